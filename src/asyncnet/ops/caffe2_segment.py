"""Caffe2's segment reductions: rows of DATA grouped into segments and each segment reduced.

The grouping comes from sorted segment ids (``SortedSegment*``, ``SortedSegmentRange*``), ids in
any order (``UnsortedSegment*``, with an optional ``num_segments``) or run lengths (``Lengths*``);
the ``Sparse*`` forms first pick DATA's rows with INDICES. Segment k of the output reduces the
rows of id k (``Sum``, ``Mean``, ``Max``, ``LogSumExp``, ``LogMeanExp``, or ``WeightedSum`` with
one scalar per row from SCALARS); an empty segment gives zeros. The outputs have
``num_segments`` rows (the number of lengths, or the largest id + 1).
``SparseLengthsPositionalWeightedSum`` weighs the j-th row of every segment by ``WEIGHTS[j]``.

Gradients: one backward op per forward op, ``<Op>WithMainInputAndForwardOutputGradient`` with the
inputs (dOUTPUT, DATA, OUTPUT, the forward's other inputs); for a sparse op it gives the values
of a GradientSlice on INDICES. ``LengthsSumGradient(dOUTPUT, LENGTHS)`` is Caffe2's legacy form.

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace(); ws.feed("x", np.array([1.0, 2.0, 4.0], np.float32))
    >>> ws.feed("ids", np.array([0, 0, 1], np.int32))
    >>> net = an.Net("seg"); _ = net.SortedSegmentMean(["x", "ids"], "y")
    >>> ws.run_net_once(net); ws.fetch("y")
    array([1.5, 4. ], dtype=float32)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from asyncnet.core.defs import OperatorDef
from asyncnet.core.registry import Arg, register_gradient, register_op
from asyncnet.ops.grad import GradOut, MakerResult, output_grad
from asyncnet.ops.sparse import GradientSlice

__all__: list[str] = []  # the ops are reached through the registry

_GRAD = "WithMainInputAndForwardOutputGradient"


def _np(x: Any) -> np.ndarray:
    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)


@dataclass(frozen=True)
class _Family:
    """How one op groups its rows: ``kind`` is sorted, unsorted, range or lengths."""

    name: str
    kind: str
    reducer: str
    sparse: bool = False
    positional: bool = False

    @property
    def weighted(self) -> bool:
        return self.reducer == "WeightedSum"

    def input_names(self) -> list[str]:
        names = ["DATA"]
        if self.weighted:
            names.append("WEIGHTS (one per position)" if self.positional else "SCALARS (one per row)")
        if self.sparse:
            names.append("INDICES (int32/int64, rows of DATA)")
        names.append("LENGTHS (int)" if self.kind == "lengths" else "SEGMENT_IDS (int)")
        return names


def _where(ctx: Any, i: int) -> str:
    return f"input {i} {ctx.op.inputs[i]!r}"


def _int_vector(ctx: Any, x: Any, i: int) -> np.ndarray:
    x = _np(x)
    if x.ndim != 1 or x.dtype.kind not in "iu":
        raise TypeError(f"expected a 1-D int vector in {_where(ctx, i)}, got {x.dtype} {x.shape}")
    return x.astype(np.int64)


def _groups(ctx: Any, fam: _Family, seg: np.ndarray, i: int, n: int) -> tuple[np.ndarray, int]:
    """The segment of each of the ``n`` rows and the number of segments."""
    if fam.kind == "lengths":
        if (seg.size and seg.min() < 0) or int(seg.sum()) != n:
            raise ValueError(f"expected non-negative lengths summing to {n} in {_where(ctx, i)}, got {seg.tolist()}")
        return np.repeat(np.arange(seg.size), seg), seg.size
    if seg.size != n:
        raise ValueError(f"expected {n} segment ids (one per row) in {_where(ctx, i)}, got {seg.size}")
    if seg.size and seg.min() < 0:
        raise ValueError(f"expected non-negative segment ids in {_where(ctx, i)}, got {int(seg.min())}")
    if fam.kind in ("sorted", "range") and np.any(np.diff(seg) < 0):
        raise ValueError(f"expected sorted segment ids in {_where(ctx, i)}, got {seg.tolist()}")
    k = int(seg.max()) + 1 if seg.size else 0
    if fam.kind == "unsorted" and ctx.args.get("num_segments", -1) >= 0:
        if k > ctx.args["num_segments"]:
            raise ValueError(f"expected segment ids below num_segments={ctx.args['num_segments']}, got {k - 1}")
        k = ctx.args["num_segments"]
    return seg, k


@dataclass
class _Rows:
    data: np.ndarray
    rows: np.ndarray  # the rows reduced, in order
    ids: np.ndarray
    k: int
    weights: np.ndarray | None
    indices: np.ndarray | None


def _rows(ctx: Any, fam: _Family, data: Any, rest: tuple[Any, ...]) -> _Rows:
    data = _np(data)
    if data.ndim == 0 or data.dtype.kind != "f":
        raise TypeError(f"expected a float DATA of at least 1 dim in {_where(ctx, 0)}, got {data.dtype} {data.shape}")
    seg = _int_vector(ctx, rest[-1], len(rest))
    indices = None
    rows = data
    if fam.sparse:
        indices = _int_vector(ctx, rest[-2], len(rest) - 1)
        if indices.size and (indices.min() < 0 or indices.max() >= data.shape[0]):
            raise ValueError(
                f"expected indices in [0, {data.shape[0]}) in {_where(ctx, len(rest) - 1)}, "
                f"got [{indices.min()}, {indices.max()}]"
            )
        rows = data[indices]
    ids, k = _groups(ctx, fam, seg, len(rest), rows.shape[0])
    weights = _weights(ctx, fam, rest[0], ids, seg) if fam.weighted else None
    return _Rows(data, rows, ids, k, weights, indices)


def _weights(ctx: Any, fam: _Family, w: Any, ids: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    w = _np(w)
    if w.ndim != 1:
        raise ValueError(f"expected 1-D weights in {_where(ctx, 1)}, got shape {w.shape}")
    if fam.positional:
        pos = np.arange(ids.size) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        if pos.size and pos.max() >= w.size:
            raise ValueError(f"expected at least {pos.max() + 1} positional weights in {_where(ctx, 1)}, got {w.size}")
        return w[pos]
    if w.size != ids.size:
        raise ValueError(f"expected {ids.size} weights (one per row) in {_where(ctx, 1)}, got {w.size}")
    return w


def _counts(ids: np.ndarray, k: int) -> np.ndarray:
    return np.bincount(ids, minlength=k)[:k]


def _bcast(v: np.ndarray, ndim: int) -> np.ndarray:
    return v.reshape(v.shape + (1,) * (ndim - 1))


def _reduce(fam: _Family, r: _Rows) -> np.ndarray:
    x = r.rows.astype(np.float64)
    shape = (r.k, *x.shape[1:])
    if fam.reducer in ("Sum", "Mean", "WeightedSum"):
        if r.weights is not None:
            x = x * _bcast(r.weights.astype(np.float64), x.ndim)
        out = np.zeros(shape)
        np.add.at(out, r.ids, x)
        if fam.reducer == "Mean":
            out /= _bcast(np.maximum(_counts(r.ids, r.k), 1), out.ndim)
        return out
    top = np.full(shape, -np.inf)
    np.maximum.at(top, r.ids, x)
    empty = _counts(r.ids, r.k) == 0
    top[empty] = 0.0
    if fam.reducer == "Max":
        return top
    sums = np.zeros(shape)
    np.add.at(sums, r.ids, np.exp(x - top[r.ids]))
    sums[empty] = 1.0
    out = top + np.log(sums)
    if fam.reducer == "LogMeanExp":
        out -= _bcast(np.log(np.maximum(_counts(r.ids, r.k), 1)), out.ndim)
    out[empty] = 0.0
    return out


def _row_grads(fam: _Family, r: _Rows, dy: np.ndarray, y: np.ndarray) -> np.ndarray:
    """d loss / d row, one per reduced row (before INDICES scatter them to DATA)."""
    g = dy.astype(np.float64)[r.ids]
    x = r.rows.astype(np.float64)
    if fam.reducer == "Mean":
        return g / _bcast(_counts(r.ids, r.k)[r.ids], g.ndim)
    if fam.reducer == "WeightedSum":
        return g * _bcast(r.weights.astype(np.float64), g.ndim)  # type: ignore[union-attr]
    if fam.reducer == "Max":
        return g * (x == y.astype(np.float64)[r.ids])
    if fam.reducer in ("LogSumExp", "LogMeanExp"):
        lse = _reduce(_Family(fam.name, fam.kind, "LogSumExp"), r)
        return g * np.exp(x - lse[r.ids])
    return g


def _forward(fam: _Family):
    def kernel(ctx: Any, data: Any, *rest: Any) -> np.ndarray:
        r = _rows(ctx, fam, data, rest)
        return _reduce(fam, r).astype(r.data.dtype)

    return kernel


def _backward(fam: _Family):
    def kernel(ctx: Any, dy: Any, data: Any, y: Any, *rest: Any) -> Any:
        r = _rows(ctx, fam, data, rest)
        dy, y = _np(dy), _np(y)
        if dy.shape != (r.k, *r.rows.shape[1:]):
            raise ValueError(f"expected dOUTPUT of shape {(r.k, *r.rows.shape[1:])}, got {dy.shape}")
        g = _row_grads(fam, r, dy, y).astype(r.data.dtype)
        if len(ctx.op.outputs) == 1:
            return g
        flat = r.rows.reshape(r.rows.shape[0], -1).astype(np.float64)
        dw = np.einsum("ij,ij->i", flat, dy.reshape(r.k, -1).astype(np.float64)[r.ids])
        return g, dw.astype(_np(rest[0]).dtype)

    return kernel


def _maker(fam: _Family):
    def make(op: OperatorDef, gout: GradOut) -> MakerResult:
        on_w = fam.weighted and bool(op.args.get("grad_on_weights", False))
        outs = ["#drows", "#dw"] if on_w else ["#drows"]
        inputs = [output_grad(op, gout), op.inputs[0], op.outputs[0], *op.inputs[1:]]
        gop = OperatorDef(fam.name + _GRAD, inputs, outs, dict(op.args))
        grads: list[Any] = [None] * len(op.inputs)
        grads[0] = GradientSlice(op.inputs[-2], "#drows") if fam.sparse else "#drows"
        if on_w:
            grads[1] = "#dw"
        return [gop], grads

    return make


def _register(fam: _Family, gradient: bool = True) -> None:
    ins = fam.input_names()
    args = []
    if fam.weighted:
        args.append(Arg("grad_on_weights", bool, False, "also differentiate with respect to the weights"))
    if fam.kind == "unsorted":
        args.append(Arg("num_segments", int, -1, "rows of the output (default: the largest id + 1)"))
    what = f"{fam.reducer} of the rows of each segment"
    register_op(
        fam.name,
        inputs=len(ins),
        args=args,
        differentiable=gradient,
        inputs_doc=tuple(ins),
        outputs_doc=("OUTPUT [num_segments, ...]",),
        doc=f"Caffe2's {fam.name}: the {what} ({fam.kind} grouping{', rows picked by INDICES' if fam.sparse else ''}).",
    )(_forward(fam))
    if not gradient:
        return
    register_op(
        fam.name + _GRAD,
        inputs=len(ins) + 2,
        outputs=(1, 2) if fam.weighted else 1,
        args=args,
        inputs_doc=("dOUTPUT", "DATA", "OUTPUT", *ins[1:]),
        outputs_doc=("dROWS (one per reduced row)", "dWEIGHTS (with grad_on_weights)"),
        doc=f"Gradient of {fam.name} with respect to its reduced rows (and weights).",
    )(_backward(fam))
    register_gradient(fam.name)(_maker(fam))


def _families() -> list[_Family]:
    fams = []
    for red in ("Sum", "Mean", "WeightedSum"):
        fams += [
            _Family(f"SortedSegment{red}", "sorted", red),
            _Family(f"SparseSortedSegment{red}", "sorted", red, sparse=True),
            _Family(f"SparseUnsortedSegment{red}", "unsorted", red, sparse=True),
        ]
    fams += [
        _Family("UnsortedSegmentMean", "unsorted", "Mean"),
        _Family("UnsortedSegmentWeightedSum", "unsorted", "WeightedSum"),
    ]
    fams += [_Family(f"SortedSegmentRange{r}", "range", r) for r in ("Sum", "Mean", "Max", "LogSumExp", "LogMeanExp")]
    fams += [_Family(f"Lengths{r}", "lengths", r) for r in ("Mean", "Max", "WeightedSum")]
    return fams


for _fam in _families():
    _register(_fam)
_register(_Family("SparseLengthsPositionalWeightedSum", "lengths", "WeightedSum", sparse=True, positional=True), False)


@register_op(
    "LengthsSumGradient",
    inputs=2,
    inputs_doc=("dOUTPUT [B, ...]", "LENGTHS [B]"),
    outputs_doc=("dDATA: dOUTPUT[b] repeated LENGTHS[b] times",),
    doc="Caffe2's legacy gradient of LengthsSum: each row of dOUTPUT repeated its segment's length times.",
)
def lengths_sum_gradient(ctx: Any, dy: Any, lengths: Any) -> np.ndarray:
    dy, lengths = _np(dy), _int_vector(ctx, lengths, 1)
    if dy.ndim == 0 or dy.shape[0] != lengths.size or (lengths.size and lengths.min() < 0):
        raise ValueError(f"expected dOUTPUT [{lengths.size}, ...] and non-negative lengths, got {dy.shape}")
    return np.repeat(dy, lengths, axis=0)


def _indices_in_gradient(mean: bool):
    def kernel(ctx: Any, dy: Any, lengths: Any, indices: Any) -> np.ndarray:
        dy, lengths, indices = _np(dy), _int_vector(ctx, lengths, 1), _int_vector(ctx, indices, 2)
        if dy.ndim == 0 or dy.shape[0] != lengths.size or (lengths.size and lengths.min() < 0):
            raise ValueError(f"expected dOUTPUT [{lengths.size}, ...] and non-negative lengths, got {dy.shape}")
        if int(lengths.sum()) != indices.size:
            raise ValueError(f"expected lengths summing to {indices.size} (the indices), got {int(lengths.sum())}")
        if mean:
            dy = dy / _bcast(np.maximum(lengths, 1), dy.ndim).astype(dy.dtype)
        return np.repeat(dy, lengths, axis=0)

    return kernel


for _red, _mean in (("Sum", False), ("Mean", True)):
    register_op(
        f"SparseLengthsIndicesInGradient{_red}Gradient",
        inputs=3,
        inputs_doc=("dOUTPUT [B, ...]", "LENGTHS [B]", "INDICES [K] (only checked against LENGTHS)"),
        outputs_doc=("values [K, ...]: the rows of a GradientSlice on INDICES",),
        doc=f"Gradient of SparseLengths{_red} given INDICES too: dOUTPUT[b]{' / LENGTHS[b]' if _mean else ''} per index.",
    )(_indices_in_gradient(_mean))
