"""Caffe2's Pow (a scalar ``exponent`` argument or an exponent tensor), Swish and NanCheck, with
their gradients, and ReduceSum / ReduceMean / ReduceMax / ReduceMin over ``axes`` (all axes when
none are given) with ``keepdims``, whose gradients take (dY, X, Y) as in Caffe2.

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace(); ws.feed("x", np.array([[1.0, 2.0], [3.0, 4.0]], np.float32))
    >>> net = an.Net("ew"); _ = net.Pow("x", "p", exponent=2.0)
    >>> _ = net.ReduceSum("x", "s", axes=[0], keepdims=0)
    >>> ws.run_net_once(net); ws.fetch("p"), ws.fetch("s")
    (array([[ 1.,  4.],
           [ 9., 16.]], dtype=float32), array([4., 6.], dtype=float32))
"""

from __future__ import annotations

from typing import Any

import numpy as np

from asyncnet.core.defs import OperatorDef
from asyncnet.core.registry import Arg, register_gradient, register_op
from asyncnet.ops._check import as_array, float_array, same_dtype
from asyncnet.ops.grad import reduce_to_shape
from asyncnet.ops.math import LEGACY_ARGS, legacy_axis, legacy_shape

__all__ = ["REDUCE_KINDS", "nan_check", "pow_op", "swish"]

_POW_ARGS = [*LEGACY_ARGS, Arg("exponent", float, None, "the exponent, when there is no exponent input")]


def _pow_operands(ctx: Any, x: Any, e: tuple[Any, ...]) -> tuple[np.ndarray, Any]:
    """X and the exponent (a float, or an array shaped to broadcast against X)."""
    x = float_array(ctx, x, 0)
    if not e:
        if ctx.args["exponent"] is None:
            raise ValueError("Pow needs an exponent: the argument exponent or a second input; got neither")
        return x, ctx.args["exponent"]
    if ctx.args["exponent"] is not None:
        raise ValueError("Pow got both the argument exponent and an exponent input; expected one")
    b = float_array(ctx, e[0], 1)
    same_dtype(ctx, [x, b])
    if ctx.args["broadcast"]:
        return x, b.reshape(legacy_shape(x.shape, b.shape, legacy_axis(ctx.args)))
    if np.broadcast_shapes(x.shape, b.shape) != x.shape:
        raise ValueError(f"exponent of shape {b.shape} does not broadcast to X's shape {x.shape}")
    return x, b


@register_op(
    "Pow",
    inputs=(1, 2),
    outputs=1,
    allow_inplace={0: 0},
    args=_POW_ARGS,
    inputs_doc=("X", "exponent (optional)"),
    outputs_doc=("Y",),
    doc="Y = X ** exponent, the exponent an argument or a tensor (numpy or Caffe2's legacy broadcast).",
)
def pow_op(ctx: Any, x: Any, *e: Any) -> np.ndarray:
    x, p = _pow_operands(ctx, x, e)
    return np.asarray(np.power(x, p), dtype=x.dtype)


def _dy_in_place(i: int, o: int) -> bool:
    """dX may overwrite the last inputs (Y, dY): an in-place Pow's input and output gradients share a name."""
    return o == 0 and i >= 2


