"""The rebatching queue: rows in, batches of another size out, columns kept apart, a closed
queue refusing rows and handing out what it holds, producers waiting on a full queue."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import asyncnet as an
from asyncnet.errors import OperatorError
from asyncnet.ops.caffe2_rebatching import RebatchingQueue

pytestmark = pytest.mark.timeout(60)


def _run(ws, op, inputs, outputs, **args):
    ws.run_operator_once(an.OperatorDef(op, list(inputs), list(outputs), args))


def test_batches_are_recut_and_columns_stay_apart():
    ws = an.Workspace()
    _run(ws, "CreateRebatchingQueue", [], ["q"], capacity=10, num_blobs=2)
    ids = np.arange(7, dtype=np.int64)
    feats = np.arange(14, dtype=np.float32).reshape(7, 2)
    ws.feed("ids", ids[:4])
    ws.feed("feats", feats[:4])
    _run(ws, "EnqueueRebatchingQueue", ["q", "ids", "feats"], [], enqueue_batch=1)
    ws.feed("ids", ids[4:])
    ws.feed("feats", feats[4:])
    _run(ws, "EnqueueRebatchingQueue", ["q", "ids", "feats"], [], enqueue_batch=1)
    got_ids, got_feats = [], []
    for n in (3, 3, 1):
        _run(ws, "DequeueRebatchingQueue", ["q"], ["i", "f"], num_elements=n)
        assert ws.fetch("i").shape == (n,) and ws.fetch("f").shape == (n, 2)
        got_ids.append(ws.fetch("i"))
        got_feats.append(ws.fetch("f"))
    np.testing.assert_array_equal(np.concatenate(got_ids), ids)
    np.testing.assert_array_equal(np.concatenate(got_feats), feats)


def test_a_single_row_enqueue_adds_a_leading_dimension_on_dequeue():
    ws = an.Workspace()
    _run(ws, "CreateRebatchingQueue", [], ["q"], capacity=3, num_blobs=1)
    for v in (1.0, 2.0):
        ws.feed("x", np.array([v, -v], np.float32))
        _run(ws, "EnqueueRebatchingQueue", ["q", "x"], [])
    _run(ws, "DequeueRebatchingQueue", ["q"], ["y"], num_elements=2)
    np.testing.assert_array_equal(ws.fetch("y"), [[1.0, -1.0], [2.0, -2.0]])


def test_a_closed_queue_refuses_rows_and_hands_out_the_rest():
    ws = an.Workspace()
    _run(ws, "CreateRebatchingQueue", [], ["q"], capacity=5, num_blobs=1)
    ws.feed("x", np.arange(3, dtype=np.int32))
    _run(ws, "EnqueueRebatchingQueue", ["q", "x"], [], enqueue_batch=1)
    _run(ws, "CloseRebatchingQueue", ["q"], [])
    with pytest.raises(OperatorError, match="closed: it takes no more rows"):
        _run(ws, "EnqueueRebatchingQueue", ["q", "x"], [], enqueue_batch=1)
    _run(ws, "DequeueRebatchingQueue", ["q"], ["y"], num_elements=5)  # what is left
    np.testing.assert_array_equal(ws.fetch("y"), [0, 1, 2])
    with pytest.raises(OperatorError, match="closed and empty"):
        _run(ws, "DequeueRebatchingQueue", ["q"], ["y"], num_elements=1)


def test_a_producer_waits_on_a_full_queue_until_a_consumer_takes_rows():
    q = RebatchingQueue("q", capacity=2, num_blobs=1)
    q.put_rows([np.array([10, 11])], batch=True)  # full now
    started, done = threading.Event(), threading.Event()

    def produce():
        started.set()
        q.put_rows([np.array([12, 13, 14])], batch=True)
        done.set()

    t = threading.Thread(target=produce)
    t.start()
    try:
        assert started.wait(10)
        assert not done.wait(0.2)  # blocked: no room
        rows = q.take_rows(5)  # each row taken makes room for the producer's next
        assert [int(r[0]) for r in rows] == [10, 11, 12, 13, 14]
        assert done.wait(10)
    finally:
        q.close()
        t.join(10)
    assert not t.is_alive()


def test_mismatched_batches_and_outputs_are_refused():
    ws = an.Workspace()
    _run(ws, "CreateRebatchingQueue", [], ["q"], capacity=5, num_blobs=2)
    ws.feed("a", np.zeros(3, np.float32))
    ws.feed("b", np.zeros(2, np.float32))
    with pytest.raises(OperatorError, match="sharing a first dimension"):
        _run(ws, "EnqueueRebatchingQueue", ["q", "a", "b"], [], enqueue_batch=1)
    with pytest.raises(OperatorError, match="expected as many outputs"):
        _run(ws, "DequeueRebatchingQueue", ["q"], ["y"])
    ws.feed("t", np.zeros(1))
    with pytest.raises(OperatorError, match="expected a rebatching queue"):
        _run(ws, "CloseRebatchingQueue", ["t"], [])


def test_module_examples_run():
    import doctest

    from asyncnet.ops import caffe2_rebatching

    result = doctest.testmod(caffe2_rebatching, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
