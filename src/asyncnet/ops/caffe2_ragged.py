"""Caffe2 ops on ragged (per-row length) data.

- ``PackRNNSequence(VALUES, LENGTHS)``: the ``sum(LENGTHS)`` rows of VALUES as a zero-padded
  time-major ``[max(LENGTHS), len(LENGTHS), ...]`` tensor (column c holds sequence c);
  ``UnpackRNNSequence(PACKED, LENGTHS)`` is the inverse. Each is the other's gradient.
- ``FlexibleTopK(X, K)``: for each row i of X (flattened to its last dim), the ``K[i]`` largest
  values in decreasing order (a tie goes to the smaller index) and their indices (int64), all
  rows concatenated into two 1-D outputs; ``FlexibleTopKGradient`` scatters dValues back.

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace(); ws.feed("v", np.arange(3, dtype=np.float32)[:, None])
    >>> ws.feed("l", np.array([2, 1], np.int32))
    >>> net = an.Net("pack"); _ = net.PackRNNSequence(["v", "l"], "p")
    >>> ws.run_net_once(net); ws.fetch("p")[:, :, 0]
    array([[0., 2.],
           [1., 0.]], dtype=float32)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from asyncnet.core.defs import OperatorDef
from asyncnet.core.registry import register_gradient, register_op
from asyncnet.ops.grad import GradOut, MakerResult, output_grad

__all__: list[str] = []  # the ops are reached through the registry


def _np(x: Any) -> np.ndarray:
    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)


def _where(ctx: Any, i: int) -> str:
    return f"input {i} {ctx.op.inputs[i]!r}"


def _lengths(ctx: Any, x: Any, i: int) -> np.ndarray:
    lens = _np(x)
    if lens.ndim != 1 or lens.dtype.kind not in "iu" or (lens.size and lens.min() < 0):
        raise ValueError(f"expected 1-D non-negative int lengths in {_where(ctx, i)}, got {lens.dtype} {lens.shape}")
    return lens.astype(np.int64)


def _slots(lens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(time step, column) of each packed row, in VALUES's order."""
    cols = np.repeat(np.arange(lens.size), lens)
    steps = np.arange(int(lens.sum())) - np.repeat(np.cumsum(lens) - lens, lens)
    return steps, cols


@register_op(
    "PackRNNSequence",
    inputs=2,
    differentiable=True,
    inputs_doc=("VALUES [sum(LENGTHS), ...]", "LENGTHS [N]"),
    outputs_doc=("PACKED [max(LENGTHS), N, ...], zero-padded",),
    doc="Pack consecutive sequences into a zero-padded time-major tensor.",
)
def pack_rnn_sequence(ctx: Any, values: Any, lengths: Any) -> np.ndarray:
    v, lens = _np(values), _lengths(ctx, lengths, 1)
    if v.ndim == 0 or v.shape[0] != int(lens.sum()):
        raise ValueError(f"expected {int(lens.sum())} rows (the sum of lengths) in {_where(ctx, 0)}, got {v.shape}")
    steps, cols = _slots(lens)
    out = np.zeros((int(lens.max()) if lens.size else 0, lens.size, *v.shape[1:]), v.dtype)
    out[steps, cols] = v
    return out


@register_op(
    "UnpackRNNSequence",
    inputs=2,
    differentiable=True,
    inputs_doc=("PACKED [T, N, ...]", "LENGTHS [N]"),
    outputs_doc=("VALUES [sum(LENGTHS), ...]",),
    doc="Unpack a time-major tensor into consecutive sequences of the given lengths.",
)
def unpack_rnn_sequence(ctx: Any, packed: Any, lengths: Any) -> np.ndarray:
    p, lens = _np(packed), _lengths(ctx, lengths, 1)
    t = int(lens.max()) if lens.size else 0
    if p.ndim < 2 or p.shape[1] != lens.size or p.shape[0] < t:
        raise ValueError(f"expected PACKED [>= {t}, {lens.size}, ...] in {_where(ctx, 0)}, got {p.shape}")
    steps, cols = _slots(lens)
    return np.ascontiguousarray(p[steps, cols])


@register_gradient("PackRNNSequence")
def _pack_grad(op: OperatorDef, gout: GradOut) -> MakerResult:
    return [OperatorDef("UnpackRNNSequence", [output_grad(op, gout), op.inputs[1]], ["#dv"])], ["#dv", None]


