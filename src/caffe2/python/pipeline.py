"""Caffe2's ``caffe2.python.pipeline``: tasks that move records from a reader to a writer.

``pipe(input, output, processor=f)`` adds to the current task group a task that reads
``input`` (a Reader, or a queue), passes each record through ``f`` and writes the result to
``output`` (a Writer or a queue; a new queue when omitted, which is returned so the next pipe
can read it). ``num_runtime_threads`` runs that many copies of the loop concurrently::

    >>> import numpy as np
    >>> from caffe2.python import core, schema
    >>> from caffe2.python.dataset import Dataset
    >>> from caffe2.python.pipeline import pipe
    >>> from caffe2.python.session import LocalSession
    >>> from caffe2.python.task import TaskGroup
    >>> init = core.Net("pipe_doc_init")
    >>> src = Dataset(schema.ConstRecord(init, schema.Struct(("x", np.arange(5)))))
    >>> dst = Dataset(schema.InitEmptyRecord(init, src.schema.clone_schema()))
    >>> def double(rec):
    ...     net = core.Net("pipe_doc_double")
    ...     with core.NameScope("doubled"):
    ...         out = schema.NewRecord(net, rec)
    ...     net.Add([rec.x(), rec.x()], [out.x()])
    ...     return [net], out
    >>> with TaskGroup() as tg:
    ...     doubled = pipe(src.reader(), processor=double)
    ...     _ = pipe(doubled, dst.writer())
    >>> session = LocalSession()
    >>> session.run(init)
    >>> session.run(tg)
    >>> sorted(schema.FetchRecord(dst.content()).x.get().tolist())
    [0, 2, 4, 6, 8]
"""

from __future__ import annotations

from typing import Any

from caffe2.python import core, queue_util
from caffe2.python.dataio import Reader, Writer
from caffe2.python.net_builder import NetBuilder, ops
from caffe2.python.schema import Field, as_record
from caffe2.python.task import Task, TaskGroup

__all__ = [
    "DEFAULT_QUEUE_CAPACITY",
    "Output",
    "ProcessingReader",
    "make_processor",
    "normalize_processor_output",
    "pipe",
    "pipe_and_output",
    "processor_name",
]

DEFAULT_QUEUE_CAPACITY = 100


class Output:
    """What a processor gives: the nets that compute its record, the record, and a blob that
    stops the pipe when true. Without ``nets``, the nets built with ``ops`` are used."""

    def __init__(self, nets: Any = None, record: Any = None, should_stop: Any = None):
        built = NetBuilder.current().get()
        if built and nets is not None:
            raise AssertionError("Cannot both use `ops` syntax and return a list of nets.")
        chosen = built if nets is None else nets
        self.nets = [chosen] if isinstance(chosen, core.Net) else list(chosen or [])
        self.record = as_record(record) if record is not None else None
        self.should_stop = should_stop


def _identity(rec: Any) -> Any:
    return rec


def make_processor(processor: Any) -> Any:
    """The processor function (the identity for None)."""
    if isinstance(processor, core.Net):
        raise NotImplementedError("pipe: a core.Net as processor (NetProcessor) is not supported; pass a function")
    return _identity if processor is None else processor


def normalize_processor_output(output: Any) -> Output:
    """An :class:`Output` from what a processor returned: an Output, a record, ``(record,
    stop_blob)``, ``(nets, record[, stop_blob])``, or nets alone."""
    if isinstance(output, Field):
        output = Output(record=output)
    elif isinstance(output, tuple):
        record_and_stop = (
            len(output) == 2 and isinstance(output[0], Field) and isinstance(output[1], core.BlobReference)
        )
        output = Output(None, *output) if record_and_stop else Output(*output)
    elif not isinstance(output, Output):
        output = Output(output)
    return output


