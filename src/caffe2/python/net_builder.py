"""Caffe2's ``caffe2.python.net_builder``: nets, loops and conditions written as Python blocks,
compiled to execution steps that asyncnet's plan executor runs.

Inside ``with NetBuilder():`` each ``ops.<Op>(...)`` call appends an operator to the builder's
current net; ``ops.loop``, ``ops.If``/``Elif``/``Else``, ``ops.stop_guard`` open nested builders
that become substeps. Stopping is Caffe2's: a builder's *stop blob* is the step's
``should_stop_blob``, which the executor checks after each net, so ``ops.stop_if(cond)`` ends
the current net and the step stops there when ``cond`` holds::

    >>> from caffe2.python import core, workspace
    >>> from caffe2.python.net_builder import NetBuilder, ops
    >>> with NetBuilder() as nb:
    ...     x = ops.Const(3)
    ...     total = ops.Const(0)
    ...     with ops.loop():
    ...         ops.stop_if(ops.LE([x, ops.Const(0)]))
    ...         _ = ops.Add([total, x], [total])
    ...         _ = ops.Add([x, ops.Const(-1)], [x])
    >>> workspace.RunPlan(core.Plan(core.to_execution_step(nb)))
    True
    >>> int(workspace.FetchBlob(str(total)))
    6

Not supported: ``ops.IfNet``/``ops.WhileNet`` (Caffe2's If and While operators, which hold
nets as arguments) and the reporters (``task_reporter``, ``local_reporter``).
"""

from __future__ import annotations

from typing import Any

from caffe2.python import context, core

__all__ = ["NetBuilder", "Operations", "ops"]


@context.define_context()
class NetBuilder:
    """A block of nets and nested builders; ``core.to_execution_step(builder)`` makes it a step.

    ``name`` is appended to the enclosing builder's; ``initial_scope`` names blobs the block may
    read. A builder with ``_stop_blob_required`` must call ``ops.stop``/``ops.stop_if``."""

    def __init__(
        self,
        name: str | None = None,
        initial_scope: Any = None,
        _stop_blob_required: bool = False,
        _stop_blob: Any = None,
        _fullname: str | None = None,
        _use_control_ops: bool = False,
    ):
        parent = NetBuilder.current(required=False)
        if _fullname and name:
            raise ValueError("Cannot set both _fullname and name")
        if _use_control_ops:
            raise NotImplementedError(
                "NetBuilder(_use_control_ops=True): Caffe2's If/While operators (nets as arguments) "
                "are not available; use ops.If / ops.loop, which compile to execution steps"
            )
        self.name = _fullname or "/".join(n for n in (parent.name if parent else None, name) if n)
        self._frozen = False
        self._current_net: core.Net | None = None
        self._children: list[Any] = []
        self._lexical_scope = set(parent._lexical_scope) if parent else set()
        if initial_scope:
            self._lexical_scope |= {str(b) for b in initial_scope}
        self._stop_blob = _stop_blob
        self._stop_blob_required = _stop_blob_required
        self._use_control_ops = False

    def stop_blob(self) -> core.BlobReference:
        """This builder's stop blob, created (set to False in the current net) on first use."""
        if self._stop_blob is None:
            net = self.current_net()
            self._stop_blob = core.BlobReference(net.NextName("stop_blob"), net=net)
            net.Const(False, blob_out=self._stop_blob)
            if self._current_net is not self._children[0]:
                init = core.Net("stop_blob_init")
                init.Const(False, blob_out=self._stop_blob)
                self._children.insert(0, init)
        return self._stop_blob

    def stop_if(self, blob: Any) -> None:
        """Set the stop blob when ``blob`` is true; the next op starts a new net."""
        stop = self.stop_blob()
        ops.Or([stop, blob], [stop])
        self._current_net = None

    def _assert_mutable(self) -> None:
        if self._frozen:
            raise AssertionError(f"This NetBuilder ({self.name}) has been built already.")

    def add(self, child: Any) -> Any:
        """Append a net, a nested builder or a task group; returns it."""
        self._assert_mutable()
        self._current_net = child if isinstance(child, core.Net) else None
        self._children.append(child)
        if isinstance(child, core.Net):
            self._lexical_scope |= child.UsedBlobNames()
        return child

    def current_net(self, name: str | None = None) -> core.Net:
        """The net ops are appended to (a new one after a nested block, or when ``name`` is given)."""
        self._assert_mutable()
        if self._current_net is None or name is not None:
            self.add(core.Net(name))
        assert self._current_net is not None
        return self._current_net

    def freeze(self) -> None:
        for child in self._children:
            if hasattr(child, "freeze"):
                child.freeze()
        self._current_net = None
        self._frozen = True

    def get(self) -> list[Any]:
        """The children (nets and builders), freezing the builder."""
        self.freeze()
        return self._children

    def __enter__(self) -> NetBuilder:
        return self

    def __exit__(self, etype: Any, *args: Any) -> None:
        self.freeze()
        if etype is None and self._stop_blob_required and self._stop_blob is None:
            raise AssertionError(
                f"This NetBuilder ({self.name}) requires a stop condition to be set with `stop` or `stop_if`"
            )

    def __str__(self) -> str:
        return self.name or "Un-named NetBuilder"


