"""Caffe2's ``caffe2.python.record_queue``: a blobs queue filled from a reader by concurrent
producer steps, read back through a Reader.

``RecordQueue(schema, num_threads=n).build(reader, process)`` gives the queue's reader, a step
running ``n`` producers (each reads a batch, optionally transforms it with
``process(net, record)``, checks it and enqueues it, until ``reader`` ends), the step closing
the queue, and the schema. The queue itself is created at once in the current workspace.
"""

from __future__ import annotations

from typing import Any

from caffe2.python import core, workspace
from caffe2.python.dataio import Reader, Writer
from caffe2.python.schema import Field, Struct, from_column_list

__all__ = ["RecordQueue"]


class _Dequeuer(Reader):
    """Reads records from the queue (``should_stop`` once it is closed and empty)."""

    def __init__(self, queue: Any, schema: Field, name: str | None = None):
        super().__init__(schema)
        self.blobs_queue, self.name = queue, name

    def read(self, read_net: Any) -> tuple[Any, list[Any]]:
        scope = read_net.NextName(self.name)
        with core.NameScope(scope):
            outputs = [*self.schema().field_names(), read_net.NextName()]
            *fields, status = read_net.SafeDequeueBlobs(self.blobs_queue, outputs)
        return status, fields


class _Enqueuer(Writer):
    """Checks a record against the schema and enqueues it."""

    def __init__(self, queue: Any, schema: Field):
        self.blobs_queue = queue
        self.schema = schema  # type: ignore[assignment]

    def write(self, writer_net: Any, fields: Any) -> Any:
        blobs = fields.field_blobs() if isinstance(fields, Field) else list(fields)
        writer_net.CheckDatasetConsistency(blobs, [], fields=self.schema.field_names())
        return writer_net.SafeEnqueueBlobs([self.blobs_queue, *blobs], [*blobs, writer_net.NextName()])[-1]


class RecordQueue:
    """A queue of records of ``fields`` (a Struct, or a list of column names), holding at most
    ``capacity`` of them, filled by ``num_threads`` producers."""

    def __init__(
        self,
        fields: Any,
        name: str | None = None,
        capacity: int = 1,
        enforce_unique_name: bool = False,
        num_threads: int = 1,
    ):
        record = from_column_list(fields) if isinstance(fields, list) else fields
        if not isinstance(record, Struct):
            raise AssertionError("fields must be either a Struct or a list of raw field names.")
        self.schema, self.name, self.num_threads = record, name or "queue", num_threads
        fields = record
        create = core.Net(f"{self.name}/init_net")
        self.blobs_queue = create.CreateBlobsQueue(
            [],
            1,
            num_blobs=len(fields.field_names()),
            capacity=capacity,
            enforce_unique_name=enforce_unique_name,
        )
        workspace.RunNetOnce(create)
        self.writer = _Enqueuer(self.blobs_queue, fields)
        self.reader = _Dequeuer(self.blobs_queue, fields, f"{self.name}_reader")
        close = core.Net(f"{self.name}/exit_net")
        close.CloseBlobsQueue(self.blobs_queue, 0)
        self.exit_step = core.execution_step(f"{close}_close_step", close)

    def _producer(self, i: int, reader: Reader, process: Any) -> Any:
        fetch = core.Net(f"reader_{i}")
        stop, record = reader.read_record(fetch)
        put = core.Net(f"queue_writer{i}")
        blobs = (process(put, record) if process else record).field_blobs()
        self.writer.write(put, blobs)
        steps = [core.execution_step(f"reader_{i}", fetch), core.execution_step(f"queue_writer{i}", put)]
        return core.execution_step(f"producer_{i}", steps, should_stop_blob=stop)

    def build(self, reader: Reader, process: Any = None) -> tuple[Reader, Any, Any, Field]:
        """``(queue reader, producers step, close step, schema)``; ``process(net, record)``
        returns the record to enqueue."""
        producers = [self._producer(i, reader, process) for i in range(self.num_threads)]
        step = core.execution_step("producers", producers, concurrent_substeps=True)
        return self.reader, step, self.exit_step, self.schema
