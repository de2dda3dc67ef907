"""Caffe2's ``caffe2.python.control``: Do, DoParallel, For, While, Until, DoWhile, DoUntil,
If, IfNot, Switch, SwitchNot on ``core.Net`` and ``core.ExecutionStep``.

Every construct is an execution step run by asyncnet's plan executor (a ``should_stop_blob``
checked after each net or substep, ``only_once`` for a conditional run, a count-down counter
for ``For``), as :mod:`asyncnet.exec.control` builds them for asyncnet's own nets. A
*condition* is a bool blob, or a net whose last external output is that blob::

    >>> import numpy as np
    >>> from caffe2.python import control, core, workspace
    >>> workspace.FeedBlob("n", np.array(0, np.int64))
    True
    >>> count = core.Net("count"); _ = count.Add(["n", count.Const(np.int64(1))], "n")
    >>> workspace.RunPlan(control.For("loop", count, 4))
    True
    >>> int(workspace.FetchBlob("n"))
    4
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from caffe2.python import core
from caffe2.python.core import ExecutionStep, Net

__all__ = [
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


def execution_step(name: str, steps_or_nets: Any, **kwargs: Any) -> ExecutionStep:
    return core.execution_step(name, steps_or_nets, **kwargs)


_serial = itertools.count(1)


def _new_net(base: str) -> Net:
    """A net with a name no other net made here has (a plan refuses two different nets of one name)."""
    return Net(f"{base}_{next(_serial)}")


def _is_net(x: Any) -> bool:
    return isinstance(x, Net)


def _make_list(items: Sequence[Any]) -> list[Any]:
    """Caffe2's _MakeList: ``(a, b)`` -> [a, b]; ``(a,)`` -> [a]; ``([a, b],)`` -> [a, b]."""
    if not items:
        raise ValueError("expected at least one net or step, got none")
    if len(items) == 1:
        return list(items[0]) if isinstance(items[0], list) else [items[0]]
    return list(items)


def _is_nets(items: list[Any]) -> bool:
    return all(not isinstance(x, ExecutionStep) for x in items)


def _prepend(nets_or_steps: Any, *nets: Any) -> list[Any]:
    body = _make_list((nets_or_steps,))
    return list(nets) + body if _is_nets(body) else [Do("prepend", list(nets))] + body


def _append(nets_or_steps: Any, *nets: Any) -> list[Any]:
    body = _make_list((nets_or_steps,))
    return body + list(nets) if _is_nets(body) else body + [Do("append", list(nets))]


def GetConditionBlobFromNet(condition_net: Any) -> str:
    """The condition blob of a net: its last external output (a one-element bool)."""
    outputs = condition_net.Proto().external_output
    if not outputs:
        raise ValueError(
            f"condition net {condition_net.Name()!r} has no external output; expected its last "
            "external output to be the condition (a bool blob)"
        )
    return core.BlobReference(outputs[-1])


def _condition_blob(condition: Any) -> str:
    return GetConditionBlobFromNet(condition) if _is_net(condition) else str(condition)


def BoolNet(*blobs_with_bool_value: Any) -> Net:
    """A net setting each blob of the ``(blob, value)`` pairs to a 0-d bool (its external outputs)."""
    net = _new_net("bool_net")
    for blob, value in _make_list(blobs_with_bool_value):
        net.AddExternalOutput(net.ConstantFill([], [str(blob)], shape=[], value=bool(value), dtype=core.DataType.BOOL))
    return net


def NotNet(condition_blob_or_net: Any) -> tuple[Net, Any]:
    """A net computing Not(condition) into a fresh blob; returns (net, that blob)."""
    net = _new_net("not_net")
    out = net.Not(_condition_blob(condition_blob_or_net))
    net.AddExternalOutput(out)
    return net, out


def _copy_condition_net(condition_blob: Any) -> tuple[Net, Any]:
    net = _new_net("copy_condition_blob_net")
    out = net.Copy(condition_blob)
    net.AddExternalOutput(out)
    return net, out