def processor_name(processor: Any) -> str:
    """A name for a processor, reader or writer in task names."""
    if hasattr(processor, "name"):
        return str(processor.name)
    fn_name = getattr(processor, "__name__", None)
    if fn_name == "<lambda>":
        return getattr(processor, "__module__", "lambda")
    return fn_name or type(processor).__name__


def _open_output(output: Any, capacity: int | None, init_net: Any, exit_net: Any) -> tuple[Any, Writer]:
    """The queue to return (if any) and the writer for ``output``."""
    if output is not None and capacity is not None:
        raise AssertionError("capacity would not be used.")
    if output is None:
        made = queue_util.Queue(capacity=DEFAULT_QUEUE_CAPACITY if capacity is None else capacity)
        found: tuple[Any, Writer] = (made, made.writer())
    elif isinstance(output, Writer):
        found = (None, output)
    elif hasattr(output, "writer"):
        found = (output, output.writer())
    else:
        raise ValueError("output must be a reader, queue or stream.")
    found[1].setup_ex(init_net, exit_net)
    return found


def _loop_body(reader: Reader, output: Any, capacity: Any, g_init: Any, g_exit: Any, i_init: Any, i_exit: Any) -> Any:
    """The nets of one thread: ``(queue, body step)``; ``i_init``/``i_exit`` run once per thread."""
    read_nets, status, rec = reader.read_record_ex(i_init, i_exit)
    i_init.ConstantFill([], [status], shape=[], value=False, dtype=core.DataType.BOOL)
    queue, write_nets = None, []
    if rec is not None:
        queue, writer = _open_output(output, capacity, g_init, g_exit)
        write_nets = writer.write_record_ex(rec, i_init, i_exit, status)[0]
    return queue, core.execution_step("body", [*read_nets, *write_nets], should_stop_blob=status)


def _runtime_threads_task(
    name: str, group: Any, final_outputs: Any, reader: Reader, num_threads: int, output: Any, capacity: Any
) -> tuple[Any, Task]:
    """One task whose body runs as ``num_threads`` concurrent instances."""
    task = Task(name=name, group=group, outputs=final_outputs, num_instances=num_threads)
    with task:
        g_init, g_exit = core.Net("pipe:init"), core.Net("pipe:exit")
        reader.setup_ex(g_init, g_exit)
        i_init, i_exit = core.Net("pipe:instance:init"), core.Net("pipe:instance:exit")
        queue, body = _loop_body(reader, output, capacity, g_init, g_exit, i_init, i_exit)
        for block, net in ((ops.task_init, g_init), (ops.task_instance_init, i_init)):
            with block():
                ops.net(net)
        ops.net(body)
        for block, net in ((ops.task_instance_exit, i_exit), (ops.task_exit, g_exit)):
            with block():
                ops.net(net)
    return queue, task


def _static_threads_task(
    name: str, group: Any, final_outputs: Any, reader: Reader, num_threads: int, output: Any, capacity: Any
) -> tuple[Any, Task]:
    """One task with ``num_threads`` concurrent substeps, each built separately."""
    task = Task(name=name, group=group, outputs=final_outputs)
    with task:
        g_init, g_exit = core.Net("init"), core.Net("exit")
        reader.setup_ex(g_init, g_exit)
        queue, target, threads = None, output, []
        for t in range(num_threads):
            with NetBuilder(name=f"t:{t}") as nb:
                i_init, i_exit = core.Net("init"), core.Net("exit")
                made, body = _loop_body(reader, target, capacity, g_init, g_exit, i_init, i_exit)
                if queue is None and made is not None:
                    queue, target, capacity = made, made, None
                for part in (i_init, body, i_exit):
                    ops.net(part)
            threads.append(core.to_execution_step(nb))
        ops.net(g_init)
        ops.net(core.execution_step("body", threads, concurrent_substeps=True))
        ops.net(g_exit)
    return queue, task


