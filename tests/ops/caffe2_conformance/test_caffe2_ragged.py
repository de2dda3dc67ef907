"""PackRNNSequence/UnpackRNNSequence and FlexibleTopK against numpy loops; gradients against
finite differences."""

from __future__ import annotations

import numpy as np
import pytest
from _c2run import run_op
from _gradcheck_helpers import autodiff_grads, numeric_grads

pytestmark = pytest.mark.timeout(120)


def _fd(build, feeds, wrt):
    _, ours = autodiff_grads(build, feeds, [wrt])
    assert ours[wrt].shape == feeds[wrt].shape
    np.testing.assert_allclose(ours[wrt], numeric_grads(build, feeds, [wrt])[wrt], rtol=1e-5, atol=1e-9)


def _head(net, y):
    net.Mul([y, "r"], "yr")
    return net.AveragedLoss("yr", "loss")


def test_pack_and_unpack_round_trip_with_padding():
    lens = np.array([2, 0, 3], np.int32)
    v = np.arange(10, dtype=np.float32).reshape(5, 2)
    (p,) = run_op("PackRNNSequence", {"v": v, "l": lens})
    expected = np.zeros((3, 3, 2), np.float32)
    expected[:2, 0], expected[:3, 2] = v[:2], v[2:]
    np.testing.assert_array_equal(p, expected)
    (back,) = run_op("UnpackRNNSequence", {"p": p, "l": lens})
    np.testing.assert_array_equal(back, v)


def test_pack_and_unpack_gradients():
    rng = np.random.default_rng(0)
    lens = np.array([1, 3], np.int32)
    feeds = {"v": rng.uniform(size=(4, 2)), "l": lens, "r": rng.uniform(0.5, 1.5, (3, 2, 2))}
    _fd(lambda net: _head(net, net.PackRNNSequence(["v", "l"], "p")), feeds, "v")
    feeds = {"p": rng.uniform(size=(4, 2, 2)), "l": lens, "r": rng.uniform(0.5, 1.5, (4, 2))}
    _fd(lambda net: _head(net, net.UnpackRNNSequence(["p", "l"], "v")), feeds, "p")


def test_flexible_top_k_per_row_counts_and_ties():
    x = np.array([[[1, 3, 3, 0]], [[5, 2, 7, 7]]], np.float32)
    v, i = run_op("FlexibleTopK", {"x": x, "k": np.array([3, 1], np.int64)}, ["v", "i"])
    np.testing.assert_array_equal(v, [3, 3, 1, 7])
    np.testing.assert_array_equal(i, [1, 2, 0, 2])
    assert i.dtype == np.int64


def test_flexible_top_k_gradient():
    rng = np.random.default_rng(1)
    feeds = {"x": rng.permutation(12).reshape(3, 4).astype(np.float64), "k": np.array([2, 4, 1], np.int32)}
    feeds["r"] = rng.uniform(0.5, 1.5, 7)
    _fd(lambda net: _head(net, net.FlexibleTopK(["x", "k"], ["v", "i"])[0]), feeds, "x")


def test_module_docstring_example_runs():
    import doctest

    from asyncnet.ops import caffe2_ragged

    result = doctest.testmod(caffe2_ragged, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
