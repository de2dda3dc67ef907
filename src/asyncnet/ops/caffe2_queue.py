"""Caffe2's blob queues: a bounded FIFO of records (``num_blobs`` blobs each) held in a blob.

CreateBlobsQueue makes the queue; EnqueueBlobs and DequeueBlobs block while it is full or
empty; CloseBlobsQueue closes it. As in Caffe2, a closed queue still hands out the records it
holds and still takes records while it has room; what closing changes is that a wait ends: a
dequeue waiting on a closed, empty queue and an enqueue waiting on a closed, full one give up.
The plain ops then fail (the net's run fails); the Safe ops instead set their last output, a
0-d bool *status*, to True. Every wait also ends when the net's run is cancelled.

Producers and consumers may run on any threads (asyncnet's executors, plain threads); the
queue is one lock and one condition. An enqueued record is kept as it is (no copy, as Caffe2's
swap): the producer's output blobs keep referring to it.

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace()
    >>> init = an.Net("init"); _ = init.CreateBlobsQueue([], "q", capacity=2, num_blobs=1)
    >>> ws.run_net_once(init); ws.feed("x", np.arange(3.0))
    >>> put = an.Net("put"); _ = put.EnqueueBlobs(["q", "x"], ["x"])
    >>> get = an.Net("get"); _ = get.DequeueBlobs("q", "y")
    >>> ws.run_net_once(put); ws.run_net_once(get); ws.fetch("y")
    array([0., 1., 2.])
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from asyncnet.core.defs import OperatorDef
from asyncnet.core.registry import Arg, register_no_gradient, register_op
from asyncnet.ops.dbio import DBReader

__all__ = ["BlobsQueue", "QueueDBReader"]

_POLL = 0.05  # s between checks of the run's cancel flag while waiting (close wakes a wait at once)


class BlobsQueue:
    """A bounded, closable FIFO of records of ``num_blobs`` values, safe across threads.

    >>> q = BlobsQueue("q", capacity=1, num_blobs=1)
    >>> q.write([1]), q.read(timeout=0.01), q.read(timeout=0.01)
    (True, [1], None)
    >>> q.close(); q.write([2]), q.write([3])
    (True, False)
    """

    def __init__(self, name: str, capacity: int, num_blobs: int, field_names: Sequence[str] = ()):
        if capacity < 1:
            raise ValueError(f"expected a capacity of at least 1, got {capacity}")
        if num_blobs < 1:
            raise ValueError(f"expected num_blobs of at least 1, got {num_blobs}")
        if field_names and len(field_names) != num_blobs:
            raise ValueError(f"expected {num_blobs} field_names (one per blob), got {len(field_names)}")
        self.name, self.capacity, self.num_blobs = name, capacity, num_blobs
        self.field_names = list(field_names)
        self._items: deque[list[Any]] = deque()
        self._cond = threading.Condition()
        self.closed = False

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"BlobsQueue({self.name!r}, {len(self._items)}/{self.capacity} records, {state})"

    def _wait(self, ready: Callable[[], bool], timeout: float | None, cancelled: Callable[[], bool] | None) -> bool:
        """Wait (holding the condition) until ``ready()``, the queue closes, ``timeout`` s pass or
        the run is cancelled; whether ``ready()``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not ready() and not self.closed:
            if cancelled is not None and cancelled():
                break
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            slice_ = _POLL if cancelled is not None else None
            if left is not None:
                slice_ = left if slice_ is None else min(slice_, left)
            self._cond.wait(slice_)
        return ready()

    def write(self, values: Sequence[Any], cancelled: Callable[[], bool] | None = None) -> bool:
        """Append one record, waiting while the queue is full; False if it is full and closed (or
        the wait was cancelled)."""
        if len(values) != self.num_blobs:
            raise ValueError(f"expected {self.num_blobs} blobs per record of queue {self.name!r}, got {len(values)}")
        with self._cond:
            if not self._wait(lambda: len(self._items) < self.capacity, None, cancelled):
                return False
            self._items.append(list(values))
            self._cond.notify_all()
            return True

    def read(self, timeout: float | None = None, cancelled: Callable[[], bool] | None = None) -> list[Any] | None:
        """Take the oldest record, waiting while the queue is empty (at most ``timeout`` s when
        given); None if it is empty and closed, or the wait timed out or was cancelled."""
        with self._cond:
            if not self._wait(lambda: bool(self._items), timeout, cancelled):
                return None
            record = self._items.popleft()
            self._cond.notify_all()
            return record

    def close(self) -> None:
        """Close the queue and wake every waiting reader and writer."""
        with self._cond:
            self.closed = True
            self._cond.notify_all()


