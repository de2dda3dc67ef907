"""Caffe2's ``caffe2.python.net_printer``: nets, steps, tasks and jobs as readable text, and a
check that every blob a job reads was written before.

:func:`to_string` prints operators as Python-like calls nested in ``with`` blocks for the steps
(``loop``, ``parallel``, ``Task(...)``); :func:`analyze` walks the same structure with a model
of each node's workspace and raises ``AssertionError('Blob undefined: x')`` when an operator
reads a blob nothing defined, or when concurrent steps create the same blob::

    >>> from caffe2.python import core, net_printer
    >>> net = core.Net("printer_doc")
    >>> _ = net.Add(["a", "b"], "c")
    >>> print(net_printer.to_string(net, c2_syntax=False))
    # net: printer_doc
    c = Add(a, b)
    >>> net_printer.analyze(net)
    Traceback (most recent call last):
    ...
    AssertionError: Blob undefined: a
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from caffe2.proto.caffe2_pb2 import NetDef, OperatorDef
from caffe2.python.checkpoint import Job
from caffe2.python.core import ExecutionStep, Net, Plan
from caffe2.python.task import Task, TaskGroup, TaskOutput, WorkspaceType

__all__ = ["Analyzer", "Printer", "Text", "Visitor", "analyze", "debug_net", "to_string"]


class Visitor:
    """Calls the handler registered (with :meth:`register`) for the first matching type."""

    handlers: list[tuple[type, Callable[..., Any]]] = []

    @classmethod
    def register(cls, kind: type) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        if "handlers" not in cls.__dict__:
            cls.handlers = []

        def add(fn: Callable[..., Any]) -> Callable[..., Any]:
            cls.handlers.append((kind, fn))
            return fn

        return add

    def __call__(self, obj: Any, *args: Any, **kwargs: Any) -> Any:
        if obj is None:
            return None
        for kind, fn in type(self).handlers:
            if isinstance(obj, kind):
                return fn(self, obj, *args, **kwargs)
        raise TypeError(f"{type(self).__name__}: unsupported object type: {type(obj)}")


def _substeps(step: ExecutionStep) -> list[Any]:
    """A step's substeps, then its nets."""
    return list(step.Substeps()) + [step.get_net(name) for name in step.Proto().network]


# -- analysis -------------------------------------------------------------------------------------


class Analyzer(Visitor):
    """A model of the blobs each workspace holds while a job runs."""

    IGNORED_PREFIXES = ("distributed_ctx_init",)

    def __init__(self) -> None:
        self.node_workspaces: dict[str, Counter[str]] = {}
        self.stack: list[Counter[str]] = []

    @property
    def workspace(self) -> Counter[str]:
        return self.stack[-1]

    @contextmanager
    def set_workspace(self, node: Any = None, ws: Any = None, do_copy: bool = False) -> Iterator[Counter[str]]:
        """Work in ``ws``, node ``node``'s workspace, or the current one; a copy with ``do_copy``."""
        if ws is None:
            ws = self.node_workspaces.setdefault(str(node), Counter()) if node is not None else self.workspace
        if do_copy:
            ws = Counter(ws)
        self.stack.append(ws)
        try:
            yield ws
        finally:
            self.stack.pop()

    def define_blob(self, blob: str) -> None:
        self.workspace[str(blob)] += 1

    def need_blob(self, blob: str) -> None:
        blob = str(blob)
        if blob.startswith(self.IGNORED_PREFIXES):
            return
        if blob not in self.workspace:
            raise AssertionError(f"Blob undefined: {blob}")


@Analyzer.register(OperatorDef)
def _analyze_op(an: Analyzer, op: OperatorDef) -> None:
    for blob in op.input:
        an.need_blob(blob)
    for blob in op.output:
        an.define_blob(blob)


@Analyzer.register(Net)
def _analyze_net(an: Analyzer, net: Net) -> None:
    for op in net.Proto().op:
        an(op)


@Analyzer.register(ExecutionStep)
def _analyze_step(an: Analyzer, step: ExecutionStep) -> None:
    proto = step.Proto()
    created: set[str] = set()
    with an.set_workspace(do_copy=proto.create_workspace):
        if proto.report_net:
            with an.set_workspace(do_copy=True):
                an(step.get_net(proto.report_net))
        for sub in _substeps(step):
            with an.set_workspace(do_copy=proto.concurrent_substeps) as inner:
                an(sub)
                if proto.should_stop_blob:
                    an.need_blob(proto.should_stop_blob)
            if proto.concurrent_substeps:
                fresh = set(inner) - set(an.workspace)
                clash = created & fresh
                if clash:
                    raise AssertionError(f"Error: Blobs created by multiple parallel steps: {', '.join(sorted(clash))}")
                created |= fresh
    for blob in created:
        an.define_blob(blob)


