"""Caffe2's locally connected layers ``LC``, ``LC1D``, ``LC2D``, ``LC3D`` (with ``LCGradient``...).

A convolution whose filter is not shared: each output position has its own. NCHW: X [N, C,
*size], W [*out, M, C, *kernel], bias [*out, M]; NHWC: X [N, *size, C], W [*out, M, *kernel, C].
Y [N, M, *out] (NHWC: [N, *out, M]) with Y[n, m, o] = b[o, m] + sum over c and the kernel of
X's window at o times W[o, m, c, kernel]. Windows take ``strides``/``stride``, ``pads``/``pad``
and ``dilations``/``dilation`` as Conv's do; the kernel is the filter's.

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace(); ws.feed("x", np.array([[[1.0, 2.0, 3.0]]], np.float32))
    >>> ws.feed("w", np.array([[[[1.0, 1.0]]], [[[0.0, 2.0]]]], np.float32))  # [out=2, M=1, C=1, k=2]
    >>> net = an.Net("lc"); _ = net.LC1D(["x", "w"], "y")
    >>> ws.run_net_once(net); ws.fetch("y")
    array([[[3., 6.]]], dtype=float32)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from asyncnet.core.defs import OperatorDef
from asyncnet.core.registry import Arg, register_gradient, register_op
from asyncnet.ops._check import float_array, same_dtype
from asyncnet.ops.caffe2_volumetric import Window, padded, patches, tap_slices, unpadded, window

__all__ = ["lc_forward", "lc_backward"]

_ARGS = [
    Arg("kernel", int, 0, "the kernel size on every axis (default: the filter's)"),
    Arg("kernels", list, [], "the kernel size per axis (default: the filter's)", item_type=int),
    Arg("stride", int, 1),
    Arg("strides", list, [], "per axis", item_type=int),
    Arg("pad", int, 0),
    Arg("pads", list, [], "the head pads per axis, then the tail pads", item_type=int),
    Arg("dilation", int, 1),
    Arg("dilations", list, [], "per axis", item_type=int),
    Arg("group", int, 1, "only 1"),
    Arg("order", str, "NCHW", "NCHW or NHWC", choices=("NCHW", "NHWC")),
]


def _columns(x: np.ndarray, w: Window) -> np.ndarray:
    """[O, N, C * K]: at each output position, each image's window (channels, then kernel taps)."""
    n, c = x.shape[:2]
    k = len(w.kernel)
    cols = patches(padded(x, w), w)  # N, C, *out, *kernel
    cols = np.moveaxis(cols, 1, 1 + k)  # N, *out, C, *kernel
    return cols.reshape(n, int(np.prod(w.out)), -1).transpose(1, 0, 2)


def lc_forward(x: np.ndarray, f: np.ndarray, b: np.ndarray | None, w: Window) -> np.ndarray:
    """Y [N, M, *out] of NCHW ``x`` and filter ``f`` [*out, M, C, *kernel] (bias [*out, M])."""
    n, m = x.shape[0], f.shape[len(w.out)]
    o = int(np.prod(w.out))
    cols = _columns(x, w)  # O, N, CK
    fo = f.reshape(o, m, -1)  # O, M, CK
    y = np.matmul(cols, fo.transpose(0, 2, 1))  # O, N, M
    if b is not None:
        y = y + b.reshape(o, 1, m)
    return np.ascontiguousarray(y.transpose(1, 2, 0).reshape(n, m, *w.out).astype(x.dtype, copy=False))


