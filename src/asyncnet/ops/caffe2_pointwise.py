"""Caffe2's smaller element-wise and reduction operators: Ceil, Floor, Sign, Mod, Selu, Softplus,
ThresholdedRelu, NegateGradient, Glu, SquareRootDivide, Mean, LpNorm, ArgMax and ArgMin, with
Caffe2's gradients where it has them (``SeluGradient``, ``SoftplusGradient`` and
``ThresholdedReluGradient`` read the output Y and dY; ``LpNormGradient`` reads X and dY;
``Mean``'s gradient is dY / n for each input; ``NegateGradient``'s is -dY).

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace(); ws.feed("x", np.array([[-1.5, 2.0], [3.0, 0.5]], np.float32))
    >>> net = an.Net("pw"); _ = net.Ceil("x", "c"); _ = net.ArgMax("x", "i", axis=1, keepdims=False)
    >>> _ = net.LpNorm("x", "n", p=1)
    >>> ws.run_net_once(net); ws.fetch("c"), ws.fetch("i"), ws.fetch("n")
    (array([[-1.,  2.],
           [ 3.,  1.]], dtype=float32), array([1, 0]), array([7.], dtype=float32))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from asyncnet.core.defs import OperatorDef
from asyncnet.core.registry import Arg, register_gradient, register_no_gradient, register_op
from asyncnet.ops._check import array, as_array, axis_of, float_array, same_dtype

__all__: list[str] = []  # the ops are reached through the registry


def _np(x: Any) -> np.ndarray:
    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)


def _like(dy: np.ndarray, ref: np.ndarray, what: str) -> np.ndarray:
    """dY in the shape of ``ref``: as Caffe2's gradient kernels, only the sizes must agree."""
    if dy.size != ref.size:
        raise ValueError(f"expected dY of the size of {what} {tuple(ref.shape)}, got shape {tuple(dy.shape)}")
    return dy.reshape(ref.shape)


def _grad_op(grad_type: str, reads: str) -> Callable[..., Any]:
    """A gradient maker: ``grad_type`` on (Y or X, dY) with the forward op's arguments."""

    def maker(op: OperatorDef, gout: list[Any]) -> tuple[list[OperatorDef], list[Any]]:
        if gout[0] is None:
            return [], [None] * len(op.inputs)
        first = op.outputs[0] if reads == "Y" else op.inputs[0]
        return [OperatorDef(grad_type, [first, gout[0]], ["#dx"], dict(op.args))], ["#dx"]

    return maker


# -- rounding, sign, modulo ------------------------------------------------------------------------


@register_op("Ceil", allow_inplace={0: 0}, doc="Y = ceil(X) element-wise (no gradient, as in Caffe2).")
def ceil(ctx: Any, x: Any) -> np.ndarray:
    return as_array(np.ceil(float_array(ctx, _np(x), 0)))


@register_op("Floor", allow_inplace={0: 0}, doc="Y = floor(X) element-wise (no gradient, as in Caffe2).")
def floor(ctx: Any, x: Any) -> np.ndarray:
    return as_array(np.floor(float_array(ctx, _np(x), 0)))


@register_op("Sign", allow_inplace={0: 0}, doc="Y = sign(X) element-wise: -1, 0 or 1 (no gradient).")
def sign(ctx: Any, x: Any) -> np.ndarray:
    return as_array(np.sign(array(ctx, _np(x), 0)))


@register_op(
    "Mod",
    allow_inplace={0: 0},
    args=[
        Arg("divisor", int, Arg.REQUIRED, "the divisor (not 0)"),
        Arg("sign_follow_divisor", bool, False, "Python's %: the result has the divisor's sign, else C's fmod"),
    ],
    doc="Y = X mod divisor for int32/int64 X: C's remainder (the sign of X), or with sign_follow_divisor "
    "Python's (the sign of the divisor).",
)
def mod(ctx: Any, x: Any) -> np.ndarray:
    x = array(ctx, _np(x), 0)
    if x.dtype not in (np.int32, np.int64):
        raise TypeError(f"expected an int32 or int64 input, got dtype {x.dtype}")
    d = int(ctx.args["divisor"])
    if d == 0:
        raise ValueError("expected a non-zero divisor, got 0")
    if ctx.args["sign_follow_divisor"]:
        return as_array(np.mod(x, x.dtype.type(d)))
    return as_array(np.fmod(x, x.dtype.type(d)))