@Analyzer.register(Task)
def _analyze_task(an: Analyzer, task: Task) -> None:
    with an.set_workspace(do_copy=task.workspace_type() != WorkspaceType.GLOBAL):
        an(task.get_step())


@Analyzer.register(TaskGroup)
def _analyze_task_group(an: Analyzer, group: TaskGroup) -> None:
    for task in group.tasks_by_node().tasks():
        with an.set_workspace(node=task.node):
            an(task)


@Analyzer.register(Job)
def _analyze_job(an: Analyzer, job: Job) -> None:
    an(job.init_group)
    an(job.epoch_group)


@Analyzer.register(Plan)
def _analyze_plan(an: Analyzer, plan: Plan) -> None:
    for step in plan.Steps():
        an(step)


def analyze(obj: Any) -> None:
    """Check that no operator of ``obj`` (a Job, TaskGroup, Task, step, plan or net) reads an
    undefined blob, and that no two concurrent steps create one blob."""
    an = Analyzer()
    with an.set_workspace(ws=Counter()):
        an(obj)


# -- printing -------------------------------------------------------------------------------------


class Text:
    """Indented lines; :meth:`context` opens a ``with ...:`` block."""

    def __init__(self) -> None:
        self._indent = 0
        self._counts = [0]
        self.lines: list[str] = []

    @contextmanager
    def context(self, text: str | None) -> Iterator[None]:
        if text is None:
            yield
            return
        self.add(f"with {text}:")
        self._indent += 4
        self._counts.append(0)
        try:
            yield
        finally:
            if not self._counts.pop():
                self.add("pass")
            self._indent -= 4

    def add(self, text: str) -> None:
        self._counts[-1] += 1
        self.lines.append(" " * self._indent + text)

    def __str__(self) -> str:
        return "\n".join(self.lines)


class Printer(Visitor, Text):
    """Writes what it visits as text; ``c2_syntax`` writes ``net.Op([inputs], [outputs])``
    calls, else ``outputs = Op(inputs)``; ``factor_prefixes`` shortens blob lists sharing a prefix."""

    def __init__(self, factor_prefixes: bool = False, c2_syntax: bool = True):
        Text.__init__(self)
        self.factor_prefixes = factor_prefixes
        self.c2_syntax = c2_syntax
        self.c2_net_name: str | None = None


def _short(s: Any) -> str:
    text = s.decode("ascii", errors="ignore") if isinstance(s, bytes) else str(s)
    return f"'{text}'" if len(text) < 64 else f"'{text[:64]}'...<+len={len(text) - 64}>"


def _arg_text(arg: Any) -> str:
    for single, show in (("f", str), ("i", str), ("s", _short)):
        if arg.HasField(single):
            return show(getattr(arg, single))
    if arg.floats:
        return str(list(arg.floats))
    if arg.ints:
        return str(list(arg.ints))
    if arg.strings:
        return str([_short(s) for s in arg.strings])
    return "[]"


def _common_prefix(names: list[str]) -> str:
    if not names:
        return ""
    lo, hi = min(names), max(names)
    n = 0
    while n < len(lo) and lo[n] == hi[n]:
        n += 1
    return lo[:n]


def _show(value: Any) -> str:
    return "[" + ", ".join(f"'{v}'" for v in value) + "]" if isinstance(value, list) else str(value)


def _join(values: list[Any], factor: bool) -> str:
    shown = [_show(v) for v in values]
    prefix = _common_prefix(shown) if factor and len(shown) > 1 else ""
    rest = ", ".join(v[len(prefix) :] for v in shown)
    return f"{prefix}[{rest}]" if prefix else rest


def _call(fn: str, args: list[Any] | None = None, outputs: list[Any] | None = None, factor: bool = False) -> str:
    """``outputs = fn(args)``; tuple args are keyword arguments."""
    positional = [a for a in args or [] if not isinstance(a, tuple)]
    keywords = [f"{k}={v}" for k, v in (a for a in args or [] if isinstance(a, tuple))]
    inner = ", ".join(x for x in [_join(positional, factor) if positional else "", *keywords] if x)
    text = f"{fn}({inner})"
    return f"{_join(list(outputs), factor)} = {text}" if outputs else text


def _device_text(dev: Any) -> str | None:
    gpu = getattr(dev, "device_id", 0) or getattr(dev, "cuda_gpu_id", 0)
    if not dev or not (dev.device_type or gpu or dev.node_name):
        return None
    return _call("DeviceOption", [dev.device_type, gpu, f"'{dev.node_name}'"])


