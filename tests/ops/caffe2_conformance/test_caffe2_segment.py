"""Caffe2's segment reductions against a per-segment numpy loop, their gradients against finite
differences (sparse ones densified from their GradientSlice)."""

from __future__ import annotations

import numpy as np
import pytest
from _c2run import run_op
from _gradcheck_helpers import numeric_grads

import asyncnet as an
from asyncnet.autodiff import add_gradient_ops
from asyncnet.ops.sparse import GradientSlice

pytestmark = pytest.mark.timeout(120)

REDUCERS = {
    "Sum": lambda s: s.sum(0),
    "Mean": lambda s: s.mean(0),
    "Max": lambda s: s.max(0),
    "LogSumExp": lambda s: np.log(np.exp(s).sum(0)),
    "LogMeanExp": lambda s: np.log(np.exp(s).mean(0)),
}
OPS = (
    [(f"SortedSegment{r}", "sorted", r, False) for r in ("Sum", "Mean", "WeightedSum")]
    + [(f"SparseSortedSegment{r}", "sorted", r, True) for r in ("Sum", "Mean", "WeightedSum")]
    + [(f"SparseUnsortedSegment{r}", "unsorted", r, True) for r in ("Sum", "Mean", "WeightedSum")]
    + [(f"UnsortedSegment{r}", "unsorted", r, False) for r in ("Mean", "WeightedSum")]
    + [(f"SortedSegmentRange{r}", "sorted", r, False) for r in ("Sum", "Mean", "Max", "LogSumExp", "LogMeanExp")]
    + [(f"Lengths{r}", "lengths", r, False) for r in ("Mean", "Max", "WeightedSum")]
)


def _case(kind: str, reducer: str, sparse: bool, seed: int, dtype=np.float64):
    rng = np.random.default_rng(seed)
    data = rng.uniform(-1, 1, (6, 2, 3)).astype(dtype)
    n = 8 if sparse else 6
    indices = rng.integers(0, 6, n).astype(np.int64) if sparse else None
    if kind == "lengths":
        seg = np.array([2, 0, 3, 1], np.int32)
        ids = np.repeat(np.arange(4), seg)
        k = 4
    else:
        ids = np.sort(rng.choice([0, 1, 3, 4], n))  # segment 2 empty
        if kind == "unsorted":
            ids = rng.permutation(ids)
        seg, k = ids.astype(np.int32), int(ids.max()) + 1
    inputs = {"data": data}
    weights = None
    if reducer == "WeightedSum":
        weights = rng.uniform(0.5, 1.5, n).astype(dtype)
        inputs["w"] = weights
    if sparse:
        inputs["idx"] = indices
    inputs["seg"] = seg
    return inputs, ids, k, weights, indices


def _reference(data, ids, k, reducer, weights, indices):
    rows = data[indices] if indices is not None else data
    if weights is not None:
        rows = rows * weights[:, None, None]
        reducer = "Sum"
    out = np.zeros((k, *data.shape[1:]))
    for s in range(k):
        if np.any(ids == s):
            out[s] = REDUCERS[reducer](rows[ids == s])
    return out


@pytest.mark.parametrize("op,kind,reducer,sparse", OPS)
def test_forward_matches_a_per_segment_loop(op, kind, reducer, sparse):
    inputs, ids, k, w, idx = _case(kind, reducer, sparse, seed=len(op), dtype=np.float32)
    (y,) = run_op(op, inputs)
    assert y.dtype == np.float32 and y.shape == (k, 2, 3)
    np.testing.assert_allclose(y, _reference(inputs["data"], ids, k, reducer, w, idx), rtol=1e-5, atol=1e-6)


def _dense_grads(op: str, names_in: list[str], feeds: dict, wrt: list[str], args: dict) -> dict[str, np.ndarray]:
    net = an.Net("g")
    net.add_op(op, names_in, ["y"], **args)
    net.Mul(["y", "r"], "yr")
    loss = net.AveragedLoss("yr", "loss")
    names = add_gradient_ops(net, loss, wrt=wrt, dtype="float64")
    ws = an.Workspace()
    for name, v in feeds.items():
        ws.feed(name, v.copy())
    ws.run_net_once(net)
    out = {}
    for w in wrt:
        g = names[w]
        if isinstance(g, GradientSlice):
            dense = np.zeros_like(feeds[w])
            np.add.at(dense, np.asarray(ws.fetch(g.indices)), np.asarray(ws.fetch(g.values)))
            out[w] = dense
        else:
            out[w] = ws.fetch(g)
    return out