register_no_gradient("Ceil", "Floor", "Sign", "Mod")


# -- activations with gradients on Y ---------------------------------------------------------------

_SELU_ARGS = [
    Arg("alpha", float, 1.6732632423543772, "the slope of the exponential part"),
    Arg("scale", float, 1.0507009873554805, "the scale of both parts"),
]


@register_op(
    "Selu",
    allow_inplace={0: 0},
    args=_SELU_ARGS,
    doc="Y = scale * (X if X > 0 else alpha * (exp(X) - 1)).",
)
def selu(ctx: Any, x: Any) -> np.ndarray:
    x = float_array(ctx, _np(x), 0)
    a, s = ctx.args["alpha"], ctx.args["scale"]
    return as_array(np.where(x > 0, s * x, (s * a) * np.expm1(x)).astype(x.dtype, copy=False))


@register_op(
    "SeluGradient",
    inputs=2,
    allow_inplace={1: 0},
    args=_SELU_ARGS,
    inputs_doc=("Y", "dY"),
    outputs_doc=("dX",),
    doc="dX = dY * scale where Y > 0, else dY * (Y + alpha * scale).",
)
def selu_gradient(ctx: Any, y: Any, dy: Any) -> np.ndarray:
    y, dy = float_array(ctx, _np(y), 0), float_array(ctx, _np(dy), 1)
    dy = _like(dy, y, "Y")
    a, s = ctx.args["alpha"], ctx.args["scale"]
    return as_array(np.where(y > 0, dy * s, dy * (y + a * s)).astype(dy.dtype, copy=False))


@register_op("Softplus", allow_inplace={0: 0}, doc="Y = log(1 + exp(X)).")
def softplus(ctx: Any, x: Any) -> np.ndarray:
    x = float_array(ctx, _np(x), 0)
    return as_array(np.logaddexp(x, x.dtype.type(0)))


@register_op(
    "SoftplusGradient",
    inputs=2,
    allow_inplace={1: 0},
    inputs_doc=("Y", "dY"),
    outputs_doc=("dX",),
    doc="dX = dY * (1 - exp(-Y)).",
)
def softplus_gradient(ctx: Any, y: Any, dy: Any) -> np.ndarray:
    y, dy = float_array(ctx, _np(y), 0), float_array(ctx, _np(dy), 1)
    dy = _like(dy, y, "Y")
    return as_array((dy * -np.expm1(-y)).astype(dy.dtype, copy=False))


_THRESHOLD = [Arg("alpha", float, 1.0, "the threshold")]


@register_op(
    "ThresholdedRelu",
    allow_inplace={0: 0},
    args=_THRESHOLD,
    doc="Y = X where X > alpha, else 0.",
)
def thresholded_relu(ctx: Any, x: Any) -> np.ndarray:
    x = float_array(ctx, _np(x), 0)
    return as_array(np.where(x > ctx.args["alpha"], x, x.dtype.type(0)))


@register_op(
    "ThresholdedReluGradient",
    inputs=2,
    allow_inplace={1: 0},
    args=_THRESHOLD,
    inputs_doc=("Y", "dY"),
    outputs_doc=("dX",),
    doc="dX = dY where Y > 0, else 0.",
)
def thresholded_relu_gradient(ctx: Any, y: Any, dy: Any) -> np.ndarray:
    y, dy = float_array(ctx, _np(y), 0), float_array(ctx, _np(dy), 1)
    dy = _like(dy, y, "Y")
    return as_array(np.where(y > 0, dy, dy.dtype.type(0)))


for _name in ("Selu", "Softplus", "ThresholdedRelu"):
    register_gradient(_name)(_grad_op(f"{_name}Gradient", "Y"))


