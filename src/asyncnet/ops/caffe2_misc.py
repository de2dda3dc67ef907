"""Caffe2 operators its example scripts emit: Print and Summarize (reporting), Clip and
MakeTwoClass (element-wise, with gradients), Unique and UnsortedSegmentSum (sparse gradient
deduplication, with UnsortedSegmentSum's gradient a Gather), ChannelStats and
ChannelBackpropStats (the per-channel sums of a SpatialBN synchronized across devices).

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace(); ws.feed("p", np.array([0.25, 1.0], np.float32))
    >>> net = an.Net("two"); _ = net.MakeTwoClass("p", "pp"); _ = net.Clip("p", "c", min=0.0, max=0.5)
    >>> ws.run_net_once(net); ws.fetch("pp"), ws.fetch("c")
    (array([[0.75, 0.25],
           [0.  , 1.  ]], dtype=float32), array([0.25, 0.5 ], dtype=float32))
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

import numpy as np

from asyncnet.core.defs import OperatorDef
from asyncnet.core.registry import (
    Arg,
    register_gradient,
    register_no_gradient,
    register_op,
)
from asyncnet.ops._check import array, as_array, float_array

__all__ = ["summary"]

_FILE_LOCK = threading.Lock()


def _report_path(ctx: Any, name: str, extension: str) -> str:
    return os.path.join(ctx.args["root_folder"] or ".", name + extension)


def _append(path: str, line: str) -> None:
    with _FILE_LOCK, open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")


# -- Print ------------------------------------------------------------------------------------------


def _print_line(name: str, x: Any, limit: int) -> str:
    a = np.asarray(x.detach().cpu().numpy() if hasattr(x, "detach") else x)
    flat = a.reshape(-1)[: max(limit, 0)] if a.ndim else a.reshape(-1)
    values = ",".join(v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in flat.tolist())
    return f"Tensor {name} of type {a.dtype}. Dims: ({','.join(str(d) for d in a.shape)},): {values}"


_PRINT_COUNTS: dict[int, int] = {}
_print_log = logging.getLogger("asyncnet.ops.print")


@register_op(
    "Print",
    inputs=1,
    outputs=0,
    args=[
        Arg("to_file", (bool, int), 0, "append to <root_folder>/<blob>.log instead of printing"),
        Arg("limit", int, 1000, "print at most this many values"),
        Arg("every_n", int, 1, "print on every n-th run only"),
        Arg("root_folder", str, "", "the folder of to_file output (Caffe2: the workspace's root folder)"),
    ],
    inputs_doc=("the blob to print",),
    doc="Log a tensor's type, dims and values (logger asyncnet.ops.print, INFO: Caffe2's LOG(INFO)), or append "
    "them to a file (Caffe2's Print).",
)
def print_op(ctx: Any, x: Any) -> None:
    every = max(ctx.args["every_n"], 1)
    key = id(ctx.op)
    n = _PRINT_COUNTS.get(key, 0)
    _PRINT_COUNTS[key] = n + 1
    if n % every:
        return
    line = _print_line(ctx.op.inputs[0], x, ctx.args["limit"])
    if ctx.args["to_file"]:
        _append(_report_path(ctx, ctx.op.inputs[0], ".log"), line)
    else:
        _print_log.info("%s", line)
    return


# -- Summarize --------------------------------------------------------------------------------------


def summary(x: np.ndarray) -> np.ndarray:
    """[min, max, mean, std] of ``x`` as float32 (std unbiased, 0 for one value), Caffe2's Summarize."""
    a = np.asarray(x, dtype=np.float64).reshape(-1)
    if a.size == 0:
        raise ValueError("Summarize needs a non-empty tensor")
    std = 0.0 if a.size == 1 else float(np.sqrt(np.sum((a - a.mean()) ** 2) / (a.size - 1)))
    return np.array([a.min(), a.max(), a.mean(), std], dtype=np.float32)


@register_op(
    "Summarize",
    inputs=1,
    outputs=(0, 1),
    args=[
        Arg("to_file", (bool, int), 0, "append 'min max mean std' to <root_folder>/<blob>.summary"),
        Arg("root_folder", str, "", "the folder of to_file output (Caffe2: the workspace's root folder)"),
    ],
    inputs_doc=("X (float)",),
    outputs_doc=("[min, max, mean, std] float32 (optional)",),
    doc="Min, max, mean and (unbiased) standard deviation of a float tensor (Caffe2's Summarize).",
)
def summarize(ctx: Any, x: Any) -> Any:
    stats = summary(float_array(ctx, x, 0))
    if ctx.args["to_file"]:
        path = _report_path(ctx, ctx.op.inputs[0], ".summary")
        if not os.path.exists(path):
            _append(path, "min max mean std")
        _append(path, " ".join(f"{v:g}" for v in stats.tolist()))
    return stats if ctx.op.outputs else None


