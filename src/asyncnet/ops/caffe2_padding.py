"""Caffe2's sequence padding and range operators: ``AddPadding`` (its gradient is
``RemovePadding`` of dY plus ``GatherPadding`` for the padding inputs), ``RemovePadding``,
``GatherPadding``, ``GatherRanges`` and ``BatchBoxCox``.

Sequences are cut along axis 0 by ``lengths`` (no lengths: one sequence of all rows).
``AddPadding`` puts ``padding_width`` rows of ``start_padding`` before each sequence and
``end_padding_width`` (-1: the same) rows of ``end_padding`` after it (zeros when not given).

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace(); ws.feed("x", np.array([1.0, 2.0, 3.0], np.float32)); ws.feed("l", np.array([1, 2], np.int32))
    >>> net = an.Net("pad"); _ = net.AddPadding(["x", "l"], ["y", "yl"], padding_width=1)
    >>> ws.run_net_once(net); ws.fetch("y"), ws.fetch("yl")
    (array([0., 1., 0., 0., 2., 3., 0.], dtype=float32), array([3, 4], dtype=int32))
"""

from __future__ import annotations

from typing import Any

import numpy as np

from asyncnet.core.defs import OperatorDef
from asyncnet.core.registry import Arg, register_gradient, register_no_gradient, register_op
from asyncnet.ops._check import array, float_array

__all__: list[str] = []  # the ops are reached through the registry

_PAD_ARGS = [
    Arg("padding_width", int, 1, "rows added before (removed from the start of) each sequence"),
    Arg("end_padding_width", int, -1, "rows added after each sequence; -1: padding_width"),
]


def _np(x: Any) -> np.ndarray:
    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)


def _widths(ctx: Any) -> tuple[int, int]:
    start, end = ctx.args["padding_width"], ctx.args["end_padding_width"]
    end = start if end < 0 else end
    if start < 0:
        raise ValueError(f"expected padding_width >= 0, got {start}")
    return start, end


def _seq_lengths(ctx: Any, data: np.ndarray, lengths: Any | None) -> np.ndarray:
    if lengths is None:
        return np.array([data.shape[0]], np.int64)
    lengths = array(ctx, _np(lengths), 1).reshape(-1).astype(np.int64)
    if int(lengths.sum()) != data.shape[0] or (lengths.size and lengths.min() < 0):
        raise ValueError(f"expected lengths summing to the {data.shape[0]} rows of data, got {lengths.tolist()}")
    return lengths


def _rows(ctx: Any, pad: Any | None, data: np.ndarray, i: int) -> np.ndarray:
    if pad is None:
        return np.zeros(data.shape[1:], data.dtype)
    pad = array(ctx, _np(pad), i)
    if pad.size != int(np.prod(data.shape[1:], dtype=np.int64)):
        raise ValueError(f"expected a padding of one row of data {data.shape[1:]}, got shape {pad.shape}")
    return pad.reshape(data.shape[1:]).astype(data.dtype, copy=False)


@register_op(
    "AddPadding",
    inputs=(1, 4),
    outputs=(1, 2),
    args=_PAD_ARGS,
    inputs_doc=("data", "lengths (optional)", "start_padding (one row, optional)", "end_padding (optional)"),
    outputs_doc=("data_out", "lengths_out (int32, optional)"),
    doc="Padding rows around each sequence of data (cut along axis 0 by lengths).",
)
def add_padding(ctx: Any, data: Any, lengths: Any = None, start_pad: Any = None, end_pad: Any = None) -> Any:
    data = array(ctx, _np(data), 0)
    if data.ndim == 0:
        raise ValueError("expected data of at least 1 dimension, got a scalar")
    start, end = _widths(ctx)
    lengths = _seq_lengths(ctx, data, lengths)
    head = _rows(ctx, start_pad, data, 2)
    tail = _rows(ctx, end_pad, data, 3) if end_pad is not None else head
    parts, at = [], 0
    for n in lengths.tolist():
        parts += [
            np.broadcast_to(head, (start,) + head.shape),
            data[at : at + n],
            np.broadcast_to(tail, (end,) + tail.shape),
        ]
        at += n
    out = np.concatenate(parts) if parts else np.zeros((0,) + data.shape[1:], data.dtype)
    if len(ctx.op.outputs) == 1:
        return out
    return out, (lengths + start + end).astype(np.int32)


@register_op(
    "RemovePadding",
    inputs=(1, 2),
    outputs=(1, 2),
    args=_PAD_ARGS,
    inputs_doc=("data", "lengths (optional, of the padded sequences)"),
    outputs_doc=("data_out", "lengths_out (int32, optional)"),
    doc="The inverse of AddPadding: padding_width rows dropped from the start of each sequence, "
    "end_padding_width from its end.",
)
def remove_padding(ctx: Any, data: Any, lengths: Any = None) -> Any:
    data = array(ctx, _np(data), 0)
    start, end = _widths(ctx)
    lengths = _seq_lengths(ctx, data, lengths)
    if lengths.size and lengths.min() < start + end:
        raise ValueError(f"expected sequences of at least {start + end} rows, got lengths {lengths.tolist()}")
    parts, at = [], 0
    for n in lengths.tolist():
        parts.append(data[at + start : at + n - end])
        at += n
    out = np.concatenate(parts) if parts else np.zeros((0,) + data.shape[1:], data.dtype)
    if len(ctx.op.outputs) == 1:
        return out
    return out, (lengths - start - end).astype(np.int32)


