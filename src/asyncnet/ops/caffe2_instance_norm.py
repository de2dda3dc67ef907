"""Caffe2's ``InstanceNorm`` (with ``InstanceNormGradient``): each channel of each example
normalized over its spatial positions, then scaled and shifted per channel.

Inputs X (N x C x ... in NCHW, N x ... x C in NHWC), scale (C,), bias (C,); outputs Y and,
optionally, the per-(example, channel) mean and inverse standard deviation (N x C).
``Y = (X - mean) / sqrt(var + epsilon) * scale + bias`` with the population variance.

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace(); ws.feed("x", np.array([[[1.0, 3.0]]], np.float32))
    >>> ws.feed("s", np.ones(1, np.float32)); ws.feed("b", np.zeros(1, np.float32))
    >>> net = an.Net("inorm"); _ = net.InstanceNorm(["x", "s", "b"], "y", epsilon=0.0)
    >>> ws.run_net_once(net); ws.fetch("y")
    array([[[-1.,  1.]]], dtype=float32)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from asyncnet.core.defs import OperatorDef
from asyncnet.core.registry import Arg, register_gradient, register_op
from asyncnet.ops._check import float_array

__all__: list[str] = []  # the ops are reached through the registry

_ARGS = [
    Arg("epsilon", float, 1e-5, "added to the variance"),
    Arg("order", str, "NCHW", "NCHW or NHWC"),
]


def _np(x: Any) -> np.ndarray:
    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)


def _to_ncs(ctx: Any, x: np.ndarray) -> np.ndarray:
    """X as N x C x S (a view where it can be)."""
    order = ctx.args["order"]
    if order not in ("NCHW", "NHWC"):
        raise ValueError(f"expected order NCHW or NHWC, got {order!r}")
    if x.ndim < 3:
        raise ValueError(f"expected X of at least 3 dimensions (N, C, spatial...), got shape {x.shape}")
    if order == "NHWC":
        x = np.moveaxis(x, -1, 1)
    return x.reshape(x.shape[0], x.shape[1], -1)


def _from_ncs(ctx: Any, y: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    if ctx.args["order"] == "NHWC":
        return np.ascontiguousarray(np.moveaxis(y.reshape((shape[0], shape[-1]) + shape[1:-1]), 1, -1))
    return y.reshape(shape)


def _params(ctx: Any, x: np.ndarray, scale: Any, bias: Any) -> tuple[np.ndarray, np.ndarray]:
    c = x.shape[1]
    scale, bias = float_array(ctx, _np(scale), 1), float_array(ctx, _np(bias), 2)
    if scale.shape != (c,) or bias.shape != (c,):
        raise ValueError(f"expected scale and bias of shape ({c},), got {scale.shape} and {bias.shape}")
    return scale, bias


def _stats(x: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray]:
    mean = x.mean(axis=2, dtype=np.float64)
    var = x.var(axis=2, dtype=np.float64)
    return mean, 1.0 / np.sqrt(var + eps)


@register_op(
    "InstanceNorm",
    inputs=3,
    outputs=(1, 3),
    allow_inplace={0: 0},
    args=_ARGS,
    inputs_doc=("X", "scale (C,)", "bias (C,)"),
    outputs_doc=("Y", "mean (N x C), optional", "inv_stdev (N x C), optional"),
    doc="Instance normalization: per example and channel over the spatial positions, then scale and bias.",
)
def instance_norm(ctx: Any, x: Any, scale: Any, bias: Any) -> Any:
    x = float_array(ctx, _np(x), 0)
    xs = _to_ncs(ctx, x)
    scale, bias = _params(ctx, xs, scale, bias)
    mean, inv = _stats(xs, ctx.args["epsilon"])
    y = (xs - mean[..., None]) * inv[..., None] * scale[None, :, None] + bias[None, :, None]
    out = [_from_ncs(ctx, y.astype(x.dtype), x.shape), mean.astype(x.dtype), inv.astype(x.dtype)]
    n = len(ctx.op.outputs)
    return out[0] if n == 1 else tuple(out[:n])


@register_op(
    "InstanceNormGradient",
    inputs=4,
    outputs=3,
    args=_ARGS,
    inputs_doc=("X", "scale", "bias", "dY"),
    outputs_doc=("dX", "dscale", "dbias"),
    doc="The gradients of InstanceNorm's X, scale and bias (the statistics recomputed from X).",
)
def instance_norm_gradient(ctx: Any, x: Any, scale: Any, bias: Any, dy: Any) -> tuple[np.ndarray, ...]:
    x, dy = float_array(ctx, _np(x), 0), float_array(ctx, _np(dy), 3)
    if dy.shape != x.shape:
        raise ValueError(f"expected dY of X's shape {x.shape}, got {dy.shape}")
    xs, dys = _to_ncs(ctx, x).astype(np.float64), _to_ncs(ctx, dy).astype(np.float64)
    scale, bias = _params(ctx, xs, scale, bias)
    mean, inv = _stats(xs, ctx.args["epsilon"])
    xhat = (xs - mean[..., None]) * inv[..., None]
    dbias = dys.sum(axis=(0, 2))
    dscale = (dys * xhat).sum(axis=(0, 2))
    dxhat = dys * scale.astype(np.float64)[None, :, None]
    dx = inv[..., None] * (
        dxhat - dxhat.mean(axis=2, keepdims=True) - xhat * (dxhat * xhat).mean(axis=2, keepdims=True)
    )
    return (
        _from_ncs(ctx, dx.astype(x.dtype), x.shape),
        dscale.astype(scale.dtype),
        dbias.astype(bias.dtype),
    )


@register_gradient("InstanceNorm")
def _instance_norm_grad(op: OperatorDef, gout: list[Any]) -> tuple[list[OperatorDef], list[Any]]:
    if gout[0] is None:
        return [], [None, None, None]
    outs = ["#dx", "#dscale", "#dbias"]
    return [OperatorDef("InstanceNormGradient", [*op.inputs[:3], gout[0]], outs, dict(op.args))], outs
