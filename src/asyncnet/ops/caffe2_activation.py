"""Caffe2's parametric activations: LeakyRelu (``alpha``), Elu (``alpha``) and PRelu (a slope
per channel, or one shared), with their gradients as Caffe2 wrote them (LeakyRelu and Elu from
their output Y; PRelu from X, with the slope's gradient summed over the non-channel axes).

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace(); ws.feed("x", np.array([-2.0, 3.0], np.float32))
    >>> net = an.Net("act"); _ = net.LeakyRelu("x", "l", alpha=0.5); _ = net.Elu("x", "e")
    >>> ws.run_net_once(net); ws.fetch("l"), ws.fetch("e").round(4)
    (array([-1.,  3.], dtype=float32), array([-0.8647,  3.    ], dtype=float32))
"""

from __future__ import annotations

from typing import Any

from asyncnet.core.defs import OperatorDef
from asyncnet.core.registry import Arg, register_gradient, register_op
from asyncnet.ops._check import as_array, float_array, same_dtype
from asyncnet.ops.math import CPU_CUDA
from asyncnet.tensor.namespace import namespace

__all__ = ["elu", "leaky_relu", "prelu"]

_ALPHA_LEAKY = [Arg("alpha", float, 0.01, "the slope for X < 0")]
_ALPHA_ELU = [Arg("alpha", float, 1.0, "Y = alpha * (exp(X) - 1) for X <= 0")]
_ORDER = [Arg("order", str, "NCHW", "where the channel axis is: 1 (NCHW) or last (NHWC)", choices=("NCHW", "NHWC"))]


def _check_pair(ctx: Any, y: Any, dy: Any) -> tuple[Any, Any, Any]:
    y, dy = float_array(ctx, y, 0), float_array(ctx, dy, 1)
    same_dtype(ctx, [y, dy])
    if y.shape != dy.shape:
        raise ValueError(f"expected dY of the forward blob's shape {tuple(y.shape)}, got {tuple(dy.shape)}")
    return namespace(ctx, y, dy), y, dy


@register_op(
    "LeakyRelu",
    inputs=1,
    outputs=1,
    allow_inplace={0: 0},
    devices=CPU_CUDA,
    args=_ALPHA_LEAKY,
    doc="Y = X for X >= 0, alpha * X otherwise.",
)
def leaky_relu(ctx: Any, x: Any) -> Any:
    x = float_array(ctx, x, 0)
    xp = namespace(ctx, x)
    return as_array(xp.where(x >= 0, x, x * ctx.args["alpha"]))


@register_op(
    "LeakyReluGradient",
    inputs=2,
    outputs=1,
    allow_inplace={1: 0},
    devices=CPU_CUDA,
    args=_ALPHA_LEAKY,
    inputs_doc=("Y", "dY"),
    outputs_doc=("dX",),
    doc="dX = dY where Y > 0, alpha * dY elsewhere.",
)
def leaky_relu_gradient(ctx: Any, y: Any, dy: Any) -> Any:
    xp, y, dy = _check_pair(ctx, y, dy)
    return as_array(xp.where(y > 0, dy, dy * ctx.args["alpha"]))


@register_op(
    "Elu",
    inputs=1,
    outputs=1,
    allow_inplace={0: 0},
    devices=CPU_CUDA,
    args=_ALPHA_ELU,
    doc="Y = X for X > 0, alpha * (exp(X) - 1) otherwise.",
)
def elu(ctx: Any, x: Any) -> Any:
    x = float_array(ctx, x, 0)
    xp = namespace(ctx, x)
    neg = xp.where(x > 0, x * 0, x)  # exp of the negative part only: no overflow for large X
    return as_array(xp.where(x > 0, x, (xp.exp(neg) - 1) * ctx.args["alpha"]))


@register_op(
    "EluGradient",
    inputs=2,
    outputs=1,
    allow_inplace={1: 0},
    devices=CPU_CUDA,
    args=_ALPHA_ELU,
    inputs_doc=("Y", "dY"),
    outputs_doc=("dX",),
    doc="dX = dY where Y > 0, dY * (Y + alpha) elsewhere.",
)
def elu_gradient(ctx: Any, y: Any, dy: Any) -> Any:
    xp, y, dy = _check_pair(ctx, y, dy)
    return as_array(xp.where(y > 0, dy, dy * (y + ctx.args["alpha"])))


def _slope_view(ctx: Any, x: Any, w: Any) -> Any:
    """The slope broadcast against X: one value, or one per channel."""
    if w.ndim != 1:
        raise ValueError(f"expected a 1-D slope, got shape {tuple(w.shape)}")
    n = w.shape[0]
    if n == 1:
        return w.reshape(())
    axis = 1 if ctx.args["order"] == "NCHW" else x.ndim - 1
    if x.ndim <= axis or x.shape[axis] != n:
        raise ValueError(f"slope has {n} values but X of shape {tuple(x.shape)} has no channel axis of that size")
    shape = [1] * x.ndim
    shape[axis] = n
    return w.reshape(tuple(shape))


@register_op(
    "PRelu",
    inputs=2,
    outputs=1,
    allow_inplace={0: 0},
    devices=CPU_CUDA,
    args=_ORDER,
    inputs_doc=("X", "Slope"),
    doc="Y = X for X > 0, Slope * X otherwise (a slope per channel, or one).",
)
def prelu(ctx: Any, x: Any, w: Any) -> Any:
    x, w = float_array(ctx, x, 0), float_array(ctx, w, 1)
    same_dtype(ctx, [x, w])
    xp = namespace(ctx, x, w)
    return as_array(xp.where(x > 0, x, x * _slope_view(ctx, x, w)))


@register_op(
    "PReluGradient",
    inputs=4,
    outputs=2,
    devices=CPU_CUDA,
    args=_ORDER,
    inputs_doc=("Y", "dY", "X", "Slope"),
    outputs_doc=("dX", "dSlope"),
    doc="dX = dY where X > 0, Slope * dY elsewhere; dSlope = sum of dY * X where X <= 0.",
)
def prelu_gradient(ctx: Any, y: Any, dy: Any, x: Any, w: Any) -> Any:
    xp, x, dy = _check_pair(ctx, x, dy)
    w = float_array(ctx, w, 3)
    slope = _slope_view(ctx, x, w)
    dx = xp.where(x > 0, dy, dy * slope)
    contrib = xp.where(x > 0, dy * 0, dy * x)
    if w.shape[0] == 1:
        dw = contrib.sum().reshape((1,))
    else:
        axis = 1 if ctx.args["order"] == "NCHW" else x.ndim - 1
        dw = contrib.sum(axis=tuple(a for a in range(x.ndim) if a != axis))
    return as_array(dx), as_array(dw)


def _from_output(grad_type: str) -> Any:
    def maker(op: OperatorDef, gout: list[Any]) -> tuple[list[OperatorDef], list[Any]]:
        if gout[0] is None:
            return [], [None]
        return [OperatorDef(grad_type, [op.outputs[0], gout[0]], ["#dx"], dict(op.args))], ["#dx"]

    return maker


@register_gradient("PRelu")
def _prelu_grad(op: OperatorDef, gout: list[Any]) -> tuple[list[OperatorDef], list[Any]]:
    if gout[0] is None:
        return [], [None, None]
    inputs = [op.outputs[0], gout[0], op.inputs[0], op.inputs[1]]
    return [OperatorDef("PReluGradient", inputs, ["#dx", "#dw"], dict(op.args))], ["#dx", "#dw"]


register_gradient("LeakyRelu")(_from_output("LeakyReluGradient"))
register_gradient("Elu")(_from_output("EluGradient"))
