"""Caffe2's ``Im2Col`` and ``Col2Im`` (each the other's gradient).

``Im2Col(X)`` lays out every kernel window of an image (Conv's kernel, stride, dilation and pad
arguments): NCHW gives ``[N, C * kh * kw, OH, OW]`` (channel, then tap row and column), NHWC
gives ``[N, OH, OW, kh * kw * C]`` (tap row, column, then channel); padding reads zeros.
``Col2Im(COL, X_LIKE)`` adds the columns back into an image of X_LIKE's shape (overlapping
windows sum; padding is dropped).

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace(); ws.feed("x", np.arange(9, dtype=np.float32).reshape(1, 1, 3, 3))
    >>> net = an.Net("i2c"); _ = net.Im2Col("x", "c", kernel=2)
    >>> ws.run_net_once(net); ws.fetch("c")[0, :, 0, 0]
    array([0., 1., 3., 4.], dtype=float32)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from asyncnet.core.defs import OperatorDef
from asyncnet.core.registry import register_gradient, register_op
from asyncnet.ops.conv import DILATION_ARGS, KERNEL_ARGS, WINDOW_ARGS, cached_geometry, pad_input, taps, unpad
from asyncnet.ops.grad import GradOut, MakerResult, output_grad

__all__: list[str] = []  # the ops are reached through the registry

_ARGS = [*KERNEL_ARGS, *WINDOW_ARGS, *DILATION_ARGS]


def _np(x: Any) -> np.ndarray:
    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)


def _nchw(ctx: Any, x: Any, i: int) -> np.ndarray:
    x = _np(x)
    if x.ndim != 4:
        raise ValueError(f"expected a 4-D image in input {i} {ctx.op.inputs[i]!r}, got shape {x.shape}")
    return x if ctx.args["order"] == "NCHW" else np.ascontiguousarray(x.transpose(0, 3, 1, 2))


@register_op(
    "Im2Col",
    args=_ARGS,
    differentiable=True,
    inputs_doc=("X [N, C, H, W] (or NHWC)",),
    outputs_doc=("COL [N, C*kh*kw, OH, OW] (NHWC: [N, OH, OW, kh*kw*C])",),
    doc="Lay out every kernel window of an image as a column (padding reads zeros).",
)
def im2col(ctx: Any, x: Any) -> np.ndarray:
    x = _nchw(ctx, x, 0)
    g = cached_geometry(ctx.args, tuple(x.shape[2:]))
    xp = pad_input(x, g)
    (kh, kw), (oh, ow) = g.kernel, g.out
    col = np.empty((x.shape[0], x.shape[1], kh, kw, oh, ow), x.dtype)
    for i, j, (sy, sx) in taps(g):
        col[:, :, i, j] = xp[:, :, sy, sx]
    if ctx.args["order"] == "NCHW":
        return col.reshape(x.shape[0], -1, oh, ow)
    return np.ascontiguousarray(col.transpose(0, 4, 5, 2, 3, 1)).reshape(x.shape[0], oh, ow, -1)


@register_op(
    "Col2Im",
    inputs=2,
    args=_ARGS,
    differentiable=True,
    inputs_doc=("COL (as Im2Col gives)", "X_LIKE (an image of the output's shape)"),
    outputs_doc=("Y: the columns summed back into the image",),
    doc="Add Im2Col's columns back into an image (overlapping windows sum).",
)
def col2im(ctx: Any, col: Any, like: Any) -> np.ndarray:
    ref = _nchw(ctx, like, 1)
    col = _np(col)
    g = cached_geometry(ctx.args, tuple(ref.shape[2:]))
    (kh, kw), (oh, ow) = g.kernel, g.out
    n, c = ref.shape[:2]
    want = (n, c * kh * kw, oh, ow) if ctx.args["order"] == "NCHW" else (n, oh, ow, kh * kw * c)
    if col.shape != want:
        raise ValueError(f"expected COL of shape {want} in input 0 {ctx.op.inputs[0]!r}, got {col.shape}")
    if ctx.args["order"] == "NCHW":
        c6 = col.reshape(n, c, kh, kw, oh, ow)
    else:
        c6 = col.reshape(n, oh, ow, kh, kw, c).transpose(0, 5, 3, 4, 1, 2)
    t, left, b, r = g.pads
    yp = np.zeros((n, c, ref.shape[2] + t + b, ref.shape[3] + left + r), col.dtype)
    for i, j, (sy, sx) in taps(g):
        yp[:, :, sy, sx] += c6[:, :, i, j]
    y = unpad(yp, g, tuple(ref.shape[2:]))
    return y if ctx.args["order"] == "NCHW" else np.ascontiguousarray(y.transpose(0, 2, 3, 1))


@register_gradient("Im2Col")
def _im2col_grad(op: OperatorDef, gout: GradOut) -> MakerResult:
    return [OperatorDef("Col2Im", [output_grad(op, gout), op.inputs[0]], ["#dx"], dict(op.args))], ["#dx"]


@register_gradient("Col2Im")
def _col2im_grad(op: OperatorDef, gout: GradOut) -> MakerResult:
    return [OperatorDef("Im2Col", [output_grad(op, gout)], ["#dcol"], dict(op.args))], ["#dcol", None]