def _queue(x: Any, i: int, ctx: Any) -> BlobsQueue:
    if not isinstance(x, BlobsQueue):
        raise TypeError(
            f"expected a blobs queue (made by CreateBlobsQueue) in input {i} {ctx.op.inputs[i]!r}, "
            f"got {type(x).__name__}"
        )
    return x


def _check_outputs(queue: BlobsQueue, ctx: Any, extra: int) -> None:
    want = queue.num_blobs + extra
    if len(ctx.op.outputs) != want:
        status = " and a status" if extra else ""
        raise ValueError(
            f"queue {queue.name!r} holds {queue.num_blobs} blobs per record: expected {want} outputs "
            f"(one per blob{status}), got {len(ctx.op.outputs)}"
        )


def _status(failed: bool) -> np.ndarray:
    return np.array(failed, dtype=bool)


def _unchanged(ctx: Any, n: int) -> list[Any]:
    """Outputs ``0..n-1`` as they are (an empty float32 array for one that does not exist yet)."""
    return [v if (v := ctx.output(i)) is not None else np.empty(0, np.float32) for i in range(n)]


def _one(values: Sequence[Any]) -> Any:
    return values[0] if len(values) == 1 else tuple(values)


# -- CreateBlobsQueue ---------------------------------------------------------------------------------


def _internal_names(name: str, capacity: int, num_blobs: int) -> list[str]:
    return [f"{name}_{i}_{j}" for i in range(capacity) for j in range(num_blobs)]


@register_op(
    "CreateBlobsQueue",
    inputs=0,
    outputs=1,
    args=[
        Arg("capacity", int, 1, "records the queue holds at most"),
        Arg("num_blobs", int, 1, "blobs per record"),
        Arg("enforce_unique_name", (bool, int), False, "refuse a queue whose slot names (<name>_<i>_<j>) are blobs"),
        Arg("field_names", list, [], "a name per blob (for statistics)", item_type=str),
    ],
    outputs_doc=("the queue",),
    doc="Caffe2's CreateBlobsQueue: a new, empty, open queue of records of num_blobs blobs, at most capacity of them.",
)
def create_blobs_queue(ctx: Any) -> BlobsQueue:
    a = ctx.args
    name = ctx.op.outputs[0]
    if a["enforce_unique_name"]:
        taken = [n for n in _internal_names(name, a["capacity"], a["num_blobs"]) if ctx._blobs.get(n) is not None]
        if taken:
            raise ValueError(f"queue internal blob already exists: {taken[0]!r}")
    return BlobsQueue(name, a["capacity"], a["num_blobs"], a["field_names"])


# -- Enqueue ------------------------------------------------------------------------------------------


def _enqueue_inputs(op: OperatorDef) -> None:
    if len(op.inputs) < 2:
        raise ValueError(f"expected the queue and at least one blob as inputs, got {len(op.inputs)} inputs")


@register_op(
    "EnqueueBlobs",
    inputs=(2, None),
    outputs=(1, None),
    allow_inplace=lambda i, o: i == o + 1,
    validate=_enqueue_inputs,
    inputs_doc=("the queue", "the blobs of one record"),
    outputs_doc=("the same blobs (in place)",),
    doc="Caffe2's EnqueueBlobs: append a record, waiting while the queue is full; fails if it is full and closed.",
)
def enqueue_blobs(ctx: Any, q: Any, *values: Any) -> Any:
    queue = _queue(q, 0, ctx)
    _check_outputs(queue, ctx, 0)
    if not queue.write(values, ctx.cancelled):
        if not queue.closed:
            raise RuntimeError(f"the run was cancelled while enqueuing into {queue.name!r}")
        raise RuntimeError(f"queue {queue.name!r} is closed and full: the record was not enqueued")
    return _one(values)


@register_op(
    "SafeEnqueueBlobs",
    inputs=(2, None),
    outputs=(2, None),
    allow_inplace=lambda i, o: i == o + 1,
    validate=_enqueue_inputs,
    inputs_doc=("the queue", "the blobs of one record"),
    outputs_doc=("the same blobs (in place)", "status: True when the record was not enqueued (queue closed)"),
    doc="Caffe2's SafeEnqueueBlobs: EnqueueBlobs that reports a closed, full queue in a bool status output.",
)
def safe_enqueue_blobs(ctx: Any, q: Any, *values: Any) -> tuple[Any, ...]:
    queue = _queue(q, 0, ctx)
    _check_outputs(queue, ctx, 1)
    ok = queue.write(values, ctx.cancelled)
    return (*values, _status(not ok))


# -- Dequeue ------------------------------------------------------------------------------------------


