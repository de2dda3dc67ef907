"""Caffe2's 8-bit rowwise quantized embeddings and their ``SparseLengths*`` lookups.

Two layouts, both quantizing each row ``x`` to ``q = round((x - min) / scale)`` with
``scale = (max - min) / 255`` and ``bias = min`` (dequantized: ``q * scale + bias``):

- *fused*: one uint8 matrix of ``cols + 8`` columns per row, the ``cols`` codes then ``scale``
  and ``bias`` as the bytes of two float32 (``FloatToFused8BitRowwiseQuantized``,
  ``Fused8BitRowwiseQuantizedToFloat``, ``SparseLengths{Sum,WeightedSum,Mean}Fused8BitRowwise``);
- *split*: a uint8 matrix of codes and a float32 ``(rows, 2)`` matrix of ``[scale, bias]``
  (``FloatToRowwiseQuantized8Bits``, ``Rowwise8BitQuantizedToFloat``,
  ``SparseLengths{Sum,WeightedSum,Mean,WeightedMean}8BitsRowwise``); a constant row gets scale 1 and codes 0.

The lookups give what ``SparseLengths{Sum,WeightedSum,Mean}`` give on the dequantized table.

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace(); ws.feed("x", np.array([[0.0, 255.0, 51.0]], np.float32))
    >>> net = an.Net("q"); _ = net.FloatToFused8BitRowwiseQuantized("x", "q")
    >>> _ = net.Fused8BitRowwiseQuantizedToFloat("q", "y")
    >>> ws.run_net_once(net); ws.fetch("q").shape, ws.fetch("y")
    ((1, 11), array([[  0., 255.,  51.]], dtype=float32))
"""

from __future__ import annotations

from typing import Any

import numpy as np

from asyncnet.core.registry import Arg, register_no_gradient, register_op

__all__: list[str] = []  # the ops are reached through the registry

_EPSILON = 1e-8  # Caffe2's fused quantizer adds this to the range before inverting it
_CONSTANT_ROW = 1e-10  # below this range, the split quantizer gives scale 1 and codes 0


def _np(x: Any) -> np.ndarray:
    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)


def _name(ctx: Any, i: int) -> str:
    return f"input {i} {ctx.op.inputs[i]!r}"


def _float_matrix(ctx: Any, x: Any, i: int) -> np.ndarray:
    x = _np(x)
    if x.dtype != np.float32 or x.ndim != 2:
        raise TypeError(f"expected a 2-D float32 matrix in {_name(ctx, i)}, got {x.dtype} {x.shape}")
    return x


def _uint8(ctx: Any, x: Any, i: int, min_cols: int = 0) -> np.ndarray:
    x = _np(x)
    if x.dtype != np.uint8 or x.ndim != 2 or x.shape[1] < min_cols:
        raise TypeError(
            f"expected a 2-D uint8 matrix of at least {min_cols} columns in {_name(ctx, i)}, got {x.dtype} {x.shape}"
        )
    return x