def _default_name(input: Any, output: Any, processor: Any) -> str:
    if processor is not None:
        return processor_name(processor)
    if output is not None:
        return f"pipe_into:{processor_name(output)}"
    return f"pipe_from:{processor_name(input)}"


def _pipe_step(
    input: Any,
    output: Any = None,
    num_threads: int = 1,
    processor: Any = None,
    name: str | None = None,
    capacity: int | None = None,
    group: Any = None,
    num_runtime_threads: int = 1,
    final_outputs: Any = None,
) -> tuple[Any, Task | None]:
    if num_threads > 1 and num_runtime_threads > 1:
        raise AssertionError("Only one of num_threads or num_runtime_threads must be set.")
    if not (isinstance(input, Reader) or hasattr(input, "reader")):
        raise ValueError("in must be a reader, queue or stream.")
    source = input if isinstance(input, Reader) else input.reader()
    if processor is not None:
        source = ProcessingReader(source, processor)
    if 0 in (num_threads, num_runtime_threads):
        if output is not None:
            raise AssertionError("with no threads, pipe returns a reader and takes no output")
        return source, None
    name = name if name is not None else _default_name(input, output, processor)
    if num_threads > 1:
        return _static_threads_task(name, group, final_outputs, source, num_threads, output, capacity)
    return _runtime_threads_task(name, group, final_outputs, source, num_runtime_threads, output, capacity)


def pipe(
    input: Any,
    output: Any = None,
    num_threads: int = 1,
    processor: Any = None,
    name: str | None = None,
    capacity: int | None = None,
    group: Any = None,
    num_runtime_threads: int = 1,
) -> Any:
    """Add a task piping ``input`` through ``processor`` into ``output``; returns the output
    queue made when ``output`` is None (with 0 threads: a reader of the processed input)."""
    return _pipe_step(input, output, num_threads, processor, name, capacity, group, num_runtime_threads)[0]


def pipe_and_output(
    input: Any,
    output: Any = None,
    num_threads: int = 1,
    processor: Any = None,
    name: str | None = None,
    capacity: int | None = None,
    group: Any = None,
    num_runtime_threads: int = 1,
    final_outputs: Any = None,
) -> tuple[Any, Any]:
    """:func:`pipe`, also returning the task outputs of ``final_outputs`` (one, or a list)."""
    if num_threads <= 0:
        raise AssertionError("pipe_and_output needs at least one thread")
    made, task = _pipe_step(
        input, output, num_threads, processor, name, capacity, group, num_runtime_threads, final_outputs
    )
    if final_outputs is None:
        return made, None
    outs = task.outputs()
    return made, (outs if isinstance(final_outputs, (list, tuple)) else outs[0])


class ProcessingReader(Reader):
    """Reads ``reader`` and passes each record through ``processor``."""

    def __init__(self, reader: Reader, processor: Any):
        super().__init__()
        self.reader = reader
        self.processor = make_processor(processor)

    def setup_ex(self, init_net: Any, finish_net: Any) -> None:
        self.reader.setup_ex(init_net, finish_net)

    def read_ex(self, init_net: Any, exit_net: Any) -> tuple[list[Any], Any, Any]:
        """The inner read, then the processor's nets; a stop blob of the processor (returned or
        set with ``ops.stop_if``) also stops the pipe."""
        nets, status, record = self.reader.read_record_ex(init_net, exit_net)
        with NetBuilder() as builder:
            out = normalize_processor_output(self.processor(record))
        nets = [*nets, *out.nets]
        extra_stops = [b for b in (out.should_stop, builder._stop_blob) if b]
        if extra_stops:
            stop_net = core.Net("stop_net")
            for blob in extra_stops:
                stop_net.Or([status, blob], [status])
            nets.append(stop_net)
        if hasattr(self.processor, "setup"):
            init_net.add_attribute(TaskGroup.LOCAL_SETUP, self.processor)
        self._set_schema(out.record)
        return nets, status, (None if out.record is None else out.record.field_blobs())