class Operations:
    """``ops``: operators of the active builder's current net, and the block constructors."""

    def net(self, net: core.Net | None = None, name: str | None = None) -> core.Net:
        """Add ``net`` to the active builder, or return (a new one when ``name``) its current net."""
        if name is not None and net is not None:
            raise ValueError("Cannot provide both `net` and `name`.")
        if net is not None:
            NetBuilder.current().add(net)
            return net
        return NetBuilder.current().current_net(name=name)

    def __getattr__(self, op_type: str) -> Any:
        if op_type.startswith("__"):
            raise AttributeError(op_type)
        if NetBuilder.current(required=False) is None:
            raise AttributeError("No active NetBuilder.")
        return getattr(self.net(), op_type)

    def task_group(self) -> Any:
        """A task group run as the next step of the active builder."""
        from caffe2.python import task

        builder = NetBuilder.current()
        with task.Cluster(), task.Node("local"):
            tg = task.TaskGroup()
            builder.add(tg)
            return tg

    def stop(self) -> None:
        """Stop the current step here."""
        self.stop_if(ops.Const(True))

    def stop_if(self, blob: Any) -> None:
        """Stop the current step here when the scalar bool ``blob`` is true."""
        NetBuilder.current().stop_if(blob)

    def loop(self, iters: Any = None, name: str | None = None) -> _Loop:
        """A block run ``iters`` times (an int or a blob), or until ``stop``/``stop_if``."""
        return NetBuilder.current().add(_Loop(iters, name=name))

    def stop_guard(self, has_stopped_blob: Any = None, name: str | None = None) -> _StopGuard:
        """A block run once; ``has_stopped()`` tells whether it was stopped early."""
        return NetBuilder.current().add(_StopGuard(has_stopped_blob=has_stopped_blob, name=name))

    def If(self, cond: Any, name: str | None = None) -> _RunIf:
        """A block run once when the scalar bool ``cond`` is true (``.Elif``, ``.Else`` follow)."""
        return NetBuilder.current().add(_RunIf(cond, name=name))

    def IfNet(self, cond: Any, name: str | None = None) -> Any:
        """Caffe2's If operator block: not available (use :meth:`If`)."""
        return NetBuilder(name=name, _use_control_ops=True)

    def Else(self, name: str | None = None) -> Any:
        """The else block of :meth:`IfNet`: not available (use ``ops.If(...).Else()``)."""
        return NetBuilder(name=name, _use_control_ops=True)

    def WhileNet(self, name: str | None = None) -> Any:
        """Caffe2's While operator block: not available (use :meth:`loop` with ``stop_if``)."""
        return NetBuilder(name=name, _use_control_ops=True)

    def Condition(self, name: str | None = None) -> Any:
        """The condition of :meth:`WhileNet`: not available."""
        return NetBuilder(name=name, _use_control_ops=True)

    def _setup(self, kind: str, key: str) -> _SetupBuilder:
        setup = _SetupBuilder(kind)
        self.net().add_attribute(key, setup)
        return setup

    def task_init(self) -> _SetupBuilder:
        """A block run once when the task starts, before any of its instances."""
        from caffe2.python.task import Task

        return self._setup(_SetupBuilder.INIT, Task.TASK_SETUP)

    def task_exit(self) -> _SetupBuilder:
        """A block run once when the task ends, after all its instances."""
        from caffe2.python.task import Task

        return self._setup(_SetupBuilder.EXIT, Task.TASK_SETUP)

    def task_instance_init(self) -> _SetupBuilder:
        """A block run when each instance of the task starts."""
        from caffe2.python.task import Task

        return self._setup(_SetupBuilder.INIT, Task.TASK_INSTANCE_SETUP)

    def task_instance_exit(self) -> _SetupBuilder:
        """A block run when each instance of the task ends."""
        from caffe2.python.task import Task

        return self._setup(_SetupBuilder.EXIT, Task.TASK_INSTANCE_SETUP)

    def local_init(self) -> _SetupBuilder:
        """A block run once per node before the tasks of the task group."""
        from caffe2.python.task import TaskGroup

        return self._setup(_SetupBuilder.INIT, TaskGroup.LOCAL_SETUP)

    def local_exit(self, name: str | None = None) -> _SetupBuilder:
        """A block run once per node after the tasks of the task group."""
        from caffe2.python.task import TaskGroup

        setup = _SetupBuilder(_SetupBuilder.EXIT, name)
        self.net().add_attribute(TaskGroup.LOCAL_SETUP, setup)
        return setup


