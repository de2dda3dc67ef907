"""LC, LC1D, LC2D, LC3D against torch: Y = per-position weights times torch's unfold patches
(2-D), a direct loop (1-D, 3-D); gradients against torch autograd and finite differences."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from _c2run import run_op
from _gradcheck_helpers import autodiff_grads, numeric_grads, weighted_mean_head
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncnet.errors import OperatorError

pytestmark = pytest.mark.timeout(180)
FEW = settings(max_examples=12, deadline=None)


def _torch_lc2d(x, w, b, stride, pad):
    """x [N, C, H, W], w [OH, OW, M, C, kh, kw]: unfold's columns [N, C*kh*kw, OH*OW] per position."""
    oh, ow, m, c, kh, kw = w.shape
    cols = F.unfold(x, (kh, kw), padding=pad, stride=stride)  # N, C*kh*kw, L
    y = torch.einsum("nkl,lmk->nml", cols, w.reshape(oh * ow, m, c * kh * kw))
    if b is not None:
        y = y + b.reshape(oh * ow, m).T
    return y.reshape(x.shape[0], m, oh, ow)


@FEW
@given(
    seed=st.integers(0, 2**16),
    kernel=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    stride=st.integers(1, 2),
    pad=st.integers(0, 1),
    bias=st.booleans(),
    order=st.sampled_from(["NCHW", "NHWC"]),
)
def test_lc2d_matches_torch_unfold_with_gradients(seed, kernel, stride, pad, bias, order):
    rng = np.random.default_rng(seed)
    n, c, m, size = 2, 3, 2, 5
    oh, ow = ((size + 2 * pad - k) // stride + 1 for k in kernel)
    x = rng.standard_normal((n, c, size, size))
    w = rng.standard_normal((oh, ow, m, c, *kernel))
    b = rng.standard_normal((oh, ow, m))
    args = {"strides": [stride] * 2, "pads": [pad] * 4, "order": order}
    xf, wf = (np.moveaxis(x, 1, -1), np.moveaxis(w, 3, -1)) if order == "NHWC" else (x, w)
    feeds = {"x": np.ascontiguousarray(xf), "w": np.ascontiguousarray(wf), **({"b": b} if bias else {})}
    (y,) = run_op("LC2D", feeds, ["y"], **args)
    t = {k: torch.tensor(v, requires_grad=True) for k, v in {"x": x, "w": w, "b": b}.items()}
    ref = _torch_lc2d(t["x"], t["w"], t["b"] if bias else None, stride, pad)
    got = np.moveaxis(y, -1, 1) if order == "NHWC" else y
    np.testing.assert_allclose(got, ref.detach().numpy(), rtol=1e-10, atol=1e-12)
    r = rng.standard_normal(y.shape)
    feeds["r"] = r
    names = ["x", "w", "b"] if bias else ["x", "w"]

    def build(net):
        net.LC2D(names, "y", **args)
        return weighted_mean_head(net, "y")

    _, ours = autodiff_grads(build, feeds, names)
    tr = torch.from_numpy(np.moveaxis(r, -1, 1) if order == "NHWC" else r)
    (ref * tr).mean().backward()
    theirs = {k: t[k].grad.numpy() for k in names}
    if order == "NHWC":
        theirs["x"], theirs["w"] = np.moveaxis(theirs["x"], 1, -1), np.moveaxis(theirs["w"], 3, -1)
    for k in names:
        np.testing.assert_allclose(ours[k], theirs[k], rtol=1e-9, atol=1e-12, err_msg=k)


def _loop_lc(x, w, b, nd):
    """Y[n, m, o] = b[o, m] + sum over c, kernel of x[n, c, o + kernel] w[o, m, c, kernel] (stride 1)."""
    out, m, kernel = w.shape[:nd], w.shape[nd], w.shape[nd + 2 :]
    y = np.zeros((x.shape[0], m, *out))
    for o in itertools.product(*(range(s) for s in out)):
        window = x[(slice(None), slice(None), *(slice(i, i + k) for i, k in zip(o, kernel)))]  # N, C, *kernel
        axes = list(range(1, window.ndim))
        y[(slice(None), slice(None), *o)] = np.tensordot(window, w[o], axes=(axes, [i + 1 for i in range(len(axes))]))
        if b is not None:
            y[(slice(None), slice(None), *o)] += b[o]
    return y


@pytest.mark.parametrize("op,nd", [("LC1D", 1), ("LC3D", 3), ("LC", 1), ("LC", 3)])
def test_lc_1d_3d_match_a_loop_and_finite_differences(op, nd):
    rng = np.random.default_rng(nd)
    size, kernel = (5, 2) if nd == 1 else (3, 2)
    out = size - kernel + 1
    x = rng.standard_normal((2, 2, *(size,) * nd))
    w = rng.standard_normal(((out,) * nd) + (3, 2) + (kernel,) * nd)
    b = rng.standard_normal(((out,) * nd) + (3,))
    (y,) = run_op(op, {"x": x, "w": w, "b": b}, ["y"])
    np.testing.assert_allclose(y, _loop_lc(x, w, b, nd), rtol=1e-10, atol=1e-12)
    feeds = {"x": x, "w": w, "b": b, "r": rng.standard_normal(y.shape)}

    def build(net):
        getattr(net, op)(["x", "w", "b"], "y")
        return weighted_mean_head(net, "y")

    _, ours = autodiff_grads(build, feeds, ["x", "w", "b"])
    fd = numeric_grads(build, feeds, ["x", "w", "b"])
    for k in ours:
        np.testing.assert_allclose(ours[k], fd[k], rtol=1e-5, atol=1e-9, err_msg=k)


def test_a_filter_of_the_wrong_positions_is_refused():
    x, w = np.zeros((1, 1, 4, 4), np.float32), np.zeros((2, 2, 1, 1, 2, 2), np.float32)  # out is 3x3
    with pytest.raises(OperatorError, match=r"\*out=\[3, 3\]"):
        run_op("LC2D", {"x": x, "w": w}, ["y"])


def test_module_example_runs():
    import doctest

    from asyncnet.ops import caffe2_locally_connected

    result = doctest.testmod(caffe2_locally_connected, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
