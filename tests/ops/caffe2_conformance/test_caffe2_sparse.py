"""Gather, SparseLengthsSum and SparseLengthsWeightedSum against Caffe2's tests.

Sources: caffe2/python/operator_test/gather_ops_test.py (ref_gather_axis0 / ref_gather: numpy's
take, int32 indices, empty data or indices), segment_ops_test.py and
caffe2/operators/segment_reduction_op.cc (SparseLengthsSum: DATA, INDICES, LENGTHS;
SparseLengthsWeightedSum: DATA, WEIGHTS, INDICES, LENGTHS, in that order; a zero length gives a
row of zeros; indices int32 or int64; out of range refused). The kernels are ops/sparse.py
(`axis` too, with Caffe2's dense BatchGatherGradient off axis 0).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _c2run import run_op
from _gradcheck_helpers import check_all
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncnet as an

pytestmark = pytest.mark.timeout(60)
FEW = settings(max_examples=15, deadline=None)


def run(op: str, inputs: dict[str, np.ndarray], **args) -> np.ndarray:
    return run_op(op, inputs, **args)[0]


@FEW
@given(
    rows=st.integers(1, 50),
    index_num=st.integers(0, 40),
    index_shape_2d=st.booleans(),
    dtype=st.sampled_from([np.int32, np.int64]),
    seed=st.integers(0, 2**16),
)
def test_gather_axis0(rows, index_num, index_shape_2d, dtype, seed):
    rng = np.random.default_rng(seed)
    data = rng.random((rows, 10, 20)).astype(np.float32)
    ind = rng.integers(rows, size=index_num).astype(dtype)
    if index_shape_2d and index_num % 2 == 0:
        ind = ind.reshape(2, -1)  # Caffe2: output shape = indices' shape + data.shape[1:]
    out = run("Gather", {"data": data, "ind": ind})
    np.testing.assert_array_equal(out, data.take(ind, axis=0))


def test_gather_refuses_out_of_range_and_negative_indices():
    data = np.zeros((4, 3), np.float32)
    # Caffe2 enforces 0 <= idx < dim after wrapping, and wraps (idx + dim) only with wrap_indices,
    # on by default on axis 0 (gather_op.h)
    for bad, args in (([4], {}), ([-5], {}), ([-1], {"wrap_indices": 0}), ([-1], {"axis": 1})):
        with pytest.raises(an.OperatorError, match="indices"):
            run("Gather", {"data": data, "ind": np.array(bad, np.int32)}, **args)


@pytest.mark.parametrize("axis", [1, 2, -1])
def test_gather_axis(axis):  # gather_ops_test's test_gather_ops_axis2, and the other axes
    rng = np.random.default_rng(0)
    data = rng.random((3, 4, 5)).astype(np.float32)
    ind = rng.integers(data.shape[axis], size=(2, 7)).astype(np.int32)
    np.testing.assert_array_equal(run("Gather", {"data": data, "ind": ind}, axis=axis), data.take(ind, axis=axis))
    t = run("Gather", {"data": torch.from_numpy(data), "ind": torch.from_numpy(ind)}, axis=axis)
    np.testing.assert_array_equal(t.numpy(), data.take(ind, axis=axis))


def test_gather_axis_gradient_is_dense_and_adds_repeats():
    rng = np.random.default_rng(1)
    feeds = {"data": rng.normal(size=(2, 5, 3)), "ind": np.array([4, 0, 4], np.int32), "r": rng.normal(size=(2, 3, 3))}

    def build(net):
        net.Gather(["data", "ind"], "g", axis=1)
        net.Mul(["g", "r"], "gr")
        return net.AveragedLoss("gr", "loss")

    check_all(build, lambda data, ind, r: (torch.index_select(data, 1, ind.long()) * r).mean(), feeds, ["data"])


def ref_lengths_sum(data, indices, lengths, weights=None):
    out = np.zeros((len(lengths),) + data.shape[1:], data.dtype)
    pos = 0
    for i, n in enumerate(lengths):
        for k in range(pos, pos + n):
            out[i] += data[indices[k]] * (1 if weights is None else weights[k])
        pos += n
    return out


@FEW
@given(
    rows=st.integers(1, 20),
    lengths=st.lists(st.integers(0, 4), min_size=1, max_size=6),
    idx_dtype=st.sampled_from([np.int32, np.int64]),
    weighted=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_sparse_lengths_sum(rows, lengths, idx_dtype, weighted, seed):
    rng = np.random.default_rng(seed)
    data = rng.random((rows, 3)).astype(np.float32)
    lengths = np.array(lengths, np.int32)
    indices = rng.integers(rows, size=int(lengths.sum())).astype(idx_dtype)
    if weighted:
        w = rng.random(indices.size).astype(np.float32)
        out = run("SparseLengthsWeightedSum", {"d": data, "w": w, "i": indices, "l": lengths})
        want = ref_lengths_sum(data, indices, lengths, w)
    else:
        out = run("SparseLengthsSum", {"d": data, "i": indices, "l": lengths})
        want = ref_lengths_sum(data, indices, lengths)
    assert out.shape == (lengths.size, 3) and out.dtype == np.float32
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


def test_sparse_lengths_sum_errors():
    data = np.ones((3, 2), np.float32)
    with pytest.raises(an.OperatorError):  # lengths sum to more than the indices
        run("SparseLengthsSum", {"d": data, "i": np.array([0, 1], np.int64), "l": np.array([3], np.int32)})
    with pytest.raises(an.OperatorError):  # an index past the table
        run("SparseLengthsSum", {"d": data, "i": np.array([3], np.int64), "l": np.array([1], np.int32)})


def test_batch_gather_gradient_numpy_and_torch_agree():
    rng = np.random.default_rng(2)
    data, ind = rng.random((2, 5, 3)).astype(np.float32), np.array([[4, 0], [4, 1]], np.int64)
    dy = rng.random((2, 2, 2, 3)).astype(np.float32)
    want = np.zeros_like(data)
    for k, i in enumerate(ind.reshape(-1)):
        want[:, i] += dy.reshape(2, 4, 3)[:, k]
    got = run("BatchGatherGradient", {"data": data, "ind": ind, "dy": dy}, axis=1)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    t = run(
        "BatchGatherGradient",
        {"data": torch.from_numpy(data), "ind": torch.from_numpy(ind), "dy": torch.from_numpy(dy)},
        axis=1,
    )
    assert isinstance(t, torch.Tensor) and t.dtype == torch.float32
    np.testing.assert_allclose(t.numpy(), want, rtol=1e-6)
