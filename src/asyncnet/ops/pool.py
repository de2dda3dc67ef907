"""2-D pooling (NCHW, or NHWC through conv.in_order), each beside its gradient, with Caffe2's arguments: MaxPool, AveragePool.

Windows are the kernel taps of :mod:`asyncnet.ops.conv` (same kernel/stride/pad spellings;
``global_pooling=1`` pools the whole image): a pool is one ufunc call per tap on a strided view. AveragePool divides by the number of input pixels
in the window, padding excluded, unless ``count_include_pad=1`` (Caffe2's default is 0; torch's
``avg_pool2d`` default is 1). MaxPool's gradient, as Caffe2's, goes to every input equal to the
window's maximum (ties share nothing: each tied input gets the whole dY). Windows that tile
the image (stride = kernel, no pad: the usual 2x2 pool) take a shorter path on numpy: the
maximum over a [N, C, OH, kh, OW, kw] view, and dX = dY * (X == Y) written tap by tap (the same
values; a zero of dX may be -0.0 where the general path gives +0.0).

On torch tensors the same tap loops run with torch's functions (so the tie and padding rules are
Caffe2's, not torch's), except MaxPool's forward, which is torch's ``F.max_pool2d`` on the
``-inf``-padded input (the same maxima).

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace(); ws.feed("x", np.arange(16.0).reshape(1, 1, 4, 4))
    >>> net = an.Net("pool"); _ = net.MaxPool("x", "y", kernel=2, stride=2)
    >>> ws.run_net_once(net)
    >>> ws.fetch("y")[0, 0]
    array([[ 5.,  7.],
           [13., 15.]])
"""

from __future__ import annotations

from typing import Any

import numpy as np

from asyncnet.core.defs import OperatorDef
from asyncnet.core.registry import Arg, register_gradient, register_op
from asyncnet.ops import caffe2_volumetric as volume
from asyncnet.ops._check import float_array, ndim, same_dtype
from asyncnet.ops.caffe2_volumetric import volumetric
from asyncnet.ops.conv import (
    KERNEL_ARGS,
    WINDOW_ARGS,
    Geometry,
    cached_geometry,
    in_order,
    pad_input,
    taps,
    unpad,
)
from asyncnet.ops.grad import GradOut, MakerResult, output_grad
from asyncnet.tensor.namespace import is_torch, namespace

__all__ = ["max_pool", "average_pool", "max_pool_gradient", "average_pool_gradient"]

POOL_ARGS = [
    *KERNEL_ARGS,
    *WINDOW_ARGS,
    Arg("global_pooling", bool, False, "pool the whole image (kernel = H, W; no pad)"),
]
AVG_ARGS = [*POOL_ARGS, Arg("count_include_pad", bool, False, "divide by the full window size, padding included")]


def _input(ctx: Any, x: Any) -> tuple[np.ndarray, Geometry]:
    x = float_array(ctx, x, 0)
    ndim(ctx, x, 0, 4)
    return x, cached_geometry(ctx.args, tuple(x.shape[2:]))


def _tiled(x: np.ndarray, g: Geometry) -> bool:
    """True when the windows tile a numpy ``x`` exactly (stride = kernel, no pad, H and W
    multiples of it, the usual 2x2 pool): each input is in exactly one window."""
    return (
        not is_torch(x)
        and g.stride == g.kernel
        and not any(g.pads)
        and x.shape[2] == g.out[0] * g.kernel[0]
        and x.shape[3] == g.out[1] * g.kernel[1]
    )


def _tiled_max(x: np.ndarray, g: Geometry) -> np.ndarray:
    """MaxPool of tiling windows: x as [N, C, OH, kh, OW, kw], the maximum over kh, then kw
    (kh + kw - 2 calls on contiguous halves instead of kh * kw strided taps; same maxima)."""
    (kh, kw), (oh, ow) = g.kernel, g.out
    x6 = x.reshape(x.shape[0], x.shape[1], oh, kh, ow, kw)
    rows = x6[:, :, :, 0]
    if kh > 1:
        rows = np.maximum(rows, x6[:, :, :, 1])
        for i in range(2, kh):
            np.maximum(rows, x6[:, :, :, i], out=rows)
    out = rows[..., 0]
    if kw > 1:
        out = np.maximum(out, rows[..., 1])
        for j in range(2, kw):
            np.maximum(out, rows[..., j], out=out)
    return np.ascontiguousarray(out)


