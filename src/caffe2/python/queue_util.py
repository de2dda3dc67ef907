"""Caffe2's ``caffe2.python.queue_util``: a blobs queue as a pipe of records.

:class:`Queue` is a bounded ``CreateBlobsQueue`` queue with a reader (``SafeDequeueBlobs``) and
a writer (``SafeEnqueueBlobs``); closing it (done when the writing task ends) makes the reader
stop once it is empty. ``pipeline.pipe`` connects readers, processors and queues.

    >>> from caffe2.python import core
    >>> from caffe2.python.queue_util import Queue, enqueue
    >>> q = Queue(capacity=4, name="doc_queue")
    >>> net = core.Net("doc_enqueue")
    >>> status = enqueue(net, q.queue(), [core.BlobReference("x")])
    >>> [op.type for op in net.Proto().op]
    ['SafeEnqueueBlobs']
"""

from __future__ import annotations

import logging
from typing import Any

from caffe2.python import core, dataio
from caffe2.python.task import TaskGroup

__all__ = ["Queue", "QueueWrapper", "close_queue", "dequeue", "enqueue"]

_log = logging.getLogger(__name__)


def _close_on_exit(pipe: QueueWrapper, exit_net: Any) -> None:
    exit_net.CloseBlobsQueue([pipe.queue()], 0)


class _QueueReader(dataio.Reader):
    """Dequeues records (``num_dequeue_records`` joined per read) until the queue is closed and empty."""

    def __init__(self, pipe: QueueWrapper, num_dequeue_records: int = 1):
        if pipe.schema() is None:
            raise AssertionError("Queue needs a schema in order to be read from.")
        super().__init__(pipe.schema())
        self._pipe = pipe
        self._records_per_read = num_dequeue_records

    def setup_ex(self, init_net: Any, exit_net: Any) -> None:
        _close_on_exit(self._pipe, exit_net)

    def read_ex(self, local_init_net: Any, local_finish_net: Any) -> tuple[list[Any], Any, list[Any]]:
        self._pipe._new_reader(local_init_net)
        net = core.Net("dequeue")
        names = self.schema().field_names()
        blobs, status = dequeue(
            net, self._pipe.queue(), len(names), field_names=names, num_records=self._records_per_read
        )
        return [net], status, blobs

    def read(self, net: Any) -> tuple[Any, list[Any]]:
        _, status, blobs = self.read_ex(net, None)
        return status, blobs


class _QueueWriter(dataio.Writer):
    """Enqueues records; the queue is closed when the writing task ends."""

    def __init__(self, pipe: QueueWrapper):
        self._pipe = pipe

    def setup_ex(self, init_net: Any, exit_net: Any) -> None:
        _close_on_exit(self._pipe, exit_net)

    def write_ex(self, fields: Any, local_init_net: Any, local_finish_net: Any, status: Any) -> list[Any]:
        self._pipe._new_writer(self.schema(), local_init_net)
        net = core.Net("enqueue")
        enqueue(net, self._pipe.queue(), fields, status)
        return [net]


class QueueWrapper(dataio.Pipe):
    """A pipe over an existing queue blob ``handler``."""

    def __init__(self, handler: Any, schema: Any = None, num_dequeue_records: int = 1):
        super().__init__(schema, TaskGroup.LOCAL_SETUP)
        self._handle = handler
        self._records_per_read = num_dequeue_records

    def reader(self) -> dataio.Reader:
        return _QueueReader(self, num_dequeue_records=self._records_per_read)

    def writer(self) -> dataio.Writer:
        return _QueueWriter(self)

    def queue(self) -> Any:
        return self._handle


class Queue(QueueWrapper):
    """A new queue of ``capacity`` records; it is created by the task groups that use it (its
    schema is the first writer's)."""

    def __init__(self, capacity: int, schema: Any = None, name: str = "queue", num_dequeue_records: int = 1):
        owner = core.Net(name)
        super().__init__(owner.AddExternalInput(owner.NextName("handler")), schema, num_dequeue_records)
        self.capacity = capacity
        self.created = False

    def setup(self, global_init_net: Any) -> None:
        """Add to ``global_init_net`` the op creating the queue."""
        if not self._schema:
            raise AssertionError("This queue does not have a schema.")
        names = self._schema.field_names()
        global_init_net.CreateBlobsQueue(
            [], [self.queue()], capacity=self.capacity, num_blobs=len(names), field_names=names
        )
        self.created = True


def enqueue(net: Any, queue: Any, data_blobs: list[Any], status: Any = None) -> Any:
    """Add a ``SafeEnqueueBlobs`` of ``data_blobs`` to ``net``; returns its status blob (a blob
    listed twice is copied first)."""
    record: list[Any] = []
    for blob in data_blobs:
        if blob in record:
            _log.warning("Need to copy blob %s to enqueue", blob)
            blob = net.Copy(blob)
        record.append(blob)
    outputs = [*record, status if status is not None else net.NextName("status")]
    return net.SafeEnqueueBlobs([queue, *record], outputs)[-1]


def dequeue(
    net: Any, queue: Any, num_blobs: int, status: Any = None, field_names: Any = None, num_records: int = 1
) -> tuple[list[Any], Any]:
    """Add a ``SafeDequeueBlobs`` to ``net``: ``(blobs, status)``."""
    if field_names is None:
        names = [net.NextName("data", i) for i in range(num_blobs)]
    elif len(field_names) == num_blobs:
        names = [net.NextName(n) for n in field_names]
    else:
        raise AssertionError(f"expected {num_blobs} field names, got {len(field_names)}")
    outputs = [*names, status if status is not None else net.NextName("status")]
    *blobs, done = net.SafeDequeueBlobs(queue, outputs, num_records=num_records)
    return blobs, done


def close_queue(step: Any, *queues: Any) -> Any:
    """A step running ``step`` and then closing ``queues``."""
    net = core.Net("close_queue_net")
    for q in queues:
        net.CloseBlobsQueue([q], 0)
    closing = core.execution_step(f"{net}_step", net)
    return core.execution_step(f"{net}_wraper_step", [step, closing])