def MergeConditionNets(name: str, condition_nets: Any, relation: str) -> Any:
    """One condition net holding the ops of every net of ``condition_nets`` and their conditions
    combined with ``relation`` ("And" or "Or"); a single net is returned as it is."""
    if not isinstance(condition_nets, list):
        return condition_nets
    if len(condition_nets) <= 1:
        return condition_nets[0] if condition_nets else None
    merged = Net(name)
    last = None
    for net in condition_nets:
        proto = net.Proto()
        merged.Proto().op.extend(proto.op)
        merged.Proto().external_input.extend(proto.external_input)
        cond = GetConditionBlobFromNet(net)
        last = cond if last is None else getattr(merged, _relation(relation))([last, cond])
    merged.AddExternalOutput(last)
    return merged


def CombineConditions(name: str, condition_nets: Any, relation: str) -> Net | None:
    """A net combining the conditions of ``condition_nets`` with ``relation`` ("And" or "Or"),
    without their ops (run the condition nets first)."""
    if not condition_nets:
        return None
    if not isinstance(condition_nets, list):
        raise ValueError("condition_nets must be a list of nets")
    if len(condition_nets) == 1:
        return _copy_condition_net(GetConditionBlobFromNet(condition_nets[0]))[0]
    combined = Net(name)
    last = None
    for net in condition_nets:
        cond = GetConditionBlobFromNet(net)
        last = cond if last is None else getattr(combined, _relation(relation))([last, cond])
    combined.AddExternalOutput(last)
    return combined


def _relation(relation: str) -> str:
    if relation not in ("And", "Or"):
        raise ValueError(f"expected relation 'And' or 'Or', got {relation!r}")
    return relation


def Do(name: str, *nets_or_steps: Any) -> ExecutionStep:
    """Run the nets or steps once, in order (a single step is returned as it is)."""
    items = _make_list(nets_or_steps)
    if len(items) == 1 and isinstance(items[0], ExecutionStep):
        return items[0]
    return execution_step(f"{name}/Do", items)


def DoParallel(name: str, *nets_or_steps: Any) -> ExecutionStep:
    """Run the steps once as concurrent substeps and wait for all (a single step is returned as
    it is). As in Caffe2, a list of nets only is one step whose nets run in order."""
    items = _make_list(nets_or_steps)
    if len(items) == 1 and isinstance(items[0], ExecutionStep):
        return items[0]
    return execution_step(f"{name}/DoParallel", items, concurrent_substeps=True)


def _run_once_if(name: str, condition: Any, nets_or_steps: Any) -> ExecutionStep:
    """Run ``nets_or_steps`` once if the condition is true (its negation is the stop blob)."""
    not_net, stop = NotNet(condition)
    body = _prepend(nets_or_steps, condition, not_net) if _is_net(condition) else _prepend(nets_or_steps, not_net)
    step = execution_step(f"{name}/_RunOnceIf", body, should_stop_blob=stop, only_once=True)
    if _is_nets(body):  # the stop blob may be left set by an earlier run: clear it first
        return Do(f"{name}/_RunOnceIf", BoolNet((stop, False)), step)
    return step


def _run_once_if_not(name: str, condition: Any, nets_or_steps: Any) -> ExecutionStep:
    """Run ``nets_or_steps`` once if the condition is false (the condition is the stop blob)."""
    if _is_net(condition):
        stop, body = GetConditionBlobFromNet(condition), _prepend(nets_or_steps, condition)
    else:
        copy_net, stop = _copy_condition_net(str(condition))
        body = _prepend(nets_or_steps, copy_net)
    return execution_step(f"{name}/_RunOnceIfNot", body, should_stop_blob=stop, only_once=True)


def For(name: str, nets_or_steps: Any, iter_num: int) -> ExecutionStep:
    """Run ``nets_or_steps`` ``iter_num`` times (a CreateCounter / CountDown pair drives the loop)."""
    init = _new_net("init-net")
    counter = init.CreateCounter([], init_count=iter_num)
    tick = _new_net("For-iter")
    done = tick.CountDown([counter])
    loop = execution_step(f"{name}/For-inner", _prepend(nets_or_steps, tick), should_stop_blob=done)
    return Do(f"{name}/For", Do(f"{name}/For-init-net", init), loop)


