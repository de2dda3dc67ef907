"""Caffe2's image padding and resizing, and two gradient-scaling helpers.

- ``PadImage``: pad (or, with negative pads, crop) the two spatial dims of an NCHW or NHWC
  image by ``pad_t, pad_l, pad_b, pad_r`` (or ``pad`` for all four, or ``pads = [t, l, b, r]``);
  ``mode`` is ``constant`` (with ``value``), ``reflect`` (mirrored, the edge not repeated) or
  ``edge``. ``PadImageGradient`` adds each output gradient back to the input pixel it came from.
- ``ResizeNearest``: NCHW nearest-neighbour resize by ``height_scale``/``width_scale``; the
  output is ``int(H * height_scale)`` by ``int(W * width_scale)`` and output pixel ``(y, x)`` reads
  input pixel ``(min(int(y / height_scale), H - 1), min(int(x / width_scale), W - 1))``.
  ``ResizeNearestGradient(dY, X)`` sums each input pixel's readers.
- ``ClipTensorByScaling(X, NORM[, ADDITIONAL_THRESHOLD])``: X scaled by
  ``threshold / NORM`` when NORM exceeds the threshold (times ADDITIONAL_THRESHOLD if given).
- ``Lars(X, dX)``: the LARS learning-rate factor ``1 / (||dX|| / ||X|| + offset)`` (1 when a
  norm is 0), as a 1-element vector.

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace(); ws.feed("x", np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2))
    >>> net = an.Net("r"); _ = net.ResizeNearest("x", "y", height_scale=2.0, width_scale=1.0)
    >>> ws.run_net_once(net); ws.fetch("y")[0, 0]
    array([[0., 1.],
           [0., 1.],
           [2., 3.],
           [2., 3.]], dtype=float32)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from asyncnet.core.defs import OperatorDef
from asyncnet.core.registry import Arg, register_gradient, register_no_gradient, register_op
from asyncnet.ops.grad import GradOut, MakerResult, output_grad

__all__: list[str] = []  # the ops are reached through the registry


def _np(x: Any) -> np.ndarray:
    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)


def _image(ctx: Any, x: Any, i: int) -> np.ndarray:
    x = _np(x)
    if x.ndim != 4 or x.dtype.kind != "f":
        raise ValueError(f"expected a 4-D float image in input {i} {ctx.op.inputs[i]!r}, got {x.dtype} {x.shape}")
    return x


# -- PadImage -------------------------------------------------------------------------------------

_PAD_ARGS = [
    Arg("pad", int, 0, "the pad of all four sides"),
    Arg("pad_t", int, None, "top pad (negative: crop)"),
    Arg("pad_l", int, None, "left pad"),
    Arg("pad_b", int, None, "bottom pad"),
    Arg("pad_r", int, None, "right pad"),
    Arg("pads", list, None, "[t, l, b, r]", item_type=int),
    Arg("mode", str, "constant", "how the border is filled", choices=("constant", "reflect", "edge")),
    Arg("value", float, 0.0, "the constant mode's fill value"),
    Arg("order", str, "NCHW", "the image layout", choices=("NCHW", "NHWC")),
]


def _pads(ctx: Any) -> tuple[int, int, int, int]:
    a = ctx.args
    if a["pads"] is not None:
        if len(a["pads"]) != 4:
            raise ValueError(f"expected pads = [t, l, b, r], got {a['pads']}")
        return tuple(a["pads"])  # type: ignore[return-value]
    return tuple(a[k] if a[k] is not None else a["pad"] for k in ("pad_t", "pad_l", "pad_b", "pad_r"))  # type: ignore[return-value]


def _source_map(ctx: Any, h: int, w: int) -> np.ndarray:
    """For each output pixel, the flat input pixel it copies (-1: the constant fill)."""
    t, left, b, r = _pads(ctx)
    src = np.arange(h * w).reshape(h, w)
    src = src[max(-t, 0) : h - max(-b, 0), max(-left, 0) : w - max(-r, 0)]
    if src.size == 0:
        raise ValueError(f"the pads {(t, left, b, r)} crop away the whole {h}x{w} image")
    widths = ((max(t, 0), max(b, 0)), (max(left, 0), max(r, 0)))
    mode = ctx.args["mode"]
    if mode == "constant":
        return np.pad(src, widths, mode="constant", constant_values=-1)
    if mode == "reflect" and any(p >= d for pair, d in zip(widths, src.shape) for p in pair):
        raise ValueError(f"expected reflect pads below the image size {src.shape}, got {(t, left, b, r)}")
    return np.pad(src, widths, mode=mode)


def _spatial(ctx: Any, x: np.ndarray) -> tuple[int, int]:
    return (x.shape[2], x.shape[3]) if ctx.args["order"] == "NCHW" else (x.shape[1], x.shape[2])


def _flat(ctx: Any, x: np.ndarray) -> np.ndarray:
    """[N, C, H*W] whatever the order."""
    if ctx.args["order"] == "NCHW":
        return x.reshape(x.shape[0], x.shape[1], -1)
    return np.moveaxis(x, 3, 1).reshape(x.shape[0], x.shape[3], -1)


def _unflat(ctx: Any, y: np.ndarray, hw: tuple[int, int]) -> np.ndarray:
    y = y.reshape(y.shape[0], y.shape[1], *hw)
    return y if ctx.args["order"] == "NCHW" else np.ascontiguousarray(np.moveaxis(y, 1, 3))


@register_op(
    "PadImage",
    args=_PAD_ARGS,
    differentiable=True,
    inputs_doc=("X [N, C, H, W] (or NHWC)",),
    outputs_doc=("Y: X padded (or cropped) on its spatial dims",),
    doc="Pad or crop an image's spatial dims (constant, reflect or edge mode).",
)
def pad_image(ctx: Any, x: Any) -> np.ndarray:
    x = _image(ctx, x, 0)
    src = _source_map(ctx, *_spatial(ctx, x))
    flat = _flat(ctx, x)
    y = flat[:, :, np.maximum(src, 0).reshape(-1)]
    y[:, :, (src < 0).reshape(-1)] = ctx.args["value"]
    return _unflat(ctx, y, src.shape)


@register_op(
    "PadImageGradient",
    inputs=2,
    args=_PAD_ARGS,
    inputs_doc=("dY", "X (the forward input, for its shape)"),
    outputs_doc=("dX",),
    doc="Gradient of PadImage: each output gradient added to the input pixel it was copied from.",
)
def pad_image_gradient(ctx: Any, dy: Any, x: Any) -> np.ndarray:
    dy, x = _np(dy), _image(ctx, x, 1)
    h, w = _spatial(ctx, x)
    src = _source_map(ctx, h, w).reshape(-1)
    g = _flat(ctx, dy)
    if g.shape[2] != src.size:
        raise ValueError(f"expected dY of the padded shape, got {dy.shape}")
    dx = np.zeros((g.shape[0], g.shape[1], h * w), dy.dtype)
    keep = src >= 0
    np.add.at(dx, (slice(None), slice(None), src[keep]), g[:, :, keep])
    return _unflat(ctx, dx, (h, w))


@register_gradient("PadImage")
def _pad_image_grad(op: OperatorDef, gout: GradOut) -> MakerResult:
    return [OperatorDef("PadImageGradient", [output_grad(op, gout), op.inputs[0]], ["#dx"], dict(op.args))], ["#dx"]


# -- ResizeNearest --------------------------------------------------------------------------------

_RESIZE_ARGS = [
    Arg("height_scale", float, 1.0, "output height / input height"),
    Arg("width_scale", float, 1.0, "output width / input width"),
    Arg("order", str, "NCHW", "the image layout", choices=("NCHW",)),
]


def _nearest(size: int, scale: float, out: int) -> np.ndarray:
    return np.minimum((np.arange(out) / scale).astype(np.int64), size - 1)


def _resize_maps(ctx: Any, h: int, w: int) -> tuple[np.ndarray, np.ndarray]:
    hs, ws = ctx.args["height_scale"], ctx.args["width_scale"]
    if hs <= 0 or ws <= 0:
        raise ValueError(f"expected positive scales, got height_scale={hs}, width_scale={ws}")
    return _nearest(h, hs, int(h * hs)), _nearest(w, ws, int(w * ws))


@register_op(
    "ResizeNearest",
    args=_RESIZE_ARGS,
    differentiable=True,
    inputs_doc=("X [N, C, H, W]",),
    outputs_doc=("Y [N, C, int(H * height_scale), int(W * width_scale)]",),
    doc="Nearest-neighbour resize of an NCHW image by height_scale and width_scale.",
)
def resize_nearest(ctx: Any, x: Any) -> np.ndarray:
    x = _image(ctx, x, 0)
    rows, cols = _resize_maps(ctx, x.shape[2], x.shape[3])
    return np.ascontiguousarray(x[:, :, rows[:, None], cols[None, :]])


@register_op(
    "ResizeNearestGradient",
    inputs=2,
    args=_RESIZE_ARGS,
    inputs_doc=("dY", "X (the forward input, for its shape)"),
    outputs_doc=("dX",),
    doc="Gradient of ResizeNearest: each input pixel gets the sum of the output gradients that read it.",
)
def resize_nearest_gradient(ctx: Any, dy: Any, x: Any) -> np.ndarray:
    dy, x = _np(dy), _image(ctx, x, 1)
    rows, cols = _resize_maps(ctx, x.shape[2], x.shape[3])
    if dy.shape != (*x.shape[:2], rows.size, cols.size):
        raise ValueError(f"expected dY of shape {(*x.shape[:2], rows.size, cols.size)}, got {dy.shape}")
    dx = np.zeros(x.shape, dy.dtype)
    np.add.at(dx, (slice(None), slice(None), rows[:, None], cols[None, :]), dy)
    return dx


@register_gradient("ResizeNearest")
def _resize_nearest_grad(op: OperatorDef, gout: GradOut) -> MakerResult:
    gop = OperatorDef("ResizeNearestGradient", [output_grad(op, gout), op.inputs[0]], ["#dx"], dict(op.args))
    return [gop], ["#dx"]


# -- ClipTensorByScaling, Lars --------------------------------------------------------------------


@register_op(
    "ClipTensorByScaling",
    inputs=(2, 3),
    allow_inplace={0: 0},
    args=[Arg("threshold", float, Arg.REQUIRED, "the largest norm kept")],
    inputs_doc=("X", "NORM (1 element: X's norm)", "ADDITIONAL_THRESHOLD (1 element, optional: scales threshold)"),
    outputs_doc=("Y: X * threshold / NORM when NORM > threshold, else X",),
    doc="Scale X down so that its norm (given) is at most threshold.",
)
def clip_tensor_by_scaling(ctx: Any, x: Any, norm: Any, *extra: Any) -> np.ndarray:
    x, norm = _np(x), _np(norm)
    if norm.size != 1:
        raise ValueError(f"expected a 1-element NORM in input 1 {ctx.op.inputs[1]!r}, got shape {norm.shape}")
    threshold = ctx.args["threshold"]
    if extra:
        scale = _np(extra[0])
        if scale.size != 1:
            raise ValueError(f"expected a 1-element ADDITIONAL_THRESHOLD, got shape {scale.shape}")
        threshold *= float(scale.reshape(-1)[0])
    n = float(norm.reshape(-1)[0])
    return (x * (threshold / n)).astype(x.dtype) if n > threshold else x.copy()


@register_op(
    "Lars",
    inputs=2,
    args=[Arg("offset", float, 0.5, "added to ||dX|| / ||X||")],
    inputs_doc=("X (a parameter)", "dX (its gradient)"),
    outputs_doc=("rescale_factor (1 element)",),
    doc="The LARS learning-rate factor 1 / (||dX|| / ||X|| + offset) (1 when a norm is 0).",
)
def lars(ctx: Any, x: Any, dx: Any) -> np.ndarray:
    x, dx = _np(x), _np(dx)
    if x.shape != dx.shape:
        raise ValueError(f"expected X and dX of one shape, got {x.shape} and {dx.shape}")
    xn, dn = float(np.linalg.norm(x.astype(np.float64))), float(np.linalg.norm(dx.astype(np.float64)))
    factor = 1.0 / (dn / xn + ctx.args["offset"]) if xn > 0 and dn > 0 else 1.0
    return np.array([factor], x.dtype)


register_no_gradient("Lars")
