"""Caffe2's ``caffe2.python.dataio``: readers and writers of record batches.

A :class:`Reader` adds operators to a net that read the next batch of a record (and a 0-d bool
blob that says the data is exhausted); a :class:`Writer` adds operators that append a batch.
Readers and writers are what ``pipeline.pipe`` connects; the in-memory ``dataset.Dataset``
provides both::

    >>> from caffe2.python import core, workspace
    >>> from caffe2.python.dataio import CountUntil
    >>> reader = CountUntil(3)
    >>> init, finish = core.Net("count_init"), core.Net("count_exit")
    >>> reader.setup_ex(init, finish)
    >>> nets, stop, fields = reader.read_ex(init, finish)
    >>> plan = core.Plan("count_plan")
    >>> plan.AddStep(core.execution_step("init", init))
    >>> plan.AddStep(core.execution_step("read", nets, should_stop_blob=stop))
    >>> workspace.RunPlan(plan)
    True
    >>> int(workspace.FetchBlob(fields[0])), bool(workspace.FetchBlob(reader.data_finished()))
    (2, False)

The step checks ``stop`` after each of its nets: the limit's check comes first, so the loop ends
before a fourth read.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from caffe2.python import core
from caffe2.python.schema import Field, Struct, from_blob_list

__all__ = [
    "CountUntil",
    "CounterReader",
    "Pipe",
    "PipedReaderBuilder",
    "Reader",
    "ReaderBuilder",
    "ReaderWithLimit",
    "ReaderWithLimitBase",
    "ReaderWithTimeLimit",
    "Writer",
]


class Reader:
    """Adds read operators to nets. Subclasses implement :meth:`read` (or :meth:`read_ex`);
    ``schema`` describes the fields read."""

    def __init__(self, schema: Field | None = None):
        if schema is not None and not isinstance(schema, Field):
            raise AssertionError(f"a reader's schema must be a schema.Field, got {type(schema).__name__}")
        self._schema = schema

    def schema(self) -> Field:
        if self._schema is None:
            raise AssertionError("Schema not provided for this reader.")
        return self._schema

    def _set_schema(self, schema: Field | None) -> None:
        self._schema = schema

    def setup_ex(self, init_net: Any, finish_net: Any) -> None:
        """Add what runs once before (``init_net``) and after (``finish_net``) all reads."""

    def read_ex(self, local_init_net: Any, local_finish_net: Any) -> tuple[list[Any], Any, list[Any]]:
        """``(nets, should_stop, fields)``: nets that read one batch each time they run."""
        net = core.Net("reader_body")
        should_stop, fields = self.read(net)
        return [net], should_stop, fields

    def read_record_ex(self, local_init_net: Any, local_finish_net: Any) -> tuple[list[Any], Any, Any]:
        """:meth:`read_ex` with the fields as a record of the reader's schema."""
        nets, should_stop, fields = self.read_ex(local_init_net, local_finish_net)
        return nets, should_stop, self._as_record(fields)

    def read(self, read_net: Any) -> tuple[Any, list[Any]]:
        """Add to ``read_net`` the ops reading one batch: ``(should_stop, fields)``."""
        raise NotImplementedError("Readers must implement `read`.")

    def reset(self, net: Any) -> None:
        """Add to ``net`` the ops that start the reading over."""
        raise NotImplementedError("This reader cannot be resetted.")

    def read_record(self, read_net: Any) -> tuple[Any, Any]:
        should_stop, fields = self.read(read_net)
        return should_stop, self._as_record(fields)

    def _as_record(self, fields: Any) -> Any:
        return from_blob_list(self._schema, fields) if self._schema else fields

    def execution_step(self, reader_net_name: str | None = None, external_should_stop: Any = None) -> tuple[Any, Any]:
        """A step that reads batches until the data ends (or ``external_should_stop``), and the
        record it reads into; add nets to the step to use each batch."""
        net = core.Net(reader_net_name or "reader")
        should_stop, fields = self.read_record(net)
        if external_should_stop is not None:
            should_stop = net.Or([external_should_stop, should_stop])
        step = core.execution_step(f"{reader_net_name}_step", net, should_stop_blob=should_stop)
        return step, fields


