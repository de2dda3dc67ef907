"""Control flow built from execution steps: Caffe2's ``control.py`` (Do, For, While, If, Switch, ...).

Every construct is an :class:`~asyncnet.exec.ExecutionStep` whose loop is driven by the plan
executor's own rules (see :mod:`asyncnet.exec.plan`): a ``should_stop_blob`` checked after each
net or substep, ``only_once`` for a conditional run, a count-down counter for ``For``. A
*condition* is a bool blob name, or a net whose last external output is that blob (the net is
run first, each time the condition is evaluated). Steps and nets given as ``nets_or_steps`` may
be one item or a list; a list mixing steps and nets makes each net a step of its own.

The nets these functions make (the negation of a condition, the counter, the flags set to false
before a loop) get fresh names, so one plan may hold several loops::

    >>> import numpy as np, asyncnet as an
    >>> from asyncnet.exec import control
    >>> ws = an.Workspace()
    >>> ws.feed("n", np.array(0, np.int64)); ws.feed("one", np.array(1, np.int64)); ws.feed("ten", np.array(10, np.int64))
    >>> count = an.Net("count"); _ = count.Add(["n", "one"], "n")
    >>> below = an.Net("below"); below.add_external_outputs(below.LT(["n", "ten"]))
    >>> ws.run_plan(control.While("loop", below, count)); int(ws.fetch("n"))
    10
    >>> ws.run_plan(control.For("again", count, 5)); int(ws.fetch("n"))
    15
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from asyncnet.core.defs import NetDef
from asyncnet.core.net import Net
from asyncnet.errors import NetDefinitionError
from asyncnet.exec.plan import ExecutionStep, execution_step

__all__ = [
    "ControlFlow",
    "Do",
    "DoParallel",
    "For",
    "While",
    "Until",
    "DoWhile",
    "DoUntil",
    "If",
    "IfNot",
    "Switch",
    "SwitchNot",
    "BoolNet",
    "NotNet",
    "GetConditionBlobFromNet",
    "CombineConditions",
    "MergeConditionNets",
]

_serial = itertools.count(1)


class ControlFlow:
    """Caffe2's control constructs over one kind of net and step. The constructs are written once,
    here; a subclass swaps the primitives (how a net is made, holds outputs and merges, how a step
    is made, which error a bad argument raises), as ``caffe2.python.control`` does for Caffe2's
    ``core.Net``. The module's functions are those of the instance for asyncnet's own nets."""

    # -- primitives ---------------------------------------------------------------------------
    def net(self, name: str) -> Any:
        """A new, empty net called ``name``."""
        return Net(name)

    def is_net(self, x: Any) -> bool:
        return isinstance(x, NetDef) or hasattr(x, "snapshot")

    def is_step(self, x: Any) -> bool:
        return isinstance(x, ExecutionStep)

    def step(self, name: str, steps_or_nets: Any, **kwargs: Any) -> Any:
        return execution_step(name, steps_or_nets, **kwargs)

    def add_outputs(self, net: Any, *blobs: Any) -> None:
        net.add_external_outputs(*blobs)

    def condition_of(self, condition_net: Any) -> Any:
        """The condition blob of a net: its last external output (a one-element bool)."""
        d = condition_net if isinstance(condition_net, NetDef) else condition_net.snapshot()
        if not d.external_outputs:
            raise self.error(
                f"condition net {d.name!r} has no external output; expected its last external "
                "output to be the condition (a bool blob)"
            )
        return d.external_outputs[-1]

    def absorb(self, merged: Any, net: Any) -> None:
        """Append ``net``'s ops and external inputs to ``merged``."""
        d = net if isinstance(net, NetDef) else net.snapshot()
        merged.ops.extend(d.ops)
        merged.add_external_inputs(*d.external_inputs)

    def error(self, message: str) -> Exception:
        return NetDefinitionError(message, "control")

    bool_dtype: Any = "bool"

    # -- helpers ------------------------------------------------------------------------------
    def _new_net(self, base: str) -> Any:
        """A net with a name no other net made here has (a plan refuses two different nets of one name)."""
        return self.net(f"{base}_{next(_serial)}")

    def _make_list(self, items: Sequence[Any]) -> list[Any]:
        """Caffe2's _MakeList: ``(a, b)`` -> [a, b]; ``(a,)`` -> [a]; ``([a, b],)`` -> [a, b]."""
        if not items:
            raise self.error("expected at least one net or step, got none")
        if len(items) == 1:
            return list(items[0]) if isinstance(items[0], list) else [items[0]]
        return list(items)

    def _is_nets(self, items: list[Any]) -> bool:
        return all(not self.is_step(x) for x in items)

    def _prepend(self, nets_or_steps: Any, *nets: Any) -> list[Any]:
        body = self._make_list((nets_or_steps,))
        return list(nets) + body if self._is_nets(body) else [self.Do("prepend", list(nets))] + body

    def _append(self, nets_or_steps: Any, *nets: Any) -> list[Any]:
        body = self._make_list((nets_or_steps,))
        return body + list(nets) if self._is_nets(body) else body + [self.Do("append", list(nets))]

    def _condition_blob(self, condition: Any) -> Any:
        return self.condition_of(condition) if self.is_net(condition) else str(condition)

    def _copy_condition_net(self, condition_blob: Any) -> tuple[Any, Any]:
        net = self._new_net("copy_condition_blob_net")
        out = net.Copy(condition_blob)
        self.add_outputs(net, out)
        return net, out

    def _relation(self, relation: str) -> str:
        if relation not in ("And", "Or"):
            raise self.error(f"expected relation 'And' or 'Or', got {relation!r}")
        return relation

    # -- condition nets -----------------------------------------------------------------------
    def GetConditionBlobFromNet(self, condition_net: Any) -> Any:
        """The condition blob of a net: its last external output (a one-element bool)."""
        return self.condition_of(condition_net)

    def BoolNet(self, *blobs_with_bool_value: Any) -> Any:
        """A net setting each blob of the ``(blob, value)`` pairs to a 0-d bool (its external outputs)."""
        net = self._new_net("bool_net")
        for blob, value in self._make_list(blobs_with_bool_value):
            out = net.ConstantFill([], [str(blob)], shape=[], value=bool(value), dtype=self.bool_dtype)
            self.add_outputs(net, out)
        return net

    def NotNet(self, condition_blob_or_net: Any) -> tuple[Any, Any]:
        """A net computing Not(condition) into a fresh blob; returns (net, that blob)."""
        net = self._new_net("not_net")
        out = net.Not(self._condition_blob(condition_blob_or_net))
        self.add_outputs(net, out)
        return net, out

    def MergeConditionNets(self, name: str, condition_nets: Any, relation: str) -> Any:
        """One condition net holding the ops of every net of ``condition_nets`` and their conditions
        combined with ``relation`` ("And" or "Or"); a single net is returned as it is."""
        if not isinstance(condition_nets, list):
            return condition_nets
        if len(condition_nets) <= 1:
            return condition_nets[0] if condition_nets else None
        merged = self.net(name)
        last = None
        for net in condition_nets:
            self.absorb(merged, net)
            cond = self.condition_of(net)
            last = cond if last is None else getattr(merged, self._relation(relation))([last, cond])
        self.add_outputs(merged, last)
        return merged

    def CombineConditions(self, name: str, condition_nets: Any, relation: str) -> Any:
        """A net combining the conditions of ``condition_nets`` with ``relation`` ("And" or "Or"),
        without their ops (run the condition nets first)."""
        if not condition_nets:
            return None
        if not isinstance(condition_nets, list):
            raise self.error("condition_nets must be a list of nets")
        if len(condition_nets) == 1:
            return self._copy_condition_net(self.condition_of(condition_nets[0]))[0]
        combined = self.net(name)
        last = None
        for net in condition_nets:
            cond = self.condition_of(net)
            last = cond if last is None else getattr(combined, self._relation(relation))([last, cond])
        self.add_outputs(combined, last)
        return combined

    # -- constructs ---------------------------------------------------------------------------
    def Do(self, name: str, *nets_or_steps: Any) -> Any:
        """Run the nets or steps once, in order (a single step is returned as it is)."""
        items = self._make_list(nets_or_steps)
        if len(items) == 1 and self.is_step(items[0]):
            return items[0]
        return self.step(f"{name}/Do", items)

    def DoParallel(self, name: str, *nets_or_steps: Any) -> Any:
        """Run the steps once as concurrent substeps and wait for all (a single step is returned as
        it is). As in Caffe2, a list of nets only is one step whose nets run in order."""
        items = self._make_list(nets_or_steps)
        if len(items) == 1 and self.is_step(items[0]):
            return items[0]
        return self.step(f"{name}/DoParallel", items, concurrent_substeps=True)

    def _run_once_if(self, name: str, condition: Any, nets_or_steps: Any) -> Any:
        """Run ``nets_or_steps`` once if the condition is true (its negation is the stop blob)."""
        not_net, stop = self.NotNet(condition)
        extra = (condition, not_net) if self.is_net(condition) else (not_net,)
        body = self._prepend(nets_or_steps, *extra)
        step = self.step(f"{name}/_RunOnceIf", body, should_stop_blob=stop, only_once=True)
        if self._is_nets(body):  # the stop blob may be left set by an earlier run: clear it first
            return self.Do(f"{name}/_RunOnceIf", self.BoolNet((stop, False)), step)
        return step

    def _run_once_if_not(self, name: str, condition: Any, nets_or_steps: Any) -> Any:
        """Run ``nets_or_steps`` once if the condition is false (the condition is the stop blob)."""
        if self.is_net(condition):
            stop, body = self.condition_of(condition), self._prepend(nets_or_steps, condition)
        else:
            copy_net, stop = self._copy_condition_net(str(condition))
            body = self._prepend(nets_or_steps, copy_net)
        return self.step(f"{name}/_RunOnceIfNot", body, should_stop_blob=stop, only_once=True)

    def For(self, name: str, nets_or_steps: Any, iter_num: int) -> Any:
        """Run ``nets_or_steps`` ``iter_num`` times (a CreateCounter / CountDown pair drives the loop)."""
        init = self._new_net("init-net")
        counter = init.CreateCounter([], init_count=iter_num)
        tick = self._new_net("For-iter")
        done = tick.CountDown([counter])
        loop = self.step(f"{name}/For-inner", self._prepend(nets_or_steps, tick), should_stop_blob=done)
        return self.Do(f"{name}/For", self.Do(f"{name}/For-init-net", init), loop)

    def While(self, name: str, condition_blob_or_net: Any, nets_or_steps: Any) -> Any:
        """Run ``nets_or_steps`` while the condition is true (evaluated before each iteration)."""
        not_net, stop = self.NotNet(condition_blob_or_net)
        cond = condition_blob_or_net
        body = self._prepend(nets_or_steps, *((cond, not_net) if self.is_net(cond) else (not_net,)))
        if self._is_nets(body):  # a stop blob left set by an earlier run would end the loop after its first net
            inner = self.step(f"{name}/While-inner", body, should_stop_blob=stop)
            return self.Do(f"{name}/While", self.BoolNet((stop, False)), inner)
        return self.step(f"{name}/While", body, should_stop_blob=stop)

    def Until(self, name: str, condition_blob_or_net: Any, nets_or_steps: Any) -> Any:
        """Run ``nets_or_steps`` until the condition is true (evaluated before each iteration)."""
        cond = condition_blob_or_net
        if self.is_net(cond):
            stop, body = self.condition_of(cond), self._prepend(nets_or_steps, cond)
        else:
            stop, body = str(cond), nets_or_steps
        return self.step(f"{name}/Until", body, should_stop_blob=stop)

    def DoWhile(self, name: str, condition_blob_or_net: Any, nets_or_steps: Any) -> Any:
        """Run ``nets_or_steps``, then again while the condition (evaluated after each iteration) is true."""
        not_net, stop = self.NotNet(condition_blob_or_net)
        cond = condition_blob_or_net
        body = self._append(nets_or_steps, *((cond, not_net) if self.is_net(cond) else (not_net,)))
        inner = self.step(f"{name}/DoWhile-inner", body, should_stop_blob=stop)
        return self.Do(f"{name}/DoWhile", self.BoolNet((stop, False)), inner)

    def DoUntil(self, name: str, condition_blob_or_net: Any, nets_or_steps: Any) -> Any:
        """Run ``nets_or_steps``, then again until the condition (evaluated after each iteration) is
        true. A condition *blob* already true runs only the first net or step (as in Caffe2)."""
        cond = condition_blob_or_net
        if not self.is_net(cond):
            return self.step(f"{name}/DoUntil", nets_or_steps, should_stop_blob=str(cond))
        stop = self.condition_of(cond)
        inner = self.step(f"{name}/DoUntil-inner", self._append(nets_or_steps, cond), should_stop_blob=stop)
        return self.Do(f"{name}/DoUntil", self.BoolNet((stop, False)), inner)

    def Switch(self, name: str, *conditions: Any) -> Any:
        """Run, in order, each ``(condition, nets_or_steps)`` whose condition is true (several may)."""
        steps = [self._run_once_if(f"{name}/Switch", c, s) for c, s in self._make_list(conditions)]
        return self.step(f"{name}/Switch", steps)

    def SwitchNot(self, name: str, *conditions: Any) -> Any:
        """Run, in order, each ``(condition, nets_or_steps)`` whose condition is false."""
        steps = [self._run_once_if_not(f"{name}/SwitchNot", c, s) for c, s in self._make_list(conditions)]
        return self.step(f"{name}/SwitchNot", steps)

    def _branch(self, label: str, condition: Any, then: Any, otherwise: Any, when: Any, unless: Any) -> Any:
        """``then`` once if ``when`` holds for the condition, else ``otherwise`` (if any): If and IfNot."""
        if not otherwise:
            return when(label, condition, then)
        cond = self._condition_blob(condition)
        return self.Do(label, when(f"{label}-true", condition, then), unless(f"{label}-false", cond, otherwise))

    def If(
        self, name: str, condition_blob_or_net: Any, true_nets_or_steps: Any, false_nets_or_steps: Any = None
    ) -> Any:
        """Run ``true_nets_or_steps`` if the condition is true, else ``false_nets_or_steps`` (if any)."""
        return self._branch(
            f"{name}/If",
            condition_blob_or_net,
            true_nets_or_steps,
            false_nets_or_steps,
            self._run_once_if,
            self._run_once_if_not,
        )

    def IfNot(
        self, name: str, condition_blob_or_net: Any, true_nets_or_steps: Any, false_nets_or_steps: Any = None
    ) -> Any:
        """Run ``true_nets_or_steps`` if the condition is false, else ``false_nets_or_steps`` (if any)."""
        return self._branch(
            f"{name}/IfNot",
            condition_blob_or_net,
            true_nets_or_steps,
            false_nets_or_steps,
            self._run_once_if_not,
            self._run_once_if,
        )


_FLOW = ControlFlow()
Do = _FLOW.Do
DoParallel = _FLOW.DoParallel
For = _FLOW.For
While = _FLOW.While
Until = _FLOW.Until
DoWhile = _FLOW.DoWhile
DoUntil = _FLOW.DoUntil
If = _FLOW.If
IfNot = _FLOW.IfNot
Switch = _FLOW.Switch
SwitchNot = _FLOW.SwitchNot
BoolNet = _FLOW.BoolNet
NotNet = _FLOW.NotNet
GetConditionBlobFromNet = _FLOW.GetConditionBlobFromNet
CombineConditions = _FLOW.CombineConditions
MergeConditionNets = _FLOW.MergeConditionNets