@register_op(
    "DequeueBlobs",
    inputs=1,
    outputs=(1, None),
    args=[Arg("timeout_secs", float, 0.0, "give up after this many seconds (0: wait until a record or close)")],
    inputs_doc=("the queue",),
    outputs_doc=("the blobs of the oldest record",),
    doc="Caffe2's DequeueBlobs: take the oldest record, waiting while the queue is empty; fails on a closed, "
    "empty queue or after timeout_secs.",
)
def dequeue_blobs(ctx: Any, q: Any) -> Any:
    queue = _queue(q, 0, ctx)
    _check_outputs(queue, ctx, 0)
    timeout = ctx.args["timeout_secs"]
    record = queue.read(timeout if timeout > 0 else None, ctx.cancelled)
    if record is None:
        if queue.closed:
            raise RuntimeError(f"queue {queue.name!r} is closed and empty: nothing to dequeue")
        if ctx.cancelled():
            raise RuntimeError(f"the run was cancelled while dequeuing from {queue.name!r}")
        raise RuntimeError(f"DequeueBlobs timed out in {timeout} secs on queue {queue.name!r}")
    return _one(record)


def _append_rows(out: list[Any], record: list[Any], queue: BlobsQueue) -> None:
    for j, x in enumerate(record):
        x = np.asarray(x)
        if x.ndim == 0:
            raise ValueError(f"cannot join a 0-d record of queue {queue.name!r} (column {j} of {queue.num_blobs})")
        out[j] = np.concatenate([out[j], x], axis=0)


@register_op(
    "SafeDequeueBlobs",
    inputs=1,
    outputs=(2, None),
    args=[Arg("num_records", int, 1, "records to take and join along axis 0 (fewer if the queue closes)")],
    inputs_doc=("the queue",),
    outputs_doc=("the blobs of the record(s)", "status: True when nothing was dequeued (queue closed)"),
    doc="Caffe2's SafeDequeueBlobs: DequeueBlobs that reports a closed, empty queue in a bool status output; "
    "with num_records > 1, joins that many records along axis 0.",
)
def safe_dequeue_blobs(ctx: Any, q: Any) -> tuple[Any, ...]:
    queue = _queue(q, 0, ctx)
    _check_outputs(queue, ctx, 1)
    n = ctx.args["num_records"]
    if n < 1:
        raise ValueError(f"expected num_records of at least 1, got {n}")
    out: list[Any] | None = None
    for _ in range(n):
        record = queue.read(None, ctx.cancelled)
        if record is None:
            break
        if out is None:
            out = [np.array(x, copy=True) if n > 1 else x for x in record]
        else:
            _append_rows(out, record, queue)
    if out is None:
        return (*_unchanged(ctx, queue.num_blobs), _status(True))
    return (*out, _status(False))


# -- WeightedSampleDequeueBlobs ---------------------------------------------------------------------


_RNGS: dict[int, np.random.Generator] = {}
_RNG_LOCK = threading.Lock()


def _rng(ctx: Any) -> np.random.Generator:
    """The op's own generator (seeded by its device_option's random_seed), dropped with its def."""
    key = id(ctx.op)
    rng = _RNGS.get(key)
    if rng is None:
        with _RNG_LOCK:
            rng = _RNGS.get(key)
            if rng is None:
                rng = _RNGS[key] = np.random.default_rng(ctx.device.random_seed)
                weakref.finalize(ctx.op, _RNGS.pop, key, None)
    return rng


def _cumulative(weights: Sequence[float], n: int) -> np.ndarray:
    w = np.asarray(weights if weights else [1.0] * n, np.float64)
    if len(w) != n:
        raise ValueError(f"expected one weight per input queue ({n}), got {len(w)}")
    if (w < 0).any():
        raise ValueError(f"expected non-negative weights, got {list(weights)}")
    if w.sum() <= 0:
        raise ValueError("the sum of weights must be positive")
    return np.cumsum(w / w.sum())


def _validate_weighted(op: OperatorDef) -> None:
    idx = op.args.get("table_idx_blob", -1)
    if idx >= len(op.outputs) - 1:
        raise ValueError(f"table_idx_blob {idx} must index an output before the status ({len(op.outputs) - 1})")