class Writer:
    """Adds write operators to nets: :meth:`write` appends a batch, :meth:`commit` ends the data."""

    _schema: Field | None = None

    def schema(self) -> Field | None:
        return self._schema

    def write(self, writer_net: Any, fields: Any) -> None:
        raise NotImplementedError("Writers must implement write.")

    def write_record(self, writer_net: Any, fields: Any) -> None:
        """:meth:`write` for a record (whose schema the writer remembers) or a list of blobs."""
        self.write(writer_net, self._blobs_of(fields))

    def _blobs_of(self, fields: Any) -> Any:
        if isinstance(fields, Field):
            self._schema = fields
            return fields.field_blobs()
        return fields

    def setup_ex(self, init_net: Any, finish_net: Any) -> None:
        self.commit(finish_net)

    def write_ex(self, fields: Any, local_init_net: Any, local_finish_net: Any, stop_blob: Any) -> list[Any]:
        net = core.Net("write_net")
        self.write(net, fields)
        return [net]

    def write_record_ex(
        self, fields: Any, local_init_net: Any, local_finish_net: Any, stop_blob: Any = None
    ) -> tuple[list[Any], Any]:
        """``(nets, stop_blob)``: nets that write one batch each time they run."""
        blobs = self._blobs_of(fields)
        if stop_blob is None:
            stop_blob = local_init_net.NextName("dequeue_status")
        return self.write_ex(blobs, local_init_net, local_finish_net, stop_blob), stop_blob

    def commit(self, finish_net: Any) -> None:
        """Add to ``finish_net`` what marks the end of the data (nothing by default)."""


class ReaderBuilder:
    """Makes readers (one per reading node or thread) of one data source."""

    def schema(self) -> Field:
        raise NotImplementedError()

    def setup(self, **kwargs: Any) -> Any:
        raise NotImplementedError()

    def new_reader(self, **kwargs: Any) -> Reader:
        raise NotImplementedError()


class PipedReaderBuilder(ReaderBuilder):
    """A builder whose readers are ``piper(reader=...)`` of the readers of ``builder``."""

    def __init__(self, builder: ReaderBuilder, piper: Any):
        self._builder = builder
        self._piper = piper

    def schema(self) -> Field:
        return self._builder.schema()

    def setup(self, **kwargs: Any) -> Any:
        return self._builder.setup(**kwargs)

    def new_reader(self, **kwargs: Any) -> Reader:
        piped = self._piper(reader=self._builder.new_reader(**kwargs), **kwargs)
        return piped if isinstance(piped, Reader) else piped.reader()


class Pipe:
    """A channel with a reader and writers (a queue, for instance); counts its ends."""

    def __init__(self, schema: Field | None = None, obj_key: str | None = None):
        self._num_writers = 0
        self._num_readers = 0
        self._schema = schema
        self._obj_key = obj_key

    def schema(self) -> Field | None:
        return self._schema

    def setup(self, global_init_net: Any) -> None:
        pass

    def reader(self) -> Reader:
        raise NotImplementedError()

    def writer(self) -> Writer:
        raise NotImplementedError()

    def num_readers(self) -> int:
        return self._num_readers

    def num_writers(self) -> int:
        return self._num_writers

    def _new_writer(self, writer_schema: Field | None, writer_init_net: Any) -> None:
        if writer_schema is not None and self._schema is None:
            self._schema = writer_schema
        self._num_writers += 1
        if self._obj_key is not None:
            writer_init_net.add_attribute(self._obj_key, self)

    def _new_reader(self, reader_init_net: Any) -> None:
        self._num_readers += 1
        if self._obj_key is not None:
            reader_init_net.add_attribute(self._obj_key, self)


def _false(net: Any, out: Any = None) -> Any:
    return net.ConstantFill([], out if out is not None else 1, shape=[], value=False, dtype=core.DataType.BOOL)


