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
        if nets is not None and built:
            raise AssertionError("Cannot both use `ops` syntax and return a list of nets.")
        if nets is None:
            nets = built
        if isinstance(nets, core.Net):
            nets = [nets]
        self.nets = list(nets or [])
        self.record = None if record is None else as_record(record)
        self.should_stop = should_stop


def make_processor(processor: Any) -> Any:
    """The processor function (the identity for None)."""
    if processor is None:
        return lambda rec: rec
    if isinstance(processor, core.Net):
        raise NotImplementedError("pipe: a core.Net as processor (NetProcessor) is not supported; pass a function")
    return processor


def normalize_processor_output(output: Any) -> Output:
    """An :class:`Output` from what a processor returned: an Output, a record, ``(record,
    stop_blob)``, ``(nets, record[, stop_blob])``, or nets alone."""
    if isinstance(output, Output):
        return output
    if isinstance(output, Field):
        return Output(record=output)
    if isinstance(output, tuple):
        if len(output) == 2 and isinstance(output[0], Field) and isinstance(output[1], core.BlobReference):
            return Output(None, *output)
        return Output(*output)
    return Output(output)


def processor_name(processor: Any) -> str:
    """A name for a processor, reader or writer in task names."""
    if hasattr(processor, "name"):
        return str(processor.name)
    name = getattr(processor, "__name__", None)
    if name == "<lambda>":
        return getattr(processor, "__module__", "lambda")
    return name or type(processor).__name__


def _open_output(output: Any, capacity: int | None, init_net: Any, exit_net: Any) -> tuple[Any, Writer]:
    """The queue to return (if any) and the writer for ``output``."""
    if output is None:
        queue = queue_util.Queue(capacity=capacity if capacity is not None else DEFAULT_QUEUE_CAPACITY)
        writer = queue.writer()
    elif isinstance(output, Writer):
        if capacity is not None:
            raise AssertionError("capacity would not be used.")
        queue, writer = None, output
    elif hasattr(output, "writer"):
        if capacity is not None:
            raise AssertionError("capacity would not be used.")
        queue, writer = output, output.writer()
    else:
        raise ValueError("output must be a reader, queue or stream.")
    writer.setup_ex(init_net, exit_net)
    return queue, writer


def _false_status(net: Any, status: Any) -> None:
    net.ConstantFill([], [status], shape=[], value=False, dtype=core.DataType.BOOL)


def _loop_body(reader: Reader, output: Any, capacity: Any, g_init: Any, g_exit: Any, i_init: Any, i_exit: Any) -> Any:
    """The nets of one thread: ``(queue, body step)``; ``i_init``/``i_exit`` run once per thread."""
    read_nets, status, rec = reader.read_record_ex(i_init, i_exit)
    _false_status(i_init, status)
    queue, write_nets = None, []
    if rec is not None:
        queue, writer = _open_output(output, capacity, g_init, g_exit)
        write_nets, _ = writer.write_record_ex(rec, i_init, i_exit, status)
    body = core.execution_step("body", [*read_nets, *write_nets], should_stop_blob=status)
    return queue, body


def _runtime_threads_task(
    name: str, group: Any, final_outputs: Any, reader: Reader, num_threads: int, output: Any, capacity: Any
) -> tuple[Any, Task]:
    """One task whose body runs as ``num_threads`` concurrent instances."""
    with Task(name=name, group=group, outputs=final_outputs, num_instances=num_threads) as task:
        g_init, g_exit = core.Net("pipe:init"), core.Net("pipe:exit")
        reader.setup_ex(g_init, g_exit)
        i_init, i_exit = core.Net("pipe:instance:init"), core.Net("pipe:instance:exit")
        queue, body = _loop_body(reader, output, capacity, g_init, g_exit, i_init, i_exit)
        with ops.task_init():
            ops.net(g_init)
        with ops.task_instance_init():
            ops.net(i_init)
        ops.net(body)
        with ops.task_instance_exit():
            ops.net(i_exit)
        with ops.task_exit():
            ops.net(g_exit)
    return queue, task