@register_op(
    "WeightedSampleDequeueBlobs",
    inputs=(1, None),
    outputs=(2, None),
    args=[
        Arg("weights", list, [], "a weight per input queue (default: equal)", item_type=float),
        Arg("table_idx_blob", int, -1, "the output that receives the chosen queue's index (int32, [1]); -1: none"),
    ],
    validate=_validate_weighted,
    inputs_doc=("the queues",),
    outputs_doc=("the blobs of the record", "status: True when the chosen queue was closed and empty"),
    doc="Caffe2's WeightedSampleDequeueBlobs: dequeue from one of the queues, chosen at random by weight.",
)
def weighted_sample_dequeue_blobs(ctx: Any, *queues: Any) -> tuple[Any, ...]:
    cum = _cumulative(ctx.args["weights"], len(queues))
    idx = min(int(np.searchsorted(cum, _rng(ctx).random(), side="left")), len(queues) - 1)
    queue = _queue(queues[idx], idx, ctx)
    _check_outputs(queue, ctx, 1)
    record = queue.read(None, ctx.cancelled)
    out = _unchanged(ctx, queue.num_blobs) if record is None else list(record)
    t = ctx.args["table_idx_blob"]
    if t >= 0:
        out[t] = np.array([idx], np.int32)
    return (*out, _status(record is None))


# -- CloseBlobsQueue ----------------------------------------------------------------------------------


@register_op(
    "CloseBlobsQueue",
    inputs=1,
    outputs=0,
    inputs_doc=("the queue",),
    doc="Caffe2's CloseBlobsQueue: close the queue, waking every blocked enqueue and dequeue.",
)
def close_blobs_queue(ctx: Any, q: Any) -> None:
    _queue(q, 0, ctx).close()


register_no_gradient(
    "CreateBlobsQueue",
    "EnqueueBlobs",
    "SafeEnqueueBlobs",
    "DequeueBlobs",
    "SafeDequeueBlobs",
    "WeightedSampleDequeueBlobs",
    "CloseBlobsQueue",
)


# -- CreateBlobsQueueDB: a queue read as a database -------------------------------------------------


class QueueDBReader(DBReader):
    """A :class:`~asyncnet.ops.dbio.DBReader` whose records are taken from a blobs queue: each
    dequeued record's blob ``value_index`` is a record's value (a serialized TensorProtos, as
    bytes, a string, or a one-element string array), its key the record's number.

    >>> q = BlobsQueue("q", capacity=2, num_blobs=1); _ = q.write([b"abc"])
    >>> QueueDBReader(q, 0, timeout=0.1).read()
    (b'0', b'abc')
    """

    def __init__(self, queue: BlobsQueue, value_index: int, timeout: float):
        if not 0 <= value_index < queue.num_blobs:
            raise ValueError(f"expected value_blob_index in [0, {queue.num_blobs}), got {value_index}")
        self.queue, self.value_index, self.timeout = queue, value_index, timeout
        self.path, self.db_type = f"queue {queue.name!r}", "blobs_queue"
        self._next = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.queue)

    def __repr__(self) -> str:
        return f"QueueDBReader({self.queue.name!r}, value_blob_index={self.value_index})"

    def read(self) -> tuple[bytes, bytes]:
        """The next record taken from the queue (waiting at most ``timeout`` s; 0: no limit)."""
        record = self.queue.read(self.timeout if self.timeout > 0 else None)
        if record is None:
            why = "is closed and empty" if self.queue.closed else f"gave no record within {self.timeout} s"
            raise RuntimeError(f"queue {self.queue.name!r} {why}")
        with self._lock:
            key, self._next = str(self._next).encode(), self._next + 1
        return key, _as_bytes(record[self.value_index], self.queue.name)

    def read_batch(self, n: int) -> list[tuple[bytes, bytes]]:
        return [self.read() for _ in range(n)]


def _as_bytes(value: Any, queue: str) -> bytes:
    if isinstance(value, np.ndarray) and value.size == 1 and value.dtype.kind in "OSU":
        value = value.reshape(-1)[0]
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape")
    if isinstance(value, (bytes, np.bytes_)):
        return bytes(value)
    raise TypeError(f"expected a string record value from queue {queue!r}, got {type(value).__name__}")


@register_op(
    "CreateBlobsQueueDB",
    inputs=1,
    outputs=1,
    args=[
        Arg("key_blob_index", int, -1, "Caffe2's; the keys here are the records' numbers"),
        Arg("value_blob_index", int, 0, "the blob of a queue record holding the value"),
        Arg("timeout_secs", float, 0.0, "a read waits at most this long for a record (0: no limit)"),
    ],
    inputs_doc=("the queue",),
    outputs_doc=("db_reader (for TensorProtosDBInput)",),
    doc="A database reader whose records are dequeued from a blobs queue.",
)
def create_blobs_queue_db(ctx: Any, q: Any) -> QueueDBReader:
    return QueueDBReader(_queue(q, 0, ctx), ctx.args["value_blob_index"], ctx.args["timeout_secs"])


register_no_gradient("CreateBlobsQueueDB")
