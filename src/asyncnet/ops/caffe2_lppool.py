"""Caffe2's ``LpPool``: the p-norm of each pooling window, ``Y = (sum |X|^p) ^ (1/p)``.

Same window arguments as MaxPool/AveragePool (kernel, stride, pads, NCHW or NHWC, 1-D inputs);
padding adds nothing to the sum. ``LpPoolGradient(X, Y, dY)`` gives
``dX = sum over the windows holding x of dY * x * |x|^(p-2) / Y^(p-1)``.

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace(); ws.feed("x", np.array([[[[3.0, 4.0]]]], np.float32))
    >>> net = an.Net("lp"); _ = net.LpPool("x", "y", kernel_h=1, kernel_w=2, p=2.0)
    >>> ws.run_net_once(net); ws.fetch("y")
    array([[[[5.]]]], dtype=float32)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from asyncnet.core.defs import OperatorDef
from asyncnet.core.registry import Arg, register_gradient, register_op
from asyncnet.ops.conv import cached_geometry, in_order, pad_input, taps, unpad
from asyncnet.ops.grad import GradOut, MakerResult, output_grad
from asyncnet.ops.pool import POOL_ARGS

__all__: list[str] = []  # the ops are reached through the registry

LP_ARGS = [*POOL_ARGS, Arg("p", float, 2.0, "the norm's order")]


def _np(x: Any) -> np.ndarray:
    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)


def _image(ctx: Any, x: Any, i: int) -> np.ndarray:
    x = _np(x)
    if x.ndim != 4 or x.dtype.kind != "f":
        raise ValueError(f"expected a 4-D float input {i} {ctx.op.inputs[i]!r}, got {x.dtype} {x.shape}")
    return x


@register_op(
    "LpPool",
    args=LP_ARGS,
    differentiable=True,
    inputs_doc=("X [N, C, H, W] (or NHWC)",),
    outputs_doc=("Y [N, C, OH, OW]",),
    doc="Caffe2's LpPool: the p-norm of each kernel window (padding adds nothing).",
)
@in_order
def lp_pool(ctx: Any, x: Any) -> np.ndarray:
    x = _image(ctx, x, 0)
    g = cached_geometry(ctx.args, tuple(x.shape[2:]))
    p = ctx.args["p"]
    powered = pad_input(np.abs(x) ** p, g)
    out = np.zeros((*x.shape[:2], *g.out), x.dtype)
    for _, _, (sy, sx) in taps(g):
        out += powered[:, :, sy, sx]
    return (out ** (1.0 / p)).astype(x.dtype)


@register_op(
    "LpPoolGradient",
    inputs=3,
    args=LP_ARGS,
    inputs_doc=("X", "Y", "dY"),
    outputs_doc=("dX",),
    doc="Gradient of LpPool: dY * x * |x|^(p-2) / Y^(p-1) summed over the windows holding x.",
)
@in_order
def lp_pool_gradient(ctx: Any, x: Any, y: Any, dy: Any) -> np.ndarray:
    x, y, dy = _image(ctx, x, 0), _np(y), _np(dy)
    g = cached_geometry(ctx.args, tuple(x.shape[2:]))
    want = (*x.shape[:2], *g.out)
    if y.shape != want or dy.shape != want:
        raise ValueError(f"expected Y and dY of shape {want}, got {y.shape} and {dy.shape}")
    p = ctx.args["p"]
    share = dy / y ** (p - 1)
    xp = pad_input(x, g)
    local = xp * np.abs(xp) ** (p - 2) if p != 2 else xp
    dxp = np.zeros(xp.shape, x.dtype)
    for _, _, (sy, sx) in taps(g):
        dxp[:, :, sy, sx] += local[:, :, sy, sx] * share
    return unpad(dxp, g, tuple(x.shape[2:])).astype(x.dtype)


@register_gradient("LpPool")
def _lp_pool_grad(op: OperatorDef, gout: GradOut) -> MakerResult:
    ins = [op.inputs[0], op.outputs[0], output_grad(op, gout)]
    return [OperatorDef("LpPoolGradient", ins, ["#dx"], dict(op.args))], ["#dx"]
