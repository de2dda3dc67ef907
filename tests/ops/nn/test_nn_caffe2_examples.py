"""Worked examples: Slice and Gather exactly as Caffe2's operator docs give them (slice_op.cc,
gather_op.cc); the others hand-computed on the same data in that style."""

from __future__ import annotations

import numpy as np
import pytest
from _nn_helpers import run

pytestmark = pytest.mark.timeout(60)


def test_slice_doc_example():
    data = np.array([[1, 2, 3, 4], [5, 6, 7, 8]], np.float32)
    out = run("Slice", [data, np.array([0, 1], np.int32), np.array([-1, 3], np.int32)])
    np.testing.assert_array_equal(out, [[2, 3], [6, 7]])


def test_sparse_lengths_sum_doc_example():
    data = np.array([[1.0, 1.2], [2.3, 3.4], [4.5, 5.7]], np.float32)
    out = run("SparseLengthsSum", [data, np.array([2, 0, 1, 2]), np.array([2, 2], np.int32)])
    np.testing.assert_allclose(out, [[5.5, 6.9], [6.8, 9.1]], rtol=1e-6)


def test_sparse_lengths_weighted_sum_doc_example():
    data = np.array([[1.0, 1.2], [2.3, 3.4], [4.5, 5.7]], np.float32)
    weights = np.array([1, 2, 1, 2], np.float32)
    out = run("SparseLengthsWeightedSum", [data, weights, np.array([2, 0, 1, 2]), np.array([2, 2], np.int32)])
    np.testing.assert_allclose(out, [[6.5, 8.1], [11.3, 14.8]], rtol=1e-6)


def test_concat_add_axis_doc_example():
    a, b = np.arange(6.0).reshape(1, 2, 3), np.arange(6.0, 12.0).reshape(1, 2, 3)
    y, info = run("Concat", [a, b], 2, axis=0)
    assert y.shape == (2, 2, 3) and list(info) == [1, 1]
    y, info = run("Concat", [a, b], 2, axis=1, add_axis=1)
    assert y.shape == (1, 2, 2, 3) and list(info) == [1, 1]


def test_gather_doc_example():
    data = np.array([[1.0, 1.2], [2.3, 3.4], [4.5, 5.7]])
    out = run("Gather", [data, np.array([[0, 1], [1, 2]])])
    np.testing.assert_array_equal(out, [[[1.0, 1.2], [2.3, 3.4]], [[2.3, 3.4], [4.5, 5.7]]])


def test_squeeze_expand_dims_doc_examples():
    x = np.zeros((1, 3, 1, 5))
    assert run("Squeeze", [x], dims=[0, 2]).shape == (3, 5)
    assert run("ExpandDims", [np.zeros((3, 5))], dims=[0, 2]).shape == (1, 3, 1, 5)
