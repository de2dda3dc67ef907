"""GatherRangesToDense, PadEmptySamples and ExtendTensor against numpy constructions."""

from __future__ import annotations

import numpy as np
import pytest
from _c2run import run_op

import asyncnet as an

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("with_key", [False, True])
def test_gather_ranges_to_dense(with_key):
    data = np.arange(10, dtype=np.float32) * 1.5
    ranges = np.array([[[0, 2], [2, 3]], [[0, 0], [5, 3]]], np.int32)
    key = np.array([1, 0, 9, 8, 7, 2, 4, 3, 0, 0], np.int64)
    inputs = {"d": data, "r": ranges, **({"k": key} if with_key else {})}
    a, b = run_op("GatherRangesToDense", inputs, ["a", "b"], lengths=[2, 3])
    rows_a = [data[0:2], np.zeros(2)]
    rows_b = [data[2:5], data[5:8]]
    if with_key:
        rows_a[0] = data[0:2][np.argsort(key[0:2])]
        rows_b = [data[2:5][np.argsort(key[2:5])], data[5:8][np.argsort(key[5:8])]]
    np.testing.assert_array_equal(a, np.stack(rows_a))
    np.testing.assert_array_equal(b, np.stack(rows_b))


def test_gather_ranges_to_dense_refuses_a_wrong_length():
    with pytest.raises(Exception, match="length 2"):
        run_op("GatherRangesToDense", {"d": np.zeros(4), "r": np.array([[[0, 3]]], np.int32)}, ["a"], lengths=[2])


def test_pad_empty_samples_vectors_and_rows():
    lens = np.array([1, 0, 2, 0], np.int32)
    f1 = np.array([[1, 1], [2, 2], [3, 3]], np.int64)
    f2 = np.array([7, 8, 9], np.float32)
    out_l, out_1, out_2 = run_op("PadEmptySamples", {"l": lens, "a": f1, "b": f2}, ["l2", "a2", "b2"])
    np.testing.assert_array_equal(out_l, [1, 1, 2, 1])
    np.testing.assert_array_equal(out_1, [[1, 1], [0, 0], [2, 2], [3, 3], [0, 0]])
    np.testing.assert_array_equal(out_2, [7, 0, 8, 9, 0])


def test_extend_tensor_grows_in_place_with_zero_rows():
    ws = an.Workspace()
    ws.feed("t", np.ones((3, 2), np.float32))
    ws.feed("i", np.array([1, 5], np.int32))
    net = an.Net("e")
    net.ExtendTensor(["t", "i"], "t")
    ws.run_net_once(net)
    np.testing.assert_array_equal(ws.fetch("t"), np.concatenate([np.ones((3, 2)), np.zeros((3, 2))]))
    ws.feed("i", np.array([0], np.int32))
    ws.run_net_once(net)
    assert ws.fetch("t").shape == (6, 2)


def test_module_docstring_example_runs():
    import doctest

    from asyncnet.ops import caffe2_ranges

    result = doctest.testmod(caffe2_ranges, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