def _static_threads_task(
    name: str, group: Any, final_outputs: Any, reader: Reader, num_threads: int, output: Any, capacity: Any
) -> tuple[Any, Task]:
    """One task with ``num_threads`` concurrent substeps, each built separately."""
    with Task(name=name, group=group, outputs=final_outputs) as task:
        g_init, g_exit = core.Net("init"), core.Net("exit")
        reader.setup_ex(g_init, g_exit)
        queue, writer_output, threads = None, output, []
        for t in range(num_threads):
            with NetBuilder(name=f"t:{t}") as nb:
                i_init, i_exit = core.Net("init"), core.Net("exit")
                q, body = _loop_body(reader, writer_output, capacity, g_init, g_exit, i_init, i_exit)
                if queue is None and q is not None:
                    queue = q
                    writer_output, capacity = q, None
                ops.net(i_init)
                ops.net(body)
                ops.net(i_exit)
            threads.append(core.to_execution_step(nb))
        ops.net(g_init)
        ops.net(core.execution_step("body", threads, concurrent_substeps=True))
        ops.net(g_exit)
    return queue, task


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
    if isinstance(input, Reader):
        reader = input
    elif hasattr(input, "reader"):
        reader = input.reader()
    else:
        raise ValueError("in must be a reader, queue or stream.")
    if processor is not None:
        reader = ProcessingReader(reader, processor)
    if num_threads == 0 or num_runtime_threads == 0:
        if output is not None:
            raise AssertionError("with no threads, pipe returns a reader and takes no output")
        return reader, None
    if name is None:
        if processor is not None:
            name = processor_name(processor)
        elif output is not None:
            name = f"pipe_into:{processor_name(output)}"
        else:
            name = f"pipe_from:{processor_name(input)}"
    build = _static_threads_task if num_threads > 1 else _runtime_threads_task
    threads = num_threads if num_threads > 1 else num_runtime_threads
    return build(name, group, final_outputs, reader, threads, output, capacity)


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
    result, _ = _pipe_step(input, output, num_threads, processor, name, capacity, group, num_runtime_threads)
    return result


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
    """:func:`pipe`, also returning the task outputs of ``final_outputs``."""
    if num_threads <= 0:
        raise AssertionError("pipe_and_output needs at least one thread")
    result, task = _pipe_step(
        input, output, num_threads, processor, name, capacity, group, num_runtime_threads, final_outputs
    )
    outputs = None
    if final_outputs is not None:
        outputs = task.outputs()
        if type(final_outputs) not in (list, tuple):
            outputs = outputs[0]
    return result, outputs


class ProcessingReader(Reader):
    """Reads ``reader`` and passes each record through ``processor``."""

    def __init__(self, reader: Reader, processor: Any):
        super().__init__()
        self.reader = reader
        self.processor = make_processor(processor)

    def setup_ex(self, init_net: Any, finish_net: Any) -> None:
        self.reader.setup_ex(init_net, finish_net)

    def read_ex(self, init_net: Any, exit_net: Any) -> tuple[list[Any], Any, Any]:
        nets, status, rec = self.reader.read_record_ex(init_net, exit_net)
        with NetBuilder() as nb:
            result = normalize_processor_output(self.processor(rec))
        nets = [*nets, *result.nets]
        stops = [b for b in (result.should_stop, nb._stop_blob) if b]
        if stops:
            stop_net = core.Net("stop_net")
            for blob in stops:
                stop_net.Or([status, blob], [status])
            nets.append(stop_net)
        if hasattr(self.processor, "setup"):
            init_net.add_attribute(TaskGroup.LOCAL_SETUP, self.processor)
        self._set_schema(result.record)
        return nets, status, (result.record.field_blobs() if result.record else None)
