"""LpPool against a per-window numpy loop and torch's lp_pool2d; its gradient against finite
differences."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _c2run import run_op
from _gradcheck_helpers import autodiff_grads, numeric_grads

import asyncnet as an

pytestmark = pytest.mark.timeout(120)


def _reference(x, k, s, pad, p):
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (xp.shape[2] - k) // s + 1, (xp.shape[3] - k) // s + 1
    out = np.zeros((*x.shape[:2], oh, ow))
    for i in range(oh):
        for j in range(ow):
            win = xp[:, :, i * s : i * s + k, j * s : j * s + k]
            out[:, :, i, j] = (np.abs(win) ** p).sum(axis=(2, 3)) ** (1 / p)
    return out


@pytest.mark.parametrize("p", [1.0, 2.0, 3.0])
@pytest.mark.parametrize("order", ["NCHW", "NHWC"])
def test_lp_pool_matches_a_window_loop(p, order):
    x = np.random.default_rng(0).uniform(-1, 1, (2, 3, 6, 5))
    xin = x if order == "NCHW" else np.moveaxis(x, 1, 3).copy()
    (y,) = run_op("LpPool", {"x": xin}, kernel=3, stride=2, pad=1, p=p, order=order)
    y = y if order == "NCHW" else np.moveaxis(y, 3, 1)
    np.testing.assert_allclose(y, _reference(x, 3, 2, 1, p), rtol=1e-12)


def test_lp_pool_matches_torch_on_positive_inputs():
    x = np.random.default_rng(1).uniform(0.1, 1, (1, 2, 6, 6)).astype(np.float32)
    (y,) = run_op("LpPool", {"x": x}, kernel=2, stride=2, p=2.0)
    expected = torch.nn.functional.lp_pool2d(torch.from_numpy(x), 2.0, 2, 2).numpy()
    np.testing.assert_allclose(y, expected, rtol=1e-5)


@pytest.mark.parametrize("p", [2.0, 3.0])
def test_lp_pool_gradient_matches_finite_differences(p):
    rng = np.random.default_rng(2)
    feeds = {"x": rng.uniform(0.2, 1, (1, 2, 5, 5)), "r": rng.uniform(0.5, 1.5, (1, 2, 3, 3))}

    def build(net: an.Net) -> str:
        net.LpPool("x", "y", kernel=3, stride=2, pad=1, p=p)
        net.Mul(["y", "r"], "yr")
        return net.AveragedLoss("yr", "loss")

    _, ours = autodiff_grads(build, feeds, ["x"])
    np.testing.assert_allclose(ours["x"], numeric_grads(build, feeds, ["x"])["x"], rtol=1e-4, atol=1e-7)


def test_module_docstring_example_runs():
    import doctest

    from asyncnet.ops import caffe2_lppool

    result = doctest.testmod(caffe2_lppool, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