def lc_backward(
    x: np.ndarray, f: np.ndarray, dy: np.ndarray, w: Window, want_dx: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(dW, db, dX or None) of :func:`lc_forward` for ``dy`` [N, M, *out]."""
    n, c = x.shape[:2]
    k, m = len(w.kernel), f.shape[len(w.out)]
    o = int(np.prod(w.out))
    cols = _columns(x, w)  # O, N, CK
    dyo = dy.reshape(n, m, o).transpose(2, 0, 1)  # O, N, M
    df = np.matmul(dyo.transpose(0, 2, 1), cols).reshape(f.shape).astype(x.dtype, copy=False)
    db = dyo.sum(axis=1).reshape(*w.out, m).astype(x.dtype, copy=False)
    if not want_dx:
        return df, db, None
    dcols = np.matmul(dyo, f.reshape(o, m, -1))  # O, N, CK
    dcols = dcols.transpose(1, 0, 2).reshape(n, *w.out, c, *w.kernel)
    dcols = np.moveaxis(dcols, 1 + k, 1)  # N, C, *out, *kernel
    xp = padded(x, w)
    dxp = np.zeros(xp.shape, x.dtype)
    for tap, spans in tap_slices(w):
        dxp[(slice(None), slice(None), *spans)] += dcols[(Ellipsis, *tap)]
    return df, db, unpadded(dxp, w)


def _nchw(ctx: Any, x: np.ndarray, f: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """X and the filter in NCHW layout, and the number of spatial axes."""
    k = x.ndim - 2
    if k < 1:
        raise ValueError(f"expected X [N, C, *size] with at least 1 spatial axis, got shape {x.shape}")
    if f.ndim != 2 * k + 2:
        raise ValueError(f"expected a filter of {2 * k + 2} dims [*out, M, C, *kernel] for a {k}-D X, got {f.shape}")
    if ctx.args["order"] == "NHWC":
        x, f = np.moveaxis(x, -1, 1), np.moveaxis(f, -1, k + 1)
    return x, f, k


def _geometry(ctx: Any, x: np.ndarray, f: np.ndarray, k: int) -> Window:
    if ctx.args["group"] != 1:
        raise ValueError(f"expected group=1 (the only grouping supported), got {ctx.args['group']}")
    w = window(ctx.args, tuple(x.shape[2:]), tuple(f.shape[2 + k :]))
    if tuple(f.shape[:k]) != w.out or f.shape[k + 1] != x.shape[1]:
        raise ValueError(
            f"expected a filter [*out={list(w.out)}, M, C={x.shape[1]}, *kernel] for this input, got {list(f.shape)}"
        )
    return w


def _to_order(ctx: Any, y: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.moveaxis(y, 1, -1)) if ctx.args["order"] == "NHWC" else y


def lc(ctx: Any, x: Any, f: Any, b: Any = None) -> np.ndarray:
    arrays = [float_array(ctx, a, i) for i, a in enumerate((x, f) if b is None else (x, f, b))]
    same_dtype(ctx, arrays)
    x, f, k = _nchw(ctx, arrays[0], arrays[1])
    w = _geometry(ctx, x, f, k)
    bias = arrays[2] if b is not None else None
    if bias is not None and bias.shape != (*w.out, f.shape[k]):
        raise ValueError(f"expected a bias of shape {(*w.out, f.shape[k])}, got {bias.shape}")
    return _to_order(ctx, lc_forward(x, f, bias, w))


def lc_gradient(ctx: Any, x: Any, f: Any, dy: Any) -> Any:
    arrays = [float_array(ctx, a, i) for i, a in enumerate((x, f, dy))]
    same_dtype(ctx, arrays)
    x, f, k = _nchw(ctx, arrays[0], arrays[1])
    w = _geometry(ctx, x, f, k)
    dy = np.moveaxis(arrays[2], -1, 1) if ctx.args["order"] == "NHWC" else arrays[2]
    want = (x.shape[0], f.shape[k], *w.out)
    if dy.shape != want:
        raise ValueError(f"expected dY of shape {want} (in NCHW terms), got {dy.shape}")
    no_bias, n_out = ctx.args["no_bias"], len(ctx.op.outputs)
    df, db, dx = lc_backward(x, f, dy, w, want_dx=n_out == (2 if no_bias else 3))
    if ctx.args["order"] == "NHWC":
        df = np.ascontiguousarray(np.moveaxis(df, k + 1, -1))
    outs = [df] if no_bias else [df, db]
    if dx is not None:
        outs.append(_to_order(ctx, dx))
    return outs[0] if n_out == 1 else tuple(outs)


def _lc_grad(op: OperatorDef, gout: list[Any]) -> tuple[list[OperatorDef], list[Any]]:
    if gout[0] is None:
        return [], [None] * len(op.inputs)
    has_bias = len(op.inputs) == 3
    outs = ["#dw", "#db", "#dx"] if has_bias else ["#dw", "#dx"]
    args = {**op.args, "no_bias": not has_bias}
    gop = OperatorDef(op.type + "Gradient", [op.inputs[0], op.inputs[1], gout[0]], outs, args)
    return [gop], ["#dx", "#dw", "#db"][: len(op.inputs)]


for _name in ("LC", "LC1D", "LC2D", "LC3D"):
    register_op(
        _name,
        inputs=(2, 3),
        outputs=1,
        args=_ARGS,
        inputs_doc=("X", "filter [*out, M, C, *kernel] (NHWC: [*out, M, *kernel, C])", "bias [*out, M] (optional)"),
        outputs_doc=("Y",),
        doc="Locally connected layer: a convolution with a separate filter at each output position.",
    )(lc)
    register_op(
        _name + "Gradient",
        inputs=3,
        outputs=(1, 3),
        args=[*_ARGS, Arg("no_bias", bool, False, "the forward op had no bias")],
        inputs_doc=("X", "filter", "dY"),
        outputs_doc=("dfilter", "dbias (unless no_bias)", "dX (optional)"),
        doc=f"Gradient of {_name}: dfilter, then dbias unless no_bias=1, then dX when that output is given.",
    )(lc_gradient)
    register_gradient(_name)(_lc_grad)