@register_op(
    "GatherPadding",
    inputs=(1, 2),
    outputs=(1, 2),
    args=_PAD_ARGS,
    inputs_doc=("data (padded)", "lengths (optional)"),
    outputs_doc=("start_padding (the sum of the start rows; with one output, of both ends)", "end_padding (optional)"),
    doc="The sums over all sequences of their start and end padding rows (AddPadding's padding gradients).",
)
def gather_padding(ctx: Any, data: Any, lengths: Any = None) -> Any:
    data = float_array(ctx, _np(data), 0)
    start, end = _widths(ctx)
    lengths = _seq_lengths(ctx, data, lengths)
    head = tail = np.zeros(data.shape[1:], data.dtype)
    at = 0
    for n in lengths.tolist():
        head = head + data[at : at + start].sum(axis=0)
        tail = tail + data[at + n - end : at + n].sum(axis=0)
        at += n
    if len(ctx.op.outputs) == 1:  # as in Caffe2: one output sums both ends
        return np.asarray(head + tail)
    return np.asarray(head), np.asarray(tail)


@register_gradient("AddPadding")
def _add_padding_grad(op: OperatorDef, gout: list[Any]) -> tuple[list[OperatorDef], list[Any]]:
    n = len(op.inputs)
    if gout[0] is None:
        return [], [None] * n
    ins = [gout[0]] + ([op.outputs[1]] if len(op.outputs) > 1 else [])
    if n > 1 and len(op.outputs) < 2:
        return [], [None] * n  # the padded lengths are needed to cut dY
    ops = [OperatorDef("RemovePadding", ins, ["#dx"], dict(op.args))]
    grads: list[Any] = ["#dx", None]
    if n > 2:  # one padding input serves both ends: one GatherPadding output sums them
        outs = ["#dstart", "#dend"][: n - 2]
        ops.append(OperatorDef("GatherPadding", ins, outs, dict(op.args)))
        grads += outs
    return ops, grads[:n]


register_no_gradient("RemovePadding", "GatherPadding")


# -- GatherRanges ---------------------------------------------------------------------------------


@register_op(
    "GatherRanges",
    inputs=2,
    outputs=2,
    inputs_doc=("DATA (1-D)", "RANGES (N x R x 2: start, length)"),
    outputs_doc=("OUTPUT (the ranges of DATA, concatenated)", "LENGTHS (int32, the total length per example)"),
    doc="The (start, length) ranges of DATA, example after example, and each example's total length.",
)
def gather_ranges(ctx: Any, data: Any, ranges: Any) -> tuple[np.ndarray, np.ndarray]:
    data, ranges = array(ctx, _np(data), 0), array(ctx, _np(ranges), 1)
    if ranges.ndim != 3 or ranges.shape[2] != 2:
        raise ValueError(f"expected RANGES of shape (N, R, 2), got {ranges.shape}")
    if data.ndim != 1:
        raise ValueError(f"expected a 1-D DATA, got shape {data.shape}")
    r = ranges.astype(np.int64)
    starts, sizes = r[..., 0].reshape(-1), r[..., 1].reshape(-1)
    if sizes.size and (sizes.min() < 0 or starts.min() < 0 or (starts + sizes).max() > data.size):
        raise IndexError(f"a range of RANGES falls outside the {data.size} elements of DATA")
    pieces = [data[s : s + n] for s, n in zip(starts.tolist(), sizes.tolist())]
    out = np.concatenate(pieces) if pieces else np.zeros(0, data.dtype)
    return out, r[..., 1].sum(axis=1).astype(np.int32)


# -- BatchBoxCox ------------------------------------------------------------------------------------


@register_op(
    "BatchBoxCox",
    inputs=3,
    args=[
        Arg("naive", bool, False, "accepted: one implementation here"),
        Arg("min_block_size", int, 256, "accepted: one implementation here"),
    ],
    inputs_doc=("data (N x D)", "lambda1 (D,)", "lambda2 (D,)"),
    doc="Box-Cox per column: b = max(x + lambda2, 1e-6); (b^lambda1 - 1) / lambda1, or log(b) where lambda1 = 0.",
)
def batch_box_cox(ctx: Any, data: Any, lambda1: Any, lambda2: Any) -> np.ndarray:
    data = float_array(ctx, _np(data), 0)
    l1, l2 = float_array(ctx, _np(lambda1), 1).reshape(-1), float_array(ctx, _np(lambda2), 2).reshape(-1)
    if data.ndim != 2 or l1.size != data.shape[1] or l2.size != data.shape[1]:
        raise ValueError(f"expected data (N, D) and lambdas of D elements, got {data.shape}, {l1.size}, {l2.size}")
    base = np.maximum(data + l2, data.dtype.type(1e-6))
    zero = l1 == 0
    safe = np.where(zero, 1, l1).astype(data.dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        out = np.where(zero, np.log(base), (np.power(base, safe) - 1) / safe)
    return out.astype(data.dtype, copy=False)


register_no_gradient("GatherRanges", "BatchBoxCox")