register_no_gradient("Print", "Summarize")


# -- Clip -------------------------------------------------------------------------------------------

_LOWEST, _HIGHEST = float(np.finfo(np.float32).min), float(np.finfo(np.float32).max)


@register_op(
    "Clip",
    inputs=1,
    outputs=1,
    allow_inplace={0: 0},
    differentiable=True,
    args=[Arg("min", float, _LOWEST, "lower bound"), Arg("max", float, _HIGHEST, "upper bound")],
    inputs_doc=("X",),
    outputs_doc=("Y = min(max(X, min), max)",),
    doc="Clamp X into [min, max].",
)
def clip(ctx: Any, x: Any) -> Any:
    x = float_array(ctx, x, 0)
    lo, hi = ctx.args["min"], ctx.args["max"]
    if lo > hi:
        raise ValueError(f"expected min <= max, got min={lo}, max={hi}")
    return as_array(np.clip(x, lo, hi).astype(x.dtype, copy=False)) if isinstance(x, np.ndarray) else x.clamp(lo, hi)


@register_op(
    "ClipGradient",
    inputs=2,
    outputs=1,
    allow_inplace={1: 0},
    args=[Arg("min", float, _LOWEST, "lower bound"), Arg("max", float, _HIGHEST, "upper bound")],
    inputs_doc=("Y", "dY"),
    outputs_doc=("dX = dY where min < Y < max, else 0",),
    doc="The gradient of Clip, from its output (Caffe2's ClipGradient).",
)
def clip_gradient(ctx: Any, y: Any, dy: Any) -> Any:
    y, dy = float_array(ctx, y, 0), float_array(ctx, dy, 1)
    if y.shape != dy.shape:
        raise ValueError(f"Y {tuple(y.shape)} and dY {tuple(dy.shape)} must have one shape")
    inside = (y > ctx.args["min"]) & (y < ctx.args["max"])
    return as_array(dy * inside)


@register_gradient("Clip")
def _clip_grad(op: OperatorDef, gout: list[str | None]) -> tuple[list[OperatorDef], list[str | None]]:
    args = {k: op.args[k] for k in ("min", "max") if k in op.args}
    return [OperatorDef("ClipGradient", [op.outputs[0], gout[0]], ["#dx"], args)], ["#dx"]


# -- MakeTwoClass -----------------------------------------------------------------------------------


@register_op(
    "MakeTwoClass",
    inputs=1,
    outputs=1,
    differentiable=True,
    inputs_doc=("X (probabilities)",),
    outputs_doc=("Y [..., 2] = stack(1 - X, X)",),
    doc="Two complementary class probabilities per value of X (Caffe2's MakeTwoClass).",
)
def make_two_class(ctx: Any, x: Any) -> Any:
    x = float_array(ctx, x, 0)
    return np.stack([1 - x, x], axis=-1)


@register_op(
    "MakeTwoClassGradient",
    inputs=1,
    outputs=1,
    inputs_doc=("dY [..., 2]",),
    outputs_doc=("dX = dY[..., 1] - dY[..., 0]",),
    doc="The gradient of MakeTwoClass.",
)
def make_two_class_gradient(ctx: Any, dy: Any) -> Any:
    dy = float_array(ctx, dy, 0)
    if dy.ndim == 0 or dy.shape[-1] != 2:
        raise ValueError(f"expected dY with a last dimension of 2, got shape {tuple(dy.shape)}")
    dx = dy[..., 1] - dy[..., 0]
    return as_array(dx)


@register_gradient("MakeTwoClass")
def _make_two_class_grad(op: OperatorDef, gout: list[str | None]) -> tuple[list[OperatorDef], list[str | None]]:
    return [OperatorDef("MakeTwoClassGradient", [gout[0]], ["#dx"])], ["#dx"]


# -- Unique and UnsortedSegmentSum ------------------------------------------------------------------


def _indices(ctx: Any, x: Any, i: int) -> np.ndarray:
    a = np.asarray(array(ctx, x, i))
    if a.dtype.kind not in "iu":
        raise TypeError(f"expected integer indices in input {i} {ctx.op.inputs[i]!r}, got dtype {a.dtype}")
    return a


@register_op(
    "Unique",
    inputs=1,
    outputs=(1, 2),
    inputs_doc=("indices [N] int",),
    outputs_doc=("unique indices [M] (ascending)", "remapping [N] int32: position of each index in unique"),
    doc="Deduplicate a vector of indices (Caffe2's Unique; the order here is ascending).",
)
def unique(ctx: Any, x: Any) -> Any:
    a = _indices(ctx, x, 0)
    if a.ndim != 1:
        raise ValueError(f"expected a 1-d vector of indices, got shape {a.shape}")
    values, inverse = np.unique(a, return_inverse=True)
    values = values.astype(a.dtype, copy=False)
    return (values, inverse.astype(np.int32)) if len(ctx.op.outputs) == 2 else values