def _reduce(xp: np.ndarray, g: Geometry, fn: str) -> np.ndarray:
    """[N, C, OH, OW]: ``fn`` ("maximum", "add") over each window, one call per kernel tap."""
    ns = namespace(None, xp)
    f = getattr(ns.lib, fn)
    parts = taps(g)
    _, _, (sy, sx) = parts[0]
    out = ns.copy(xp[:, :, sy, sx])
    for _, _, (sy, sx) in parts[1:]:
        f(out, xp[:, :, sy, sx], out=out)
    return out


# -- MaxPool: Y = max over each window (padding never wins); dX[p] += dY where X[p] == Y ------------
@register_op(
    "MaxPool",
    inputs=1,
    outputs=1,
    args=POOL_ARGS,
    inputs_doc=("X [N, C, H, W]",),
    outputs_doc=("Y [N, C, OH, OW]",),
    doc="Caffe2's MaxPool (NCHW or NHWC): the maximum of each kernel window (padding never wins).",
)
@in_order
@volumetric(volume.pool_kernel("max"))
def max_pool(ctx: Any, x: Any) -> np.ndarray:
    x, g = _input(ctx, x)
    if namespace(ctx, x).name == "torch":
        import torch.nn.functional as F

        if x.shape[1] == 0:  # torch refuses 0 channels; numpy's kernel gives the empty output
            return x.new_empty((*x.shape[:2], *g.out))
        return F.max_pool2d(pad_input(x, g, -np.inf), g.kernel, g.stride)
    if _tiled(x, g):
        return _tiled_max(x, g)
    return _reduce(pad_input(x, g, -np.inf), g, "maximum")


@register_op(
    "MaxPoolGradient",
    inputs=3,
    outputs=1,
    args=POOL_ARGS,
    inputs_doc=("X", "Y", "dY"),
    outputs_doc=("dX",),
    doc="Gradient of MaxPool (Caffe2's rule): each input equal to its window's maximum receives that window's dY.",
)
@in_order
@volumetric(volume.pool_gradient_kernel("max"))
def max_pool_gradient(ctx: Any, x: Any, y: Any, dy: Any) -> np.ndarray:
    x, g = _input(ctx, x)
    y, dy = float_array(ctx, y, 1), float_array(ctx, dy, 2)
    ns = namespace(ctx, x, y, dy)
    same_dtype(ctx, [x, y, dy])
    want = (*x.shape[:2], *g.out)
    if y.shape != want or dy.shape != want:
        raise ValueError(f"expected Y and dY of shape {want}, got {tuple(y.shape)} and {tuple(dy.shape)}")
    if _tiled(x, g):  # each input in one window: dX is dY times (X == Y), one multiply per tap
        dx = np.empty(x.shape, x.dtype)
        for _, _, (sy, sx) in taps(g):
            np.multiply(dy, x[:, :, sy, sx] == y, out=dx[:, :, sy, sx])
        return dx
    xp = pad_input(x, g, -np.inf)
    dxp = ns.full(tuple(xp.shape), 0, like=x)
    zero = x.dtype.type(0) if ns.name == "numpy" else 0.0
    for _, _, (sy, sx) in taps(g):
        dxp[:, :, sy, sx] += ns.where(xp[:, :, sy, sx] == y, dy, zero)
    return unpad(dxp, g, tuple(x.shape[2:]))


@register_gradient("MaxPool")
def _max_pool_grad(op: OperatorDef, gout: GradOut) -> MakerResult:
    gop = OperatorDef(
        op.type + "Gradient", [op.inputs[0], op.outputs[0], output_grad(op, gout)], ["#dx"], dict(op.args)
    )
    return [gop], ["#dx"]


# -- AveragePool: Y = window sum / count;  dX[p] += dY / count over the windows holding p ----------
def _counts(x: np.ndarray, g: Geometry, include_pad: bool) -> np.ndarray:
    """[OH, OW]: the divisor of each window (a function of the geometry only)."""
    ns = namespace(None, x)
    if include_pad:
        return ns.full(g.out, g.kernel[0] * g.kernel[1], like=x)
    ones = ns.full((1, 1, *x.shape[2:]), 1, like=x)
    return _reduce(pad_input(ones, g), g, "add")[0, 0]