ops = Operations()


class _SetupBuilder(NetBuilder):
    INIT = "init"
    EXIT = "exit"

    def __init__(self, type: str, name: str | None = None):
        NetBuilder.__init__(self, name)
        self.type = type

    def setup(self, net: Any) -> core.ExecutionStep | None:
        return core.to_execution_step(self) if self.type == _SetupBuilder.INIT else None

    def exit(self, net: Any) -> core.ExecutionStep | None:
        return core.to_execution_step(self) if self.type == _SetupBuilder.EXIT else None


class _RunOnce(NetBuilder):
    """A block run once: a stop blob, if the block made one, is set at its end."""

    def __exit__(self, etype: Any, *args: Any) -> None:
        if etype is None and self._stop_blob is not None:
            ops.stop()
        NetBuilder.__exit__(self, etype, *args)


class _StopGuard(_RunOnce):
    def __init__(self, has_stopped_blob: Any = None, name: str | None = None):
        _RunOnce.__init__(self, name)
        self._stopped = has_stopped_blob
        self._ran = False

    def __enter__(self) -> _StopGuard:
        _RunOnce.__enter__(self)
        self._stopped = ops.Const(True, blob_out=self._stopped)
        return self

    def __exit__(self, etype: Any, *args: Any) -> None:
        if etype is None:
            self._ran = True
            ops.Const(False, blob_out=self._stopped)
        _RunOnce.__exit__(self, etype, *args)

    def has_stopped(self) -> Any:
        """A scalar bool blob, true after the block ran iff it was stopped early."""
        if not self._ran:
            raise AssertionError("Context not used yet.")
        return self._stopped


class _Loop(NetBuilder):
    def __init__(self, iters: Any = None, name: str | None = None):
        NetBuilder.__init__(self, name, _stop_blob_required=True)
        self._iter = None
        self._num_iters = None
        if iters is not None:
            self._inc = ops.Const(1)
            self._iter = ops.Const(0)
            self._num_iters = iters if isinstance(iters, core.BlobReference) else ops.Const(iters)

    def iter(self) -> Any:
        """The blob counting this loop's iterations from 0."""
        if self._num_iters is None:
            raise AssertionError("This loop does not have a number of iterations.")
        return self._iter

    def __enter__(self) -> _Loop:
        NetBuilder.__enter__(self)
        if self._num_iters is not None:
            ops.stop_if(ops.GE([self._iter, self._num_iters]))
        return self

    def __exit__(self, etype: Any, *args: Any) -> None:
        if etype is None and self._num_iters is not None:
            self.current_net().Add([self._iter, self._inc], [self._iter])
        NetBuilder.__exit__(self, etype, *args)


class _RunIf(_RunOnce):
    def __init__(self, cond_blob: Any = None, name: str | None = None, _already_ran: Any = None):
        _RunOnce.__init__(self, name)
        if cond_blob is None and _already_ran is None:
            raise ValueError("If needs a condition blob")
        self._is_else = cond_blob is None
        if _already_ran is None:
            self._else_blob = ops.Not(cond_blob)
            self._already_ran = ops.Const(False)
        else:
            self._already_ran = _already_ran
            self._else_blob = _already_ran if cond_blob is None else ops.Or([_already_ran, ops.Not(cond_blob)])

    def __enter__(self) -> _RunIf:
        _RunOnce.__enter__(self)
        ops.stop_if(self._else_blob)
        ops.Const(True, blob_out=self._already_ran)
        return self

    def Elif(self, cond: Any, name: str | None = None) -> _RunIf:
        """A block run when no earlier branch ran and ``cond`` is true."""
        if self._is_else:
            raise AssertionError("Elif not allowed for an Else.")
        return NetBuilder.current().add(_RunIf(cond, name=name or self.name, _already_ran=self._already_ran))

    def Else(self, name: str | None = None) -> _RunIf:
        """A block run when no earlier branch ran."""
        if self._is_else:
            raise AssertionError("Else not allowed for an Else.")
        return NetBuilder.current().add(_RunIf(name=name or self.name, _already_ran=self._already_ran))