@register_gradient("UnpackRNNSequence")
def _unpack_grad(op: OperatorDef, gout: GradOut) -> MakerResult:
    gop = OperatorDef("UnpackRNNSequenceGradient", [output_grad(op, gout), op.inputs[1], op.inputs[0]], ["#dp"])
    return [gop], ["#dp", None]


@register_op(
    "UnpackRNNSequenceGradient",
    inputs=3,
    inputs_doc=("dVALUES", "LENGTHS", "PACKED (the forward input, for its shape)"),
    outputs_doc=("dPACKED",),
    doc="Gradient of UnpackRNNSequence: dVALUES packed into PACKED's shape (zeros elsewhere).",
)
def unpack_rnn_sequence_gradient(ctx: Any, dv: Any, lengths: Any, packed: Any) -> np.ndarray:
    dv, lens, p = _np(dv), _lengths(ctx, lengths, 1), _np(packed)
    steps, cols = _slots(lens)
    out = np.zeros(p.shape, dv.dtype)
    out[steps, cols] = dv
    return out


# -- FlexibleTopK ---------------------------------------------------------------------------------


def _rows_k(ctx: Any, x: Any, k: Any) -> tuple[np.ndarray, np.ndarray]:
    x, k = _np(x), _np(k)
    if x.ndim < 1:
        raise ValueError(f"expected X of at least 1 dim in {_where(ctx, 0)}, got a scalar")
    rows = x.reshape(-1, x.shape[-1])
    if k.ndim != 1 or k.size != rows.shape[0] or k.dtype.kind not in "iu":
        raise ValueError(f"expected {rows.shape[0]} ints K (one per row of X) in {_where(ctx, 1)}, got {k.shape}")
    if k.size and (k.min() < 1 or k.max() > rows.shape[1]):
        raise ValueError(f"expected K in [1, {rows.shape[1]}] in {_where(ctx, 1)}, got [{k.min()}, {k.max()}]")
    return rows, k.astype(np.int64)


@register_op(
    "FlexibleTopK",
    inputs=2,
    outputs=2,
    differentiable=True,
    inputs_doc=("X [..., D]", "K [prod of X's leading dims] ints"),
    outputs_doc=("Values [sum(K)]", "Indices [sum(K)] int64 (within each row)"),
    doc="The K[i] largest values of each row of X in decreasing order and their indices, concatenated.",
)
def flexible_top_k(ctx: Any, x: Any, k: Any) -> tuple[np.ndarray, np.ndarray]:
    rows, k = _rows_k(ctx, x, k)
    order = np.argsort(-rows, axis=1, kind="stable")
    idx = np.concatenate([order[i, :n] for i, n in enumerate(k)]) if k.size else np.zeros(0, np.int64)
    row_of = np.repeat(np.arange(k.size), k)
    return rows[row_of, idx], idx.astype(np.int64)


@register_op(
    "FlexibleTopKGradient",
    inputs=4,
    inputs_doc=("X (the forward input)", "K", "dValues [sum(K)]", "Indices [sum(K)]"),
    outputs_doc=("dX",),
    doc="Gradient of FlexibleTopK: dValues scattered to the picked positions, zeros elsewhere.",
)
def flexible_top_k_gradient(ctx: Any, x: Any, k: Any, dv: Any, indices: Any) -> np.ndarray:
    rows, k = _rows_k(ctx, x, k)
    dv, idx = _np(dv), _np(indices).astype(np.int64)
    if dv.shape != (int(k.sum()),) or idx.shape != dv.shape:
        raise ValueError(f"expected dValues and Indices of shape ({int(k.sum())},), got {dv.shape}, {idx.shape}")
    dx = np.zeros(rows.shape, dv.dtype)
    dx[np.repeat(np.arange(k.size), k), idx] = dv
    return dx.reshape(_np(x).shape)


@register_gradient("FlexibleTopK")
def _flexible_top_k_grad(op: OperatorDef, gout: GradOut) -> MakerResult:
    if gout[0] is None:
        return [], [None, None]
    ins = [op.inputs[0], op.inputs[1], gout[0], op.outputs[1]]
    return [OperatorDef("FlexibleTopKGradient", ins, ["#dx"])], ["#dx", None]