@register_op(
    "NegateGradient",
    allow_inplace={0: 0},
    doc="Y = X; its gradient is -dY (a gradient-reversal layer).",
)
def negate_gradient(ctx: Any, x: Any) -> Any:
    return x


@register_gradient("NegateGradient")
def _negate_gradient_grad(op: OperatorDef, gout: list[Any]) -> tuple[list[OperatorDef], list[Any]]:
    if gout[0] is None:
        return [], [None]
    return [OperatorDef("Negative", [gout[0]], ["#dx"])], ["#dx"]


# -- Glu, SquareRootDivide, Mean -------------------------------------------------------------------


@register_op(
    "Glu",
    args=[Arg("dim", int, -1, "the axis split in two halves")],
    doc="Gated linear unit: X split in halves A, B along dim; Y = A * sigmoid(B).",
)
def glu(ctx: Any, x: Any) -> np.ndarray:
    x = float_array(ctx, _np(x), 0)
    axis = axis_of(ctx, x, ctx.args["dim"], "dim")
    if x.shape[axis] % 2:
        raise ValueError(f"expected an even size along dim {axis}, got shape {x.shape}")
    a, b = np.split(x, 2, axis=axis)
    return as_array((a / (1 + np.exp(-b))).astype(x.dtype, copy=False))


register_no_gradient("Glu")


@register_op(
    "SquareRootDivide",
    inputs=2,
    allow_inplace={0: 0},
    inputs_doc=("data (N x ...)", "scale (N,), any numeric dtype"),
    doc="Row i of data divided by sqrt(scale[i]) where scale[i] > 0, else left as it is.",
)
def square_root_divide(ctx: Any, data: Any, scale: Any) -> np.ndarray:
    data, scale = float_array(ctx, _np(data), 0), array(ctx, _np(scale), 1)
    if scale.ndim != 1 or data.ndim < 1 or scale.shape[0] != data.shape[0]:
        raise ValueError(f"expected scale of shape ({data.shape[0] if data.ndim else '?'},), got {scale.shape}")
    s = scale.astype(np.float64)
    factor = np.where(s > 0, 1.0 / np.sqrt(np.where(s > 0, s, 1.0)), 1.0).astype(data.dtype)
    return as_array(data * factor.reshape((-1,) + (1,) * (data.ndim - 1)))


@register_gradient("SquareRootDivide")
def _square_root_divide_grad(op: OperatorDef, gout: list[Any]) -> tuple[list[OperatorDef], list[Any]]:
    if gout[0] is None:
        return [], [None, None]
    return [OperatorDef("SquareRootDivide", [gout[0], op.inputs[1]], ["#dx"])], ["#dx", None]


@register_op(
    "Mean",
    inputs=(1, None),
    allow_inplace={0: 0},
    doc="Y = the element-wise mean of the inputs (all of one shape and dtype).",
)
def mean(ctx: Any, *xs: Any) -> np.ndarray:
    arrays = [float_array(ctx, _np(x), i) for i, x in enumerate(xs)]
    same_dtype(ctx, arrays)
    for i, a in enumerate(arrays[1:], 1):
        if a.shape != arrays[0].shape:
            raise ValueError(f"expected input {i} of shape {arrays[0].shape}, got {a.shape}")
    total = arrays[0].copy()
    for a in arrays[1:]:
        total += a
    return as_array(total / total.dtype.type(len(arrays)))


@register_op(
    "MeanGradient",
    outputs=(1, None),
    allow_inplace={0: 0},
    inputs_doc=("dY",),
    doc="Each output dX_i = dY / (the number of outputs).",
)
def mean_gradient(ctx: Any, dy: Any) -> Any:
    dy = float_array(ctx, _np(dy), 0)
    n = len(ctx.op.outputs)
    g = as_array(dy / dy.dtype.type(n))
    return g if n == 1 else tuple(g.copy() for _ in range(n))


