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
        if not (schema is None or isinstance(schema, Field)):
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
        body = core.Net("reader_body")
        return ([body], *self.read(body))

    def read_record_ex(self, local_init_net: Any, local_finish_net: Any) -> tuple[list[Any], Any, Any]:
        """:meth:`read_ex` with the fields as a record of the reader's schema."""
        nets, stop, blobs = self.read_ex(local_init_net, local_finish_net)
        return nets, stop, self._as_record(blobs)

    def read(self, read_net: Any) -> tuple[Any, list[Any]]:
        """Add to ``read_net`` the ops reading one batch: ``(should_stop, fields)``."""
        raise NotImplementedError("Readers must implement `read`.")

    def reset(self, net: Any) -> None:
        """Add to ``net`` the ops that start the reading over."""
        raise NotImplementedError("This reader cannot be resetted.")

    def read_record(self, read_net: Any) -> tuple[Any, Any]:
        stop, blobs = self.read(read_net)
        return stop, self._as_record(blobs)

    def _as_record(self, blobs: Any) -> Any:
        return blobs if not self._schema else from_blob_list(self._schema, blobs)

    def execution_step(self, reader_net_name: str | None = None, external_should_stop: Any = None) -> tuple[Any, Any]:
        """A step that reads batches until the data ends (or ``external_should_stop``), and the
        record it reads into; add nets to the step to use each batch."""
        net = core.Net(reader_net_name or "reader")
        stop, record = self.read_record(net)
        stop = stop if external_should_stop is None else net.Or([external_should_stop, stop])
        return core.execution_step(f"{reader_net_name}_step", net, should_stop_blob=stop), record


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

    def _blobs_of(self, record_or_blobs: Any) -> Any:
        if not isinstance(record_or_blobs, Field):
            return record_or_blobs
        self._schema = record_or_blobs
        return record_or_blobs.field_blobs()

    def setup_ex(self, init_net: Any, finish_net: Any) -> None:
        self.commit(finish_net)  # the end of the data is marked once the writing is over

    def write_ex(self, fields: Any, local_init_net: Any, local_finish_net: Any, stop_blob: Any) -> list[Any]:
        body = core.Net("write_net")
        self.write(body, fields)
        return [body]

    def write_record_ex(
        self, fields: Any, local_init_net: Any, local_finish_net: Any, stop_blob: Any = None
    ) -> tuple[list[Any], Any]:
        """``(nets, stop_blob)``: nets that write one batch each time they run."""
        blobs = self._blobs_of(fields)
        status = local_init_net.NextName("dequeue_status") if stop_blob is None else stop_blob
        return self.write_ex(blobs, local_init_net, local_finish_net, status), status

    def commit(self, finish_net: Any) -> None:
        """Add to ``finish_net`` what marks the end of the data (nothing by default)."""


class ReaderBuilder:
    """Makes readers (one per reading node or thread) of one data source."""

    def schema(self) -> Field:
        raise NotImplementedError("ReaderBuilder.schema")

    def setup(self, **kwargs: Any) -> Any:
        raise NotImplementedError("ReaderBuilder.setup")

    def new_reader(self, **kwargs: Any) -> Reader:
        raise NotImplementedError("ReaderBuilder.new_reader")


class PipedReaderBuilder(ReaderBuilder):
    """A builder whose readers are ``piper(reader=...)`` of the readers of ``builder``."""

    def __init__(self, builder: ReaderBuilder, piper: Any):
        self._inner, self._through = builder, piper

    def schema(self) -> Field:
        return self._inner.schema()

    def setup(self, **kwargs: Any) -> Any:
        return self._inner.setup(**kwargs)

    def new_reader(self, **kwargs: Any) -> Reader:
        piped = self._through(reader=self._inner.new_reader(**kwargs), **kwargs)
        return piped if isinstance(piped, Reader) else piped.reader()


class Pipe:
    """A channel with a reader and writers (a queue, for instance); counts its ends. With an
    ``obj_key``, each end registers the pipe on its init net under that key (the task's setup
    then calls the pipe's ``setup``)."""

    def __init__(self, schema: Field | None = None, obj_key: str | None = None):
        self._schema = schema
        self._ends = {"readers": 0, "writers": 0}
        self._setup_key = obj_key

    def schema(self) -> Field | None:
        return self.__dict__.get("_schema")

    def setup(self, global_init_net: Any) -> None:
        pass

    def reader(self) -> Reader:
        raise NotImplementedError("Pipe.reader")

    def writer(self) -> Writer:
        raise NotImplementedError("Pipe.writer")

    def num_readers(self) -> int:
        return self._ends["readers"]

    def num_writers(self) -> int:
        return self._ends["writers"]

    def _register(self, end: str, net: Any) -> None:
        self._ends[end] += 1
        if self._setup_key is not None:
            net.add_attribute(self._setup_key, self)

    def _new_writer(self, writer_schema: Field | None, writer_init_net: Any) -> None:
        self._schema = self._schema if self._schema is not None else writer_schema
        self._register("writers", writer_init_net)

    def _new_reader(self, reader_init_net: Any) -> None:
        self._register("readers", reader_init_net)


