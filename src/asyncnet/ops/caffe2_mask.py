"""Caffe2's mask and per-segment selection ops.

- ``BooleanMask(DATA, MASK)``: the rows of DATA where the 1-D bool MASK is true, and optionally
  their positions (int64); ``BooleanMaskGradient(MASK, dOUT)`` scatters them back.
- ``BooleanMaskLengths(LENGTHS, MASK)``: how many true entries each segment of MASK holds.
- ``BooleanUnmask(MASK_0, VALUES_0, MASK_1, VALUES_1, ...)``: the inverse: one vector of the
  masks' length where VALUES_i fills the true positions of MASK_i (zeros where no mask is true).
- ``LengthsTopK(DATA, LENGTHS)``: the k largest values of each segment of the 1-D DATA in
  decreasing order (a tie goes to the earlier one) and their positions in the segment (int32),
  padded with 0 and -1 when a segment has fewer than k; ``LengthsTopKGradient``.
- ``BatchSparseToDense(LENGTHS, INDICES, VALUES[, SHAPE_LIKE])``: row b of a dense
  ``[len(LENGTHS), dense_last_dim]`` matrix filled with ``default_value`` gets the values of
  segment b at its indices; ``BatchDenseToSparse(LENGTHS, INDICES, DENSE)`` reads them back.
  Each is the other's gradient.

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace(); ws.feed("x", np.array([3.0, 1.0, 2.0, 5.0], np.float32))
    >>> ws.feed("len", np.array([3, 1], np.int32))
    >>> net = an.Net("topk"); _ = net.LengthsTopK(["x", "len"], ["v", "i"], k=2)
    >>> ws.run_net_once(net); ws.fetch("v"), ws.fetch("i")
    (array([[3., 2.],
           [5., 0.]], dtype=float32), array([[ 0,  2],
           [ 0, -1]], dtype=int32))
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


def _where(ctx: Any, i: int) -> str:
    return f"input {i} {ctx.op.inputs[i]!r}"


def _mask(ctx: Any, m: Any, i: int, n: int | None = None) -> np.ndarray:
    m = _np(m)
    if m.dtype != np.bool_ or m.ndim != 1 or (n is not None and m.size != n):
        want = f"of length {n}" if n is not None else ""
        raise TypeError(f"expected a 1-D bool mask {want} in {_where(ctx, i)}, got {m.dtype} {m.shape}")
    return m


def _ints(ctx: Any, x: Any, i: int) -> np.ndarray:
    x = _np(x)
    if x.ndim != 1 or x.dtype.kind not in "iu":
        raise TypeError(f"expected a 1-D int vector in {_where(ctx, i)}, got {x.dtype} {x.shape}")
    return x.astype(np.int64)


def _lengths(ctx: Any, x: Any, i: int, total: int) -> np.ndarray:
    lens = _ints(ctx, x, i)
    if (lens.size and lens.min() < 0) or int(lens.sum()) != total:
        raise ValueError(f"expected non-negative lengths summing to {total} in {_where(ctx, i)}, got {lens.tolist()}")
    return lens


# -- BooleanMask ----------------------------------------------------------------------------------


@register_op(
    "BooleanMask",
    inputs=2,
    outputs=(1, 2),
    differentiable=True,
    inputs_doc=("DATA [N, ...]", "MASK [N] bool"),
    outputs_doc=("MASKED_DATA: DATA's rows where MASK is true", "MASKED_INDICES (int64, optional)"),
    doc="The rows of DATA where MASK is true (and their positions).",
)
def boolean_mask(ctx: Any, data: Any, mask: Any) -> Any:
    data = _np(data)
    if data.ndim == 0:
        raise ValueError(f"expected DATA of at least 1 dim in {_where(ctx, 0)}, got a scalar")
    m = _mask(ctx, mask, 1, data.shape[0])
    out = data[m]
    return (out, np.flatnonzero(m).astype(np.int64)) if len(ctx.op.outputs) == 2 else out


@register_op(
    "BooleanMaskGradient",
    inputs=2,
    inputs_doc=("MASK [N] bool", "dMASKED_DATA"),
    outputs_doc=("dDATA [N, ...]: zeros but for the rows MASK kept",),
    doc="Gradient of BooleanMask: dMASKED_DATA's rows put back where MASK is true.",
)
def boolean_mask_gradient(ctx: Any, mask: Any, dy: Any) -> np.ndarray:
    m, dy = _mask(ctx, mask, 0), _np(dy)
    if dy.ndim == 0 or dy.shape[0] != int(m.sum()):
        raise ValueError(f"expected {int(m.sum())} rows (the true entries of MASK) in {_where(ctx, 1)}, got {dy.shape}")
    dx = np.zeros((m.size, *dy.shape[1:]), dy.dtype)
    dx[m] = dy
    return dx


@register_gradient("BooleanMask")
def _boolean_mask_grad(op: OperatorDef, gout: GradOut) -> MakerResult:
    return [OperatorDef("BooleanMaskGradient", [op.inputs[1], output_grad(op, gout)], ["#dx"])], ["#dx", None]


@register_op(
    "BooleanMaskLengths",
    inputs=2,
    inputs_doc=("LENGTHS [B] int", "MASK [sum(LENGTHS)] bool"),
    outputs_doc=("MASKED_LENGTHS [B] int32: the true entries of each segment",),
    doc="How many true entries of MASK each segment (given by LENGTHS) holds.",
)
def boolean_mask_lengths(ctx: Any, lengths: Any, mask: Any) -> np.ndarray:
    m = _mask(ctx, mask, 1)
    lens = _lengths(ctx, lengths, 0, m.size)
    ids = np.repeat(np.arange(lens.size), lens)
    return np.bincount(ids[m], minlength=lens.size).astype(np.int32)


@register_op(
    "BooleanUnmask",
    inputs=(2, None),
    inputs_doc=("MASK_0 [N] bool", "VALUES_0 [sum(MASK_0)]", "... more (MASK, VALUES) pairs"),
    outputs_doc=("UNMASKED [N]: VALUES_i at the true positions of MASK_i",),
    doc="Merge masked vectors back: VALUES_i fills the true positions of MASK_i (zeros elsewhere).",
)
def boolean_unmask(ctx: Any, *pairs: Any) -> np.ndarray:
    if len(pairs) % 2:
        raise ValueError(f"expected (MASK, VALUES) pairs of inputs, got {len(pairs)} inputs")
    first = _mask(ctx, pairs[0], 0)
    values = [_np(v) for v in pairs[1::2]]
    out = np.zeros(first.size, values[0].dtype)
    for j, v in enumerate(values):
        m = _mask(ctx, pairs[2 * j], 2 * j, first.size)
        if v.ndim != 1 or v.size != int(m.sum()):
            raise ValueError(
                f"expected {int(m.sum())} values (the true entries of MASK_{j}) in {_where(ctx, 2 * j + 1)}"
            )
        out[m] = v
    return out


# -- LengthsTopK ----------------------------------------------------------------------------------


@register_op(
    "LengthsTopK",
    inputs=2,
    outputs=2,
    differentiable=True,
    args=[Arg("k", int, Arg.REQUIRED, "how many values per segment")],
    inputs_doc=("DATA [sum(LENGTHS)]", "LENGTHS [B] int"),
    outputs_doc=("TopKValue [B, k] (0 padded)", "TopKIndices [B, k] int32 (-1 padded)"),
    doc="The k largest values of each segment in decreasing order and their positions in it.",
)
def lengths_top_k(ctx: Any, data: Any, lengths: Any) -> tuple[np.ndarray, np.ndarray]:
    x, k = _np(data), ctx.args["k"]
    if k < 1:
        raise ValueError(f"expected k >= 1, got {k}")
    if x.ndim != 1:
        raise ValueError(f"expected a 1-D DATA in {_where(ctx, 0)}, got shape {x.shape}")
    lens = _lengths(ctx, lengths, 1, x.size)
    values = np.zeros((lens.size, k), x.dtype)
    indices = np.full((lens.size, k), -1, np.int32)
    start = 0
    for b, n in enumerate(lens):
        order = np.argsort(-x[start : start + n], kind="stable")[:k]
        values[b, : order.size] = x[start + order]
        indices[b, : order.size] = order
        start += n
    return values, indices


@register_op(
    "LengthsTopKGradient",
    inputs=3,
    args=[Arg("k", int, Arg.REQUIRED, "the forward op's k")],
    inputs_doc=("LENGTHS [B]", "TopKIndices [B, k]", "dTopKValue [B, k]"),
    outputs_doc=("dDATA [sum(LENGTHS)]",),
    doc="Gradient of LengthsTopK: each kept value's gradient at its position, zeros elsewhere.",
)
def lengths_top_k_gradient(ctx: Any, lengths: Any, indices: Any, dv: Any) -> np.ndarray:
    lens, idx, dv = _ints(ctx, lengths, 0), _np(indices), _np(dv)
    k = ctx.args["k"]
    if idx.shape != (lens.size, k) or dv.shape != (lens.size, k):
        raise ValueError(f"expected TopKIndices and dTopKValue of shape {(lens.size, k)}, got {idx.shape}, {dv.shape}")
    dx = np.zeros(int(lens.sum()), dv.dtype)
    offsets = np.cumsum(lens) - lens
    kept = idx >= 0
    dx[(offsets[:, None] + idx)[kept]] = dv[kept]
    return dx


@register_gradient("LengthsTopK")
def _lengths_top_k_grad(op: OperatorDef, gout: GradOut) -> MakerResult:
    if gout[0] is None:
        return [], [None, None]
    args = {"k": op.args["k"]}
    gop = OperatorDef("LengthsTopKGradient", [op.inputs[1], op.outputs[1], gout[0]], ["#dx"], args)
    return [gop], ["#dx", None]


# -- BatchSparseToDense / BatchDenseToSparse ------------------------------------------------------


def _batch_positions(ctx: Any, lengths: Any, indices: Any, width: int) -> tuple[np.ndarray, np.ndarray]:
    idx = _ints(ctx, indices, 1)
    lens = _lengths(ctx, lengths, 0, idx.size)
    if idx.size and (idx.min() < 0 or idx.max() >= width):
        raise ValueError(f"expected indices in [0, {width}) in {_where(ctx, 1)}, got [{idx.min()}, {idx.max()}]")
    return np.repeat(np.arange(lens.size), lens), idx


@register_op(
    "BatchSparseToDense",
    inputs=(3, 4),
    differentiable=True,
    args=[
        Arg("dense_last_dim", int, -1, "the dense width (or the shape of input 3)"),
        Arg("default_value", float, 0.0, "the value where no index points"),
    ],
    inputs_doc=("LENGTHS [B]", "INDICES [sum(LENGTHS)]", "VALUES [sum(LENGTHS)]", "SHAPE_LIKE [B, D] (optional)"),
    outputs_doc=("DENSE [B, D]",),
    doc="Scatter each segment's values to its row of a dense matrix filled with default_value.",
)
def batch_sparse_to_dense(ctx: Any, lengths: Any, indices: Any, values: Any, *like: Any) -> np.ndarray:
    v = _np(values)
    b = _ints(ctx, lengths, 0).size
    if like:
        width = _np(like[0]).shape[-1] if _np(like[0]).ndim == 2 else -1
        if _np(like[0]).shape[:1] != (b,) or width < 0:
            raise ValueError(f"expected a [{b}, D] SHAPE_LIKE in {_where(ctx, 3)}, got {_np(like[0]).shape}")
    else:
        width = ctx.args["dense_last_dim"]
        if width < 0:
            raise ValueError("expected the dense_last_dim argument or a SHAPE_LIKE input")
    rows, idx = _batch_positions(ctx, lengths, indices, width)
    if v.shape != idx.shape:
        raise ValueError(f"expected {idx.size} values (one per index) in {_where(ctx, 2)}, got {v.shape}")
    out = np.full((b, width), ctx.args["default_value"], v.dtype)
    out[rows, idx] = v
    return out


@register_op(
    "BatchDenseToSparse",
    inputs=3,
    differentiable=True,
    inputs_doc=("LENGTHS [B]", "INDICES [sum(LENGTHS)]", "DENSE [B, D]"),
    outputs_doc=("VALUES [sum(LENGTHS)]: DENSE[b, index] for each index of segment b",),
    doc="Read each segment's values from its row of a dense matrix (BatchSparseToDense's inverse).",
)
def batch_dense_to_sparse(ctx: Any, lengths: Any, indices: Any, dense: Any) -> np.ndarray:
    d = _np(dense)
    if d.ndim != 2:
        raise ValueError(f"expected a 2-D DENSE in {_where(ctx, 2)}, got {d.shape}")
    rows, idx = _batch_positions(ctx, lengths, indices, d.shape[1])
    if rows.size and rows.max() >= d.shape[0]:
        raise ValueError(f"expected {int(rows.max()) + 1} rows in {_where(ctx, 2)}, got {d.shape[0]}")
    return d[rows, idx]


@register_gradient("BatchSparseToDense")
def _bstd_grad(op: OperatorDef, gout: GradOut) -> MakerResult:
    gop = OperatorDef("BatchDenseToSparse", [op.inputs[0], op.inputs[1], output_grad(op, gout)], ["#dv"])
    return [gop], [None, None, "#dv"] + [None] * (len(op.inputs) - 3)


@register_gradient("BatchDenseToSparse")
def _bdts_grad(op: OperatorDef, gout: GradOut) -> MakerResult:
    ins = [op.inputs[0], op.inputs[1], output_grad(op, gout), op.inputs[2]]
    return [OperatorDef("BatchSparseToDense", ins, ["#dd"])], [None, None, "#dd"]


register_no_gradient("BooleanMaskLengths", "BooleanUnmask")
