"""Caffe2's ``Python`` operator: a Python function run as an op of a net.

``core.CreatePythonOperator(f, inputs, outputs)`` and ``net.Python(f)(inputs, outputs)`` store
``f`` under a token (the op's ``token`` argument). When the op runs, ``f(inputs, outputs)``
gets views of its blobs: an input has ``.data`` (the array) and ``.shape``; an output has
``.reshape(shape)``, ``.data`` (write into it), ``.feed(array)`` and ``.shape``. ``f`` may be a
``(builder, args, kwargs)`` tuple: ``builder(*args, **kwargs)`` makes the function, once per op
instance (per created net). With ``grad_f``, the op has a gradient: ``PythonGradient`` calls
``grad_f(inputs + outputs + output_gradients, input_gradients)``.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any

import numpy as np

from asyncnet.core.defs import OperatorDef
from asyncnet.core.registry import Arg, register_gradient, register_op

_functions: dict[str, dict[str, Any]] = {}
_instances: dict[int, tuple[Any, Any]] = {}  # id(op context) -> (context, built function)
_lock = threading.Lock()
_tokens = itertools.count()


def register(f: Any, grad_f: Any = None, pass_workspace: bool = False) -> str:
    """Store ``f`` (and ``grad_f``) and return the token naming them."""
    token = f"python_op_{next(_tokens)}"
    _functions[token] = {"f": f, "grad_f": grad_f, "pass_workspace": pass_workspace}
    return token


class _In:
    __slots__ = ("data",)

    def __init__(self, data: Any):
        self.data = data

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(np.shape(self.data))


class _Out:
    __slots__ = ("data",)

    def __init__(self, current: Any):
        # a copy: the blob's array may be shared with another blob (or be an input, in place)
        self.data = current.copy() if isinstance(current, np.ndarray) else np.empty((0,), np.float32)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)

    def reshape(self, shape: Any) -> None:
        """Make the output an array of ``shape`` (its dtype kept)."""
        shape = tuple(int(d) for d in shape)
        if self.data.shape != shape:
            self.data = np.zeros(shape, self.data.dtype)

    def feed(self, value: Any) -> bool:
        """Set the output to a copy of ``value``."""
        self.data = np.array(value, copy=True)
        return True


def _function(ctx: Any, key: str) -> Any:
    """The function of this op instance (a builder tuple is called once per instance)."""
    token = ctx.args["token"]
    if token not in _functions:
        raise ValueError(f"Python op token {token!r} names no registered function (was it made in this process?)")
    spec = _functions[token][key]
    if not isinstance(spec, tuple):
        return spec
    with _lock:
        entry = _instances.get(id(ctx))
        if entry is None or entry[0] is not ctx:
            builder, args, kwargs = (list(spec) + [(), {}])[:3]
            entry = _instances[id(ctx)] = (ctx, builder(*args, **kwargs))
    return entry[1]


def _workspace_of(ctx: Any) -> Any:
    from caffe2.python import workspace

    for key, ws in list(workspace._workspaces.items()):
        if ws._blobs is ctx._blobs:
            return workspace.C.Workspace._bound(key)
    raise ValueError("the workspace running this Python op is not a caffe2 workspace")


def _call(ctx: Any, key: str, inputs: tuple[Any, ...]) -> Any:
    fn = _function(ctx, key)
    ins = [_In(x) for x in inputs]
    outs = [_Out(ctx.output(i)) for i in range(len(ctx.op.outputs))]
    if _functions[ctx.args["token"]]["pass_workspace"]:
        fn(ins, outs, _workspace_of(ctx))
    else:
        fn(ins, outs)
    if not outs:
        return None
    return outs[0].data if len(outs) == 1 else tuple(o.data for o in outs)


_ARGS = [
    Arg("token", str, Arg.REQUIRED, "names the Python function"),
    Arg("grad_input_indices", list, [], "inputs given a gradient (all when empty)", item_type=int),
    Arg("grad_output_indices", list, [], "outputs whose gradients grad_f reads (all when empty)", item_type=int),
]


@register_op(
    "Python",
    inputs=(0, None),
    outputs=(0, None),
    allow_inplace=lambda i, o: True,
    args=_ARGS,
    doc="Run a Python function registered by caffe2.python.core.CreatePythonOperator.",
)
def python_op(ctx: Any, *inputs: Any) -> Any:
    return _call(ctx, "f", inputs)


@register_op(
    "PythonGradient",
    inputs=(0, None),
    outputs=(0, None),
    allow_inplace=lambda i, o: True,
    args=_ARGS,
    doc="Run the gradient function of a Python op: inputs, outputs, output gradients -> input gradients.",
)
def python_gradient(ctx: Any, *inputs: Any) -> Any:
    return _call(ctx, "grad_f", inputs)


@register_gradient("Python")
def _python_grad(op: OperatorDef, output_grads: list[Any]) -> tuple[list[OperatorDef], list[Any]]:
    token = op.args["token"]
    if _functions.get(token, {}).get("grad_f") is None:
        raise ValueError(f"the Python op {token!r} was made without grad_f: it has no gradient")
    out_idx = list(op.args.get("grad_output_indices") or range(len(op.outputs)))
    in_idx = list(op.args.get("grad_input_indices") or range(len(op.inputs)))
    missing = [op.outputs[i] for i in out_idx if output_grads[i] is None]
    if missing:
        raise ValueError(f"the Python op's gradient needs the gradients of its outputs {missing}")
    grads = [f"#d{i}" for i in in_idx]
    gop = OperatorDef(
        "PythonGradient",
        list(op.inputs) + list(op.outputs) + [output_grads[i] for i in out_idx],
        grads,
        dict(op.args),
    )
    gin: list[Any] = [None] * len(op.inputs)
    for i, g in zip(in_idx, grads):
        gin[i] = g
    return [gop], gin
