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

``ops.IfNet``/``ops.Else`` and ``ops.WhileNet``/``ops.Condition`` compile their block to one
net holding Caffe2's ``If`` or ``While`` operator; blobs first written inside the block stay in
its child workspace. Not supported: the reporters (``task_reporter``, ``local_reporter``).
"""

from __future__ import annotations

from typing import Any

from caffe2.python import context, core
from caffe2.python.control_ops_util import add_if_op, add_while_op

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
        if _use_control_ops and (_stop_blob_required or _stop_blob):
            raise AssertionError("Stop blobs are not used with control operators")
        if parent:
            parent._update_lexical_scope()
        self.name = _fullname or "/".join(n for n in (parent.name if parent else None, name) if n)
        self._frozen = False
        self._current_net: core.Net | None = None
        self._children: list[Any] = []
        self._init_lexical_scope = set(parent._lexical_scope) if parent else set()
        if initial_scope:
            self._init_lexical_scope |= {str(b) for b in initial_scope}
        self._lexical_scope = set(self._init_lexical_scope)
        self._stop_blob = _stop_blob
        self._stop_blob_required = _stop_blob_required
        self._use_control_ops = _use_control_ops

    def _update_lexical_scope(self) -> None:
        """The blobs visible here: the initial scope, every child net's, every control block's."""
        scope = set(self._init_lexical_scope)
        for child in self._children:
            if isinstance(child, core.Net):
                scope |= child.UsedBlobNames()
            elif isinstance(child, NetBuilder) and child._use_control_ops:
                scope |= child._lexical_scope
        self._lexical_scope = scope

    def _reset_children(self) -> None:
        self._current_net = None
        self._children = []
        self._lexical_scope = set(self._init_lexical_scope)

    @staticmethod
    def merge_nets(nets_or_builders: list[Any], outer_blob_names: Any) -> core.Net | None:
        """The nets (and control blocks' nets) appended into the first; its external outputs
        kept only when they are in ``outer_blob_names``. None when there is nothing to merge."""
        net = None
        for child in nets_or_builders:
            if isinstance(child, NetBuilder):
                nets = child.get()
                if not child._use_control_ops or len(nets) != 1 or not isinstance(nets[0], core.Net):
                    raise AssertionError("Merging of NetBuilder supported only for control ops")
                child = nets[0]
            if net is None:
                net = child
            else:
                net.AppendNet(child)
        if net is not None:
            outer = {str(b) for b in outer_blob_names}
            net.Proto().external_output[:] = [o for o in net.Proto().external_output if o in outer]
        return net

    def stop_blob(self) -> core.BlobReference:
        """This builder's stop blob, created (set to False in the current net) on first use."""
        if self._use_control_ops:
            raise AssertionError("Stop blobs are not used with control operators")
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
        if self._use_control_ops and not (
            isinstance(child, core.Net) or (isinstance(child, NetBuilder) and child._use_control_ops)
        ):
            raise AssertionError("Expected Net or NetBuilder with control ops")
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
        if self._use_control_ops and self._children:
            self._update_lexical_scope()
            children = self._children
            self._reset_children()
            self._children = [NetBuilder.merge_nets(children, self._lexical_scope)]
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

    def IfNet(self, cond: Any, name: str | None = None) -> _RunIfNet:
        """Like :meth:`If`, as one net holding Caffe2's If operator (``ops.Else`` may follow)."""
        return NetBuilder.current().add(_RunIfNet(cond, name=name))

    def Else(self, name: str | None = None) -> _RunElseNet:
        """The else block of the :meth:`IfNet` just closed."""
        return _RunElseNet(name=name)

    def WhileNet(self, name: str | None = None) -> _RunWhileNet:
        """A loop as one net holding Caffe2's While operator; ``ops.Condition`` comes first."""
        return NetBuilder.current().add(_RunWhileNet(name=name))

    def Condition(self, name: str | None = None) -> _RunWhileCondition:
        """The condition of the enclosing :meth:`WhileNet`: its last op writes one bool."""
        if not isinstance(NetBuilder.current(), _RunWhileNet):
            raise AssertionError("Use of Condition outside of WhileNet")
        return _RunWhileCondition(name=name)

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


class _RunIfNet(NetBuilder):
    """A block compiled to one net with an If op on ``cond_blob``."""

    def __init__(self, cond_blob: Any, name: str | None = None):
        NetBuilder.__init__(self, name=name, _use_control_ops=True)
        if not cond_blob:
            raise AssertionError("Conditional blob is not specified for an If net")
        self._cond_blob = cond_blob
        self._then_net: core.Net | None = None
        self._else_net: core.Net | None = None

    def __exit__(self, etype: Any, *args: Any) -> None:
        try:
            if etype is None:
                self._update_lexical_scope()
                children = self._children
                self._reset_children()
                self._then_net = NetBuilder.merge_nets(children, self._lexical_scope) or core.Net("empty_then_net")
                if_net = core.Net(self.name + "/if_net")
                add_if_op(if_net, self._cond_blob, self._lexical_scope, self._then_net)
                self._current_net = if_net
                self._children = [if_net]
        finally:
            NetBuilder.__exit__(self, etype, *args)


class _RunElseNet(NetBuilder):
    """The else block of the :class:`_RunIfNet` just before it: rewrites that block's net."""

    def __init__(self, name: str | None = None):
        parent = NetBuilder.current(required=False)
        if not (parent and parent._children and isinstance(parent._children[-1], _RunIfNet)):
            raise AssertionError("Invalid use of Else builder")
        NetBuilder.__init__(self, name=name, _use_control_ops=True)
        self._if_builder = parent._children[-1]

    def __exit__(self, etype: Any, *args: Any) -> None:
        try:
            if etype is None:
                self._update_lexical_scope()
                children = self._children
                self._reset_children()
                else_net = NetBuilder.merge_nets(children, self._lexical_scope)
                if else_net is not None:
                    ifb = self._if_builder
                    if_else_net = core.Net(self.name + "/if_else_net")
                    add_if_op(if_else_net, ifb._cond_blob, self._lexical_scope, ifb._then_net, else_net)
                    ifb._else_net = else_net
                    ifb._current_net = if_else_net
                    ifb._children = [if_else_net]
        finally:
            NetBuilder.__exit__(self, etype, *args)


class _RunWhileNet(NetBuilder):
    """A block compiled to one net with a While op; its :class:`_RunWhileCondition` comes first."""

    def __init__(self, name: str | None = None):
        NetBuilder.__init__(self, name=name, _use_control_ops=True)
        self._cond_builder: _RunWhileCondition | None = None

    def __exit__(self, etype: Any, *args: Any) -> None:
        try:
            if etype is None:
                if self._cond_builder is None:
                    raise AssertionError("Condition builder must be specified in While op")
                self._update_lexical_scope()
                body = [c for c in self._children if c is not self._cond_builder]
                self._reset_children()
                body_net = NetBuilder.merge_nets(body, self._lexical_scope) or core.Net("empty_loop_body_net")
                while_net = core.Net(self.name + "/while_net")
                cond = self._cond_builder
                add_while_op(while_net, cond._cond_blob, self._lexical_scope, body_net, cond._cond_net)
                self._current_net = while_net
                self._children = [while_net]
        finally:
            NetBuilder.__exit__(self, etype, *args)


class _RunWhileCondition(NetBuilder):
    """The condition of a :class:`_RunWhileNet`; its last op's one output is the condition."""

    def __init__(self, name: str | None = None):
        parent = NetBuilder.current(required=False)
        if not isinstance(parent, _RunWhileNet):
            raise AssertionError("Invalid use of loop condition builder")
        if parent._cond_builder is not None:
            raise AssertionError("Multiple loop condition builders specified")
        if parent._children:
            raise AssertionError("Condition definition must be specified before the loop's body")
        NetBuilder.__init__(self, name=name, _use_control_ops=True)
        parent._cond_builder = self
        self._cond_blob: Any = None
        self._cond_net: core.Net | None = None

    def __exit__(self, etype: Any, *args: Any) -> None:
        try:
            if etype is None:
                self._update_lexical_scope()
                children = self._children
                self._reset_children()
                net = NetBuilder.merge_nets(children, self._lexical_scope)
                if net is None or not net.Proto().op or len(net.Proto().op[-1].output) != 1:
                    raise AssertionError("Invalid loop condition specified")
                self._cond_net = net
                self._cond_blob = core.BlobReference(name=net.Proto().op[-1].output[0], net=None)
                self._current_net = net
                self._children = [net]
        finally:
            NetBuilder.__exit__(self, etype, *args)
