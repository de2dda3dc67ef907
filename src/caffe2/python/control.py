"""Caffe2's ``caffe2.python.control``: Do, DoParallel, For, While, Until, DoWhile, DoUntil,
If, IfNot, Switch, SwitchNot on ``core.Net`` and ``core.ExecutionStep``.

Every construct is an execution step run by asyncnet's plan executor (a ``should_stop_blob``
checked after each net or substep, ``only_once`` for a conditional run, a count-down counter
for ``For``), with the constructs of :class:`asyncnet.exec.control.ControlFlow` over Caffe2's nets. A
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

from typing import Any

from asyncnet.exec.control import ControlFlow
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


class Caffe2ControlFlow(ControlFlow):
    """The control constructs over ``core.Net`` and ``core.ExecutionStep``; a bad argument is a
    ValueError, as in Caffe2."""

    bool_dtype = core.DataType.BOOL

    def net(self, name: str) -> Net:
        return Net(name)

    def is_net(self, x: Any) -> bool:
        return isinstance(x, Net)

    def is_step(self, x: Any) -> bool:
        return isinstance(x, ExecutionStep)

    def step(self, name: str, steps_or_nets: Any, **kwargs: Any) -> ExecutionStep:
        return core.execution_step(name, steps_or_nets, **kwargs)

    def add_outputs(self, net: Any, *blobs: Any) -> None:
        for blob in blobs:
            net.AddExternalOutput(blob)

    def condition_of(self, condition_net: Any) -> Any:
        outputs = condition_net.Proto().external_output
        if not outputs:
            raise self.error(
                f"condition net {condition_net.Name()!r} has no external output; expected its last "
                "external output to be the condition (a bool blob)"
            )
        return core.BlobReference(outputs[-1])

    def absorb(self, merged: Any, net: Any) -> None:
        proto = net.Proto()
        merged.Proto().op.extend(proto.op)
        merged.Proto().external_input.extend(proto.external_input)

    def error(self, message: str) -> Exception:
        return ValueError(message)


def execution_step(name: str, steps_or_nets: Any, **kwargs: Any) -> ExecutionStep:
    return core.execution_step(name, steps_or_nets, **kwargs)


_FLOW = Caffe2ControlFlow()
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
