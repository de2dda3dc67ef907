"""Caffe2's 2-D ``ConvTranspose`` (with ``ConvTransposeGradient``), on PyTorch's
``conv_transpose2d``.

Inputs X (N x C x H x W, or N x H x W x C with ``order="NHWC"``), filter (C x M x kh x kw, or
C x kh x kw x M in NHWC) and an optional bias (M); Caffe2's arguments ``kernel``/``kernel_h``/
``kernel_w`` or ``kernels``, ``stride``/``stride_h``/``stride_w`` or ``strides``,
``pad``/``pad_t``/``pad_l``/``pad_b``/``pad_r`` or ``pads``, and ``adj``/``adj_h``/``adj_w`` or
``adjs`` (extra rows and columns at the end). The output
height is ``(H - 1) * stride_h + kh + adj_h - pad_t - pad_b``. The gradient gives the filter's,
the bias's (with a bias) and, unless ``no_gradient_to_input``, X's.

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace(); ws.feed("x", np.ones((1, 1, 2, 2), np.float32)); ws.feed("w", np.ones((1, 1, 2, 2), np.float32))
    >>> net = an.Net("ct"); _ = net.ConvTranspose(["x", "w"], "y", kernel=2, stride=2)
    >>> ws.run_net_once(net); ws.fetch("y").shape
    (1, 1, 4, 4)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from asyncnet.core.defs import OperatorDef
from asyncnet.core.registry import Arg, register_gradient, register_op
from asyncnet.ops._check import float_array, same_dtype

__all__: list[str] = []  # the ops are reached through the registry

_ARGS = [
    Arg("kernel", int, 0, "the kernel size (both sides)"),
    Arg("kernel_h", int, 0, "the kernel height"),
    Arg("kernel_w", int, 0, "the kernel width"),
    Arg("stride", int, 1, "the stride (both sides)"),
    Arg("stride_h", int, 0, "the vertical stride"),
    Arg("stride_w", int, 0, "the horizontal stride"),
    Arg("pad", int, 0, "the padding removed on every side"),
    Arg("pad_t", int, -1, "top padding"),
    Arg("pad_l", int, -1, "left padding"),
    Arg("pad_b", int, -1, "bottom padding"),
    Arg("pad_r", int, -1, "right padding"),
    Arg("pads", list, [], "t, l, b, r paddings", item_type=int),
    Arg("strides", list, [], "h, w strides", item_type=int),
    Arg("kernels", list, [], "h, w kernel sizes", item_type=int),
    Arg("adjs", list, [], "h, w adjustments", item_type=int),
    Arg("adj", int, 0, "extra output rows and columns at the end"),
    Arg("adj_h", int, -1, "extra output rows"),
    Arg("adj_w", int, -1, "extra output columns"),
    Arg("order", str, "NCHW", "NCHW or NHWC"),
    Arg("no_gradient_to_input", bool, False, "the gradient op gives no dX"),
    Arg("shared_buffer", int, 0, "accepted: a Caffe2 memory hint"),
]


def _np(x: Any) -> np.ndarray:
    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)


def _pick(a: dict[str, Any], one: str, both: str, unset: int) -> int:
    return a[one] if a[one] != unset else a[both]


def _geometry(ctx: Any, w: np.ndarray) -> tuple[tuple[int, int], tuple[int, int, int, int], tuple[int, int]]:
    a = ctx.args
    stride = tuple(a["strides"]) if a["strides"] else (a["stride_h"] or a["stride"], a["stride_w"] or a["stride"])
    pads = (
        tuple(a["pads"]) if a["pads"] else tuple(_pick(a, k, "pad", -1) for k in ("pad_t", "pad_l", "pad_b", "pad_r"))
    )
    adj = tuple(a["adjs"]) if a["adjs"] else (_pick(a, "adj_h", "adj", -1), _pick(a, "adj_w", "adj", -1))
    if len(pads) != 4 or len(stride) != 2 or len(adj) != 2 or min(pads) < 0 or min(stride) < 1 or min(adj) < 0:
        raise ValueError(f"expected 4 non-negative pads, strides >= 1 and adj >= 0, got {pads}, {stride}, {adj}")
    kernel = tuple(a["kernels"]) if a["kernels"] else (a["kernel_h"] or a["kernel"], a["kernel_w"] or a["kernel"])
    if any(kernel) and kernel != tuple(w.shape[2:]):
        raise ValueError(f"expected a filter of kernel {kernel}, got spatial size {tuple(w.shape[2:])}")
    return stride, pads, adj  # type: ignore[return-value]


def _nchw(ctx: Any, x: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = ctx.args["order"]
    if order not in ("NCHW", "NHWC"):
        raise ValueError(f"expected order NCHW or NHWC, got {order!r}")
    if x.ndim != 4 or w.ndim != 4:
        raise ValueError(f"expected a 4-D X and filter (2-D ConvTranspose), got {x.shape} and {w.shape}")
    if order == "NHWC":
        x, w = x.transpose(0, 3, 1, 2), w.transpose(0, 3, 1, 2)
    if w.shape[0] != x.shape[1]:
        raise ValueError(f"expected a filter of {x.shape[1]} input channels, got {w.shape[0]}")
    return x, w


def _forward(ctx: Any, x: Any, w: Any, b: Any) -> Any:
    """The transposed convolution on torch tensors (NCHW), differentiable."""
    import torch

    stride, (pt, pl, pb, pr), (ah, aw) = _geometry(ctx, w.detach().numpy())
    full = torch.nn.functional.conv_transpose2d(x, w, stride=stride)
    full = torch.nn.functional.pad(full, (0, aw, 0, ah))
    h, wd = full.shape[2] - pt - pb, full.shape[3] - pl - pr
    if h <= 0 or wd <= 0:
        raise ValueError(f"the paddings {pt, pl, pb, pr} leave no output of the {tuple(full.shape[2:])} computed")
    y = full[:, :, pt : pt + h, pl : pl + wd]
    return y if b is None else y + b.reshape(1, -1, 1, 1)


def _tensors(ctx: Any, x: Any, w: Any, b: Any, grad: bool) -> tuple[Any, Any, Any]:
    import torch

    x, w = float_array(ctx, _np(x), 0), float_array(ctx, _np(w), 1)
    same_dtype(ctx, [x, w])
    x, w = _nchw(ctx, x, w)
    tb = None
    if b is not None:
        b = float_array(ctx, _np(b), 2).reshape(-1)
        if b.size != w.shape[1]:
            raise ValueError(f"expected a bias of {w.shape[1]} values, got {b.size}")
        tb = torch.tensor(b, requires_grad=grad)
    return (
        torch.tensor(np.ascontiguousarray(x), requires_grad=grad),
        torch.tensor(np.ascontiguousarray(w), requires_grad=grad),
        tb,
    )


def _to_order(ctx: Any, y: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(y.transpose(0, 2, 3, 1)) if ctx.args["order"] == "NHWC" else y


@register_op(
    "ConvTranspose",
    inputs=(2, 3),
    args=_ARGS,
    inputs_doc=("X", "filter", "bias (optional)"),
    doc="2-D transposed convolution (Caffe2's ConvTranspose), NCHW or NHWC.",
)
def conv_transpose(ctx: Any, x: Any, w: Any, b: Any = None) -> np.ndarray:
    import torch

    tx, tw, tb = _tensors(ctx, x, w, b, grad=False)
    with torch.no_grad():
        return _to_order(ctx, _forward(ctx, tx, tw, tb).numpy())


@register_op(
    "ConvTransposeGradient",
    inputs=(3, 4),
    outputs=(1, 3),
    args=_ARGS,
    inputs_doc=("X", "filter", "bias (optional)", "dY"),
    outputs_doc=("dfilter", "dbias (with a bias)", "dX (unless no_gradient_to_input)"),
    doc="The gradients of ConvTranspose's filter, bias and input (by PyTorch's autograd).",
)
def conv_transpose_gradient(ctx: Any, *inputs: Any) -> Any:
    import torch

    x, w, b, dy = (inputs[0], inputs[1], None, inputs[2]) if len(inputs) == 3 else inputs
    tx, tw, tb = _tensors(ctx, x, w, b, grad=True)
    dy = float_array(ctx, _np(dy), len(inputs) - 1)
    if ctx.args["order"] == "NHWC":
        dy = dy.transpose(0, 3, 1, 2)
    with torch.enable_grad():
        y = _forward(ctx, tx, tw, tb)
        if tuple(y.shape) != dy.shape:
            raise ValueError(f"expected dY of the output's shape {tuple(y.shape)}, got {dy.shape}")
        y.backward(torch.tensor(np.ascontiguousarray(dy)))
    dw = tw.grad.numpy()
    if ctx.args["order"] == "NHWC":
        dw = np.ascontiguousarray(dw.transpose(0, 2, 3, 1))
    outs = [dw]
    if tb is not None:
        outs.append(tb.grad.numpy())
    if not ctx.args["no_gradient_to_input"]:
        outs.append(_to_order(ctx, tx.grad.numpy()))
    return outs[0] if len(outs) == 1 else tuple(outs)


@register_gradient("ConvTranspose")
def _conv_transpose_grad(op: OperatorDef, gout: list[Any]) -> tuple[list[OperatorDef], list[Any]]:
    n = len(op.inputs)
    if gout[0] is None:
        return [], [None] * n
    outs = ["#dw"] + (["#db"] if n == 3 else [])
    no_dx = bool(op.args.get("no_gradient_to_input", False))
    if not no_dx:
        outs.append("#dx")
    grads = [None if no_dx else "#dx", "#dw"] + (["#db"] if n == 3 else [])
    return [OperatorDef("ConvTransposeGradient", [*op.inputs, gout[0]], outs, dict(op.args))], grads