def _minmax(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if x.shape[1] == 0:
        zero = np.zeros((x.shape[0], 1), np.float32)
        return zero, zero
    return x.min(axis=1, keepdims=True), x.max(axis=1, keepdims=True)


# -- fused layout ---------------------------------------------------------------------------------


@register_op(
    "FloatToFused8BitRowwiseQuantized",
    inputs_doc=("DATA (2-D float32)",),
    outputs_doc=("OUTPUT (uint8, cols + 8: codes, then scale and bias as float32 bytes)",),
    doc="Each row quantized to uint8 codes with its own float32 scale and bias appended as bytes.",
)
def float_to_fused(ctx: Any, data: Any) -> np.ndarray:
    x = _float_matrix(ctx, data, 0)
    lo, hi = _minmax(x)
    span = hi - lo
    scale = (span / np.float32(255.0)).astype(np.float32)
    inverse = (np.float32(255.0) / (span + np.float32(_EPSILON))).astype(np.float32)
    codes = np.clip(np.rint((x - lo) * inverse), 0, 255).astype(np.uint8)
    tail = np.concatenate([scale, lo.astype(np.float32)], axis=1).view(np.uint8)
    return np.ascontiguousarray(np.concatenate([codes, tail], axis=1))


def _fused_parts(ctx: Any, data: Any, i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    q = _uint8(ctx, data, i, 8)
    tail = np.ascontiguousarray(q[:, -8:]).view(np.float32)
    return q[:, :-8], tail[:, :1], tail[:, 1:]


@register_op(
    "Fused8BitRowwiseQuantizedToFloat",
    inputs_doc=("DATA (uint8, cols + 8, from FloatToFused8BitRowwiseQuantized)",),
    outputs_doc=("OUTPUT (float32, cols)",),
    doc="Dequantize each fused row: codes * scale + bias.",
)
def fused_to_float(ctx: Any, data: Any) -> np.ndarray:
    codes, scale, bias = _fused_parts(ctx, data, 0)
    return (codes.astype(np.float32) * scale + bias).astype(np.float32)


@register_op(
    "GatherFused8BitRowwise",
    inputs=2,
    inputs_doc=("DATA (uint8, cols + 8, fused rows)", "INDICES (1-D int32 or int64)"),
    outputs_doc=("OUTPUT (float32, len(INDICES) x cols)",),
    doc="Gather on fused 8-bit rows: the rows INDICES picks, dequantized (codes * scale + bias).",
)
def gather_fused(ctx: Any, data: Any, indices: Any) -> np.ndarray:
    codes, scale, bias = _fused_parts(ctx, data, 0)
    idx = _np(indices)
    if idx.ndim != 1 or idx.dtype.kind not in "iu":
        raise TypeError(f"expected 1-D integer INDICES in {_name(ctx, 1)}, got {idx.dtype} {idx.shape}")
    if idx.size and (idx.min() < 0 or idx.max() >= len(codes)):
        raise IndexError(f"expected INDICES in [0, {len(codes)}), got values in [{idx.min()}, {idx.max()}]")
    return (codes[idx].astype(np.float32) * scale[idx] + bias[idx]).astype(np.float32)


# -- split layout ---------------------------------------------------------------------------------


@register_op(
    "FloatToRowwiseQuantized8Bits",
    outputs=2,
    inputs_doc=("DATA (2-D float32)",),
    outputs_doc=("DATA_UINT8 (codes)", "SCALE_BIAS (float32, rows x 2)"),
    doc="Each row quantized to uint8 codes, with its [scale, bias] in a separate matrix.",
)
def float_to_rowwise(ctx: Any, data: Any) -> tuple[np.ndarray, np.ndarray]:
    x = _float_matrix(ctx, data, 0)
    lo, hi = _minmax(x)
    flat = (hi - lo) < np.float32(_CONSTANT_ROW)
    scale = np.where(flat, np.float32(1.0), (hi - lo) / np.float32(255.0)).astype(np.float32)
    inverse = np.float32(1.0) / scale
    codes = np.floor((x - lo) * inverse + np.float32(0.5))  # Eigen's round (half away from 0) on v >= 0
    codes = np.where(flat, 0, np.clip(codes, 0, 255)).astype(np.uint8)
    return codes, np.concatenate([scale, lo.astype(np.float32)], axis=1)


def _scale_bias(ctx: Any, sb: Any, i: int, rows: int) -> tuple[np.ndarray, np.ndarray]:
    sb = _np(sb)
    if sb.ndim != 2 or sb.shape != (rows, 2):
        raise ValueError(f"expected SCALE_BIAS of shape ({rows}, 2) in {_name(ctx, i)}, got {sb.shape}")
    sb = sb.astype(np.float32, copy=False)
    return sb[:, :1], sb[:, 1:]


@register_op(
    "Rowwise8BitQuantizedToFloat",
    inputs=2,
    inputs_doc=("DATA_UINT8 (codes)", "SCALE_BIAS (float32, rows x 2)"),
    outputs_doc=("DATA_FLOAT",),
    doc="Dequantize each row: codes * scale + bias.",
)
def rowwise_to_float(ctx: Any, data: Any, scale_bias: Any) -> np.ndarray:
    codes = _uint8(ctx, data, 0)
    scale, bias = _scale_bias(ctx, scale_bias, 1, codes.shape[0])
    return (codes.astype(np.float32) * scale + bias).astype(np.float32)


# -- lookups --------------------------------------------------------------------------------------


def _lookup_args(ctx: Any, indices: Any, lengths: Any, rows: int, i: int) -> tuple[np.ndarray, np.ndarray]:
    idx, lens = _np(indices), _np(lengths)
    if idx.ndim != 1 or idx.dtype not in (np.int32, np.int64):
        raise TypeError(f"expected 1-D int32/int64 indices in {_name(ctx, i)}, got {idx.dtype} {idx.shape}")
    if idx.size and (idx.min() < 0 or idx.max() >= rows):
        raise ValueError(f"expected indices in [0, {rows}) in {_name(ctx, i)}, got [{idx.min()}, {idx.max()}]")
    if lens.ndim != 1 or lens.dtype.kind not in "iu":
        raise TypeError(f"expected 1-D int lengths in {_name(ctx, i + 1)}, got {lens.dtype} {lens.shape}")
    if (lens.size and lens.min() < 0) or int(lens.sum()) != idx.size:
        raise ValueError(
            f"expected non-negative lengths in {_name(ctx, i + 1)} summing to {idx.size} (the number of indices), "
            f"got sum {int(lens.sum())}"
        )
    return idx, lens


def _reduce(
    codes: np.ndarray,
    scale: np.ndarray,
    bias: np.ndarray,
    idx: np.ndarray,
    lens: np.ndarray,
    weights: np.ndarray | None,
    mean: bool,
) -> np.ndarray:
    rows = codes[idx].astype(np.float32) * scale[idx] + bias[idx]
    if weights is not None:
        rows = rows * weights[:, None]
    out = np.zeros((lens.size, codes.shape[1]), np.float32)
    np.add.at(out, np.repeat(np.arange(lens.size), lens), rows)
    if mean:
        out = out / np.maximum(lens, 1).astype(np.float32)[:, None]
    return out.astype(np.float32)


def _weights(ctx: Any, w: Any, i: int, n: int) -> np.ndarray:
    w = _np(w)
    if w.ndim != 1 or w.shape[0] != n:
        raise ValueError(f"expected 1-D weights of length {n} (one per index) in {_name(ctx, i)}, got {w.shape}")
    return w.astype(np.float32, copy=False)


def _register_fused(name: str, weighted: bool, mean: bool) -> None:
    ins = ["DATA (fused uint8)", "INDICES", "LENGTHS"]
    if weighted:
        ins.insert(1, "WEIGHTS")

    @register_op(
        name,
        inputs=len(ins),
        inputs_doc=tuple(ins),
        outputs_doc=("OUTPUT (float32, len(LENGTHS) x cols)",),
        doc=f"SparseLengths{'WeightedSum' if weighted else 'Mean' if mean else 'Sum'} over a fused 8-bit table.",
    )
    def kernel(ctx: Any, data: Any, *rest: Any) -> np.ndarray:
        codes, scale, bias = _fused_parts(ctx, data, 0)
        first = 2 if weighted else 1
        idx, lens = _lookup_args(ctx, rest[-2], rest[-1], codes.shape[0], first)
        w = _weights(ctx, rest[0], 1, idx.size) if weighted else None
        return _reduce(codes, scale, bias, idx, lens, w, mean)


def _register_split(name: str, weighted: bool, mean: bool) -> None:
    ins = ["DATA (uint8 codes)", "INDICES", "LENGTHS", "SCALE_BIAS (float32, rows x 2)"]
    if weighted:
        ins.insert(1, "WEIGHTS")

    @register_op(
        name,
        inputs=len(ins),
        args=[Arg("grad_on_weights", bool, False, "accepted for Caffe2's schema; the op has no gradient")],
        inputs_doc=tuple(ins),
        outputs_doc=("OUTPUT (float32, len(LENGTHS) x cols)",),
        doc=f"SparseLengths{'Weighted' if weighted else ''}{'Mean' if mean else 'Sum'} over an 8-bit rowwise table.",
    )
    def kernel(ctx: Any, data: Any, *rest: Any) -> np.ndarray:
        codes = _uint8(ctx, data, 0)
        first = 2 if weighted else 1
        scale, bias = _scale_bias(ctx, rest[-1], first + 2, codes.shape[0])
        idx, lens = _lookup_args(ctx, rest[-3], rest[-2], codes.shape[0], first)
        w = _weights(ctx, rest[0], 1, idx.size) if weighted else None
        return _reduce(codes, scale, bias, idx, lens, w, mean)


for _suffix, _weighted, _mean in (("Sum", False, False), ("WeightedSum", True, False), ("Mean", False, True)):
    _register_fused(f"SparseLengths{_suffix}Fused8BitRowwise", _weighted, _mean)
    _register_split(f"SparseLengths{_suffix}8BitsRowwise", _weighted, _mean)
_register_split("SparseLengthsWeightedMean8BitsRowwise", True, True)

register_no_gradient(
    "GatherFused8BitRowwise",
    "FloatToFused8BitRowwiseQuantized",
    "Fused8BitRowwiseQuantizedToFloat",
    "FloatToRowwiseQuantized8Bits",
    "Rowwise8BitQuantizedToFloat",
)