@register_op(
    "AveragePool",
    inputs=1,
    outputs=1,
    args=AVG_ARGS,
    inputs_doc=("X [N, C, H, W]",),
    outputs_doc=("Y [N, C, OH, OW]",),
    doc="Caffe2's AveragePool (NCHW or NHWC): the mean of each kernel window, padding excluded from the count "
    "unless count_include_pad=1.",
)
@in_order
@volumetric(volume.pool_kernel("average"))
def average_pool(ctx: Any, x: Any) -> np.ndarray:
    x, g = _input(ctx, x)
    s = _reduce(pad_input(x, g), g, "add")
    s /= _counts(x, g, ctx.args["count_include_pad"])
    return s


@register_op(
    "AveragePoolGradient",
    inputs=(2, 3),
    outputs=1,
    args=AVG_ARGS,
    inputs_doc=("X", "Y (optional, unused)", "dY"),
    outputs_doc=("dX",),
    doc="Gradient of AveragePool: each window's dY / count spread over its inputs.",
)
@in_order
@volumetric(volume.pool_gradient_kernel("average"))
def average_pool_gradient(ctx: Any, x: Any, *rest: Any) -> np.ndarray:
    x, g = _input(ctx, x)
    dy = float_array(ctx, rest[-1], len(rest))
    ns = namespace(ctx, x, *rest)
    want = (*x.shape[:2], *g.out)
    if dy.shape != want or dy.dtype != x.dtype:
        raise ValueError(f"expected dY of shape {want} and dtype {x.dtype}, got {tuple(dy.shape)} {dy.dtype}")
    share = dy / _counts(x, g, ctx.args["count_include_pad"])
    t, l, b, r = g.pads
    dxp = ns.full((*x.shape[:2], x.shape[2] + t + b, x.shape[3] + l + r), 0, like=x)
    for _, _, (sy, sx) in taps(g):
        dxp[:, :, sy, sx] += share
    return unpad(dxp, g, tuple(x.shape[2:]))


@register_gradient("AveragePool")
def _average_pool_grad(op: OperatorDef, gout: GradOut) -> MakerResult:
    # Y is not read, so a later in-place op on Y (Relu) does not block the gradient
    gop = OperatorDef(op.type + "Gradient", [op.inputs[0], output_grad(op, gout)], ["#dx"], dict(op.args))
    return [gop], ["#dx"]


# Caffe2's names for the same ops (MaxPool1D/2D/3D, AveragePool1D/2D/3D and their gradients)
for _d in ("1D", "2D", "3D"):
    register_op(
        "MaxPool" + _d,
        inputs=1,
        outputs=1,
        args=POOL_ARGS,
        doc="Caffe2's MaxPool" + _d + ": MaxPool under another name.",
        inputs_doc=("X",),
        outputs_doc=("Y",),
    )(max_pool)
    register_op(
        "MaxPool" + _d + "Gradient",
        inputs=3,
        outputs=1,
        args=POOL_ARGS,
        inputs_doc=("X", "Y", "dY"),
        outputs_doc=("dX",),
        doc="Gradient of MaxPool" + _d + ".",
    )(max_pool_gradient)
    register_gradient("MaxPool" + _d)(_max_pool_grad)
    register_op(
        "AveragePool" + _d,
        inputs=1,
        outputs=1,
        args=AVG_ARGS,
        inputs_doc=("X",),
        outputs_doc=("Y",),
        doc="Caffe2's AveragePool" + _d + ": AveragePool under another name.",
    )(average_pool)
    register_op(
        "AveragePool" + _d + "Gradient",
        inputs=(2, 3),
        outputs=1,
        args=AVG_ARGS,
        inputs_doc=("X", "Y (optional)", "dY"),
        outputs_doc=("dX",),
        doc="Gradient of AveragePool" + _d + ".",
    )(average_pool_gradient)
    register_gradient("AveragePool" + _d)(_average_pool_grad)