@register_gradient("Mean")
def _mean_grad(op: OperatorDef, gout: list[Any]) -> tuple[list[OperatorDef], list[Any]]:
    if gout[0] is None:
        return [], [None] * len(op.inputs)
    outs = [f"#dx{i}" for i in range(len(op.inputs))]
    return [OperatorDef("MeanGradient", [gout[0]], outs)], outs


# -- LpNorm ------------------------------------------------------------------------------------------

_LP_ARGS = [
    Arg("p", int, 2, "1: the sum of |X|; 2: the sum of X^2"),
    Arg("average", bool, False, "divide by the number of elements"),
]


def _p(ctx: Any) -> int:
    p = int(ctx.args["p"])
    if p not in (1, 2):
        raise ValueError(f"expected p 1 or 2, got {p}")
    return p


@register_op(
    "LpNorm",
    args=_LP_ARGS,
    outputs_doc=("Z, shape (1,)",),
    doc="Z = sum |X| (p=1) or sum X^2 (p=2, no square root), divided by X's size with average.",
)
def lp_norm(ctx: Any, x: Any) -> np.ndarray:
    x = float_array(ctx, _np(x), 0)
    z = np.abs(x).sum() if _p(ctx) == 1 else np.square(x).sum()
    if ctx.args["average"]:
        z = z / max(x.size, 1)
    return np.array([z], x.dtype)


@register_op(
    "LpNormGradient",
    inputs=2,
    args=_LP_ARGS,
    inputs_doc=("X", "dZ (1,)"),
    outputs_doc=("dX",),
    doc="dX = sign(X) dZ (p=1, 0 within 1e-12 of 0) or 2 X dZ (p=2), divided by X's size with average.",
)
def lp_norm_gradient(ctx: Any, x: Any, dz: Any) -> np.ndarray:
    x, dz = float_array(ctx, _np(x), 0), float_array(ctx, _np(dz), 1)
    if dz.size != 1:
        raise ValueError(f"expected a one-element dZ, got shape {dz.shape}")
    g = dz.reshape(-1)[0]
    if ctx.args["average"]:
        g = g / max(x.size, 1)
    if _p(ctx) == 1:
        eps = 1e-12
        dx = np.where(x > eps, g, np.where(x < -eps, -g, 0))
    else:
        dx = 2 * x * g
    return as_array(np.asarray(dx).astype(x.dtype, copy=False))


register_gradient("LpNorm")(_grad_op("LpNormGradient", "X"))


# -- ArgMax / ArgMin ---------------------------------------------------------------------------------

_ARG_ARGS = [
    Arg("axis", int, -1, "the axis reduced"),
    Arg("keepdims", bool, True, "keep the reduced axis with size 1"),
]


def _arg_reduce(ctx: Any, x: Any, fn: Callable[..., Any]) -> np.ndarray:
    x = array(ctx, _np(x), 0)
    if x.ndim == 0:
        raise ValueError("expected an input of at least 1 dimension, got a scalar")
    axis = axis_of(ctx, x, ctx.args["axis"])
    out = fn(x, axis=axis).astype(np.int64)
    return np.expand_dims(out, axis) if ctx.args["keepdims"] else as_array(out)


@register_op("ArgMax", args=_ARG_ARGS, doc="The int64 index of the first largest value along axis.")
def arg_max(ctx: Any, x: Any) -> np.ndarray:
    return _arg_reduce(ctx, x, np.argmax)


@register_op("ArgMin", args=_ARG_ARGS, doc="The int64 index of the first smallest value along axis.")
def arg_min(ctx: Any, x: Any) -> np.ndarray:
    return _arg_reduce(ctx, x, np.argmin)


register_no_gradient("ArgMax", "ArgMin")


# -- SumElements, SumElementsInt, RowwiseMax, ColwiseMax ------------------------------------------

_AVERAGE = [Arg("average", bool, False, "divide the sum by the number of elements")]


