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

logger = logging.getLogger(__name__)


class _QueueReader(dataio.Reader):
    """Dequeues records (``num_dequeue_records`` joined per read) until the queue is closed and empty."""

    def __init__(self, wrapper: QueueWrapper, num_dequeue_records: int = 1):
        if wrapper.schema() is None:
            raise AssertionError("Queue needs a schema in order to be read from.")
        super().__init__(wrapper.schema())
        self._wrapper = wrapper
        self._num_dequeue_records = num_dequeue_records

    def setup_ex(self, init_net: Any, exit_net: Any) -> None:
        exit_net.CloseBlobsQueue([self._wrapper.queue()], 0)

    def read_ex(self, local_init_net: Any, local_finish_net: Any) -> tuple[list[Any], Any, list[Any]]:
        self._wrapper._new_reader(local_init_net)
        net = core.Net("dequeue")
        names = self.schema().field_names()
        fields, status = dequeue(
            net, self._wrapper.queue(), len(names), field_names=names, num_records=self._num_dequeue_records
        )
        return [net], status, fields

    def read(self, net: Any) -> tuple[Any, list[Any]]:
        _, status, fields = self.read_ex(net, None)
        return status, fields


class _QueueWriter(dataio.Writer):
    """Enqueues records; the queue is closed when the writing task ends."""

    def __init__(self, wrapper: QueueWrapper):
        self._wrapper = wrapper

    def setup_ex(self, init_net: Any, exit_net: Any) -> None:
        exit_net.CloseBlobsQueue([self._wrapper.queue()], 0)

    def write_ex(self, fields: Any, local_init_net: Any, local_finish_net: Any, status: Any) -> list[Any]:
        self._wrapper._new_writer(self.schema(), local_init_net)
        net = core.Net("enqueue")
        enqueue(net, self._wrapper.queue(), fields, status)
        return [net]


class QueueWrapper(dataio.Pipe):
    """A pipe over an existing queue blob ``handler``."""

    def __init__(self, handler: Any, schema: Any = None, num_dequeue_records: int = 1):
        super().__init__(schema, TaskGroup.LOCAL_SETUP)
        self._queue = handler
        self._num_dequeue_records = num_dequeue_records

    def reader(self) -> dataio.Reader:
        return _QueueReader(self, num_dequeue_records=self._num_dequeue_records)

    def writer(self) -> dataio.Writer:
        return _QueueWriter(self)

    def queue(self) -> Any:
        return self._queue


class Queue(QueueWrapper):
    """A new queue of ``capacity`` records; it is created by the task groups that use it (its
    schema is the first writer's)."""

    def __init__(self, capacity: int, schema: Any = None, name: str = "queue", num_dequeue_records: int = 1):
        net = core.Net(name)
        handler = net.AddExternalInput(net.NextName("handler"))
        super().__init__(handler, schema, num_dequeue_records=num_dequeue_records)
        self.capacity = capacity
        self._setup_done = False

    def setup(self, global_init_net: Any) -> None:
        if not self._schema:
            raise AssertionError("This queue does not have a schema.")
        self._setup_done = True
        names = self._schema.field_names()
        global_init_net.CreateBlobsQueue(
            [], [self._queue], capacity=self.capacity, num_blobs=len(names), field_names=names
        )


def enqueue(net: Any, queue: Any, data_blobs: list[Any], status: Any = None) -> Any:
    """Add a ``SafeEnqueueBlobs`` of ``data_blobs`` to ``net``; returns its status blob (a blob
    listed twice is copied first)."""
    if status is None:
        status = net.NextName("status")
    blobs: list[Any] = []
    for blob in data_blobs:
        if blob in blobs:
            logger.warning("Need to copy blob %s to enqueue", blob)
            blob = net.Copy(blob)
        blobs.append(blob)
    return net.SafeEnqueueBlobs([queue, *blobs], [*blobs, status])[-1]


def dequeue(
    net: Any, queue: Any, num_blobs: int, status: Any = None, field_names: Any = None, num_records: int = 1
) -> tuple[list[Any], Any]:
    """Add a ``SafeDequeueBlobs`` to ``net``: ``(blobs, status)``."""
    if field_names is not None:
        if len(field_names) != num_blobs:
            raise AssertionError(f"expected {num_blobs} field names, got {len(field_names)}")
        names = [net.NextName(n) for n in field_names]
    else:
        names = [net.NextName("data", i) for i in range(num_blobs)]
    if status is None:
        status = net.NextName("status")
    out = list(net.SafeDequeueBlobs(queue, [*names, status], num_records=num_records))
    return out[:-1], out[-1]


def close_queue(step: Any, *queues: Any) -> Any:
    """A step running ``step`` and then closing ``queues``."""
    net = core.Net("close_queue_net")
    for q in queues:
        net.CloseBlobsQueue([q], 0)
    closing = core.execution_step(f"{net}_step", net)
    return core.execution_step(f"{net}_wraper_step", [step, closing])
