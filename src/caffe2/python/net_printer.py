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

# The kinds of objects walked, most specific first; a walker handles kind K in method ``_on_K``.
_KINDS: list[tuple[type, str]] = [
    (OperatorDef, "op"),
    (NetDef, "netdef"),
    (Net, "net"),
    (ExecutionStep, "step"),
    (Plan, "plan"),
    (Task, "task"),
    (TaskGroup, "group"),
    (Job, "job"),
]


class Visitor:
    """Walks objects: a handler added with :meth:`register` for a type, else the class's
    ``_on_<kind>`` method, handles each object."""

    extra: list[tuple[type, Callable[..., Any]]] = []

    @classmethod
    def register(cls, kind: type) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator: ``fn(visitor, obj, *args)`` handles objects of ``kind``."""
        if "extra" not in cls.__dict__:
            cls.extra = []

        def add(fn: Callable[..., Any]) -> Callable[..., Any]:
            cls.extra.insert(0, (kind, fn))
            return fn

        return add

    def __call__(self, obj: Any, *args: Any, **kwargs: Any) -> Any:
        if obj is None:
            return None
        for kind, fn in type(self).extra:
            if isinstance(obj, kind):
                return fn(self, obj, *args, **kwargs)
        for kind, name in _KINDS:
            method = getattr(self, f"_on_{name}", None)
            if method is not None and isinstance(obj, kind):
                return method(obj, *args, **kwargs)
        raise TypeError(f"{type(self).__name__}: unsupported object type: {type(obj)}")


def _children(step: ExecutionStep) -> list[Any]:
    """A step's substeps, then its nets."""
    return [*step.Substeps(), *(step.get_net(n) for n in step.Proto().network)]


# -- analysis -------------------------------------------------------------------------------------


class Analyzer(Visitor):
    """A model of the blobs each workspace holds while a job runs (a count of definitions per
    blob name; ``stack[-1]`` is the workspace the walk is in)."""

    IGNORED_PREFIXES = ("distributed_ctx_init",)

    def __init__(self) -> None:
        self.node_workspaces: dict[str, Counter[str]] = {}
        self.stack: list[Counter[str]] = [Counter()]

    @property
    def workspace(self) -> Counter[str]:
        return self.stack[-1]

    @contextmanager
    def set_workspace(self, node: Any = None, ws: Any = None, do_copy: bool = False) -> Iterator[Counter[str]]:
        """Work in ``ws``, node ``node``'s workspace, or the current one; a copy with ``do_copy``."""
        target = ws
        if target is None and node is not None:
            target = self.node_workspaces.setdefault(str(node), Counter())
        if target is None:
            target = self.workspace
        self.stack.append(Counter(target) if do_copy else target)
        try:
            yield self.stack[-1]
        finally:
            self.stack.pop()

    def define_blob(self, blob: Any) -> None:
        self.workspace.update([str(blob)])

    def need_blob(self, blob: Any) -> None:
        name = str(blob)
        if not name.startswith(self.IGNORED_PREFIXES) and name not in self.workspace:
            raise AssertionError(f"Blob undefined: {name}")

    def _on_op(self, op: OperatorDef) -> None:
        for name in op.input:
            self.need_blob(name)
        for name in op.output:
            self.define_blob(name)

    def _on_netdef(self, net: NetDef) -> None:
        for op in net.op:
            self(op)

    def _on_net(self, net: Net) -> None:
        self(net.Proto())

    def _on_step(self, step: ExecutionStep) -> None:
        spec = step.Proto()
        parallel = spec.concurrent_substeps
        made_in_parallel: set[str] = set()
        with self.set_workspace(do_copy=spec.create_workspace):
            if spec.report_net:
                with self.set_workspace(do_copy=True):
                    self(step.get_net(spec.report_net))
            for child in _children(step):
                with self.set_workspace(do_copy=parallel) as scratch:
                    self(child)
                    if spec.should_stop_blob:
                        self.need_blob(spec.should_stop_blob)
                if parallel:
                    fresh = scratch.keys() - self.workspace.keys()
                    both = made_in_parallel & fresh
                    if both:
                        raise AssertionError(
                            f"Error: Blobs created by multiple parallel steps: {', '.join(sorted(both))}"
                        )
                    made_in_parallel |= fresh
        for name in made_in_parallel:
            self.define_blob(name)

    def _on_plan(self, plan: Plan) -> None:
        for step in plan.Steps():
            self(step)

    def _on_task(self, task: Task) -> None:
        with self.set_workspace(do_copy=task.workspace_type() != WorkspaceType.GLOBAL):
            self(task.get_step())

    def _on_group(self, group: TaskGroup) -> None:
        for task in group.tasks_by_node().tasks():
            with self.set_workspace(node=task.node):
                self(task)

    def _on_job(self, job: Job) -> None:
        for group in (job.init_group, job.epoch_group):
            self(group)