def While(name: str, condition_blob_or_net: Any, nets_or_steps: Any) -> ExecutionStep:
    """Run ``nets_or_steps`` while the condition is true (evaluated before each iteration)."""
    not_net, stop = NotNet(condition_blob_or_net)
    cond = condition_blob_or_net
    body = _prepend(nets_or_steps, cond, not_net) if _is_net(cond) else _prepend(nets_or_steps, not_net)
    if _is_nets(body):  # a stop blob left set by an earlier run would end the loop after its first net
        return Do(
            f"{name}/While", BoolNet((stop, False)), execution_step(f"{name}/While-inner", body, should_stop_blob=stop)
        )
    return execution_step(f"{name}/While", body, should_stop_blob=stop)


def Until(name: str, condition_blob_or_net: Any, nets_or_steps: Any) -> ExecutionStep:
    """Run ``nets_or_steps`` until the condition is true (evaluated before each iteration)."""
    if _is_net(condition_blob_or_net):
        stop, body = GetConditionBlobFromNet(condition_blob_or_net), _prepend(nets_or_steps, condition_blob_or_net)
    else:
        stop, body = str(condition_blob_or_net), nets_or_steps
    return execution_step(f"{name}/Until", body, should_stop_blob=stop)


def DoWhile(name: str, condition_blob_or_net: Any, nets_or_steps: Any) -> ExecutionStep:
    """Run ``nets_or_steps``, then again while the condition (evaluated after each iteration) is true."""
    not_net, stop = NotNet(condition_blob_or_net)
    cond = condition_blob_or_net
    body = _append(nets_or_steps, cond, not_net) if _is_net(cond) else _append(nets_or_steps, not_net)
    return Do(
        f"{name}/DoWhile", BoolNet((stop, False)), execution_step(f"{name}/DoWhile-inner", body, should_stop_blob=stop)
    )


def DoUntil(name: str, condition_blob_or_net: Any, nets_or_steps: Any) -> ExecutionStep:
    """Run ``nets_or_steps``, then again until the condition (evaluated after each iteration) is
    true. A condition *blob* already true runs only the first net or step (as in Caffe2)."""
    if not _is_net(condition_blob_or_net):
        return execution_step(f"{name}/DoUntil", nets_or_steps, should_stop_blob=str(condition_blob_or_net))
    stop = GetConditionBlobFromNet(condition_blob_or_net)
    body = _append(nets_or_steps, condition_blob_or_net)
    return Do(
        f"{name}/DoUntil", BoolNet((stop, False)), execution_step(f"{name}/DoUntil-inner", body, should_stop_blob=stop)
    )


def Switch(name: str, *conditions: Any) -> ExecutionStep:
    """Run, in order, each ``(condition, nets_or_steps)`` whose condition is true (several may)."""
    return execution_step(f"{name}/Switch", [_run_once_if(f"{name}/Switch", c, s) for c, s in _make_list(conditions)])


def SwitchNot(name: str, *conditions: Any) -> ExecutionStep:
    """Run, in order, each ``(condition, nets_or_steps)`` whose condition is false."""
    return execution_step(
        f"{name}/SwitchNot", [_run_once_if_not(f"{name}/SwitchNot", c, s) for c, s in _make_list(conditions)]
    )


def _branch(label: str, condition_blob_or_net: Any, then: Any, otherwise: Any, when: Any, unless: Any) -> ExecutionStep:
    """``then`` once if ``when`` holds for the condition, else ``otherwise`` (if any): If and IfNot."""
    if not otherwise:
        return when(label, condition_blob_or_net, then)
    cond = _condition_blob(condition_blob_or_net)
    return Do(label, when(f"{label}-true", condition_blob_or_net, then), unless(f"{label}-false", cond, otherwise))


def If(
    name: str, condition_blob_or_net: Any, true_nets_or_steps: Any, false_nets_or_steps: Any = None
) -> ExecutionStep:
    """Run ``true_nets_or_steps`` if the condition is true, else ``false_nets_or_steps`` (if any)."""
    return _branch(
        f"{name}/If", condition_blob_or_net, true_nets_or_steps, false_nets_or_steps, _run_once_if, _run_once_if_not
    )


def IfNot(
    name: str, condition_blob_or_net: Any, true_nets_or_steps: Any, false_nets_or_steps: Any = None
) -> ExecutionStep:
    """Run ``true_nets_or_steps`` if the condition is false, else ``false_nets_or_steps`` (if any)."""
    return _branch(
        f"{name}/IfNot", condition_blob_or_net, true_nets_or_steps, false_nets_or_steps, _run_once_if_not, _run_once_if
    )
