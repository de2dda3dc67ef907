"""Caffe2's SpatialSoftmaxWithLoss (a softmax over the channels of each pixel of an NCHW X, with
a cross-entropy against per-pixel labels, -1 ignored, optionally weighted) and LRN (local
response normalization across channels, Caffe's formula), with their gradients.

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace(); ws.feed("x", np.zeros((1, 2, 1, 2), np.float32))
    >>> ws.feed("l", np.array([[[0, -1]]], np.int32))
    >>> net = an.Net("sp"); _ = net.SpatialSoftmaxWithLoss(["x", "l"], ["p", "loss"])
    >>> ws.run_net_once(net); ws.fetch("p")[0, :, 0, 0], round(float(ws.fetch("loss")), 4)
    (array([0.5, 0.5], dtype=float32), 0.6931)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from asyncnet.core.defs import OperatorDef
from asyncnet.core.registry import Arg, register_gradient, register_op
from asyncnet.ops._check import array, float_array

__all__ = ["lrn", "spatial_softmax_with_loss"]

_SSWL_ARGS = [
    Arg("scale", float, 1.0, "multiplier of the loss"),
    Arg("order", str, "NCHW", "only NCHW, as Caffe2", choices=("NCHW",)),
]


def _sswl_inputs(ctx: Any, x: Any, label: Any, weight: tuple[Any, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """X [N, D, H, W], labels [N, H, W] and the per-pixel weights (1 where no weight input)."""
    x = float_array(ctx, x, 0)
    if x.ndim != 4:
        raise ValueError(f"expected X of 4 dims [N, D, H, W], got shape {x.shape}")
    lab = array(ctx, label, 1)
    n, d, h, w = x.shape
    if lab.dtype.kind not in "iu" or lab.size != n * h * w:
        raise ValueError(f"expected {n * h * w} integer labels (X {x.shape}), got {lab.dtype} {lab.shape}")
    lab = lab.reshape(n, h, w).astype(np.int64)
    if ((lab < -1) | (lab >= d)).any():
        raise ValueError(f"expected labels in [0, {d}) or -1 (ignored), got {np.unique(lab[(lab < -1) | (lab >= d)])}")
    if weight:
        wt = float_array(ctx, weight[0], 2)
        if wt.size != n * h * w:
            raise ValueError(f"expected {n * h * w} weights, got shape {wt.shape}")
        wt = wt.reshape(n, h, w).astype(x.dtype)
    else:
        wt = np.ones((n, h, w), x.dtype)
    return x, lab, np.where(lab == -1, 0, wt).astype(x.dtype)


def _softmax_channels(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _label_probs(p: np.ndarray, lab: np.ndarray) -> np.ndarray:
    return np.take_along_axis(p, np.maximum(lab, 0)[:, None], axis=1)[:, 0]


@register_op(
    "SpatialSoftmaxWithLoss",
    inputs=(2, 3),
    outputs=2,
    args=_SSWL_ARGS,
    inputs_doc=("logits X [N, D, H, W]", "label [N, H, W] int (-1: ignored)", "weight [N, H, W] (optional)"),
    outputs_doc=("softmax P over D, X's shape", "loss (0-d)"),
    doc="P = softmax of X over the channels of each pixel; loss = scale * sum w * -log(max(P[label], "
    "1e-20)) / sum w over the pixels whose label is not -1 (0 when that weight is 0).",
)
def spatial_softmax_with_loss(ctx: Any, x: Any, label: Any, *weight: Any) -> tuple[np.ndarray, np.ndarray]:
    x, lab, wt = _sswl_inputs(ctx, x, label, weight)
    p = _softmax_channels(x)
    total = wt.sum(dtype=np.float64)
    xent = -np.log(np.maximum(_label_probs(p, lab), 1e-20)) * wt
    loss = ctx.args["scale"] * xent.sum(dtype=np.float64) / total if total > 0 else 0.0
    return p.astype(x.dtype), np.asarray(loss, dtype=x.dtype)


@register_op(
    "SpatialSoftmaxWithLossGradient",
    inputs=(4, 5),
    outputs=1,
    args=_SSWL_ARGS,
    inputs_doc=("X", "label", "weight (optional)", "P", "dloss"),
    outputs_doc=("dX",),
    doc="dX = (P - onehot(label)) * w * scale * dloss / sum w; 0 at ignored pixels.",
)
def spatial_softmax_with_loss_gradient(ctx: Any, x: Any, label: Any, *rest: Any) -> np.ndarray:
    weight, (p, dloss) = rest[:-2], rest[-2:]
    x, lab, wt = _sswl_inputs(ctx, x, label, weight)
    p = float_array(ctx, p, len(rest))
    if p.shape != x.shape:
        raise ValueError(f"expected P of X's shape {x.shape}, got {p.shape}")
    total = wt.sum(dtype=np.float64)
    if total <= 0:
        return np.zeros_like(x)
    g = p.astype(np.float64)
    onehot = np.arange(x.shape[1])[None, :, None, None] == lab[:, None]
    g = (g - onehot) * wt[:, None]
    k = ctx.args["scale"] * float(np.asarray(dloss).reshape(-1)[0]) / total
    return (g * k).astype(x.dtype)


@register_gradient("SpatialSoftmaxWithLoss")
def _sswl_grad(op: OperatorDef, gout: list[Any]) -> tuple[list[OperatorDef], list[Any]]:
    if gout[1] is None:
        return [], [None] * len(op.inputs)
    inputs = [*op.inputs, op.outputs[0], gout[1]]
    return [OperatorDef("SpatialSoftmaxWithLossGradient", inputs, ["#dx"], dict(op.args))], ["#dx"] + [None] * (
        len(op.inputs) - 1
    )


# -- LRN ----------------------------------------------------------------------------------------
_LRN_ARGS = [
    Arg("size", int, Arg.REQUIRED, "how many channels each window spans"),
    Arg("alpha", float, 0.0, "the scale of the sum of squares (divided by size)"),
    Arg("beta", float, 0.0, "the exponent"),
    Arg("bias", float, 1.0, "added to the scaled sum"),
    Arg("order", str, "NCHW", "where the channel axis is: 1 (NCHW) or last (NHWC)", choices=("NCHW", "NHWC")),
]


def _channel_axis(ctx: Any, x: np.ndarray) -> int:
    if x.ndim < 2:
        raise ValueError(f"expected X of at least 2 dims, got shape {x.shape}")
    return 1 if ctx.args["order"] == "NCHW" else x.ndim - 1


def _window_sum(v: np.ndarray, axis: int, before: int, after: int) -> np.ndarray:
    """out[c] = sum of v[c - before .. c + after] along ``axis`` (zeros outside)."""
    v = np.moveaxis(v, axis, -1)
    c = v.shape[-1]
    before, after = min(before, c), min(after, c)  # past the channels the window holds only zeros
    pad = [(0, 0)] * (v.ndim - 1) + [(before + 1, after)]
    cs = np.cumsum(np.pad(v, pad), axis=-1)
    return np.moveaxis(cs[..., before + 1 + after :][..., :c] - cs[..., :c], -1, axis)


def _lrn_scale(ctx: Any, x: np.ndarray, axis: int) -> np.ndarray:
    size = ctx.args["size"]
    if size < 1:
        raise ValueError(f"expected size >= 1, got {size}")
    pre = (size - 1) // 2
    sq = _window_sum(x.astype(np.float64) ** 2, axis, pre, size - 1 - pre)
    return ctx.args["bias"] + ctx.args["alpha"] / size * sq


@register_op(
    "LRN",
    inputs=1,
    outputs=(1, 2),
    args=_LRN_ARGS,
    outputs_doc=("Y", "scale (optional)"),
    doc="scale = bias + alpha / size * (sum of X^2 over channels c - (size-1)/2 .. c + size/2); Y = X * scale^-beta.",
)
def lrn(ctx: Any, x: Any) -> Any:
    x = float_array(ctx, x, 0)
    scale = _lrn_scale(ctx, x, _channel_axis(ctx, x))
    y = (x * scale ** -ctx.args["beta"]).astype(x.dtype)
    return (y, scale.astype(x.dtype)) if len(ctx.op.outputs) == 2 else y


@register_op(
    "LRNGradient",
    inputs=(3, 4),
    outputs=1,
    args=_LRN_ARGS,
    inputs_doc=("X", "Y", "scale (optional: recomputed when absent)", "dY"),
    outputs_doc=("dX",),
    doc="dX = dY * scale^-beta - 2 alpha beta / size * X * (sum over the windows holding c of dY * Y / scale).",
)
def lrn_gradient(ctx: Any, x: Any, y: Any, *rest: Any) -> np.ndarray:
    x, y, dy = float_array(ctx, x, 0), float_array(ctx, y, 1), float_array(ctx, rest[-1], len(rest) + 1)
    axis = _channel_axis(ctx, x)
    if not x.shape == y.shape == dy.shape:
        raise ValueError(f"expected X, Y and dY of one shape, got {x.shape}, {y.shape}, {dy.shape}")
    scale = float_array(ctx, rest[0], 2).astype(np.float64) if len(rest) == 2 else _lrn_scale(ctx, x, axis)
    size, beta = ctx.args["size"], ctx.args["beta"]
    pre = (size - 1) // 2
    ratio = _window_sum(dy * y / scale, axis, size - 1 - pre, pre)  # the windows that hold channel c
    dx = dy * scale**-beta - 2.0 * ctx.args["alpha"] * beta / size * x * ratio
    return dx.astype(x.dtype)


@register_gradient("LRN")
def _lrn_grad(op: OperatorDef, gout: list[Any]) -> tuple[list[OperatorDef], list[Any]]:
    if gout[0] is None:
        return [], [None]
    inputs = [op.inputs[0], op.outputs[0], *op.outputs[1:2], gout[0]]
    return [OperatorDef("LRNGradient", inputs, ["#dx"], dict(op.args))], ["#dx"]