@register_op("SumElements", args=_AVERAGE, doc="The sum (or with average the mean) of all elements, a 0-d array.")
def sum_elements(ctx: Any, x: Any) -> np.ndarray:
    x = float_array(ctx, _np(x), 0)
    total = x.sum(dtype=np.float64)
    if ctx.args["average"]:
        total = total / max(x.size, 1)
    return np.array(total, x.dtype)


@register_op(
    "SumElementsGradient",
    inputs=2,
    args=_AVERAGE,
    inputs_doc=("X", "dSum (one element)"),
    outputs_doc=("dX",),
    doc="dX = dSum everywhere (divided by X's size with average).",
)
def sum_elements_gradient(ctx: Any, x: Any, ds: Any) -> np.ndarray:
    x, ds = float_array(ctx, _np(x), 0), float_array(ctx, _np(ds), 1)
    if ds.size != 1:
        raise ValueError(f"expected a one-element dSum, got shape {ds.shape}")
    g = ds.reshape(-1)[0] / (max(x.size, 1) if ctx.args["average"] else 1)
    return np.full(x.shape, g, x.dtype)


register_gradient("SumElements")(_grad_op("SumElementsGradient", "X"))


@register_op("SumElementsInt", doc="The int32 sum of all elements of an int32 tensor, a 0-d array.")
def sum_elements_int(ctx: Any, x: Any) -> np.ndarray:
    x = array(ctx, _np(x), 0)
    if x.dtype != np.int32:
        raise TypeError(f"expected an int32 input, got dtype {x.dtype}")
    return np.array(x.sum(dtype=np.int64), np.int32)


def _max_reduce(ctx: Any, x: Any, axis: int) -> np.ndarray:
    x = float_array(ctx, _np(x), 0)
    if x.ndim != 3:
        raise ValueError(f"expected a 3-D input (N, M, K), got shape {x.shape}")
    return x.max(axis=axis)


@register_op("RowwiseMax", doc="The max over the last axis of an N x M x K tensor: N x M.")
def rowwise_max(ctx: Any, x: Any) -> np.ndarray:
    return _max_reduce(ctx, x, 2)


@register_op("ColwiseMax", doc="The max over the middle axis of an N x M x K tensor: N x K.")
def colwise_max(ctx: Any, x: Any) -> np.ndarray:
    return _max_reduce(ctx, x, 1)


def _max_reduce_gradient(ctx: Any, x: Any, y: Any, dy: Any, axis: int) -> np.ndarray:
    x, y, dy = (float_array(ctx, _np(v), i) for i, v in enumerate((x, y, dy)))
    return np.where(x == np.expand_dims(y, axis), np.expand_dims(dy, axis), 0).astype(x.dtype)


@register_op(
    "RowwiseMaxGradient",
    inputs=3,
    inputs_doc=("X", "Y", "dY"),
    outputs_doc=("dX",),
    doc="dY at every position equal to its row's max (ties all get it), 0 elsewhere.",
)
def rowwise_max_gradient(ctx: Any, x: Any, y: Any, dy: Any) -> np.ndarray:
    return _max_reduce_gradient(ctx, x, y, dy, 2)


@register_op(
    "ColwiseMaxGradient",
    inputs=3,
    inputs_doc=("X", "Y", "dY"),
    outputs_doc=("dX",),
    doc="dY at every position equal to its column's max (ties all get it), 0 elsewhere.",
)
def colwise_max_gradient(ctx: Any, x: Any, y: Any, dy: Any) -> np.ndarray:
    return _max_reduce_gradient(ctx, x, y, dy, 1)


def _xy_grad_op(grad_type: str) -> Callable[..., Any]:
    def maker(op: OperatorDef, gout: list[Any]) -> tuple[list[OperatorDef], list[Any]]:
        if gout[0] is None:
            return [], [None]
        return [OperatorDef(grad_type, [op.inputs[0], op.outputs[0], gout[0]], ["#dx"])], ["#dx"]

    return maker


register_gradient("RowwiseMax")(_xy_grad_op("RowwiseMaxGradient"))
register_gradient("ColwiseMax")(_xy_grad_op("ColwiseMaxGradient"))
register_no_gradient("SumElementsInt")