@pytest.mark.parametrize("op,kind,reducer,sparse", OPS)
def test_gradients_match_finite_differences(op, kind, reducer, sparse):
    inputs, _, k, _, _ = _case(kind, reducer, sparse, seed=len(op) + 1)
    feeds = {**inputs, "r": np.random.default_rng(9).uniform(0.5, 1.5, (k, 2, 3))}
    weighted = reducer == "WeightedSum"
    wrt = ["data", "w"] if weighted else ["data"]
    args = {"grad_on_weights": True} if weighted else {}
    ours = _dense_grads(op, list(inputs), feeds, wrt, args)

    def build(net: an.Net) -> str:
        net.add_op(op, list(inputs), ["y"], **args)
        net.Mul(["y", "r"], "yr")
        return net.AveragedLoss("yr", "loss")

    fd = numeric_grads(build, feeds, wrt)
    for w in wrt:
        assert ours[w].shape == feeds[w].shape and ours[w].dtype == feeds[w].dtype
        np.testing.assert_allclose(ours[w], fd[w], rtol=1e-4, atol=1e-6, err_msg=f"{op} d/d{w}")


def test_positional_weighted_sum_weighs_each_position():
    rng = np.random.default_rng(5)
    data, w = rng.uniform(size=(10, 3)).astype(np.float32), rng.uniform(size=5).astype(np.float32)
    idx, lens = rng.integers(0, 10, 7).astype(np.int64), np.array([4, 0, 3], np.int32)
    (y,) = run_op("SparseLengthsPositionalWeightedSum", {"d": data, "w": w, "i": idx, "l": lens})
    expected = np.stack([(data[idx[:4]] * w[:4, None]).sum(0), np.zeros(3), (data[idx[4:]] * w[:3, None]).sum(0)])
    np.testing.assert_allclose(y, expected, rtol=1e-6)


def test_unsorted_num_segments_pads_the_output():
    data, ids = np.arange(6, dtype=np.float32).reshape(3, 2), np.array([1, 0, 1], np.int32)
    (y,) = run_op("UnsortedSegmentMean", {"d": data, "s": ids}, num_segments=4)
    np.testing.assert_array_equal(y, [[2, 3], [2, 3], [0, 0], [0, 0]])


def test_legacy_and_indices_in_gradient_ops_repeat_rows():
    dy, lens = np.arange(6, dtype=np.float32).reshape(3, 2), np.array([2, 0, 1], np.int32)
    (a,) = run_op("LengthsSumGradient", {"dy": dy, "l": lens})
    (b,) = run_op("SparseLengthsIndicesInGradientSumGradient", {"dy": dy, "l": lens, "i": np.zeros(3, np.int64)})
    (c,) = run_op("SparseLengthsIndicesInGradientMeanGradient", {"dy": dy, "l": lens, "i": np.zeros(3, np.int64)})
    np.testing.assert_array_equal(a, dy[[0, 0, 2]])
    np.testing.assert_array_equal(b, a)
    np.testing.assert_array_equal(c, dy[[0, 0, 2]] / np.array([[2], [2], [1]], np.float32))


def test_errors_name_the_problem():
    data = np.zeros((3, 2), np.float32)
    with pytest.raises(Exception, match="sorted segment ids"):
        run_op("SortedSegmentSum", {"d": data, "s": np.array([1, 0, 1], np.int32)})
    with pytest.raises(Exception, match="summing to 3"):
        run_op("LengthsMean", {"d": data, "l": np.array([1, 1], np.int32)})
    with pytest.raises(Exception, match="indices in \\[0, 3\\)"):
        run_op("SparseSortedSegmentSum", {"d": data, "i": np.array([3], np.int64), "s": np.array([0], np.int32)})
    with pytest.raises(Exception, match="one per row"):
        run_op("LengthsWeightedSum", {"d": data, "w": np.ones(2, np.float32), "l": np.array([3], np.int32)})


def test_module_docstring_example_runs():
    import doctest

    from asyncnet.ops import caffe2_segment

    result = doctest.testmod(caffe2_segment, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