def analyze(obj: Any) -> None:
    """Check that no operator of ``obj`` (a Job, TaskGroup, Task, step, plan or net) reads an
    undefined blob, and that no two concurrent steps create one blob."""
    Analyzer()(obj)


# -- printing -------------------------------------------------------------------------------------


class Text:
    """Indented lines; :meth:`context` opens a ``with ...:`` block (``pass`` when left empty)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._depth = 0
        self._block_sizes = [0]

    @contextmanager
    def context(self, text: str | None) -> Iterator[None]:
        if text is None:
            yield
            return
        self.add(f"with {text}:")
        self._depth += 1
        self._block_sizes.append(0)
        try:
            yield
        finally:
            if self._block_sizes.pop() == 0:
                self.add("pass")
            self._depth -= 1

    def add(self, text: str) -> None:
        self._block_sizes[-1] += 1
        self.lines.append("    " * self._depth + text)

    def __str__(self) -> str:
        return "\n".join(self.lines)


def _quoted(s: Any) -> str:
    text = s.decode("ascii", errors="ignore") if isinstance(s, bytes) else str(s)
    if len(text) >= 64:
        return f"'{text[:64]}'...<+len={len(text) - 64}>"
    return f"'{text}'"


def _arg_value(arg: Any) -> str:
    if arg.HasField("f"):
        return str(arg.f)
    if arg.HasField("i"):
        return str(arg.i)
    if arg.HasField("s"):
        return _quoted(arg.s)
    for repeated in ("floats", "ints"):
        values = list(getattr(arg, repeated))
        if values:
            return str(values)
    return str([_quoted(s) for s in arg.strings]) if arg.strings else "[]"


def _shared_prefix(texts: list[str]) -> str:
    if not texts:
        return ""
    first, last = min(texts), max(texts)
    n = next((i for i, (a, b) in enumerate(zip(first, last)) if a != b), len(first))
    return first[:n]


def _as_text(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(f"'{v}'" for v in value) + "]"
    return str(value)


def _listing(values: list[Any], factor: bool) -> str:
    """``values`` joined by commas; with ``factor``, a common prefix is written once: ``p[a, b]``."""
    texts = [_as_text(v) for v in values]
    prefix = _shared_prefix(texts) if factor and len(texts) > 1 else ""
    body = ", ".join(t[len(prefix) :] for t in texts)
    return f"{prefix}[{body}]" if prefix else body


def _call(fn: str, args: list[Any] | None = None, outputs: list[Any] | None = None, factor: bool = False) -> str:
    """``outputs = fn(args)``; tuple args are keyword arguments."""
    args = args or []
    plain = [a for a in args if not isinstance(a, tuple)]
    parts = [_listing(plain, factor)] if plain else []
    parts += [f"{k}={v}" for k, v in (a for a in args if isinstance(a, tuple))]
    text = f"{fn}({', '.join(p for p in parts if p)})"
    return f"{_listing(list(outputs), factor)} = {text}" if outputs else text


def _device(dev: Any) -> str | None:
    gpu = getattr(dev, "device_id", 0) or getattr(dev, "cuda_gpu_id", 0)
    if dev.device_type or gpu or dev.node_name:
        return _call("DeviceOption", [dev.device_type, gpu, f"'{dev.node_name}'"])
    return None


def _step_block(step: ExecutionStep) -> tuple[str | None, bool]:
    """The ``with`` line of a step and whether its substeps get a block each."""
    spec = step.Proto()
    several = len(step.Substeps()) > 1
    if spec.should_stop_blob:
        return _call("loop"), False
    if spec.num_iter not in (0, 1):
        return _call("loop", [spec.num_iter]), False
    if spec.num_concurrent_instances > 1:
        return _call("parallel", [("num_instances", spec.num_concurrent_instances)]), several
    if several and spec.concurrent_substeps:
        return _call("parallel"), True
    return (_call("run_once"), False) if spec.report_net else (None, False)


def _child_block(child: Any, own_block: bool) -> str | None:
    spec = child.Proto() if isinstance(child, ExecutionStep) else None
    if spec is not None and spec.run_every_ms:
        return _call("reporter", [str(child), ("interval_ms", spec.run_every_ms)])
    if own_block:
        return _call("workspace" if spec is not None and spec.create_workspace else "step", [str(child)])
    return None


def _output_names(out: TaskOutput) -> str:
    return f"Output[{', '.join(str(n) for n in out.names)}]"


class Printer(Visitor, Text):
    """Writes what it visits as text; ``c2_syntax`` writes ``net.Op([inputs], [outputs])``
    calls, else ``outputs = Op(inputs)``; ``factor_prefixes`` shortens blob lists sharing a prefix."""

    def __init__(self, factor_prefixes: bool = False, c2_syntax: bool = True):
        Text.__init__(self)
        self.factor_prefixes = factor_prefixes
        self.c2_syntax = c2_syntax
        self.c2_net_name: str | None = None

    def _on_op(self, op: OperatorDef) -> None:
        args: list[Any] = [(a.name, _arg_value(a)) for a in op.arg]
        dev = _device(op.device_option) if op.HasField("device_option") else None
        if dev:
            args.append(("device_option", dev))
        if self.c2_net_name:
            self.add(_call(f"{self.c2_net_name}.{op.type}", [list(op.input), list(op.output), *args]))
        else:
            self.add(_call(op.type, [*op.input, *args], list(op.output), self.factor_prefixes))
        for sub in (a for a in op.arg if a.HasField("n")):
            with self.context(f"arg: {sub.name}"):
                self(sub.n)

    def _on_netdef(self, net: NetDef) -> None:
        if self.c2_syntax:
            self.add(_call("core.Net", [f"'{net.name}'"], [net.name]))
            self.c2_net_name = net.name
        else:
            self.add(f"# net: {net.name}")
        for op in net.op:
            self(op)
        self.c2_net_name = None

    def _on_net(self, net: Net) -> None:
        self(net.Proto())

    def _on_step(self, step: ExecutionStep) -> None:
        spec = step.Proto()
        header, own_blocks = _step_block(step)
        with self.context(header):
            if spec.report_net:
                with self.context(_call("report_net", [spec.report_interval])):
                    self(step.get_net(spec.report_net))
            for child in _children(step):
                with self.context(_child_block(child, own_blocks)):
                    self(child)
                    if spec.should_stop_blob:
                        self.add(_call("yield stop_if", [spec.should_stop_blob]))

    def _on_plan(self, plan: Plan) -> None:
        with self.context(_call("Plan", [f"'{plan.Proto().name}'"])):
            for step in plan.Steps():
                self(step)

    def _on_task(self, task: Task) -> None:
        outputs = ", ".join(_output_names(o) for o in task.outputs())
        with self.context(_call("Task", [("node", task.node), ("name", task.name), ("outputs", outputs)])):
            self(task.get_step())

    def _on_group(self, group: TaskGroup, header: str | None = None) -> None:
        with self.context(header or _call("TaskGroup")):
            for task in group.tasks_by_node().tasks():
                self(task)

    def _on_job(self, job: Job) -> None:
        where = "Job.current()"
        self(job.init_group, f"{where}.init_group")
        self(job.epoch_group, f"{where}.epoch_group")
        with self.context(f"{where}.stop_signals"):
            for signal in job.stop_signals:
                self.add(_output_names(signal))
        self(job.download_group, f"{where}.download_group")
        self(job.exit_group, f"{where}.exit_group")


def to_string(obj: Any, **kwargs: Any) -> str:
    """``obj`` (a Net, ExecutionStep, Plan, Task, TaskGroup or Job) as text; ``kwargs`` go to
    :class:`Printer`."""
    text = Printer(**kwargs)
    text(obj)
    return str(text)


def debug_net(net: Net) -> Net:
    """A copy of ``net`` that logs each operator (``LogInfo``) before running it."""
    if not isinstance(net, Net):
        raise AssertionError(f"debug_net takes a core.Net, got {type(net).__name__}")
    logged = Net(str(net))
    for op in net.Proto().op:
        line = Printer(c2_syntax=False)
        line(op)
        logged.LogInfo(str(line))
        logged.Proto().op.extend([op])
    return logged