def _false(net: Any, out: Any = None) -> Any:
    """A 0-d False that ``net`` makes (in ``out``, else a new blob)."""
    return net.ConstantFill([], 1 if out is None else out, shape=[], value=False, dtype=core.DataType.BOOL)


class CounterReader(Reader):
    """Reads 0, 1, 2, ... (an int64 ``iter`` field); never ends by itself."""

    def __init__(self) -> None:
        super().__init__(schema=Struct(("iter", np.int64)))
        self._counter: Any = None
        self._never: Any = None

    def setup_ex(self, global_init_net: Any, global_finish_net: Any) -> None:
        if self._counter is not None:
            return
        self._counter = global_init_net.CreateCounter([], init_count=0)
        self._never = _false(global_init_net)

    def read_ex(self, local_init_net: Any, local_finish_net: Any) -> tuple[list[Any], Any, list[Any]]:
        net = core.Net("limited_reader_counter")
        return [net], self._never, [net.CountUp([self._counter], 1)]


class ReaderWithLimitBase(Reader):
    """A reader that may stop before ``reader`` does; :meth:`data_finished` is a 0-d bool blob
    telling, after the run, whether ``reader`` itself ran out of data."""

    def __init__(self, reader: Reader):
        super().__init__(schema=reader._schema)
        self.reader = reader
        self.net = core.Net("reader_with_limit")
        self._finished = self.net.AddExternalInput(self.net.NextName("data_finished"))

    def setup_ex(self, global_init_net: Any, global_finish_net: Any) -> None:
        _false(global_init_net, [self._finished])
        for setup in (self.reader.setup_ex, self.setup_limiter):
            setup(global_init_net, global_finish_net)

    def read_ex(self, local_init_net: Any, local_finish_net: Any) -> tuple[list[Any], Any, list[Any]]:
        """First the limit's check (which sets the stop blob: the step stops right after it),
        then the inner read, whose own end of data sets the stop blob and ``data_finished``."""
        check = core.Net("limited_reader_condition")
        stop = self.check_limiter_condition(check)
        inner_nets, inner_stop, blobs = self.reader.read_ex(local_init_net, local_finish_net)
        self._set_schema(self.reader._schema)  # known once the inner read is built
        after = core.Net("limited_reader_post")
        after.Copy(inner_stop, stop)
        after.Or([self._finished, inner_stop], [self._finished])
        return [check, *inner_nets, after], stop, blobs

    def setup_limiter(self, global_init_net: Any, global_finish_net: Any) -> None:
        raise NotImplementedError(f"{type(self).__name__} must define setup_limiter")

    def check_limiter_condition(self, stop_condition_net: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must define check_limiter_condition")

    def data_finished(self) -> Any:
        return self._finished


class ReaderWithLimit(ReaderWithLimitBase):
    """Stops after ``num_iter`` batches (``None``: reads everything)."""

    def __init__(self, reader: Reader, num_iter: int | None = 1):
        super().__init__(reader)
        self.num_iter: int | None = num_iter
        self._budget = None if num_iter is None else self.net.AddExternalInput(self.net.NextName("counter"))

    def setup_limiter(self, global_init_net: Any, global_finish_net: Any) -> None:
        if self._budget is not None:
            global_init_net.CreateCounter([], [self._budget], init_count=int(self.num_iter))

    def check_limiter_condition(self, stop_condition_net: Any) -> Any:
        if self._budget is None:
            return _false(stop_condition_net)
        return stop_condition_net.CountDown([self._budget], 1)


def CountUntil(num_iter: int) -> ReaderWithLimit:
    """A reader of 0 .. num_iter - 1."""
    return ReaderWithLimit(CounterReader(), num_iter)


class ReaderWithTimeLimit(ReaderWithLimitBase):
    """Stops once ``duration`` seconds have passed since the reading began (0 or None: never)."""

    def __init__(self, reader: Reader, duration: float | None = 0):
        super().__init__(reader)
        self.duration: float | None = duration
        self._clock: Any = None
        self._deadline: Any = None

    def setup_limiter(self, global_init_net: Any, global_finish_net: Any) -> None:
        if not self.duration or self.duration <= 0:
            return
        self._clock = global_init_net.TimerBegin([], counter_name="epoch_timer")
        started = global_init_net.TimerGet(self._clock)
        self._deadline = global_init_net.ConstantFill([started], value=int(self.duration * 1e9))
        global_finish_net.TimerEnd([self._clock], [])

    def check_limiter_condition(self, stop_condition_net: Any) -> Any:
        if not self.duration:
            return _false(stop_condition_net)
        return stop_condition_net.GE([stop_condition_net.TimerGet(self._clock), self._deadline])
