"""Caffe2 ops reshaping sparse feature ranges.

- ``GatherRangesToDense(DATA, RANGES[, KEY])`` with ``lengths = [L_0, ...]``: RANGES is
  ``[batch, R, 2]`` of ``(start, length)``; output r is ``[batch, L_r, ...]`` holding each
  example's range r of DATA (which must have length ``L_r``, or 0 for zeros). With KEY (one per
  DATA entry), each range's entries come ordered by their key.
- ``PadEmptySamples(LENGTHS, FEATURES...)``: every sample of length 0 gets length 1 and one zero
  feature row, in every FEATURES input.
- ``ExtendTensor(TENSOR, INDICES)`` (in place): TENSOR grown along its first dim with zero rows
  so that every index is a valid row (``growthPct`` is accepted: Caffe2's spare capacity).

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace(); ws.feed("l", np.array([1, 0, 2], np.int32))
    >>> ws.feed("f", np.array([5, 6, 7], np.int64))
    >>> net = an.Net("pad"); _ = net.PadEmptySamples(["l", "f"], ["l2", "f2"])
    >>> ws.run_net_once(net); ws.fetch("l2"), ws.fetch("f2")
    (array([1, 1, 2], dtype=int32), array([5, 0, 6, 7]))
"""

from __future__ import annotations

from typing import Any

import numpy as np

from asyncnet.core.registry import Arg, register_no_gradient, register_op

__all__: list[str] = []  # the ops are reached through the registry


def _np(x: Any) -> np.ndarray:
    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)


def _where(ctx: Any, i: int) -> str:
    return f"input {i} {ctx.op.inputs[i]!r}"


@register_op(
    "GatherRangesToDense",
    inputs=(2, 3),
    outputs=(1, None),
    args=[Arg("lengths", list, Arg.REQUIRED, "each range's length (one per output)", item_type=int)],
    inputs_doc=("DATA [N, ...]", "RANGES [batch, R, 2] (start, length)", "KEY [N] (optional: sort each range)"),
    outputs_doc=("one [batch, lengths[r], ...] tensor per range r",),
    doc="Each example's r-th range of DATA as row of output r (zeros for an empty range).",
)
def gather_ranges_to_dense(ctx: Any, data: Any, ranges: Any, *key: Any) -> Any:
    data, ranges = _np(data), _np(ranges)
    lengths = ctx.args["lengths"]
    if ranges.ndim != 3 or ranges.shape[2] != 2 or ranges.shape[1] != len(lengths):
        raise ValueError(f"expected RANGES [batch, {len(lengths)}, 2] in {_where(ctx, 1)}, got {ranges.shape}")
    if len(ctx.op.outputs) != len(lengths):
        raise ValueError(f"expected one output per range ({len(lengths)}), got {len(ctx.op.outputs)}")
    keys = _np(key[0]) if key else None
    if keys is not None and keys.shape != data.shape[:1]:
        raise ValueError(f"expected one key per DATA row ({data.shape[0]}) in {_where(ctx, 2)}, got {keys.shape}")
    outs = []
    for r, size in enumerate(lengths):
        out = np.zeros((ranges.shape[0], size, *data.shape[1:]), data.dtype)
        for b in range(ranges.shape[0]):
            start, n = int(ranges[b, r, 0]), int(ranges[b, r, 1])
            if n == 0:
                continue
            if n != size or start < 0 or start + n > data.shape[0]:
                raise ValueError(f"expected range ({start}, {n}) of example {b} to have length {size} within DATA")
            piece = data[start : start + n]
            if keys is not None:
                piece = piece[np.argsort(keys[start : start + n], kind="stable")]
            out[b] = piece
        outs.append(out)
    return outs[0] if len(outs) == 1 else tuple(outs)


@register_op(
    "PadEmptySamples",
    inputs=(1, None),
    outputs=(1, None),
    inputs_doc=("LENGTHS [B]", "FEATURES... (rows per sample, as LENGTHS says)"),
    outputs_doc=("OUT_LENGTHS: 0 became 1", "OUT_FEATURES...: a zero row for each empty sample"),
    doc="Give every empty sample one zero feature row (its length becomes 1).",
)
def pad_empty_samples(ctx: Any, lengths: Any, *features: Any) -> Any:
    lens = _np(lengths)
    if lens.ndim != 1 or lens.dtype.kind not in "iu" or (lens.size and lens.min() < 0):
        raise ValueError(f"expected 1-D non-negative int lengths in {_where(ctx, 0)}, got {lens.dtype} {lens.shape}")
    if len(ctx.op.outputs) != 1 + len(features):
        raise ValueError(f"expected {1 + len(features)} outputs (lengths and each feature), got {len(ctx.op.outputs)}")
    starts = np.cumsum(lens) - lens
    empty = np.flatnonzero(lens == 0)
    out: list[np.ndarray] = [np.maximum(lens, 1).astype(lens.dtype)]
    for j, f in enumerate(features):
        f = _np(f)
        if f.shape[:1] != (int(lens.sum()),):
            raise ValueError(f"expected {int(lens.sum())} rows in {_where(ctx, j + 1)}, got {f.shape}")
        row = f.shape[1:] if f.ndim > 1 else ()
        if f.ndim == 1 and f.size == 0:
            row = ()
        out.append(np.insert(f, starts[empty], np.zeros(row, f.dtype), axis=0) if empty.size else f.copy())
    return out[0] if len(out) == 1 else tuple(out)


@register_op(
    "ExtendTensor",
    inputs=2,
    enforce_inplace={0: 0},
    args=[Arg("growthPct", int, 40, "Caffe2's spare capacity in percent (no effect on the values)")],
    inputs_doc=("TENSOR [N, ...] (also the output)", "INDICES (ints)"),
    outputs_doc=("TENSOR grown with zero rows to max(N, max(INDICES) + 1) rows",),
    doc="Grow TENSOR along its first dim with zero rows so that every index is a row.",
)
def extend_tensor(ctx: Any, tensor: Any, indices: Any) -> np.ndarray:
    t, idx = _np(tensor), _np(indices)
    if t.ndim == 0 or idx.dtype.kind not in "iu":
        raise ValueError(f"expected a tensor of at least 1 dim and int indices, got {t.shape} and {idx.dtype}")
    need = int(idx.max()) + 1 if idx.size else 0
    if need <= t.shape[0]:
        return t
    return np.concatenate([t, np.zeros((need - t.shape[0], *t.shape[1:]), t.dtype)])


register_no_gradient("GatherRangesToDense", "PadEmptySamples", "ExtendTensor")
