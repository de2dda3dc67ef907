"""Caffe2's ``If`` and ``While`` operators: nets held as arguments, run in the op's workspace.

``If``: input 0 is a one-element bool condition; runs ``then_net`` when it is true, else
``else_net`` (optional). ``While``: runs ``cond_net`` (optional), then reads input 0 and, while
it is true, runs ``loop_net`` and ``cond_net`` again. The nets are asyncnet NetDef JSON (the
Caffe2 layer converts a ``NetDef`` argument); each is created once per op instance, against
the same blobs as the op, and run on its own executor (its ``type``); closing the op's net
closes them. As in Caffe2, the op's
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

import collections
import threading
import weakref
from typing import Any

import numpy as np

from asyncnet.core.defs import NetDef, OperatorDef
from asyncnet.core.netbase import NetBase, net_class, on_net_close
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
            nets = _INSTANCES.get(ctx)
            if nets is None:
                nets = _INSTANCES[ctx] = {}
                ref = weakref.ref(ctx)  # the closer must not keep the op instance alive
                on_net_close(ctx, lambda: _close_subnets(ref()))
    net = nets.get(name)
    if net is None:
        nd = _net_def(ctx.args[name], name)
        blobs = ctx._blobs
        net = net_class(nd.type)(nd, build_operators(nd, blobs), blobs)
        nets[name] = net
    return net


def _close_subnets(ctx: Any) -> None:
    """Close the nets the op instance created (its outer net is being closed)."""
    if ctx is None:
        return
    with _LOCK:
        nets = _INSTANCES.pop(ctx, {})
    for net in nets.values():
        net.close()


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
    for name in ("then_net", "else_net", "loop_net", "cond_net", "net"):
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


class _Frame:
    """One child workspace of a scope: its blobs, and the nets created against them."""

    def __init__(self) -> None:
        self.blobs: dict[str, Any] = {}
        self.nets: dict[str, NetBase] = {}

    def net(self, text: str) -> NetBase:
        """The net of ``text`` created once against this frame's blobs."""
        net = self.nets.get(text)
        if net is None:
            nd = _net_def(text, "net")
            net = self.nets[text] = net_class(nd.type)(nd, build_operators(nd, self.blobs), self.blobs)
        return net


class Scope:
    """The workspace blob of Caffe2's ``CreateScope``/``Do``: a stack of child workspaces.

    A forward ``Do`` pushes a fresh child workspace (``reuse_workspace``: runs in the last one);
    a backward ``Do`` pops the last one and runs in it, so a loop's backward pass visits its
    iterations' workspaces last to first. ``HasScope`` tells whether one is left.

        >>> s = Scope(); f = s.push(); f.blobs["a"] = 1; s.depth, s.pop() is f, s.depth
        (1, True, 0)
    """

    def __init__(self) -> None:
        self._frames: list[_Frame] = []
        self._top = -1

    @property
    def depth(self) -> int:
        """How many forward child workspaces are on the stack."""
        return self._top + 1

    @property
    def blobs(self) -> dict[str, Any]:
        """The blobs of the last child workspace (empty when there is none)."""
        return self._frames[self._top].blobs if self._top >= 0 else {}

    def push(self) -> _Frame:
        """A new, empty child workspace on top of the stack (one popped earlier is recycled)."""
        self._top += 1
        if self._top == len(self._frames):
            self._frames.append(_Frame())
        frame = self._frames[self._top]
        frame.blobs.clear()
        return frame

    def last(self) -> _Frame:
        """The child workspace on top of the stack (a new one when the stack is empty)."""
        return self._frames[self._top] if self._top >= 0 else self.push()

    def pop(self) -> _Frame:
        """Take the top child workspace off the stack (it keeps its blobs until recycled)."""
        if self._top < 0:
            raise ValueError("Do: expected a forward child workspace to run the backward net in, found none")
        self._top -= 1
        return self._frames[self._top + 1]

    def __repr__(self) -> str:
        return f"Scope({self.depth} child workspaces)"