@register_op(
    "UnsortedSegmentSum",
    inputs=2,
    outputs=1,
    differentiable=True,
    args=[Arg("num_segments", int, -1, "rows of the output (default: max segment id + 1)")],
    inputs_doc=("DATA [N, ...]", "SEGMENT_IDS [N] int"),
    outputs_doc=("OUTPUT [K, ...]: row k sums DATA's rows of id k",),
    doc="Sum the rows of DATA by segment id, ids in any order (Caffe2's UnsortedSegmentSum).",
)
def unsorted_segment_sum(ctx: Any, data: Any, ids: Any) -> Any:
    data = np.asarray(array(ctx, data, 0))
    ids = _indices(ctx, ids, 1)
    if ids.ndim != 1 or data.ndim == 0 or ids.shape[0] != data.shape[0]:
        raise ValueError(f"expected SEGMENT_IDS [N] for DATA [N, ...]; got {ids.shape} and {data.shape}")
    k = ctx.args["num_segments"]
    if k < 0:
        k = int(ids.max()) + 1 if ids.size else 0
    if ids.size and (ids.min() < 0 or ids.max() >= k):
        raise ValueError(f"segment ids must lie in [0, {k}), got [{ids.min()}, {ids.max()}]")
    out = np.zeros((k,) + data.shape[1:], dtype=data.dtype)
    np.add.at(out, ids, data)
    return out


@register_gradient("UnsortedSegmentSum")
def _unsorted_segment_sum_grad(op: OperatorDef, gout: list[str | None]) -> tuple[list[OperatorDef], list[str | None]]:
    return [OperatorDef("Gather", [gout[0], op.inputs[1]], ["#dx"])], ["#dx", None]


register_no_gradient("Unique")


# -- ChannelStats and ChannelBackpropStats (the sums behind a synchronized SpatialBN) ---------------


def _nchw(ctx: Any, x: Any, i: int) -> np.ndarray:
    x = float_array(ctx, x, i)
    if x.ndim < 2:
        raise ValueError(f"expected input {i} {ctx.op.inputs[i]!r} of shape [N, C, ...], got {tuple(x.shape)}")
    return x


def _channel_axes(x: np.ndarray) -> tuple[int, ...]:
    return (0, *range(2, x.ndim))


@register_op(
    "ChannelStats",
    inputs=1,
    outputs=2,
    inputs_doc=("X [N, C, ...]",),
    outputs_doc=("sum [C]", "sumsq [C]"),
    doc="Per-channel sum and sum of squares of X (Caffe2's ChannelStats; SpatialBN across devices adds them up).",
)
def channel_stats(ctx: Any, x: Any) -> tuple[Any, Any]:
    x = _nchw(ctx, x, 0)
    axes = _channel_axes(x)
    return x.sum(axis=axes), (x * x).sum(axis=axes)


@register_op(
    "ChannelBackpropStats",
    inputs=4,
    outputs=2,
    inputs_doc=("X [N, C, ...]", "mean [C]", "inv_std [C]", "dY"),
    outputs_doc=("scale_grad [C] = sum(dY * (X - mean) * inv_std)", "bias_grad [C] = sum(dY)"),
    doc="Per-channel gradients of SpatialBN's scale and bias (Caffe2's ChannelBackpropStats).",
)
def channel_backprop_stats(ctx: Any, x: Any, mean: Any, inv_std: Any, dy: Any) -> tuple[Any, Any]:
    x, dy = _nchw(ctx, x, 0), float_array(ctx, dy, 3)
    if x.shape != dy.shape:
        raise ValueError(f"X {tuple(x.shape)} and dY {tuple(dy.shape)} must have one shape")
    c = x.shape[1]
    mean, inv_std = float_array(ctx, mean, 1), float_array(ctx, inv_std, 2)
    if mean.shape != (c,) or inv_std.shape != (c,):
        raise ValueError(
            f"expected mean and inv_std of shape [{c}], got {tuple(mean.shape)} and {tuple(inv_std.shape)}"
        )
    shape = (1, c) + (1,) * (x.ndim - 2)
    axes = _channel_axes(x)
    xhat = (x - mean.reshape(shape)) * inv_std.reshape(shape)
    return (dy * xhat).sum(axis=axes), dy.sum(axis=axes)


register_no_gradient("ChannelStats", "ChannelBackpropStats")
