"""Caffe2's rebatching queue: a bounded FIFO of rows that re-cuts batches to another size.

``CreateRebatchingQueue`` makes a queue of at most ``capacity`` rows of ``num_blobs`` columns;
``EnqueueRebatchingQueue`` puts the inputs in as one row, or with ``enqueue_batch=1`` puts each
index of their first dimension in as a row, waiting while the queue is full;
``DequeueRebatchingQueue`` takes ``num_elements`` rows, waiting for them, and stacks each column
into one output; ``CloseRebatchingQueue`` closes it. Once closed the queue takes no rows (an
enqueue fails), hands out the rows it holds, and a dequeue from it empty fails. Every wait ends
when the run is cancelled. Rows are kept as they were given (no copy).

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace(); ws.feed("x", np.arange(6, dtype=np.int32))
    >>> net = an.Net("rebatch"); _ = net.CreateRebatchingQueue([], "q", capacity=8, num_blobs=1)
    >>> _ = net.EnqueueRebatchingQueue(["q", "x"], [], enqueue_batch=1)
    >>> _ = net.DequeueRebatchingQueue("q", "a", num_elements=4)
    >>> _ = net.DequeueRebatchingQueue("q", "b", num_elements=2)
    >>> ws.run_net_once(net); ws.fetch("a"), ws.fetch("b")
    (array([0, 1, 2, 3], dtype=int32), array([4, 5], dtype=int32))
"""

from __future__ import annotations

from typing import Any

import numpy as np

from asyncnet.core.defs import OperatorDef
from asyncnet.core.registry import Arg, register_no_gradient, register_op
from asyncnet.ops.caffe2_queue import BlobsQueue

__all__ = ["RebatchingQueue"]


class RebatchingQueue(BlobsQueue):
    """A :class:`BlobsQueue` whose records are rows, which refuses rows once closed.

    >>> q = RebatchingQueue("q", capacity=4, num_blobs=1)
    >>> q.put_rows([np.arange(3)], batch=True); [int(r[0]) for r in q.take_rows(2)]
    [0, 1]
    """

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"RebatchingQueue({self.name!r}, {len(self)}/{self.capacity} rows, {state})"

    def put_rows(self, columns: list[Any], batch: bool, cancelled: Any = None) -> None:
        """Append the ``columns`` as one row, or (``batch``) each index of their first dimension."""
        if len(columns) != self.num_blobs:
            raise ValueError(f"expected {self.num_blobs} blobs per row of queue {self.name!r}, got {len(columns)}")
        columns = [np.asarray(c) for c in columns]
        if batch:
            sizes = {c.shape[0] if c.ndim else None for c in columns}
            if len(sizes) != 1 or None in sizes:
                shapes = [c.shape for c in columns]
                raise ValueError(f"expected inputs sharing a first dimension (enqueue_batch=1), got shapes {shapes}")
            rows = [[c[i] for c in columns] for i in range(sizes.pop())]
        else:
            rows = [columns]
        for row in rows:
            if self.closed:
                raise RuntimeError(f"queue {self.name!r} is closed: it takes no more rows")
            if not self.write(row, cancelled):
                why = "closed" if self.closed else "cancelled"
                raise RuntimeError(f"enqueuing into queue {self.name!r} failed: the {why} while it was full")

    def take_rows(self, n: int, cancelled: Any = None) -> list[list[Any]]:
        """The next ``n`` rows (fewer when the queue closes first; at least one, or an error)."""
        rows = []
        while len(rows) < n:
            row = self.read(None, cancelled)
            if row is None:
                break
            rows.append(row)
        if not rows:
            why = "closed and empty" if self.closed else "left by a cancelled run"
            raise RuntimeError(f"queue {self.name!r} is {why}: nothing to dequeue")
        return rows


def _queue(ctx: Any, q: Any) -> RebatchingQueue:
    if not isinstance(q, RebatchingQueue):
        raise TypeError(
            f"expected a rebatching queue (made by CreateRebatchingQueue) in input 0 {ctx.op.inputs[0]!r}, "
            f"got {type(q).__name__}"
        )
    return q


@register_op(
    "CreateRebatchingQueue",
    inputs=0,
    outputs=1,
    args=[
        Arg("capacity", int, 1, "the most rows the queue holds"),
        Arg("num_blobs", int, 1, "the columns of a row"),
    ],
    outputs_doc=("queue",),
    doc="A new rebatching queue of rows of num_blobs columns, at most capacity rows.",
)
def create_rebatching_queue(ctx: Any) -> RebatchingQueue:
    return RebatchingQueue(ctx.op.outputs[0], ctx.args["capacity"], ctx.args["num_blobs"])


def _enqueue_inputs(op: OperatorDef) -> None:
    if len(op.inputs) < 2:
        raise ValueError("expected the queue and at least one tensor to enqueue")


@register_op(
    "EnqueueRebatchingQueue",
    inputs=(2, None),
    outputs=0,
    validate=_enqueue_inputs,
    args=[Arg("enqueue_batch", (bool, int), 0, "each index of the first dimension is a row")],
    inputs_doc=("queue", "the tensors of a row (one per column)"),
    doc="Put the tensors in as one row (or, with enqueue_batch=1, each index of their first dimension as a "
    "row), waiting while the queue is full; fails once it is closed.",
)
def enqueue_rebatching_queue(ctx: Any, q: Any, *tensors: Any) -> None:
    _queue(ctx, q).put_rows(list(tensors), bool(ctx.args["enqueue_batch"]), ctx.cancelled)


@register_op(
    "DequeueRebatchingQueue",
    inputs=1,
    outputs=(1, None),
    args=[Arg("num_elements", int, 1, "the rows to take")],
    inputs_doc=("queue",),
    outputs_doc=("each column of the rows, stacked",),
    doc="Take num_elements rows (waiting for them; fewer when the queue closes first) and stack each column.",
)
def dequeue_rebatching_queue(ctx: Any, q: Any) -> Any:
    queue = _queue(ctx, q)
    if len(ctx.op.outputs) != queue.num_blobs:
        raise ValueError(f"queue {queue.name!r} has {queue.num_blobs} columns: expected as many outputs")
    n = ctx.args["num_elements"]
    if n < 1:
        raise ValueError(f"expected num_elements >= 1, got {n}")
    rows = queue.take_rows(n, ctx.cancelled)
    columns = [np.stack([np.asarray(r[j]) for r in rows]) for j in range(queue.num_blobs)]
    return columns[0] if len(columns) == 1 else tuple(columns)


@register_op(
    "CloseRebatchingQueue",
    inputs=1,
    outputs=0,
    inputs_doc=("queue",),
    doc="Close the queue: enqueues fail, dequeues get the rows left, then fail.",
)
def close_rebatching_queue(ctx: Any, q: Any) -> None:
    _queue(ctx, q).close()


register_no_gradient(
    "CreateRebatchingQueue", "EnqueueRebatchingQueue", "DequeueRebatchingQueue", "CloseRebatchingQueue"
)