@register_op("CreateScope", inputs=0, outputs=1, doc="Caffe2's CreateScope: a new workspace blob for Do ops.")
def create_scope(ctx: Any) -> Scope:
    return Scope()


@register_op(
    "HasScope",
    inputs=1,
    outputs=1,
    inputs_doc=("scope (a CreateScope blob)",),
    outputs_doc=("has_scope (bool scalar)",),
    doc="Caffe2's HasScope: whether the workspace blob still holds a forward child workspace.",
)
def has_scope(ctx: Any, scope: Any) -> np.ndarray:
    return np.array(_scope(ctx, scope, "HasScope").depth > 0)


def _scope(ctx: Any, value: Any, op_type: str) -> Scope:
    if not isinstance(value, Scope):
        name = ctx.op.inputs[-1]
        raise TypeError(f"{op_type}: expected a CreateScope blob in input {name!r}, got {type(value).__name__}")
    return value


def _do_validate(op: OperatorDef) -> None:
    _validate(op)
    inner, idx = op.args.get("inner_blobs", []), op.args.get("outer_blobs_idx", [])
    if len(inner) != len(idx):
        raise ValueError(f"expected one outer_blobs_idx per inner blob, got {len(idx)} for {len(inner)}")
    n = len(op.inputs) + len(op.outputs) - 2
    bad = [i for i in idx if not 0 <= i < n]
    if bad:
        raise ValueError(f"outer_blobs_idx {bad} index none of the {n} inputs and outputs before the workspace blob")
    if op.args.get("backward") and op.args.get("reuse_workspace"):
        raise ValueError("expected at most one of backward and reuse_workspace")


@register_op(
    "Do",
    inputs=(1, None),
    outputs=(1, None),
    allow_inplace=_ANY,
    args=[
        Arg("net", str, Arg.REQUIRED, "the net run in the child workspace (NetDef JSON)"),
        Arg("inner_blobs", list, [], "the net's names of the outer blobs", item_type=str),
        Arg("outer_blobs_idx", list, [], "for each inner blob, its index in inputs + outputs", item_type=int),
        Arg("reuse_workspace", bool, False, "run in the last child workspace instead of a new one"),
        Arg(
            "backward",
            bool,
            False,
            "a gradient Do: pop the last child workspace and run in it; the inner blobs it still "
            "holds keep their forward values, and only the op's outputs are passed back out",
        ),
        Arg("copy_external_blobs", bool, False, "accepted; the outer blobs are always passed in and out"),
    ],
    validate=_do_validate,
    doc="Caffe2's Do: runs net in a child workspace of the last input (a CreateScope blob) whose inner_blobs "
    "are the op's outer blobs; other blobs the net writes stay in the child workspace.",
)
def do_op(ctx: Any, *inputs: Any) -> Any:
    a, op = ctx.args, ctx.op
    scope = _scope(ctx, inputs[-1], "Do")
    names = list(op.inputs[:-1]) + list(op.outputs[:-1])
    pairs = [(inner, names[i]) for inner, i in zip(a["inner_blobs"], a["outer_blobs_idx"])]
    back = a["backward"]
    if back:
        frame = scope.pop()
    else:
        frame = scope.last() if a["reuse_workspace"] else scope.push()
    outer, child = ctx._blobs, frame.blobs
    for inner, name in pairs:
        if name in outer and not (back and inner in child):
            child[inner] = outer[name]
    frame.net(a["net"]).run()
    written = set(op.outputs[:-1]) if back else set(names)
    for inner, name in pairs:
        if inner in child and name in written:
            outer[name] = child[inner]
    return _outputs(ctx, "Do")


# -- ONNXWhile ---------------------------------------------------------------------------------------

_BODY = "_onnx_while_body"  # the op instance's body net and its child blobs, in its own args dict


