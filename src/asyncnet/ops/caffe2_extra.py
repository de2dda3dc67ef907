"""Small Caffe2 operators: Logit (with gradient), ReplaceNaN, EnsureDense, RowMul, DotProduct and
DotProductWithPadding and FlattenToVec (with gradients), ReduceTailSum, SumSqrElements, Perplexity, MultiClassAccuracy, AccumulateHistogram, RmsProp,
and the lengths / segment-id conversions LengthsToSegmentIds, LengthsToRanges, LengthsToWeights,
SegmentIdsToLengths, SegmentIdsToRanges.

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace(); ws.feed("len", np.array([2, 0, 1], np.int32))
    >>> net = an.Net("seg"); _ = net.LengthsToSegmentIds("len", "ids"); _ = net.SegmentIdsToRanges("ids", "r")
    >>> ws.run_net_once(net); ws.fetch("ids"), ws.fetch("r").tolist()
    (array([0, 0, 2], dtype=int32), [[0, 2], [2, 0], [2, 1]])
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import numpy as np

from asyncnet.core.defs import OperatorDef
from asyncnet.core.registry import Arg, register_gradient, register_op
from asyncnet.ops._check import array, as_array, float_array, same_dtype

__all__ = ["dot_product", "logit", "row_mul"]


def _no_grad(n: int) -> list[Any]:
    return [None] * n


# -- Logit ----------------------------------------------------------------------------------------
_EPS = [Arg("eps", float, 1e-6, "X is clipped to [eps, 1 - eps]")]


@register_op(
    "Logit",
    inputs=1,
    outputs=1,
    allow_inplace={0: 0},
    args=_EPS,
    doc="Y = log(X / (1 - X)), X clipped to [eps, 1 - eps].",
)
def logit(ctx: Any, x: Any) -> np.ndarray:
    x = float_array(ctx, x, 0)
    eps = ctx.args["eps"]
    c = np.clip(x, eps, 1.0 - eps)
    return as_array(np.log(c / (1 - c))).astype(x.dtype)


@register_op(
    "LogitGradient",
    inputs=2,
    outputs=1,
    args=_EPS,
    inputs_doc=("X", "dY"),
    outputs_doc=("dX",),
    doc="dX = dY / (X (1 - X)) inside [eps, 1 - eps], 0 outside (where the clip holds Y constant).",
)
def logit_gradient(ctx: Any, x: Any, dy: Any) -> np.ndarray:
    x, dy = float_array(ctx, x, 0), float_array(ctx, dy, 1)
    same_dtype(ctx, [x, dy])
    eps = ctx.args["eps"]
    inside = (x >= eps) & (x <= 1.0 - eps)
    with np.errstate(divide="ignore", invalid="ignore"):
        return as_array(np.where(inside, dy / (x * (1 - x)), 0)).astype(x.dtype)


@register_gradient("Logit")
def _logit_grad(op: OperatorDef, gout: list[Any]) -> tuple[list[OperatorDef], list[Any]]:
    if gout[0] is None:
        return [], [None]
    return [OperatorDef("LogitGradient", [op.inputs[0], gout[0]], ["#dx"], dict(op.args))], ["#dx"]


@register_op(
    "ReplaceNaN",
    inputs=1,
    outputs=1,
    allow_inplace={0: 0},
    args=[Arg("value", float, 0.0, "what replaces each NaN")],
    doc="Y = X with every NaN replaced by `value`.",
)
def replace_nan(ctx: Any, x: Any) -> np.ndarray:
    x = float_array(ctx, x, 0)
    return as_array(np.where(np.isnan(x), x.dtype.type(ctx.args["value"]), x))


@register_op("EnsureDense", inputs=1, outputs=1, allow_inplace={0: 0}, doc="Y = X; its gradient is dense.")
def ensure_dense(ctx: Any, x: Any) -> np.ndarray:
    x = array(ctx, x, 0)
    return x if ctx.op.outputs[0] == ctx.op.inputs[0] else np.array(x, copy=True)


@register_gradient("EnsureDense")
def _ensure_dense_grad(op: OperatorDef, gout: list[Any]) -> tuple[list[OperatorDef], list[Any]]:
    if gout[0] is None:
        return [], [None]
    return [OperatorDef("Copy", [gout[0]], ["#dx"], {})], ["#dx"]


# -- RowMul, ReduceTailSum, DotProduct -----------------------------------------------------------
@register_op(
    "RowMul",
    inputs=2,
    outputs=1,
    inputs_doc=("mat [N, ...]", "w [N]"),
    doc="Y[i] = mat[i] * w[i]: each row scaled by its weight.",
)
def row_mul(ctx: Any, mat: Any, w: Any) -> np.ndarray:
    m, w = float_array(ctx, mat, 0), float_array(ctx, w, 1)
    same_dtype(ctx, [m, w])
    if m.ndim == 0 or w.size != m.shape[0]:
        raise ValueError(f"expected {m.shape[0] if m.ndim else 0} row weights for mat {m.shape}, got {w.shape}")
    return as_array(m * w.reshape((-1,) + (1,) * (m.ndim - 1)))


@register_op("ReduceTailSum", inputs=1, outputs=1, doc="Y[i] = the sum of X[i] (every dim but the first).")
def reduce_tail_sum(ctx: Any, x: Any) -> np.ndarray:
    x = float_array(ctx, x, 0)
    if x.ndim == 0:
        raise ValueError("expected X of at least 1 dim, got a scalar")
    return as_array(x.reshape(x.shape[0], -1).sum(axis=1)).astype(x.dtype)


@register_gradient("RowMul")
def _row_mul_grad(op: OperatorDef, gout: list[Any]) -> tuple[list[OperatorDef], list[Any]]:
    if gout[0] is None:
        return [], [None, None]
    mat, w = op.inputs
    return [
        OperatorDef("RowMul", [gout[0], w], ["#dmat"], {}),
        OperatorDef("Mul", [gout[0], mat], ["#dw_full"], {}),
        OperatorDef("ReduceTailSum", ["#dw_full"], ["#dw"], {}),
    ], ["#dmat", "#dw"]


def _dot_operands(ctx: Any, x: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
    x, y = float_array(ctx, x, 0), float_array(ctx, y, 1)
    same_dtype(ctx, [x, y])
    if x.shape != y.shape or x.ndim == 0:
        raise ValueError(f"expected X and Y of one shape of at least 1 dim, got {x.shape} and {y.shape}")
    return x, y


@register_op(
    "DotProduct",
    inputs=2,
    outputs=1,
    inputs_doc=("X [N, ...] or [N]", "Y, X's shape"),
    outputs_doc=("Z [N]",),
    doc="Z[i] = the sum of X[i] * Y[i] over every axis but the first (for 1-D inputs, Z = X * Y).",
)
def dot_product(ctx: Any, x: Any, y: Any) -> np.ndarray:
    x, y = _dot_operands(ctx, x, y)
    return as_array(x * y if x.ndim == 1 else (x * y).reshape(x.shape[0], -1).sum(axis=1)).astype(x.dtype)


@register_op(
    "DotProductGradient",
    inputs=3,
    outputs=2,
    inputs_doc=("X", "Y", "dZ"),
    outputs_doc=("dX", "dY"),
    doc="dX = dZ[i] Y[i]; dY = dZ[i] X[i].",
)
def dot_product_gradient(ctx: Any, x: Any, y: Any, dz: Any) -> tuple[np.ndarray, np.ndarray]:
    x, y = _dot_operands(ctx, x, y)
    dz = float_array(ctx, dz, 2)
    if dz.size != x.shape[0]:
        raise ValueError(f"expected dZ of {x.shape[0]} values, got shape {dz.shape}")
    d = dz.reshape((-1,) + (1,) * (x.ndim - 1))
    return as_array(d * y).astype(x.dtype), as_array(d * x).astype(x.dtype)


@register_gradient("DotProduct")
def _dot_grad(op: OperatorDef, gout: list[Any]) -> tuple[list[OperatorDef], list[Any]]:
    if gout[0] is None:
        return [], [None, None]
    return [OperatorDef("DotProductGradient", [*op.inputs, gout[0]], ["#dx", "#dy"], {})], ["#dx", "#dy"]


# -- metrics ---------------------------------------------------------------------------------------
@register_op(
    "Perplexity",
    inputs=1,
    outputs=1,
    inputs_doc=("the probabilities of the targets [N]",),
    outputs_doc=("perplexity (0-d)",),
    doc="perplexity = prod_i p_i^(-1/N).",
)
def perplexity(ctx: Any, p: Any) -> np.ndarray:
    p = float_array(ctx, p, 0)
    n = p.shape[0] if p.ndim else 1
    return np.asarray(np.prod(np.power(p.astype(np.float64), -1.0 / max(n, 1))), dtype=p.dtype)


@register_op(
    "MultiClassAccuracy",
    inputs=2,
    outputs=2,
    inputs_doc=("prediction [N, D]", "labels [N] int"),
    outputs_doc=("accuracies [D] float32", "amounts [D] int32"),
    doc="Per class c: amounts[c] = how many labels are c; accuracies[c] = the share of those whose "
    "arg-max prediction is c (0 when none).",
)
def multi_class_accuracy(ctx: Any, pred: Any, labels: Any) -> tuple[np.ndarray, np.ndarray]:
    p, lab = float_array(ctx, pred, 0), array(ctx, labels, 1)
    if p.ndim != 2 or lab.dtype.kind not in "iu" or lab.shape != (p.shape[0],):
        raise ValueError(f"expected prediction [N, D] and N integer labels, got {p.shape} and {lab.dtype} {lab.shape}")
    d = p.shape[1]
    if lab.size and (lab.min() < 0 or lab.max() >= d):
        raise ValueError(f"expected labels in [0, {d}), got {lab.tolist()}")
    hit = (p.argmax(axis=1) == lab) if p.shape[0] else np.zeros(0, bool)
    amounts = np.bincount(lab, minlength=d)[:d]
    correct = np.bincount(lab[hit], minlength=d)[:d]
    acc = np.where(amounts > 0, correct / np.maximum(amounts, 1), 0.0)
    return acc.astype(np.float32), amounts.astype(np.int32)


# -- RmsProp ----------------------------------------------------------------------------------------
@register_op(
    "RmsProp",
    inputs=4,
    outputs=3,
    allow_inplace={0: 0, 1: 1, 2: 2},
    args=[
        Arg("decay", float, 0.9, "mean-square decay"),
        Arg("momentum", float, 0.0, "momentum"),
        Arg("epsilon", float, 1e-5, "added to the mean square under the root"),
    ],
    inputs_doc=("grad", "mean_squares", "mom", "lr (1 element)"),
    outputs_doc=("output_grad", "output_mean_squares", "output_mom"),
    doc="ms' = ms + (1 - decay) (g^2 - ms); mom' = momentum mom + lr g / sqrt(epsilon + ms'); grad' = mom'.",
)
def rms_prop(ctx: Any, grad: Any, ms: Any, mom: Any, lr: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    g, s, m = float_array(ctx, grad, 0), float_array(ctx, ms, 1), float_array(ctx, mom, 2)
    if not g.shape == s.shape == m.shape:
        raise ValueError(f"expected grad, mean_squares and mom of one shape, got {g.shape}, {s.shape}, {m.shape}")
    rate = array(ctx, lr, 3)
    if rate.size != 1:
        raise ValueError(f"expected a one-element lr, got shape {rate.shape}")
    a = ctx.args
    s_new = (s + (1.0 - a["decay"]) * (g * g - s)).astype(s.dtype)
    m_new = (a["momentum"] * m + float(rate.reshape(-1)[0]) * g / np.sqrt(a["epsilon"] + s_new)).astype(m.dtype)
    return m_new.copy(), s_new, m_new


# -- lengths and segment ids -----------------------------------------------------------------------
def _lengths(ctx: Any, x: Any) -> np.ndarray:
    n = array(ctx, x, 0)
    if n.dtype.kind not in "iu" or n.ndim != 1 or (n.size and n.min() < 0):
        raise ValueError(f"expected a 1-D array of lengths >= 0, got {n.dtype} {n.shape}")
    return n.astype(np.int64)


def _segment_lengths(ctx: Any, ids: Any, data: tuple[Any, ...]) -> np.ndarray:
    s = array(ctx, ids, 0)
    if s.dtype.kind not in "iu" or s.ndim != 1:
        raise ValueError(f"expected 1-D integer segment ids, got {s.dtype} {s.shape}")
    s = s.astype(np.int64)
    if s.size and (s.min() < 0 or (np.diff(s) < 0).any()):
        raise ValueError(f"expected sorted segment ids >= 0, got {s.tolist()}")
    count = int(s[-1]) + 1 if s.size else 0
    if data:
        d = np.asarray(data[0])
        count = d.shape[0] if d.ndim else 1
        if s.size and s[-1] >= count:
            raise ValueError(f"segment id {int(s[-1])} for {count} segments (input 1's first dim)")
    return np.bincount(s, minlength=count)


def _ranges(lengths: np.ndarray) -> np.ndarray:
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]) if lengths.size else np.zeros(0, np.int64)
    return np.stack([starts, lengths], axis=1).astype(np.int32).reshape(-1, 2)


@register_op(
    "LengthsToSegmentIds", inputs=1, outputs=1, doc="[2, 0, 1] -> [0, 0, 2]: segment i repeated lengths[i] times."
)
def lengths_to_segment_ids(ctx: Any, lengths: Any) -> np.ndarray:
    n = _lengths(ctx, lengths)
    return np.repeat(np.arange(n.size, dtype=np.int32), n)


@register_op(
    "LengthsToRanges", inputs=1, outputs=1, doc="[2, 0, 1] -> [[0, 2], [2, 0], [2, 1]]: (offset, length) rows, int32."
)
def lengths_to_ranges(ctx: Any, lengths: Any) -> np.ndarray:
    return _ranges(_lengths(ctx, lengths))


@register_op(
    "LengthsToWeights",
    inputs=1,
    outputs=1,
    args=[Arg("power", float, 0.5, "each element of a segment of length L weighs 1 / L^power")],
    doc="[2, 1] -> [2^-p, 2^-p, 1]: one weight per element, float32.",
)
def lengths_to_weights(ctx: Any, lengths: Any) -> np.ndarray:
    n = _lengths(ctx, lengths)
    w = np.power(np.maximum(n, 1).astype(np.float64), -ctx.args["power"])
    return np.repeat(w, n).astype(np.float32)


@register_op(
    "SegmentIdsToLengths",
    inputs=(1, 2),
    outputs=1,
    inputs_doc=("sorted segment ids", "data whose first dim is the number of segments (optional)"),
    doc="[0, 0, 2] -> [2, 0, 1]: how many ids each segment has, int32.",
)
def segment_ids_to_lengths(ctx: Any, ids: Any, *data: Any) -> np.ndarray:
    return _segment_lengths(ctx, ids, data).astype(np.int32)


@register_op(
    "SegmentIdsToRanges",
    inputs=(1, 2),
    outputs=1,
    inputs_doc=("sorted segment ids", "data whose first dim is the number of segments (optional)"),
    doc="[0, 0, 2] -> [[0, 2], [2, 0], [2, 1]]: (offset, length) per segment, int32.",
)
def segment_ids_to_ranges(ctx: Any, ids: Any, *data: Any) -> np.ndarray:
    return _ranges(_segment_lengths(ctx, ids, data))


# -- DotProductWithPadding ------------------------------------------------------------------------
_PAD_ARGS = [
    Arg("pad_value", float, 0.0, "what the shorter row is padded with"),
    Arg("replicate", bool, False, "tile the shorter row instead of padding it (lengths must divide)"),
]


def _padded_operands(ctx: Any, x: Any, y: Any) -> tuple[np.ndarray, np.ndarray, int, int]:
    x, y = float_array(ctx, x, 0), float_array(ctx, y, 1)
    same_dtype(ctx, [x, y])
    if x.ndim != 2 or y.ndim != 2 or x.shape[0] != y.shape[0]:
        raise ValueError(f"expected X [N, M] and Y [N, K], got {x.shape} and {y.shape}")
    m, k = x.shape[1], y.shape[1]
    if ctx.args["replicate"] and max(m, k) % max(min(m, k), 1):
        raise ValueError(f"replicate=1 needs one row length to divide the other, got {m} and {k}")
    return x, y, m, k


def _widen(ctx: Any, short: np.ndarray, width: int) -> np.ndarray:
    """The shorter operand at the longer one's width: tiled, or padded with pad_value."""
    if ctx.args["replicate"]:
        return np.tile(short, (1, width // max(short.shape[1], 1)))
    pad = np.full((short.shape[0], width - short.shape[1]), ctx.args["pad_value"], short.dtype)
    return np.concatenate([short, pad], axis=1)


@register_op(
    "DotProductWithPadding",
    inputs=2,
    outputs=1,
    args=_PAD_ARGS,
    inputs_doc=("X [N, M]", "Y [N, K]"),
    outputs_doc=("Z [N]",),
    doc="Z[i] = the dot product of X[i] and Y[i], the shorter row padded with pad_value (or tiled).",
)
def dot_product_with_padding(ctx: Any, x: Any, y: Any) -> np.ndarray:
    x, y, m, k = _padded_operands(ctx, x, y)
    a, b = (_widen(ctx, x, k), y) if m < k else (x, _widen(ctx, y, m))
    return as_array((a * b).sum(axis=1)).astype(x.dtype)


@register_op(
    "DotProductWithPaddingGradient",
    inputs=3,
    outputs=2,
    args=_PAD_ARGS,
    inputs_doc=("X", "Y", "dZ"),
    outputs_doc=("dX", "dY"),
    doc="The gradient of DotProductWithPadding (a tiled row's gradient summed over its copies).",
)
def dot_product_with_padding_gradient(ctx: Any, x: Any, y: Any, dz: Any) -> tuple[np.ndarray, np.ndarray]:
    x, y, m, k = _padded_operands(ctx, x, y)
    dz = float_array(ctx, dz, 2).reshape(-1, 1)
    if dz.shape[0] != x.shape[0]:
        raise ValueError(f"expected dZ of {x.shape[0]} values, got {dz.size}")
    short, long_, swap = (x, y, False) if m < k else (y, x, True)
    d_long = dz * _widen(ctx, short, long_.shape[1])
    n, s = short.shape
    if ctx.args["replicate"]:
        d_short = (dz * long_).reshape(n, -1, s).sum(axis=1) if s else np.zeros_like(short)
    else:
        d_short = dz * long_[:, :s]
    d_short, d_long = d_short.astype(x.dtype), d_long.astype(x.dtype)
    return (d_long, d_short) if swap else (d_short, d_long)


@register_gradient("DotProductWithPadding")
def _dot_pad_grad(op: OperatorDef, gout: list[Any]) -> tuple[list[OperatorDef], list[Any]]:
    if gout[0] is None:
        return [], [None, None]
    inputs = [*op.inputs, gout[0]]
    return [OperatorDef("DotProductWithPaddingGradient", inputs, ["#dx", "#dy"], dict(op.args))], ["#dx", "#dy"]


@register_op("FlattenToVec", inputs=1, outputs=1, doc="Y = X as a 1-D array of all its values.")
def flatten_to_vec(ctx: Any, x: Any) -> np.ndarray:
    x = array(ctx, x, 0)
    return x.reshape(-1)


@register_gradient("FlattenToVec")
def _flatten_to_vec_grad(op: OperatorDef, gout: list[Any]) -> tuple[list[OperatorDef], list[Any]]:
    if gout[0] is None:
        return [], [None]
    return [OperatorDef("ResizeLike", [gout[0], op.inputs[0]], ["#dx"], {})], ["#dx"]


@register_op(
    "SumSqrElements",
    inputs=1,
    outputs=1,
    args=[Arg("average", bool, False, "divide by the number of elements")],
    outputs_doc=("the sum of squares (0-d)",),
    doc="Y = sum(X^2) (the mean with average=1).",
)
def sum_sqr_elements(ctx: Any, x: Any) -> np.ndarray:
    x = float_array(ctx, x, 0)
    s = np.square(x.astype(np.float64)).sum()
    if ctx.args["average"] and x.size:
        s = s / x.size
    return np.asarray(s, dtype=x.dtype)


# -- AccumulateHistogram ----------------------------------------------------------------------------
_HISTOGRAMS: dict[int, np.ndarray] = {}
_HIST_LOCK = threading.Lock()


def _accumulated(ctx: Any, size: int) -> np.ndarray:
    """The op's running histogram, kept per operator definition and dropped with it (Caffe2 kept
    one per created op: here nets created from one definition share it)."""
    key = id(ctx.op)
    with _HIST_LOCK:
        acc = _HISTOGRAMS.get(key)
        if acc is None or acc.size != size:
            acc = _HISTOGRAMS[key] = np.zeros(size, np.int64)
            weakref.finalize(ctx.op, _HISTOGRAMS.pop, key, None)
        return acc


@register_op(
    "AccumulateHistogram",
    inputs=1,
    outputs=2,
    args=[
        Arg("lower_bound", float, 0.0, "the lower bound of the first regular bucket"),
        Arg("upper_bound", float, 1.0, "the upper bound of the last regular bucket"),
        Arg("num_buckets", int, 1, "how many equal buckets span [lower_bound, upper_bound)"),
    ],
    outputs_doc=("CurHist: this run's counts", "AccHist: the counts over every run of this op"),
    doc="Counts of X in num_buckets + 2 buckets: below lower_bound, the equal buckets, and at or "
    "above upper_bound; int64.",
)
def accumulate_histogram(ctx: Any, x: Any) -> tuple[np.ndarray, np.ndarray]:
    x = float_array(ctx, x, 0)
    lo, hi, n = ctx.args["lower_bound"], ctx.args["upper_bound"], ctx.args["num_buckets"]
    if n < 1 or not hi > lo:
        raise ValueError(f"expected num_buckets >= 1 and upper_bound > lower_bound, got {n}, [{lo}, {hi})")
    v = x.reshape(-1).astype(np.float64)
    inside = (v >= lo) & (v < hi)
    bucket = np.where(v < lo, 0, n + 1)
    bucket[inside] = np.minimum(((v[inside] - lo) / ((hi - lo) / n) + 1).astype(np.int64), n)
    cur = np.bincount(bucket, minlength=n + 2).astype(np.int64)
    acc = _accumulated(ctx, n + 2)
    with _HIST_LOCK:
        acc += cur
        return cur, acc.copy()
