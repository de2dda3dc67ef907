"""PadImage against numpy.pad, ResizeNearest against a per-pixel loop, their gradients against
finite differences; ClipTensorByScaling and Lars against their formulas."""

from __future__ import annotations

import numpy as np
import pytest
from _c2run import run_op
from _gradcheck_helpers import autodiff_grads, numeric_grads

import asyncnet as an

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
@pytest.mark.parametrize("order", ["NCHW", "NHWC"])
def test_pad_image_matches_numpy_pad(mode, order):
    x = np.random.default_rng(0).uniform(size=(2, 3, 5, 6)).astype(np.float32)
    xin = x if order == "NCHW" else np.moveaxis(x, 1, 3).copy()
    (y,) = run_op("PadImage", {"x": xin}, pad_t=2, pad_l=1, pad_b=0, pad_r=3, mode=mode, value=7.0, order=order)
    kw = {"constant_values": 7.0} if mode == "constant" else {}
    expected = np.pad(x, ((0, 0), (0, 0), (2, 0), (1, 3)), mode=mode, **kw)
    np.testing.assert_array_equal(y if order == "NCHW" else np.moveaxis(y, 3, 1), expected)


def test_negative_pads_crop_and_pads_list():
    x = np.arange(2 * 6 * 7, dtype=np.float32).reshape(1, 2, 6, 7)
    (y,) = run_op("PadImage", {"x": x}, pad_t=-1, pad_l=-2, pad_b=-3, pad_r=0)
    np.testing.assert_array_equal(y, x[:, :, 1:3, 2:])
    (z,) = run_op("PadImage", {"x": x}, pads=[1, 0, 0, 2])
    np.testing.assert_array_equal(z, np.pad(x, ((0, 0), (0, 0), (1, 0), (0, 2))))


def _fd_check(build, feeds: dict, wrt: str) -> None:
    _, ours = autodiff_grads(build, feeds, [wrt])
    fd = numeric_grads(build, feeds, [wrt])
    assert ours[wrt].shape == feeds[wrt].shape
    np.testing.assert_allclose(ours[wrt], fd[wrt], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad_image_gradient_matches_finite_differences(mode):
    rng = np.random.default_rng(1)
    feeds = {"x": rng.uniform(size=(1, 2, 4, 3)), "r": rng.uniform(0.5, 1.5, (1, 2, 5, 6))}

    def build(net: an.Net) -> str:
        net.PadImage("x", "y", pad_t=2, pad_l=1, pad_b=-1, pad_r=2, mode=mode)
        net.Mul(["y", "r"], "yr")
        return net.AveragedLoss("yr", "loss")

    _fd_check(build, feeds, "x")


@pytest.mark.parametrize("hs,ws", [(2.0, 1.0), (0.5, 1.5), (1.7, 0.3)])
def test_resize_nearest_matches_a_pixel_loop_and_its_gradient(hs, ws):
    rng = np.random.default_rng(2)
    x = rng.uniform(size=(2, 2, 5, 7))
    (y,) = run_op("ResizeNearest", {"x": x}, height_scale=hs, width_scale=ws)
    oh, ow = int(5 * hs), int(7 * ws)
    expected = np.empty((2, 2, oh, ow))
    for i in range(oh):
        for j in range(ow):
            expected[:, :, i, j] = x[:, :, min(int(i / hs), 4), min(int(j / ws), 6)]
    np.testing.assert_array_equal(y, expected)
    feeds = {"x": x, "r": rng.uniform(0.5, 1.5, (2, 2, oh, ow))}

    def build(net: an.Net) -> str:
        net.ResizeNearest("x", "y", height_scale=hs, width_scale=ws)
        net.Mul(["y", "r"], "yr")
        return net.AveragedLoss("yr", "loss")

    _fd_check(build, feeds, "x")


def test_clip_tensor_by_scaling():
    x = np.random.default_rng(3).uniform(size=(4, 3)).astype(np.float32)
    norm = np.array(np.linalg.norm(x), np.float32)
    (y,) = run_op("ClipTensorByScaling", {"x": x, "n": norm}, threshold=0.5)
    np.testing.assert_allclose(y, x * 0.5 / norm, rtol=1e-6)
    (z,) = run_op("ClipTensorByScaling", {"x": x, "n": norm, "t": np.array([100.0], np.float32)}, threshold=0.5)
    np.testing.assert_array_equal(z, x)


def test_lars_factor():
    rng = np.random.default_rng(4)
    x, dx = rng.uniform(size=(3, 4)).astype(np.float32), rng.uniform(size=(3, 4)).astype(np.float32)
    (f,) = run_op("Lars", {"x": x, "dx": dx}, offset=0.25)
    np.testing.assert_allclose(f, [1 / (np.linalg.norm(dx) / np.linalg.norm(x) + 0.25)], rtol=1e-6)
    (one,) = run_op("Lars", {"x": np.zeros_like(x), "dx": dx})
    np.testing.assert_array_equal(one, [1.0])


def test_module_docstring_example_runs():
    import doctest

    from asyncnet.ops import caffe2_resize

    result = doctest.testmod(caffe2_resize, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