@Printer.register(OperatorDef)
def _print_op(p: Printer, op: OperatorDef) -> None:
    args: list[Any] = [(a.name, _arg_text(a)) for a in op.arg]
    dev = _device_text(op.device_option) if op.HasField("device_option") else None
    if dev:
        args.append(("device_option", dev))
    if p.c2_net_name:
        p.add(_call(f"{p.c2_net_name}.{op.type}", [list(op.input), list(op.output), *args]))
    else:
        p.add(_call(op.type, [*op.input, *args], list(op.output), p.factor_prefixes))
    for arg in op.arg:
        if arg.HasField("n"):
            with p.context(f"arg: {arg.name}"):
                p(arg.n)


@Printer.register(NetDef)
def _print_net_def(p: Printer, net: NetDef) -> None:
    if p.c2_syntax:
        p.add(_call("core.Net", [f"'{net.name}'"], [net.name]))
        p.c2_net_name = net.name
    else:
        p.add(f"# net: {net.name}")
    for op in net.op:
        p(op)
    p.c2_net_name = None


@Printer.register(Net)
def _print_net(p: Printer, net: Net) -> None:
    p(net.Proto())


def _step_header(step: ExecutionStep) -> tuple[str | None, bool]:
    """The ``with`` line of a step and whether its substeps get their own blocks."""
    proto = step.Proto()
    many = len(step.Substeps()) > 1
    if proto.should_stop_blob:
        return _call("loop"), False
    if proto.num_iter and proto.num_iter != 1:
        return _call("loop", [proto.num_iter]), False
    if proto.num_concurrent_instances > 1:
        return _call("parallel", [("num_instances", proto.num_concurrent_instances)]), many
    if proto.concurrent_substeps and many:
        return _call("parallel"), True
    if proto.report_net:
        return _call("run_once"), False
    return None, False


def _substep_header(sub: Any, own_block: bool) -> str | None:
    sub_proto = sub.Proto() if isinstance(sub, ExecutionStep) else None
    if sub_proto is not None and sub_proto.run_every_ms:
        return _call("reporter", [str(sub), ("interval_ms", sub_proto.run_every_ms)])
    if not own_block:
        return None
    kind = "workspace" if sub_proto is not None and sub_proto.create_workspace else "step"
    return _call(kind, [str(sub)])


@Printer.register(ExecutionStep)
def _print_step(p: Printer, step: ExecutionStep) -> None:
    proto = step.Proto()
    header, own_blocks = _step_header(step)
    with p.context(header):
        if proto.report_net:
            with p.context(_call("report_net", [proto.report_interval])):
                p(step.get_net(proto.report_net))
        for sub in _substeps(step):
            with p.context(_substep_header(sub, own_blocks)):
                p(sub)
                if proto.should_stop_blob:
                    p.add(_call("yield stop_if", [proto.should_stop_blob]))


def _output_text(out: TaskOutput) -> str:
    return "Output[" + ", ".join(str(n) for n in out.names) + "]"


@Printer.register(Task)
def _print_task(p: Printer, task: Task) -> None:
    outputs = ", ".join(_output_text(o) for o in task.outputs())
    with p.context(_call("Task", [("node", task.node), ("name", task.name), ("outputs", outputs)])):
        p(task.get_step())


@Printer.register(TaskGroup)
def _print_task_group(p: Printer, group: TaskGroup, header: str | None = None) -> None:
    with p.context(header or _call("TaskGroup")):
        for task in group.tasks_by_node().tasks():
            p(task)


@Printer.register(Job)
def _print_job(p: Printer, job: Job) -> None:
    p(job.init_group, "Job.current().init_group")
    p(job.epoch_group, "Job.current().epoch_group")
    with p.context("Job.current().stop_signals"):
        for out in job.stop_signals:
            p.add(_output_text(out))
    p(job.download_group, "Job.current().download_group")
    p(job.exit_group, "Job.current().exit_group")


@Printer.register(Plan)
def _print_plan(p: Printer, plan: Plan) -> None:
    with p.context(_call("Plan", [f"'{plan.Proto().name}'"])):
        for step in plan.Steps():
            p(step)


def to_string(obj: Any, **kwargs: Any) -> str:
    """``obj`` (a Net, ExecutionStep, Plan, Task, TaskGroup or Job) as text; ``kwargs`` go to
    :class:`Printer`."""
    printer = Printer(**kwargs)
    printer(obj)
    return str(printer)


def debug_net(net: Net) -> Net:
    """A copy of ``net`` that logs each operator (``LogInfo``) before running it."""
    if not isinstance(net, Net):
        raise AssertionError(f"debug_net takes a core.Net, got {type(net).__name__}")
    out = Net(str(net))
    for op in net.Proto().op:
        text = Printer(c2_syntax=False)
        text(op)
        out.LogInfo(str(text))
        out.Proto().op.extend([op])
    return out
