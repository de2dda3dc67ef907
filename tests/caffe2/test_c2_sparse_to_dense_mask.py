"""SparseToDenseMask through the caffe2 front end: invalid ids (negative, or the largest value of
their dtype) are skipped and counted per op instance; the op fails once the count reaches
``max_skipped_indices`` (5 by default, Caffe2's documented default of 2018)."""

from __future__ import annotations

import numpy as np
import pytest

from caffe2.python import core, workspace

pytestmark = pytest.mark.timeout(60)


def _feed(indices, lengths):
    workspace.FeedBlob("indices", np.asarray(indices[0], indices[1]))
    workspace.FeedBlob("values", np.arange(1, len(indices[0]) + 1, dtype=np.float32))
    workspace.FeedBlob("default", np.array(-1, np.float32))
    workspace.FeedBlob("lengths", np.asarray(lengths, np.int32))


def _op(**kwargs):
    return core.CreateOperator("SparseToDenseMask", ["indices", "values", "default", "lengths"], ["out"], **kwargs)


def test_a_negative_id_is_skipped_and_the_rest_placed():
    _feed(([-7, 999, 2, 3], np.int32), [2, 2])
    workspace.RunOperatorOnce(_op(mask=[999, 2]))
    np.testing.assert_array_equal(workspace.FetchBlob("out"), [[2, -1], [-1, 3]])


def test_the_dtype_maximum_is_invalid_even_when_masked():
    top = np.iinfo(np.int32).max
    _feed(([top, 5], np.int32), [2])
    workspace.RunOperatorOnce(_op(mask=[top, 5]))
    np.testing.assert_array_equal(workspace.FetchBlob("out"), [[-1, 2]])
    _feed(([top, 5], np.int64), [2])  # below the int64 maximum: an ordinary id
    workspace.RunOperatorOnce(_op(mask=[top, 5]))
    np.testing.assert_array_equal(workspace.FetchBlob("out"), [[1, 2]])


@pytest.mark.parametrize(("cap", "bad", "fails"), [(5, 4, False), (5, 5, True), (3, 2, False), (3, 3, True)])
def test_the_op_fails_when_the_skips_reach_the_cap(cap, bad, fails):
    _feed(([-1] * bad + [2], np.int64), [bad + 1])
    op = _op(mask=[2]) if cap == 5 else _op(mask=[2], max_skipped_indices=cap)
    if fails:
        with pytest.raises(RuntimeError, match="skipped"):
            workspace.RunOperatorOnce(op)
    else:
        workspace.RunOperatorOnce(op)
        np.testing.assert_array_equal(workspace.FetchBlob("out"), [[bad + 1]])


def test_the_count_runs_over_the_runs_of_one_instance():
    _feed(([-1, -2, 2], np.int32), [3])
    net = core.Net("s2dm")
    net.SparseToDenseMask(["indices", "values", "default", "lengths"], ["out"], mask=[2], max_skipped_indices=5)
    workspace.CreateNet(net)
    workspace.RunNet(net.Name())  # 2 skipped
    workspace.RunNet(net.Name())  # 4 skipped
    with pytest.raises(RuntimeError, match="skipped"):
        workspace.RunNet(net.Name())  # 6 >= 5
    workspace.RunOperatorOnce(_op(mask=[2]))  # a new instance starts from 0


def test_indices_must_be_one_dimensional_integers():
    _feed(([1.0, 2.0], np.float32), [2])
    with pytest.raises(RuntimeError, match="int32 or int64"):
        workspace.RunOperatorOnce(_op(mask=[1]))
