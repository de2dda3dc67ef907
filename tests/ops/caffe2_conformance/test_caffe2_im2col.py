"""Im2Col/Col2Im against torch's unfold/fold (NCHW and NHWC), gradients against finite
differences."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _c2run import run_op
from _gradcheck_helpers import autodiff_grads, numeric_grads

import asyncnet as an

pytestmark = pytest.mark.timeout(120)
CASES = [dict(kernel=3, stride=1, pad=1, dilation=1), dict(kernel=2, stride=2, pad=0, dilation=2)]


@pytest.mark.parametrize("args", CASES)
def test_im2col_and_col2im_match_torch_unfold_fold(args):
    x = np.random.default_rng(0).uniform(-1, 1, (2, 3, 7, 6))
    tx = torch.from_numpy(x)
    kw = dict(kernel_size=args["kernel"], dilation=args["dilation"], padding=args["pad"], stride=args["stride"])
    unfolded = torch.nn.functional.unfold(tx, **kw).numpy()
    (col,) = run_op("Im2Col", {"x": x}, **args)
    np.testing.assert_allclose(col.reshape(unfolded.shape), unfolded, rtol=1e-12)
    (back,) = run_op("Col2Im", {"c": col, "x": x}, **args)
    folded = torch.nn.functional.fold(torch.from_numpy(unfolded), output_size=(7, 6), **kw).numpy()
    np.testing.assert_allclose(back, folded, rtol=1e-12)
    # NHWC: the same windows, laid out (tap row, tap column, channel) after the position
    nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    (col_h,) = run_op("Im2Col", {"x": nhwc}, order="NHWC", **args)
    n, oh, ow, _ = col_h.shape
    k = args["kernel"]
    as_nchw = col_h.reshape(n, oh, ow, k, k, 3).transpose(0, 5, 3, 4, 1, 2).reshape(col.shape)
    np.testing.assert_allclose(as_nchw, col, rtol=1e-12)
    (back_h,) = run_op("Col2Im", {"c": col_h, "x": nhwc}, order="NHWC", **args)
    np.testing.assert_allclose(back_h.transpose(0, 3, 1, 2), back, rtol=1e-12)


def test_im2col_gradient_matches_finite_differences():
    rng = np.random.default_rng(1)
    feeds = {"x": rng.uniform(size=(1, 2, 4, 4)), "r": rng.uniform(0.5, 1.5, (1, 8, 5, 5))}

    def build(net: an.Net) -> str:
        net.Im2Col("x", "c", kernel=2, pad=1, stride=1)
        net.Mul(["c", "r"], "cr")
        return net.AveragedLoss("cr", "loss")

    _, ours = autodiff_grads(build, feeds, ["x"])
    np.testing.assert_allclose(ours["x"], numeric_grads(build, feeds, ["x"])["x"], rtol=1e-5, atol=1e-9)


def test_module_docstring_example_runs():
    import doctest

    from asyncnet.ops import caffe2_im2col

    result = doctest.testmod(caffe2_im2col, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
