"""BooleanMask/BooleanUnmask/BooleanMaskLengths, LengthsTopK and BatchSparseToDense against numpy,
their gradients against finite differences."""

from __future__ import annotations

import numpy as np
import pytest
from _c2run import run_op
from _gradcheck_helpers import autodiff_grads, numeric_grads

import asyncnet as an

pytestmark = pytest.mark.timeout(120)


def _fd_check(build, feeds: dict, wrt: list[str]) -> None:
    _, ours = autodiff_grads(build, feeds, wrt)
    fd = numeric_grads(build, feeds, wrt)
    for w in wrt:
        assert ours[w].shape == feeds[w].shape and ours[w].dtype == feeds[w].dtype
        np.testing.assert_allclose(ours[w], fd[w], rtol=1e-4, atol=1e-6, err_msg=w)


def _head(net: an.Net, y: str) -> str:
    net.Mul([y, "r"], "yr")
    return net.AveragedLoss("yr", "loss")


def test_boolean_mask_rows_positions_and_gradient():
    rng = np.random.default_rng(0)
    x, m = rng.uniform(size=(6, 2, 3)), np.array([1, 0, 1, 1, 0, 0], bool)
    y, pos = run_op("BooleanMask", {"x": x, "m": m}, ["y", "p"])
    np.testing.assert_array_equal(y, x[m])
    np.testing.assert_array_equal(pos, [0, 2, 3])
    assert pos.dtype == np.int64
    feeds = {"x": x, "m": m, "r": rng.uniform(0.5, 1.5, (3, 2, 3))}
    _fd_check(lambda net: _head(net, net.BooleanMask(["x", "m"], "y")), feeds, ["x"])


def test_boolean_unmask_inverts_a_split_and_mask_lengths_count():
    values = np.arange(7, dtype=np.int16) * 3
    masks = [np.isin(np.arange(7), p) for p in ([0, 4], [1, 2, 6], [3, 5])]
    feeds = {}
    for j, m in enumerate(masks):
        feeds[f"m{j}"], feeds[f"v{j}"] = m, values[m]
    (out,) = run_op("BooleanUnmask", feeds)
    np.testing.assert_array_equal(out, values)
    assert out.dtype == np.int16
    (lens,) = run_op("BooleanMaskLengths", {"l": np.array([3, 0, 4], np.int32), "m": masks[1]})
    np.testing.assert_array_equal(lens, [2, 0, 1])


def test_lengths_top_k_pads_and_keeps_the_earlier_of_equal_values():
    x = np.array([2, 5, 5, 1, 7, 3, 3, 3], np.float32)
    v, i = run_op("LengthsTopK", {"x": x, "l": np.array([4, 0, 1, 3], np.int32)}, ["v", "i"], k=2)
    np.testing.assert_array_equal(v, [[5, 5], [0, 0], [7, 0], [3, 3]])
    np.testing.assert_array_equal(i, [[1, 2], [-1, -1], [0, -1], [0, 1]])
    assert i.dtype == np.int32


def test_lengths_top_k_gradient_matches_finite_differences():
    rng = np.random.default_rng(1)
    feeds = {"x": rng.permutation(9).astype(np.float64), "l": np.array([4, 2, 0, 3], np.int32)}
    feeds["r"] = rng.uniform(0.5, 1.5, (4, 3))
    _fd_check(lambda net: _head(net, net.LengthsTopK(["x", "l"], ["v", "i"], k=3)[0]), feeds, ["x"])


def test_batch_sparse_to_dense_and_back():
    lens, idx = np.array([2, 0, 3], np.int64), np.array([4, 1, 0, 2, 3], np.int32)
    v = np.arange(1, 6, dtype=np.float32)
    (d,) = run_op("BatchSparseToDense", {"l": lens, "i": idx, "v": v}, dense_last_dim=5, default_value=-1.0)
    expected = np.full((3, 5), -1.0, np.float32)
    expected[0, [4, 1]], expected[2, [0, 2, 3]] = [1, 2], [3, 4, 5]
    np.testing.assert_array_equal(d, expected)
    (d2,) = run_op("BatchSparseToDense", {"l": lens, "i": idx, "v": v, "s": np.zeros((3, 5))}, default_value=-1.0)
    np.testing.assert_array_equal(d2, expected)
    (back,) = run_op("BatchDenseToSparse", {"l": lens, "i": idx, "d": d})
    np.testing.assert_array_equal(back, v)


def test_batch_sparse_dense_gradients_match_finite_differences():
    rng = np.random.default_rng(2)
    lens, idx = np.array([2, 3], np.int32), np.array([3, 0, 1, 2, 4], np.int32)
    feeds = {"l": lens, "i": idx, "v": rng.uniform(size=5), "r": rng.uniform(0.5, 1.5, (2, 5))}
    _fd_check(lambda net: _head(net, net.BatchSparseToDense(["l", "i", "v"], "d", dense_last_dim=5)), feeds, ["v"])
    feeds = {"l": lens, "i": idx, "d": rng.uniform(size=(2, 5)), "r": rng.uniform(0.5, 1.5, 5)}
    _fd_check(lambda net: _head(net, net.BatchDenseToSparse(["l", "i", "d"], "v")), feeds, ["d"])


def test_errors_name_the_problem():
    with pytest.raises(Exception, match="bool mask of length 3"):
        run_op("BooleanMask", {"x": np.zeros(3), "m": np.ones(2, bool)})
    with pytest.raises(Exception, match="summing to 3"):
        run_op("LengthsTopK", {"x": np.zeros(3, np.float32), "l": np.array([1], np.int32)}, ["v", "i"], k=1)
    with pytest.raises(Exception, match="indices in \\[0, 2\\)"):
        run_op("BatchSparseToDense", {"l": np.array([1]), "i": np.array([2]), "v": np.ones(1)}, dense_last_dim=2)


def test_module_docstring_example_runs():
    import doctest

    from asyncnet.ops import caffe2_mask

    result = doctest.testmod(caffe2_mask, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