def _x_from_y(y: np.ndarray, p: float) -> np.ndarray:
    """X of Y = X^p when Pow ran in place: the real p-th root (X's sign is kept for odd integer p)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        root = np.power(np.abs(y), 1.0 / p)
        odd = float(p).is_integer() and int(p) % 2 == 1
        return np.asarray(np.sign(y) * root if odd else root, dtype=y.dtype)


@register_op(
    "PowGradient",
    inputs=(3, 4),
    outputs=(1, 2),
    allow_inplace=_dy_in_place,
    args=[*_POW_ARGS, Arg("x_is_output", bool, False, "Pow ran in place: X holds Y, and X is Y's root")],
    inputs_doc=("X", "exponent (when an input)", "Y", "dY"),
    outputs_doc=("dX", "dExponent (when an input)"),
    doc="dX = dY * e * X^(e - 1); dE = dY * Y * log(X), summed back to the exponent's shape.",
)
def pow_gradient(ctx: Any, x: Any, *rest: Any) -> Any:
    e, (y, dy) = rest[:-2], rest[-2:]
    x, p = _pow_operands(ctx, x, e)
    y, dy = float_array(ctx, y, len(rest) - 1), float_array(ctx, dy, len(rest))
    if ctx.args["x_is_output"]:
        if e:
            raise ValueError("PowGradient: x_is_output needs the exponent as an argument, got an exponent input")
        x = _x_from_y(y, p)
    with np.errstate(divide="ignore", invalid="ignore"):
        dx = np.asarray(dy * p * np.power(x, p - 1), dtype=x.dtype)
        if not e:
            return dx
        de = np.asarray(dy * y * np.log(x), dtype=x.dtype)
    return dx, reduce_to_shape(de, p.shape).reshape(np.shape(e[0]))


@register_gradient("Pow")
def _pow_grad(op: OperatorDef, gout: list[Any]) -> tuple[list[OperatorDef], list[Any]]:
    if gout[0] is None:
        return [], [None] * len(op.inputs)
    outs = ["#dx", "#de"][: len(op.inputs)]
    inputs = [*op.inputs, op.outputs[0], gout[0]]
    args = dict(op.args)
    if len(op.inputs) == 1 and op.inputs[0] == op.outputs[0]:
        args["x_is_output"] = True
    return [OperatorDef("PowGradient", inputs, outs, args)], outs


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return np.asarray(0.5 * (1 + np.tanh(0.5 * x)), dtype=x.dtype)  # no overflow for large |x|


@register_op("Swish", inputs=1, outputs=1, allow_inplace={0: 0}, doc="Y = X * sigmoid(X).")
def swish(ctx: Any, x: Any) -> np.ndarray:
    x = float_array(ctx, x, 0)
    return as_array(x * _sigmoid(x))


@register_op(
    "SwishGradient",
    inputs=3,
    outputs=1,
    allow_inplace={2: 0},
    inputs_doc=("X", "Y", "dY"),
    outputs_doc=("dX",),
    doc="dX = dY * (Y + sigmoid(X) * (1 - Y)).",
)
def swish_gradient(ctx: Any, x: Any, y: Any, dy: Any) -> np.ndarray:
    x, y, dy = (float_array(ctx, v, i) for i, v in enumerate((x, y, dy)))
    same_dtype(ctx, [x, y, dy])
    if not x.shape == y.shape == dy.shape:
        raise ValueError(f"expected X, Y and dY of one shape, got {x.shape}, {y.shape}, {dy.shape}")
    return np.asarray(dy * (y + _sigmoid(x) * (1 - y)), dtype=x.dtype)


@register_gradient("Swish")
def _swish_grad(op: OperatorDef, gout: list[Any]) -> tuple[list[OperatorDef], list[Any]]:
    if gout[0] is None:
        return [], [None]
    return [OperatorDef("SwishGradient", [op.inputs[0], op.outputs[0], gout[0]], ["#dx"], {})], ["#dx"]


@register_op(
    "NanCheck",
    inputs=(1, None),
    outputs=1,
    allow_inplace={0: 0},
    inputs_doc=("X", "more tensors to check"),
    outputs_doc=("Y: X",),
    doc="Y = X; fails naming the input and position when X or another input holds a NaN or an infinity.",
)
def nan_check(ctx: Any, x: Any, *others: Any) -> np.ndarray:
    for i, v in enumerate((x, *others)):
        a = np.asarray(v)
        if a.dtype.kind == "f" and not np.isfinite(a).all():
            bad = tuple(int(j) for j in np.argwhere(~np.isfinite(a))[0])
            raise ValueError(f"expected finite values, found {a[bad]} at {bad} in input {i} {ctx.op.inputs[i]!r}")
    return np.array(x, copy=True)


@register_gradient("NanCheck")
def _nan_check_grad(op: OperatorDef, gout: list[Any]) -> tuple[list[OperatorDef], list[Any]]:
    if gout[0] is None:
        return [], [None] * len(op.inputs)
    return [OperatorDef("NanCheck", [gout[0]], ["#dx"], {})], ["#dx"] + [None] * (len(op.inputs) - 1)


# -- ReduceSum / ReduceMean / ReduceMax / ReduceMin over axes ---------------------------------
REDUCE_KINDS = {"Sum": np.sum, "Mean": np.mean, "Max": np.max, "Min": np.min}
_REDUCE_ARGS = [
    Arg("axes", list, [], "the axes to reduce (negative counts from the end); none: every axis", item_type=int),
    Arg("keepdims", bool, True, "keep the reduced axes with size 1"),
]


def _axes(ctx: Any, ndim: int) -> tuple[int, ...]:
    axes = ctx.args["axes"] or list(range(ndim))
    out = []
    for a in axes:
        if not -ndim <= a < ndim:
            raise ValueError(f"axis {a} out of range for an input of {ndim} dims")
        out.append(a % ndim)
    if len(set(out)) != len(out):
        raise ValueError(f"expected distinct axes, got {axes}")
    return tuple(sorted(out))


def _reduce(kind: str) -> Any:
    def kernel(ctx: Any, x: Any) -> np.ndarray:
        x = float_array(ctx, x, 0)
        axes = _axes(ctx, x.ndim)
        if kind in ("Max", "Min") and any(x.shape[a] == 0 for a in axes):
            raise ValueError(f"Reduce{kind} over an empty axis of X of shape {x.shape}")
        y = REDUCE_KINDS[kind](x, axis=axes, keepdims=ctx.args["keepdims"])
        return np.asarray(y, dtype=x.dtype)

    return kernel


def _reduce_gradient(kind: str) -> Any:
    def kernel(ctx: Any, dy: Any, x: Any, y: Any) -> np.ndarray:
        dy, x, y = (float_array(ctx, v, i) for i, v in enumerate((dy, x, y)))
        axes = _axes(ctx, x.ndim)
        kept = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
        if dy.size != int(np.prod(kept)) or y.size != dy.size:
            raise ValueError(f"expected dY and Y of {int(np.prod(kept))} values for X {x.shape}, got {dy.shape}")
        dy, y = dy.reshape(kept), y.reshape(kept)
        if kind == "Sum":
            return np.broadcast_to(dy, x.shape).astype(x.dtype)
        if kind == "Mean":
            n = int(np.prod([x.shape[a] for a in axes]))
            return np.broadcast_to(dy / max(n, 1), x.shape).astype(x.dtype)
        return np.asarray(np.where(x == y, dy, 0), dtype=x.dtype)

    return kernel


def _reduce_grad_maker(kind: str) -> Any:
    def maker(op: OperatorDef, gout: list[Any]) -> tuple[list[OperatorDef], list[Any]]:
        if gout[0] is None:
            return [], [None]
        inputs = [gout[0], op.inputs[0], op.outputs[0]]
        return [OperatorDef(f"Reduce{kind}Gradient", inputs, ["#dx"], dict(op.args))], ["#dx"]

    return maker


for _kind in REDUCE_KINDS:
    _what = {"Sum": "sum", "Mean": "mean", "Max": "max", "Min": "min"}[_kind]
    register_op(
        f"Reduce{_kind}",
        inputs=1,
        outputs=1,
        args=_REDUCE_ARGS,
        doc=f"Y = the {_what} of X over `axes` (every axis when none), keeping them as size 1 with keepdims.",
    )(_reduce(_kind))
    register_op(
        f"Reduce{_kind}Gradient",
        inputs=3,
        outputs=1,
        args=_REDUCE_ARGS,
        inputs_doc=("dY", "X", "Y"),
        outputs_doc=("dX",),
        doc=f"The gradient of Reduce{_kind}: dY spread back over the reduced axes"
        + (" (to where X equals Y)." if _kind in ("Max", "Min") else "."),
    )(_reduce_gradient(_kind))
    register_gradient(f"Reduce{_kind}")(_reduce_grad_maker(_kind))
