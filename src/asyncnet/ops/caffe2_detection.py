"""Caffe2's detection ops ``BBoxTransform`` (boxes moved by regression deltas, clipped to their
image), ``RMACRegions`` (the regions of R-MAC pooling, see :func:`rmac_regions`) and
``CollectAndDistributeFpnRpnProposals`` (Detectron's FPN proposals, see :func:`fpn_levels`).

``BBoxTransform``:

Inputs: rois [R, 4] (x1, y1, x2, y2, all in image 0) or [R, 5] (the image's index first),
deltas [R, 4 * K] (dx, dy, dw, dh per class, divided by ``weights``), im_info [B, 3] (height,
width, scale per image). A box of width w = x2 - x1 + 1 and centre cx = x1 + w / 2 moves to
centre cx + dx w with width w exp(min(dw, log(1000 / 16))) (the same for y and h); the corners
come back as centre -/+ half the size, the far corner less 1 when ``correct_transform_coords``.
The rois are divided by the image's scale first and the boxes clipped to the scaled image
([0, width / scale - 1] by [0, height / scale - 1]); with ``apply_scale`` the boxes are scaled
back. Outputs: the boxes [R, 4 * K] and, optionally, the number of rois of each image [B].

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace(); ws.feed("rois", np.array([[0.0, 0.0, 9.0, 9.0]], np.float32))
    >>> ws.feed("deltas", np.array([[0.1, 0.0, 0.0, 0.0]], np.float32))
    >>> ws.feed("im", np.array([[100.0, 100.0, 1.0]], np.float32))
    >>> net = an.Net("bbox"); _ = net.BBoxTransform(["rois", "deltas", "im"], "boxes", correct_transform_coords=1)
    >>> ws.run_net_once(net); ws.fetch("boxes")
    array([[ 1.,  0., 10.,  9.]], dtype=float32)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from asyncnet.core.registry import Arg, register_no_gradient, register_op
from asyncnet.ops._check import float_array

__all__ = ["transform_boxes", "clip_boxes", "rmac_regions", "fpn_levels"]

DELTA_CLIP = math.log(1000.0 / 16.0)  # the largest dw, dh: exp() of it grows a box 62.5 times


def transform_boxes(boxes: np.ndarray, deltas: np.ndarray, weights: tuple[float, ...], correct: bool) -> np.ndarray:
    """[R, 4 * K]: each box [R, 4] moved by its K deltas (see the module's docstring)."""
    boxes = boxes.astype(deltas.dtype, copy=False)
    size = boxes[:, 2:4] - boxes[:, 0:2] + 1.0  # R, (w, h)
    centre = boxes[:, 0:2] + 0.5 * size
    d = deltas.reshape(len(deltas), -1, 4) / np.asarray(weights, deltas.dtype)  # R, K, (dx, dy, dw, dh)
    new_centre = d[:, :, 0:2] * size[:, None, :] + centre[:, None, :]
    new_size = np.exp(np.minimum(d[:, :, 2:4], DELTA_CLIP)) * size[:, None, :]
    far = new_centre + 0.5 * new_size - (1.0 if correct else 0.0)
    out = np.concatenate([new_centre - 0.5 * new_size, far], axis=2)
    return out.reshape(deltas.shape).astype(deltas.dtype, copy=False)


def clip_boxes(boxes: np.ndarray, height: float, width: float) -> np.ndarray:
    """The boxes [R, 4 * K] with x in [0, width - 1] and y in [0, height - 1]."""
    b = boxes.reshape(len(boxes), -1, 4)
    limit = np.array([width - 1, height - 1, width - 1, height - 1], boxes.dtype)
    return np.clip(b, 0, limit).reshape(boxes.shape)


def _checked(ctx: Any, rois: np.ndarray, deltas: np.ndarray, im_info: np.ndarray) -> None:
    if rois.ndim != 2 or rois.shape[1] not in (4, 5):
        raise ValueError(f"expected rois [R, 4] or [R, 5] (image index first), got shape {rois.shape}")
    if deltas.ndim != 2 or deltas.shape[0] != rois.shape[0] or deltas.shape[1] % 4:
        raise ValueError(f"expected deltas [R={rois.shape[0]}, 4 * classes], got shape {deltas.shape}")
    if im_info.ndim != 2 or im_info.shape[1] != 3:
        raise ValueError(f"expected im_info [images, 3] (height, width, scale), got shape {im_info.shape}")
    if len(ctx.args["weights"]) != 4:
        raise ValueError(f"expected 4 weights (x, y, w, h), got {ctx.args['weights']}")


def _image_of_each_roi(rois: np.ndarray, images: int) -> np.ndarray:
    if rois.shape[1] == 4:
        if images != 1:
            raise ValueError(f"rois without an image index [R, 4] need one image in im_info, got {images}")
        return np.zeros(len(rois), np.int64)
    index = rois[:, 0].astype(np.int64)
    if len(index) and (index.min() < 0 or index.max() >= images):
        raise ValueError(f"expected image indices in [0, {images}) in rois[:, 0], got {index.min()}..{index.max()}")
    return index


@register_op(
    "BBoxTransform",
    inputs=3,
    outputs=(1, 2),
    args=[
        Arg("weights", list, [1.0, 1.0, 1.0, 1.0], "the deltas are divided by these (x, y, w, h)", item_type=float),
        Arg("apply_scale", (bool, int), 1, "scale the boxes back by im_info's scale"),
        Arg("correct_transform_coords", (bool, int), 0, "the far corner is centre + size / 2 - 1 (Detectron's)"),
    ],
    inputs_doc=("rois [R, 4] or [R, 5]", "deltas [R, 4 * K]", "im_info [B, 3]"),
    outputs_doc=("boxes [R, 4 * K]", "roi_batch_splits [B] (float, optional)"),
    doc="Boxes moved by bounding-box regression deltas and clipped to their image.",
)
def bbox_transform(ctx: Any, rois: Any, deltas: Any, im_info: Any) -> Any:
    rois, deltas, im_info = (float_array(ctx, a, i) for i, a in enumerate((rois, deltas, im_info)))
    _checked(ctx, rois, deltas, im_info)
    image = _image_of_each_roi(rois, len(im_info))
    boxes = rois[:, -4:]
    out = np.empty(deltas.shape, deltas.dtype)
    weights = tuple(ctx.args["weights"])
    for i, (height, width, scale) in enumerate(im_info.astype(np.float64)):
        mine = image == i
        if not mine.any():
            continue
        moved = transform_boxes(boxes[mine] / scale, deltas[mine], weights, bool(ctx.args["correct_transform_coords"]))
        moved = clip_boxes(moved, height / scale, width / scale)
        out[mine] = moved * scale if ctx.args["apply_scale"] else moved
    if len(ctx.op.outputs) == 1:
        return out
    return out, np.bincount(image, minlength=len(im_info)).astype(np.float32)


register_no_gradient("BBoxTransform")


# -- RMACRegions -----------------------------------------------------------------------------------

_STEPS = np.arange(2, 8, dtype=np.float64)  # the region counts tried along the long side


def _extra_regions(height: int, width: int, overlap: float) -> int:
    """How many more regions the long side gets than the short one: the count whose overlap of
    neighbouring squares (side = the short side) is nearest ``overlap``."""
    short, long_ = min(height, width), max(height, width)
    if short == long_:
        return 0
    step = (long_ - short) / (_STEPS - 1)
    return int(np.argmin(np.abs((short - step) / short - overlap))) + 1


def _starts(extent: int, side: float, count: int) -> np.ndarray:
    """``count`` region starts spread evenly over [0, extent - side] (one region: at 0)."""
    if count <= 1:
        return np.zeros(1)
    return np.floor((extent - side) / (count - 1) * np.arange(count))


def rmac_regions(height: int, width: int, scales: int, overlap: float) -> list[tuple[int, int, int, int]]:
    """The R-MAC regions (x, y, w, h) of a height x width map: at scale l (1..scales) squares of
    side floor(2 min / (l + 1)) on an l x l grid, with more along the longer side, kept inside.

    >>> rmac_regions(4, 4, 2, 0.4)
    [(0, 0, 4, 4), (0, 0, 2, 2), (0, 2, 2, 2), (2, 0, 2, 2), (2, 2, 2, 2)]
    """
    extra = _extra_regions(height, width, overlap)
    extra_w, extra_h = (extra, 0) if height < width else (0, extra)
    out = []
    for level in range(1, scales + 1):
        side = float(np.floor(2 * min(height, width) / (level + 1)))
        for x in _starts(width, side, level + extra_w):
            for y in _starts(height, side, level + extra_h):
                s, x0, y0 = int(round(side)), int(round(x)), int(round(y))
                x0, y0 = min(x0, width - s), min(y0, height - s)  # pushed back inside
                if s > 0:
                    out.append((x0, y0, s, s))
    return out


@register_op(
    "RMACRegions",
    inputs=1,
    outputs=1,
    args=[
        Arg("scales", int, 3, "the number of region sizes"),
        Arg("overlap", float, 0.4, "the wanted overlap of neighbouring regions"),
    ],
    inputs_doc=("X [N, C, H, W]",),
    outputs_doc=("regions [N * R, 5] (image index, x1, y1, x2, y2), float32",),
    doc="The regions of R-MAC pooling (Tolias et al.) for each image, in RoIPool's format.",
)
def rmac_regions_op(ctx: Any, x: Any) -> np.ndarray:
    shape = tuple(x.shape)
    if len(shape) != 4:
        raise ValueError(f"expected X [N, C, H, W], got shape {shape}")
    if ctx.args["scales"] < 1:
        raise ValueError(f"expected scales >= 1, got {ctx.args['scales']}")
    boxes = [
        (px, py, px + s - 1, py + s - 1)
        for px, py, s, _ in rmac_regions(shape[2], shape[3], ctx.args["scales"], ctx.args["overlap"])
    ]
    out = np.array([(n, *b) for n in range(shape[0]) for b in boxes], np.float32)
    return out.reshape(-1, 5)


register_no_gradient("RMACRegions")


# -- CollectAndDistributeFpnRpnProposals -----------------------------------------------------------


def fpn_levels(boxes: np.ndarray, canonical_scale: float, canonical_level: int, lo: int, hi: int) -> np.ndarray:
    """The FPN level of each box [R, 4]: floor(level0 + log2(sqrt(area) / scale0)), within [lo, hi]
    (Lin et al., eq. 1; area counted in whole pixels, x2 - x1 + 1 by y2 - y1 + 1)."""
    area = (boxes[:, 2] - boxes[:, 0] + 1) * (boxes[:, 3] - boxes[:, 1] + 1)
    if (area < 0).any():
        raise ValueError("expected boxes with x2 >= x1 - 1 and y2 >= y1 - 1 (a negative area)")
    level = np.floor(canonical_level + np.log2(np.sqrt(area) / canonical_scale + 1e-6))
    return np.clip(level, lo, hi).astype(np.int64)


_FPN_ARGS = [
    Arg("roi_canonical_scale", int, 224, "the box size that maps to roi_canonical_level"),
    Arg("roi_canonical_level", int, 4, "the level of a box of roi_canonical_scale"),
    Arg("roi_max_level", int, 5, "the coarsest level the rois go to"),
    Arg("roi_min_level", int, 2, "the finest level the rois go to"),
    Arg("rpn_max_level", int, 6, "the coarsest level of the proposals given"),
    Arg("rpn_min_level", int, 2, "the finest level of the proposals given"),
    Arg("post_nms_topN", int, 2000, "the proposals kept (the best scored)"),
]


def _fpn_validate(op: Any) -> None:
    a = {arg.name: arg.default for arg in _FPN_ARGS} | dict(op.args)
    rpn = a["rpn_max_level"] - a["rpn_min_level"] + 1
    roi = a["roi_max_level"] - a["roi_min_level"] + 1
    if rpn < 1 or roi < 1:
        raise ValueError(f"expected min levels <= max levels, got rpn {rpn} and roi {roi} levels")
    if len(op.inputs) != 2 * rpn:
        raise ValueError(
            f"expected {2 * rpn} inputs (the rois, then the scores, of {rpn} levels), got {len(op.inputs)}"
        )
    if len(op.outputs) != roi + 2:
        raise ValueError(
            f"expected {roi + 2} outputs (rois, {roi} levels' rois, rois_idx_restore), got {len(op.outputs)}"
        )


@register_op(
    "CollectAndDistributeFpnRpnProposals",
    inputs=(2, None),
    outputs=(3, None),
    args=_FPN_ARGS,
    validate=_fpn_validate,
    inputs_doc=("rpn_rois_fpn<l> [R_l, 5] per RPN level", "then rpn_roi_probs_fpn<l> [R_l] per RPN level"),
    outputs_doc=("rois [K, 5]", "rois_fpn<l> per RoI level", "rois_idx_restore [K] (int32)"),
    doc="Detectron's FPN proposals: the post_nms_topN best scored rois of all RPN levels, then the same rois "
    "split by the FPN level their size maps to, and the order that puts the split rois back.",
)
def collect_and_distribute(ctx: Any, *inputs: Any) -> tuple[np.ndarray, ...]:
    a = ctx.args
    half = len(inputs) // 2
    rois = [np.asarray(r) for r in inputs[:half]]
    scores = [np.asarray(s).reshape(-1) for s in inputs[half:]]
    for i, (r, s) in enumerate(zip(rois, scores)):
        if r.ndim != 2 or r.shape[1] != 5 or len(s) != len(r):
            raise ValueError(f"level {i}: expected rois [R, 5] and R scores, got {r.shape} and {s.shape}")
    all_rois, all_scores = np.concatenate(rois), np.concatenate(scores)
    keep = np.argsort(-all_scores, kind="stable")[: max(a["post_nms_topN"], 0)]
    kept = all_rois[keep]
    levels = fpn_levels(kept[:, 1:5], a["roi_canonical_scale"], a["roi_canonical_level"],
                        a["roi_min_level"], a["roi_max_level"])  # fmt: skip
    per_level, order = [], []
    for level in range(a["roi_min_level"], a["roi_max_level"] + 1):
        idx = np.flatnonzero(levels == level)
        per_level.append(kept[idx])
        order.append(idx)
    restore = np.argsort(np.concatenate(order), kind="stable").astype(np.int32)
    return (kept, *per_level, restore)


register_no_gradient("CollectAndDistributeFpnRpnProposals")
