"""Caffe2's blob queue ops against Caffe2's documented semantics (caffe2/queue/blobs_queue.cc):
FIFO records, blocking while full or empty, close waking every wait, Safe* status outputs."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import asyncnet as an
from asyncnet.errors import AsyncNetError, NetDefinitionError
from asyncnet.ops.caffe2_queue import BlobsQueue

pytestmark = pytest.mark.timeout(120)

JOIN = 30.0  # s a thread may take to finish after every thread started (generous: a loaded machine)


def _ws_with_queue(capacity: int = 2, num_blobs: int = 1, **kw) -> an.Workspace:
    ws = an.Workspace()
    init = an.Net("init")
    init.CreateBlobsQueue([], "q", capacity=capacity, num_blobs=num_blobs, **kw)
    ws.run_net_once(init)
    return ws


def _enqueue(ws: an.Workspace, *values: np.ndarray, safe: bool = False) -> None:
    names = [f"v{j}" for j in range(len(values))]
    for n, v in zip(names, values):
        ws.feed(n, v)
    net = an.Net("put")
    if safe:
        net.SafeEnqueueBlobs(["q", *names], [*names, "put_status"])
    else:
        net.EnqueueBlobs(["q", *names], names)
    ws.run_net_once(net)


def _dequeue(ws: an.Workspace, n: int = 1, safe: bool = False, **kw) -> list[np.ndarray]:
    outs = [f"o{j}" for j in range(n)]
    net = an.Net("get")
    if safe:
        net.SafeDequeueBlobs("q", [*outs, "get_status"], **kw)
    else:
        net.DequeueBlobs("q", outs, **kw)
    ws.run_net_once(net)
    return [ws.fetch(o) for o in outs]


def _close(ws: an.Workspace) -> None:
    net = an.Net("close")
    net.CloseBlobsQueue(["q"], [])
    ws.run_net_once(net)


def _start(fns) -> list[threading.Thread]:
    threads = [threading.Thread(target=f, daemon=True) for f in fns]
    for t in threads:
        t.start()
    return threads


def _join_all(threads: list[threading.Thread]) -> None:
    deadline = time.monotonic() + JOIN
    for t in threads:
        t.join(max(deadline - time.monotonic(), 0.0))
    assert not any(t.is_alive() for t in threads), "a thread is still blocked"


def test_records_come_out_in_order_with_every_blob():
    ws = _ws_with_queue(capacity=3, num_blobs=2)
    for k in range(3):
        _enqueue(ws, np.full(2, k, np.float32), np.array([k], np.int32))
    for k in range(3):
        x, y = _dequeue(ws, 2)
        assert x.tolist() == [k, k] and y.tolist() == [k]
    assert len(ws.fetch("q")) == 0


def test_a_closed_queue_still_hands_out_and_takes_records_while_it_has_room():
    ws = _ws_with_queue(capacity=2)
    _enqueue(ws, np.array([1.0]))
    _close(ws)
    _enqueue(ws, np.array([2.0]))  # Caffe2: a write gives up only when the closed queue is full
    assert _dequeue(ws)[0].tolist() == [1.0]
    assert _dequeue(ws)[0].tolist() == [2.0]
    with pytest.raises(AsyncNetError, match="closed and empty"):
        _dequeue(ws)


def test_enqueue_on_a_closed_full_queue_fails_and_safe_enqueue_reports_it():
    ws = _ws_with_queue(capacity=1)
    _enqueue(ws, np.array([1.0]))
    _close(ws)
    with pytest.raises(AsyncNetError, match="closed and full"):
        _enqueue(ws, np.array([2.0]))
    _enqueue(ws, np.array([3.0]), safe=True)
    status = ws.fetch("put_status")
    assert status.dtype == bool and status.shape == () and bool(status)
    assert _dequeue(ws)[0].tolist() == [1.0]


def test_safe_dequeue_status_is_false_with_a_record_and_true_once_closed_and_empty():
    ws = _ws_with_queue()
    _enqueue(ws, np.array([5.0]))
    assert _dequeue(ws, safe=True)[0].tolist() == [5.0]
    assert not bool(ws.fetch("get_status"))
    _close(ws)
    assert _dequeue(ws, safe=True)[0].tolist() == [5.0]  # outputs left as they were
    assert bool(ws.fetch("get_status"))


def test_safe_dequeue_num_records_joins_rows_and_keeps_what_it_got_before_close():
    ws = _ws_with_queue(capacity=4)
    for k in range(3):
        _enqueue(ws, np.full((k + 1, 2), k, np.float32))
    (x,) = _dequeue(ws, safe=True, num_records=2)
    np.testing.assert_array_equal(x, np.array([[0, 0], [1, 1], [1, 1]], np.float32))
    _close(ws)
    (x,) = _dequeue(ws, safe=True, num_records=3)
    assert x.shape == (3, 2) and (x == 2).all()
    assert not bool(ws.fetch("get_status"))


def test_dequeue_timeout_fails_after_the_timeout():
    ws = _ws_with_queue()
    t0 = time.monotonic()
    with pytest.raises(AsyncNetError, match="timed out"):
        _dequeue(ws, timeout_secs=0.2)
    assert time.monotonic() - t0 >= 0.19


@pytest.mark.parametrize("safe", [False, True])
def test_close_wakes_blocked_dequeues(safe):
    ws = _ws_with_queue()
    outcome: list[str] = []
    started = threading.Barrier(5)

    def consumer(k: int) -> None:
        net = an.Net(f"get{k}")
        outs = [f"o{k}", f"s{k}"] if safe else [f"o{k}"]
        (net.SafeDequeueBlobs if safe else net.DequeueBlobs)("q", outs)
        started.wait()
        try:
            ws.run_net_once(net)
            outcome.append(str(bool(ws.fetch(f"s{k}"))) if safe else "ok")
        except AsyncNetError as e:
            outcome.append("closed" if "closed and empty" in str(e) else repr(e))

    threads = _start([lambda k=k: consumer(k) for k in range(4)])
    started.wait()
    time.sleep(0.05)
    _close(ws)
    _join_all(threads)
    assert outcome == (["True"] * 4 if safe else ["closed"] * 4)


def test_close_wakes_blocked_enqueues():
    ws = _ws_with_queue(capacity=1)
    _enqueue(ws, np.array([0.0]))
    errors: list[str] = []
    started = threading.Barrier(4)

    def producer(k: int) -> None:
        ws.feed(f"x{k}", np.array([float(k)]))
        net = an.Net(f"put{k}")
        net.EnqueueBlobs(["q", f"x{k}"], [f"x{k}"])
        started.wait()
        try:
            ws.run_net_once(net)
        except AsyncNetError as e:
            errors.append(str(e))

    threads = _start([lambda k=k: producer(k) for k in range(3)])
    started.wait()
    time.sleep(0.05)
    _close(ws)
    _join_all(threads)
    assert len(errors) == 3 and all("closed and full" in e for e in errors)


@pytest.mark.parametrize("net_type", ["simple", "straight", "async_scheduling"])
def test_producers_and_consumers_on_threads_and_executors_pass_every_record_once_in_order(net_type):
    """4 producers x 150 records through a queue of capacity 3 to 3 consumers; each producer's
    records arrive once each, in its order; the consumers stop on close."""
    ws = _ws_with_queue(capacity=3, num_blobs=2)
    n_prod, n_items, n_cons = 4, 150, 3
    got: list[list[tuple[int, int]]] = [[] for _ in range(n_cons)]
    ready = threading.Barrier(n_prod + n_cons)

    def producer(p: int) -> None:
        net = an.Net(f"put{p}", type=net_type)
        net.EnqueueBlobs(["q", f"id{p}", f"seq{p}"], [f"id{p}", f"seq{p}"])
        ready.wait()
        for k in range(n_items):
            ws.feed(f"id{p}", np.array([p], np.int64))
            ws.feed(f"seq{p}", np.array([k], np.int64))
            ws.run_net_once(net)

    def consumer(c: int) -> None:
        net = an.Net(f"get{c}", type=net_type)
        net.SafeDequeueBlobs("q", [f"gid{c}", f"gseq{c}", f"st{c}"])
        ws.feed(f"gid{c}", np.zeros(1, np.int64))
        ws.feed(f"gseq{c}", np.zeros(1, np.int64))
        instance = ws.create_net(net)
        ready.wait()
        while True:
            instance.run()
            if bool(ws.fetch(f"st{c}")):
                return
            got[c].append((int(ws.fetch(f"gid{c}")[0]), int(ws.fetch(f"gseq{c}")[0])))

    producers = _start([lambda p=p: producer(p) for p in range(n_prod)])
    consumers = _start([lambda c=c: consumer(c) for c in range(n_cons)])
    _join_all(producers)
    _close(ws)
    _join_all(consumers)
    everything = sorted(x for g in got for x in g)
    assert everything == sorted((p, k) for p in range(n_prod) for k in range(n_items))
    for g in got:  # one consumer sees each producer's records in the order they were written
        for p in range(n_prod):
            seq = [k for q, k in g if q == p]
            assert seq == sorted(seq)


def test_a_failing_op_cancels_a_blocked_dequeue_in_the_same_async_run():
    ws = _ws_with_queue()
    ws.feed("bad", np.array([1.0]))
    net = an.Net("n", type="async_scheduling")
    net.DequeueBlobs("q", "x")
    net.Reshape("bad", ["r", "old"], shape=[7])  # fails: 1 value into 7
    t0 = time.monotonic()
    with pytest.raises(AsyncNetError):
        ws.run_net_once(net)
    assert time.monotonic() - t0 < JOIN


def test_weighted_sample_dequeue_picks_by_weight_and_reports_the_table():
    ws = an.Workspace()
    init = an.Net("init")
    init.CreateBlobsQueue([], "qa", capacity=50, num_blobs=2)
    init.CreateBlobsQueue([], "qb", capacity=50, num_blobs=2)
    ws.run_net_once(init)
    for _ in range(40):
        for q in ("qa", "qb"):
            ws.feed("v", np.array([1.0 if q == "qa" else 2.0]))
            ws.feed("w", np.array([-1], np.int32))
            put = an.Net("put")
            put.EnqueueBlobs([q, "v", "w"], ["v", "w"])
            ws.run_net_once(put)
    net = an.Net("get")
    net.WeightedSampleDequeueBlobs(["qa", "qb"], ["x", "table", "status"], weights=[0.0, 1.0], table_idx_blob=1)
    ws.run_net_once(net)
    assert ws.fetch("table").tolist() == [1] and not bool(ws.fetch("status"))
    net = an.Net("get2", device_option=an.DeviceOption(random_seed=7))
    net.WeightedSampleDequeueBlobs(["qa", "qb"], ["x", "w2", "status"], weights=[3.0, 1.0])
    instance = ws.create_net(net)
    picks = []
    for _ in range(30):
        instance.run()
        picks.append(float(ws.fetch("x")[0]))
    assert 15 <= picks.count(1.0) <= 30  # expected 22.5 of 30 from queue a; seeded


def test_bad_uses_give_clear_errors():
    ws = _ws_with_queue(capacity=1, num_blobs=2)
    ws.feed("x", np.zeros(1))
    ws.feed("y", np.zeros(1))
    net = an.Net("wrong")
    net.EnqueueBlobs(["x", "y"], ["y"])
    with pytest.raises(AsyncNetError, match="expected a blobs queue"):
        ws.run_net_once(net)
    net = an.Net("count")
    net.DequeueBlobs("q", ["a"])
    with pytest.raises(AsyncNetError, match="holds 2 blobs per record: expected 2 outputs"):
        ws.run_net_once(net)
    bad = an.Net("zero")
    bad.CreateBlobsQueue([], "z", capacity=0)
    with pytest.raises(AsyncNetError, match="capacity of at least 1"):
        ws.run_net_once(bad)
    names = an.Net("names")
    names.CreateBlobsQueue([], "z", num_blobs=2, field_names=["a"])
    with pytest.raises((AsyncNetError, NetDefinitionError), match="field_names"):
        ws.run_net_once(names)


def test_enforce_unique_name_refuses_a_name_whose_slots_are_blobs():
    ws = an.Workspace()
    ws.feed("q_0_0", np.zeros(1))
    net = an.Net("init")
    net.CreateBlobsQueue([], "q", capacity=1, enforce_unique_name=True)
    with pytest.raises(AsyncNetError, match="'q_0_0'"):
        ws.run_net_once(net)
    net = an.Net("init2")
    net.CreateBlobsQueue([], "q", capacity=1)
    ws.run_net_once(net)


def test_blobs_queue_object_read_and_write_wait_and_wake():
    q = BlobsQueue("q", capacity=1, num_blobs=1)
    assert q.write([1]) and q.read(0.01) == [1] and q.read(0.01) is None
    got: list = []
    t = _start([lambda: got.append(q.read())])
    q.write([2])
    _join_all(t)
    assert got == [[2]]


def test_docstring_examples():
    import doctest

    import asyncnet.ops.caffe2_queue as module

    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


def test_a_failing_op_cancels_a_blocked_enqueue_in_the_same_async_run():
    ws = _ws_with_queue(capacity=1)
    _enqueue(ws, np.array([0.0]))  # full
    ws.feed("v", np.array([1.0]))
    ws.feed("bad", np.array([1.0]))
    net = an.Net("n", type="async_scheduling")
    net.EnqueueBlobs(["q", "v"], ["v"])
    net.Reshape("bad", ["r", "old"], shape=[7])
    t0 = time.monotonic()
    with pytest.raises(AsyncNetError):
        ws.run_net_once(net)
    assert time.monotonic() - t0 < JOIN
    assert len(ws.fetch("q")) == 1 and not ws.fetch("q").closed


# -- CreateBlobsQueueDB ---------------------------------------------------------------------------


def test_a_queue_read_as_a_database_feeds_tensor_protos_db_input():
    from asyncnet.ops import _tensorproto as tp

    ws = an.Workspace()
    ws.run_operator_once(an.OperatorDef("CreateBlobsQueue", [], ["q"], {"capacity": 8, "num_blobs": 1}))
    ws.run_operator_once(
        an.OperatorDef("CreateBlobsQueueDB", ["q"], ["db"], {"value_blob_index": 0, "timeout_secs": 0.05})
    )
    for i in range(4):  # as bytes, and as a one-element string array (ASCII records, no trailing NUL)
        record = tp.encode_tensor_protos([np.array([i, i + 10], np.int32), np.array(i + 1, np.int32)])
        ws.feed("r", record if i % 2 else np.array([record.decode("ascii")]))
        ws.run_operator_once(an.OperatorDef("EnqueueBlobs", ["q", "r"], ["r"]))
    read = an.OperatorDef("TensorProtosDBInput", ["db"], ["x", "label"], {"batch_size": 2})
    for first in (0, 2):
        ws.run_operator_once(read)
        np.testing.assert_array_equal(ws.fetch("x"), [[first, first + 10], [first + 1, first + 11]])
        np.testing.assert_array_equal(ws.fetch("label"), [first + 1, first + 2])
    t0 = time.monotonic()
    with pytest.raises(AsyncNetError, match="gave no record within 0.05 s"):
        ws.run_operator_once(read)
    assert time.monotonic() - t0 < 5
    ws.run_operator_once(an.OperatorDef("CloseBlobsQueue", ["q"], []))
    with pytest.raises(AsyncNetError, match="closed and empty"):
        ws.run_operator_once(read)
