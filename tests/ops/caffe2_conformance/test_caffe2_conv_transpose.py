"""ConvTranspose against torch.nn.functional.conv_transpose2d (symmetric pads, adj as
output_padding) and a direct numpy scatter (asymmetric pads), both orders; its gradients
against finite differences.

Source: Caffe2's conv_transpose_test.py (output size (size - 1) * stride + kernel + adj - pad_t
- pad_b; filter C x M x k x k in NCHW, C x k x k x M in NHWC; legacy and list arguments)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _c2run import run_op
from _gradcheck_helpers import autodiff_grads, numeric_grads, weighted_mean_head
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncnet as an

pytestmark = pytest.mark.timeout(120)


def _scatter_ref(x, w, b, stride, pads, adj):
    """Each input pixel adds its filter-weighted window to the output (NCHW), then the crop."""
    n, c, h, wd = x.shape
    m, k = w.shape[1], w.shape[2]
    full = np.zeros((n, m, (h - 1) * stride + k + adj, (wd - 1) * stride + k + adj))
    for i in range(h):
        for j in range(wd):
            full[:, :, i * stride : i * stride + k, j * stride : j * stride + k] += np.einsum(
                "nc,cmxy->nmxy", x[:, :, i, j], w
            )
    pt, pl, pb, pr = pads
    y = full[:, :, pt : full.shape[2] - pb, pl : full.shape[3] - pr]
    return y + (0 if b is None else b.reshape(1, -1, 1, 1))


@settings(max_examples=15, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    stride=st.integers(1, 3),
    kernel=st.integers(1, 4),
    pads=st.lists(st.integers(0, 2), min_size=4, max_size=4),
    adj=st.integers(0, 2),
    order=st.sampled_from(["NCHW", "NHWC"]),
    bias=st.booleans(),
)
def test_conv_transpose_matches_the_scatter_reference(seed, stride, kernel, pads, adj, order, bias):
    adj = min(adj, stride - 1)
    rng = np.random.default_rng(seed)
    x, w, b = rng.standard_normal((2, 3, 5, 4)), rng.standard_normal((3, 2, kernel, kernel)), rng.standard_normal(2)
    feeds = {
        "x": x.transpose(0, 2, 3, 1) if order == "NHWC" else x,
        "w": w.transpose(0, 2, 3, 1) if order == "NHWC" else w,
    }
    if bias:
        feeds["b"] = b
    (y,) = run_op(
        "ConvTranspose",
        feeds,
        ["y"],
        strides=[stride] * 2,
        kernels=[kernel] * 2,
        pads=pads,
        adjs=[adj] * 2,
        order=order,
    )
    ref = _scatter_ref(x, w, b if bias else None, stride, pads, adj)
    np.testing.assert_allclose(y.transpose(0, 3, 1, 2) if order == "NHWC" else y, ref, rtol=1e-10, atol=1e-10)


def test_conv_transpose_matches_torch_with_legacy_arguments():
    rng = np.random.default_rng(1)
    x, w, b = rng.standard_normal((1, 2, 4, 4)), rng.standard_normal((2, 3, 3, 3)), rng.standard_normal(3)
    (y,) = run_op("ConvTranspose", {"x": x, "w": w, "b": b}, ["y"], kernel=3, stride=2, pad=1, adj=1)
    ref = torch.nn.functional.conv_transpose2d(
        torch.tensor(x), torch.tensor(w), torch.tensor(b), stride=2, padding=1, output_padding=1
    )
    np.testing.assert_allclose(y, ref.numpy(), rtol=1e-10, atol=1e-12)
    with pytest.raises(an.OperatorError, match="kernel"):
        run_op("ConvTranspose", {"x": x, "w": w}, ["y"], kernel=2)


@pytest.mark.parametrize("order", ["NCHW", "NHWC"])
@pytest.mark.parametrize("no_dx", [False, True])
def test_conv_transpose_gradients_match_finite_differences(order, no_dx):
    rng = np.random.default_rng(2)
    x, w = rng.standard_normal((1, 2, 3, 3)), rng.standard_normal((2, 2, 2, 2))
    feeds = {
        "x": x.transpose(0, 2, 3, 1) if order == "NHWC" else x,
        "w": w.transpose(0, 2, 3, 1) if order == "NHWC" else w,
    }
    feeds["b"] = rng.standard_normal(2)
    args = {"stride": 2, "kernel": 2, "pad_t": 1, "pad_l": 0, "pad_b": 0, "pad_r": 1, "adj": 1, "order": order}
    out_shape = run_op("ConvTranspose", dict(feeds), ["y"], **args)[0].shape
    feeds["r"] = rng.standard_normal(out_shape)

    def build(net):
        net.ConvTranspose(["x", "w", "b"], "y", no_gradient_to_input=no_dx, **args)
        return weighted_mean_head(net, "y")

    wrt = ["w", "b"] + ([] if no_dx else ["x"])
    _, ours = autodiff_grads(build, feeds, wrt)
    fd = numeric_grads(build, feeds, wrt)
    for name in wrt:
        np.testing.assert_allclose(ours[name], fd[name], rtol=1e-5, atol=1e-8, err_msg=name)