def _body(ctx: Any) -> tuple[NetBase, dict[str, Any], NetDef]:
    """The body net, created once against a child blob map that reads through to the op's blobs
    and keeps what the body writes to itself."""
    made = ctx.args.get(_BODY)
    if made is None:
        nd = _net_def(ctx.args["body"], "body")
        child: dict[str, Any] = {}
        blobs = collections.ChainMap(child, ctx._blobs)
        made = ctx.args[_BODY] = (net_class(nd.type)(nd, build_operators(nd, blobs), blobs), child, nd)
    return made


def _onnx_while_validate(op: OperatorDef) -> None:
    nd = _net_def(op.args.get("body", ""), "body")
    heads = int(bool(op.args.get("has_trip_count"))) + int(bool(op.args.get("has_cond")))
    carried = len(op.inputs) - heads
    if carried < 0:
        raise ValueError("expected the max trip count and condition inputs that has_trip_count/has_cond name")
    if len(nd.external_inputs) != 2 + carried:
        raise ValueError(
            f"expected the body's external inputs to be (i, cond, {carried} loop-carried values), got {nd.external_inputs}"
        )
    scans = len(op.outputs) - carried
    if scans < 0 or len(nd.external_outputs) != 1 + carried + scans:
        raise ValueError(
            f"expected the body's external outputs to be (cond, {carried} loop-carried values, {max(scans, 0)} scan "
            f"outputs), got {nd.external_outputs}"
        )


@register_op(
    "ONNXWhile",
    inputs=(0, None),
    outputs=(0, None),
    allow_inplace=_ANY,
    args=[
        Arg(
            "body",
            str,
            Arg.REQUIRED,
            "the loop body (NetDef JSON): inputs (i, cond, carried...), outputs (cond, carried..., scans...)",
        ),
        Arg("has_trip_count", bool, False, "input 0 is the most iterations (int)"),
        Arg("has_cond", bool, False, "the next input is the first condition (bool)"),
        Arg("save_scopes", bool, False, "Caffe2's; the body's blobs are kept in one child map here"),
        Arg("disable_scopes", bool, False, "Caffe2's; accepted"),
    ],
    validate=_onnx_while_validate,
    doc="ONNX's Loop as Caffe2 ran it: the body runs while the trip count and condition allow, its "
    "loop-carried values fed back; outputs the final carried values, then each scan output's values of every "
    "iteration concatenated along axis 0. The body's other blobs stay out of the op's workspace.",
)
def onnx_while(ctx: Any, *inputs: Any) -> Any:
    a = ctx.args
    rest = list(inputs)
    limit = int(np.asarray(rest.pop(0)).reshape(-1)[0]) if a["has_trip_count"] else None
    cond = bool(np.asarray(rest.pop(0)).reshape(-1)[0]) if a["has_cond"] else True
    net, child, nd = _body(ctx)
    i_name, cond_name, *carried_names = nd.external_inputs
    new_cond, *results = nd.external_outputs
    carried = rest
    scans: list[list[Any]] = [[] for _ in range(len(results) - len(carried))]
    i = 0
    while cond and (limit is None or i < limit):
        if ctx.cancelled():
            raise RuntimeError("ONNXWhile: the run was cancelled")
        child[i_name], child[cond_name] = np.array(i, np.int64), np.array(cond)
        child.update(zip(carried_names, carried))
        net.run()
        missing = [n for n in nd.external_outputs if n not in child]
        if missing:
            raise ValueError(f"ONNXWhile: the body did not write {missing}")
        cond = bool(np.asarray(child[new_cond]).reshape(-1)[0])
        carried = [child[n] for n in results[: len(carried)]]
        for out, name in zip(scans, results[len(carried) :]):
            out.append(np.asarray(child[name]))
        i += 1
    outs = list(carried) + [_stacked(s) for s in scans]
    if not outs:
        return None
    return outs[0] if len(outs) == 1 else tuple(outs)


def _stacked(values: list[Any]) -> np.ndarray:
    """A scan output: the iterations' values concatenated along axis 0 (none: an empty float32 array)."""
    if values:
        return np.concatenate([v.reshape(1) if v.ndim == 0 else v for v in values], axis=0)
    return np.zeros((0,), np.float32)
