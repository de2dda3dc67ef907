"""Caffe2's ``If`` and ``While`` operators: nets held as arguments, run in the op's workspace.

``If``: input 0 is a one-element bool condition; runs ``then_net`` when it is true, else
``else_net`` (optional). ``While``: runs ``cond_net`` (optional), then reads input 0 and, while
it is true, runs ``loop_net`` and ``cond_net`` again. The nets are asyncnet NetDef JSON (the
Caffe2 layer converts a ``NetDef`` argument); each is created once per op instance, against
the same blobs as the op, and run on its own executor (its ``type``). As in Caffe2, the op's
other inputs and outputs only declare which blobs the nets read and write; an output the nets
did not write keeps its value (an error if it has none).

    >>> import asyncnet as an, numpy as np
    >>> body = an.Net("body"); _ = body.Add(["i", "one"], "i"); _ = body.LT(["i", "n"], "go")
    >>> ws = an.Workspace(); ws.feed("i", np.int32(0)); ws.feed("one", np.int32(1)); ws.feed("n", np.int32(5))
    >>> ws.feed("go", np.array(True))
    >>> net = an.Net("n"); _ = net.While(["go", "i", "one", "n"], ["i", "go"], loop_net=body.to_def().to_json())
    >>> ws.run_net_once(net); int(ws.fetch("i"))
    5
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import numpy as np

from asyncnet.core.defs import NetDef, OperatorDef
from asyncnet.core.netbase import NetBase, net_class
from asyncnet.core.operator import build_operators
from asyncnet.core.registry import Arg, register_op
from asyncnet.errors import NetDefinitionError

_DEFS: dict[str, NetDef] = {}
_INSTANCES: weakref.WeakKeyDictionary[Any, dict[str, NetBase]] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def _ANY(i: int, o: int) -> bool:
    return True


def _net_def(text: str, name: str) -> NetDef:
    nd = _DEFS.get(text)
    if nd is None:
        try:
            nd = NetDef.from_json(text)
        except NetDefinitionError as e:
            raise ValueError(f"expected {name} as asyncnet NetDef JSON: {e}") from None
        with _LOCK:
            nd = _DEFS.setdefault(text, nd)
    return nd


def _subnet(ctx: Any, name: str) -> NetBase:
    """The op instance's net ``name`` (an argument), created on first use against its blobs."""
    nets = _INSTANCES.get(ctx)
    if nets is None:
        with _LOCK:
            nets = _INSTANCES.setdefault(ctx, {})
    net = nets.get(name)
    if net is None:
        nd = _net_def(ctx.args[name], name)
        blobs = ctx._blobs
        net = net_class(nd.type)(nd, build_operators(nd, blobs), blobs)
        nets[name] = net
    return net


def _condition(ctx: Any, op_type: str) -> bool:
    """Input 0 read from the blobs now (a subnet may have just rewritten it)."""
    name = ctx.op.inputs[0]
    value = ctx._blobs.get(name)
    if value is None:
        raise ValueError(f"{op_type}: condition blob {name!r} does not exist")
    a = np.asarray(value.cpu() if hasattr(value, "cpu") else value)
    if a.size != 1:
        raise ValueError(f"{op_type}: expected a one-element condition in {name!r}, got shape {a.shape}")
    if a.dtype != np.bool_:
        raise TypeError(f"{op_type}: expected a bool condition in {name!r}, got dtype {a.dtype}")
    return bool(a.reshape(()))


def _outputs(ctx: Any, op_type: str) -> Any:
    values = []
    for name in ctx.op.outputs:
        if name not in ctx._blobs:
            raise ValueError(f"{op_type}: output blob {name!r} was not written by the op's nets")
        values.append(ctx._blobs[name])
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def _validate(op: OperatorDef) -> None:
    for name in ("then_net", "else_net", "loop_net", "cond_net"):
        text = op.args.get(name)
        if isinstance(text, str) and text:
            _net_def(text, name)


@register_op(
    "If",
    inputs=(1, None),
    outputs=(0, None),
    allow_inplace=_ANY,
    args=[
        Arg("then_net", str, Arg.REQUIRED, "the net run when the condition is true (NetDef JSON)"),
        Arg("else_net", str, "", "the net run when it is false (NetDef JSON); empty: none"),
    ],
    validate=_validate,
    doc="Caffe2's If: runs then_net when input 0 (one bool) is true, else else_net, in the op's workspace; "
    "the other inputs and the outputs declare the blobs the nets read and write.",
)
def if_op(ctx: Any, *inputs: Any) -> Any:
    if _condition(ctx, "If"):
        _subnet(ctx, "then_net").run()
    elif ctx.args["else_net"]:
        _subnet(ctx, "else_net").run()
    return _outputs(ctx, "If")


@register_op(
    "While",
    inputs=(1, None),
    outputs=(0, None),
    allow_inplace=_ANY,
    args=[
        Arg("loop_net", str, Arg.REQUIRED, "the loop body (NetDef JSON)"),
        Arg("cond_net", str, "", "run before each test of input 0 (NetDef JSON); empty: none"),
    ],
    validate=_validate,
    doc="Caffe2's While: runs cond_net (if any), then loop_net and cond_net again while input 0 (one bool) "
    "is true, in the op's workspace.",
)
def while_op(ctx: Any, *inputs: Any) -> Any:
    has_cond = bool(ctx.args["cond_net"])
    while True:
        if has_cond:
            _subnet(ctx, "cond_net").run()
        if not _condition(ctx, "While"):
            break
        if ctx.cancelled():
            raise RuntimeError("While: the run was cancelled")
        _subnet(ctx, "loop_net").run()
    return _outputs(ctx, "While")