class CounterReader(Reader):
    """Reads 0, 1, 2, ... (an int64 ``iter`` field); never ends by itself."""

    def __init__(self) -> None:
        super().__init__(schema=Struct(("iter", np.int64)))
        self.counter = None
        self.should_stop = None

    def setup_ex(self, global_init_net: Any, global_finish_net: Any) -> None:
        if self.counter is None:
            self.counter = global_init_net.CreateCounter([], init_count=0)
            self.should_stop = _false(global_init_net)

    def read_ex(self, local_init_net: Any, local_finish_net: Any) -> tuple[list[Any], Any, list[Any]]:
        net = core.Net("limited_reader_counter")
        return [net], self.should_stop, [net.CountUp([self.counter], 1)]


class ReaderWithLimitBase(Reader):
    """A reader that may stop before ``reader`` does; :meth:`data_finished` is a 0-d bool blob
    telling, after the run, whether ``reader`` itself ran out of data."""

    def __init__(self, reader: Reader):
        super().__init__(schema=reader._schema)
        self.reader = reader
        self.net = core.Net("reader_with_limit")
        self._data_finished = self.net.AddExternalInput(self.net.NextName("data_finished"))
        self.should_stop = None

    def setup_ex(self, global_init_net: Any, global_finish_net: Any) -> None:
        _false(global_init_net, [self._data_finished])
        self.reader.setup_ex(global_init_net, global_finish_net)
        self.setup_limiter(global_init_net, global_finish_net)

    def read_ex(self, local_init_net: Any, local_finish_net: Any) -> tuple[list[Any], Any, list[Any]]:
        """First the limit's check (which sets should_stop), then the inner read, whose own end
        of data overrides should_stop and is remembered in data_finished."""
        check = core.Net("limited_reader_condition")
        should_stop = self.check_limiter_condition(check)
        nets, inner_stop, fields = self.reader.read_ex(local_init_net, local_finish_net)
        self._set_schema(self.reader._schema)
        after = core.Net("limited_reader_post")
        after.Copy(inner_stop, should_stop)
        after.Or([self._data_finished, inner_stop], [self._data_finished])
        return [check, *nets, after], should_stop, fields

    def setup_limiter(self, global_init_net: Any, global_finish_net: Any) -> None:
        raise NotImplementedError("Subclass must implement `setup_limiter`")

    def check_limiter_condition(self, stop_condition_net: Any) -> Any:
        raise NotImplementedError("Subclass must implement `check_limiter_condition`")

    def data_finished(self) -> Any:
        return self._data_finished


class ReaderWithLimit(ReaderWithLimitBase):
    """Stops after ``num_iter`` batches (``None``: reads everything)."""

    def __init__(self, reader: Reader, num_iter: int | None = 1):
        super().__init__(reader)
        self.num_iter = num_iter
        self.counter = None if num_iter is None else self.net.AddExternalInput(self.net.NextName("counter"))

    def setup_limiter(self, global_init_net: Any, global_finish_net: Any) -> None:
        if self.counter is not None:
            global_init_net.CreateCounter([], [self.counter], init_count=int(self.num_iter))

    def check_limiter_condition(self, stop_condition_net: Any) -> Any:
        if self.counter is not None:
            return stop_condition_net.CountDown([self.counter], 1)
        return _false(stop_condition_net)


def CountUntil(num_iter: int) -> ReaderWithLimit:
    """A reader of 0 .. num_iter - 1."""
    return ReaderWithLimit(CounterReader(), num_iter)


class ReaderWithTimeLimit(ReaderWithLimitBase):
    """Stops once ``duration`` seconds have passed since the reading began (0 or None: never)."""

    def __init__(self, reader: Reader, duration: float | None = 0):
        super().__init__(reader)
        self.timer = None
        self.duration = duration
        self.duration_ns_blob = None

    def setup_limiter(self, global_init_net: Any, global_finish_net: Any) -> None:
        if self.duration is not None and self.duration > 0:
            self.timer = global_init_net.TimerBegin([], counter_name="epoch_timer")
            start = global_init_net.TimerGet(self.timer)
            self.duration_ns_blob = global_init_net.ConstantFill([start], value=int(self.duration * 1e9))
            global_finish_net.TimerEnd([self.timer], [])

    def check_limiter_condition(self, stop_condition_net: Any) -> Any:
        if self.duration:
            elapsed = stop_condition_net.TimerGet(self.timer)
            return stop_condition_net.GE([elapsed, self.duration_ns_blob], str(self.should_stop))
        return _false(stop_condition_net)
