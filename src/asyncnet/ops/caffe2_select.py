"""More of Caffe2's small operators: ``Conditional`` (rows of DATA_T or DATA_F by a bool per
row), ``Assert`` (fails unless every element is non-zero), ``Find`` (the last position of each
needle in an index), ``PrependDim`` and ``MergeDim`` (each the other's gradient), and the
losses ``CrossEntropy`` (soft labels) and ``WeightedSigmoidCrossEntropyWithLogits``, with
their gradients.

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace(); ws.feed("idx", np.array([4, 7, 4], np.int32)); ws.feed("q", np.array([4, 5], np.int32))
    >>> net = an.Net("find"); _ = net.Find(["idx", "q"], "pos")
    >>> ws.run_net_once(net); ws.fetch("pos")
    array([ 2, -1], dtype=int32)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from asyncnet.core.defs import OperatorDef
from asyncnet.core.registry import Arg, register_gradient, register_no_gradient, register_op
from asyncnet.ops._check import array, float_array, same_dtype

__all__: list[str] = []  # the ops are reached through the registry


def _np(x: Any) -> np.ndarray:
    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)


@register_op(
    "Conditional",
    inputs=3,
    inputs_doc=("CONDITION (N bools)", "DATA_T (N x ...)", "DATA_F (N x ...)"),
    doc="Row i of DATA_T where CONDITION[i], else row i of DATA_F.",
)
def conditional(ctx: Any, cond: Any, dt: Any, df: Any) -> np.ndarray:
    cond, dt, df = array(ctx, _np(cond), 0), array(ctx, _np(dt), 1), array(ctx, _np(df), 2)
    if dt.shape != df.shape or dt.dtype != df.dtype or dt.ndim == 0:
        raise ValueError(
            f"expected DATA_T and DATA_F of one shape and dtype, got {dt.dtype}{dt.shape}, {df.dtype}{df.shape}"
        )
    if cond.dtype != np.bool_ or cond.size != dt.shape[0]:
        raise ValueError(f"expected {dt.shape[0]} bools in CONDITION, got {cond.dtype}{cond.shape}")
    return np.where(cond.reshape((-1,) + (1,) * (dt.ndim - 1)), dt, df)


@register_op(
    "Assert",
    outputs=0,
    args=[Arg("error_msg", str, "", "the message of the failure")],
    doc="Fails unless every element of the bool or integer input is true (non-zero).",
)
def assert_op(ctx: Any, x: Any) -> None:
    x = array(ctx, _np(x), 0)
    if x.dtype != np.bool_ and x.dtype.kind not in "iu":
        raise TypeError(f"expected a bool or integer input, got dtype {x.dtype}")
    if not np.all(x):
        raise AssertionError(ctx.args["error_msg"] or f"Assert failed for input {ctx.op.inputs[0]!r}")


@register_op(
    "Find",
    inputs=2,
    args=[Arg("missing_value", int, -1, "the result for a needle not in the index")],
    inputs_doc=("index (1-D ints)", "needles (ints of the index's dtype)"),
    doc="For each needle, the last position of its value in the index, or missing_value.",
)
def find(ctx: Any, index: Any, needles: Any) -> np.ndarray:
    index, needles = array(ctx, _np(index), 0), array(ctx, _np(needles), 1)
    if index.dtype.kind not in "iu" or needles.dtype != index.dtype:
        raise TypeError(f"expected integer index and needles of one dtype, got {index.dtype} and {needles.dtype}")
    where = {v: i for i, v in enumerate(index.reshape(-1).tolist())}
    missing = ctx.args["missing_value"]
    return np.array([where.get(v, missing) for v in needles.reshape(-1).tolist()], index.dtype).reshape(needles.shape)


register_no_gradient("Conditional", "Assert", "Find")


# -- PrependDim / MergeDim --------------------------------------------------------------------------


@register_op(
    "PrependDim",
    args=[Arg("dim_size", int, Arg.REQUIRED, "the size of the new first dimension")],
    doc="X (N x ...) reshaped to (dim_size, N / dim_size, ...).",
)
def prepend_dim(ctx: Any, x: Any) -> np.ndarray:
    x = array(ctx, _np(x), 0)
    d = ctx.args["dim_size"]
    if x.ndim == 0 or d <= 0 or x.shape[0] % d:
        raise ValueError(f"expected a first dimension divisible by dim_size={d}, got shape {x.shape}")
    return x.reshape((d, x.shape[0] // d) + x.shape[1:])


@register_op("MergeDim", doc="X (A x B x ...) reshaped to (A * B, ...).")
def merge_dim(ctx: Any, x: Any) -> np.ndarray:
    x = array(ctx, _np(x), 0)
    if x.ndim < 2:
        raise ValueError(f"expected at least 2 dimensions, got shape {x.shape}")
    return x.reshape((x.shape[0] * x.shape[1],) + x.shape[2:])


@register_gradient("PrependDim")
def _prepend_dim_grad(op: OperatorDef, gout: list[Any]) -> tuple[list[OperatorDef], list[Any]]:
    if gout[0] is None:
        return [], [None]
    return [OperatorDef("MergeDim", [gout[0]], ["#dx"])], ["#dx"]


# -- cross entropies --------------------------------------------------------------------------------

_LOG_THRESHOLD = 1e-20  # Caffe2's kLOG_THRESHOLD


def _xent_inputs(ctx: Any, x: Any, label: Any) -> tuple[np.ndarray, np.ndarray]:
    x, label = float_array(ctx, _np(x), 0), float_array(ctx, _np(label), 1)
    same_dtype(ctx, [x, label])
    if x.ndim not in (1, 2) or label.shape != x.shape:
        raise ValueError(f"expected X (N x D or D) and a soft label of its shape, got {x.shape} and {label.shape}")
    return x.reshape(-1, x.shape[-1]), label.reshape(-1, x.shape[-1])


@register_op(
    "CrossEntropy",
    inputs=2,
    inputs_doc=("X (probabilities, N x D)", "label (soft labels, N x D)"),
    outputs_doc=("Y (N,)",),
    doc="Y[i] = -sum_j label[i, j] log(max(X[i, j], 1e-20)).",
)
def cross_entropy(ctx: Any, x: Any, label: Any) -> np.ndarray:
    x2, l2 = _xent_inputs(ctx, x, label)
    return (-(l2 * np.log(np.maximum(x2, _LOG_THRESHOLD))).sum(axis=1)).astype(x2.dtype)


@register_op(
    "CrossEntropyGradient",
    inputs=3,
    inputs_doc=("X", "label", "dY"),
    outputs_doc=("dX",),
    doc="dX = -label / max(X, 1e-20) dY.",
)
def cross_entropy_gradient(ctx: Any, x: Any, label: Any, dy: Any) -> np.ndarray:
    shape = _np(x).shape
    x2, l2 = _xent_inputs(ctx, x, label)
    g = float_array(ctx, _np(dy), 2).reshape(-1, 1)
    return (-l2 / np.maximum(x2, _LOG_THRESHOLD) * g).astype(x2.dtype).reshape(shape)


@register_gradient("CrossEntropy")
def _cross_entropy_grad(op: OperatorDef, gout: list[Any]) -> tuple[list[OperatorDef], list[Any]]:
    if gout[0] is None:
        return [], [None, None]
    return [OperatorDef("CrossEntropyGradient", [*op.inputs, gout[0]], ["#dx"])], ["#dx", None]


def _sigmoid_xent(x: np.ndarray, z: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0) - x * z + np.log1p(np.exp(-np.abs(x)))


def _weighted_inputs(ctx: Any, logits: Any, targets: Any, weights: Any) -> tuple[np.ndarray, ...]:
    arrays = [float_array(ctx, _np(v), i) for i, v in enumerate((logits, targets, weights))]
    same_dtype(ctx, arrays)
    if arrays[1].shape != arrays[0].shape or arrays[2].shape != arrays[0].shape or arrays[0].ndim == 0:
        raise ValueError(f"expected logits, targets and weights of one shape, got {[a.shape for a in arrays]}")
    return tuple(arrays)


@register_op(
    "WeightedSigmoidCrossEntropyWithLogits",
    inputs=3,
    inputs_doc=("logits", "targets", "weights"),
    outputs_doc=("xentropy (the last axis averaged)",),
    doc="The mean over the last axis of weights * sigmoid cross-entropy(logits, targets).",
)
def weighted_sigmoid_xent(ctx: Any, logits: Any, targets: Any, weights: Any) -> np.ndarray:
    x, z, w = _weighted_inputs(ctx, logits, targets, weights)
    return np.asarray((_sigmoid_xent(x, z) * w).mean(axis=-1)).astype(x.dtype)


@register_op(
    "WeightedSigmoidCrossEntropyWithLogitsGradient",
    inputs=4,
    inputs_doc=("dXentropy", "logits", "targets", "weights"),
    outputs_doc=("dLogits",),
    doc="dLogits = -dXentropy (targets - sigmoid(logits)) weights / (the last axis' size).",
)
def weighted_sigmoid_xent_gradient(ctx: Any, g: Any, logits: Any, targets: Any, weights: Any) -> np.ndarray:
    x, z, w = _weighted_inputs(ctx, logits, targets, weights)
    g = float_array(ctx, _np(g), 0).reshape(x.shape[:-1] + (1,))
    return (-g * (z - 1 / (1 + np.exp(-x))) * w / x.shape[-1]).astype(x.dtype)


@register_gradient("WeightedSigmoidCrossEntropyWithLogits")
def _weighted_xent_grad(op: OperatorDef, gout: list[Any]) -> tuple[list[OperatorDef], list[Any]]:
    if gout[0] is None:
        return [], [None, None, None]
    grad = OperatorDef("WeightedSigmoidCrossEntropyWithLogitsGradient", [gout[0], *op.inputs], ["#dx"])
    return [grad], ["#dx", None, None]


# -- SparseToDenseMask ------------------------------------------------------------------------------

_MASK_ARGS = [
    Arg("mask", list, Arg.REQUIRED, "the ids kept, in output order", item_type=int),
    Arg("return_presence_mask", bool, False, "a second output: whether each (row, id) was given"),
    Arg(
        "max_skipped_indices",
        int,
        5,
        "invalid ids (negative, or the largest value of their dtype) are skipped; the op fails when "
        "the count of skips over the op instance's runs reaches this",
    ),
]
_SKIPPED = "_skipped_indices"  # key in the op instance's own args dict: invalid ids skipped so far


def _count_invalid(ctx: Any, ids: np.ndarray, limit: int) -> np.ndarray:
    """Where ``ids`` are invalid (negative, or the largest value of their integer dtype); adds their
    number to the op instance's running count and fails once it reaches ``max_skipped_indices``."""
    invalid = (ids < 0) | (ids >= limit)
    skipped = ctx.args.get(_SKIPPED, 0) + int(invalid.sum())
    ctx.args[_SKIPPED] = skipped
    cap = ctx.args["max_skipped_indices"]
    if skipped >= cap:
        raise ValueError(f"too many sparse indices skipped: {skipped} invalid ids so far, expected fewer than {cap}")
    return invalid


def _mask_slots(
    ctx: Any, indices: Any, lengths: Any | None, at: int, count_invalid: bool = False
) -> tuple[np.ndarray, np.ndarray, int]:
    """For each index, (its output row, its column in the mask or -1), and the number of rows;
    of repeated (row, id) pairs only the last keeps its column (its value is the one written).
    With ``count_invalid``, invalid ids are counted against ``max_skipped_indices``."""
    raw = array(ctx, _np(indices), 0)
    if raw.dtype not in (np.int32, np.int64) or raw.ndim != 1:
        raise TypeError(f"expected 1-D int32 or int64 indices, got {raw.dtype}{raw.shape}")
    ids = raw.astype(np.int64)
    limit = int(np.iinfo(raw.dtype).max)
    invalid = _count_invalid(ctx, ids, limit) if count_invalid else (ids < 0) | (ids >= limit)
    column = {v: k for k, v in enumerate(ctx.args["mask"])}
    if lengths is None:
        rows, n_rows = np.zeros(ids.size, np.int64), 1
    else:
        lens = array(ctx, _np(lengths), at).reshape(-1).astype(np.int64)
        if int(lens.sum()) != ids.size:
            raise ValueError(f"expected lengths summing to the {ids.size} indices, got {lens.tolist()}")
        rows, n_rows = np.repeat(np.arange(lens.size), lens), lens.size
    cols = np.array([column.get(v, -1) for v in ids.tolist()], np.int64)
    cols[invalid] = -1
    last: dict[tuple[int, int], int] = {}
    for i, (r, c) in enumerate(zip(rows.tolist(), cols.tolist())):
        if c >= 0:
            last[(r, c)] = i
    keep = np.full(ids.size, -1, np.int64)
    for i in last.values():
        keep[i] = cols[i]
    return rows, keep, n_rows


@register_op(
    "SparseToDenseMask",
    inputs=(3, 4),
    outputs=(1, 2),
    args=_MASK_ARGS,
    inputs_doc=("indices (N ids)", "values (N x ...)", "default_value (...)", "lengths (B, optional)"),
    outputs_doc=("output (B x len(mask) x ..., or len(mask) x ... without lengths)", "presence_mask"),
    doc="Dense rows over the ids of mask: the value given for each id (the last one if repeated), "
    "default_value where none was given; ids outside mask are ignored; invalid ids (negative, or the "
    "largest value of their dtype) are skipped, up to max_skipped_indices over the op's runs.",
)
def sparse_to_dense_mask(ctx: Any, indices: Any, values: Any, default: Any, lengths: Any = None) -> Any:
    values, default = array(ctx, _np(values), 1), array(ctx, _np(default), 2)
    rows, cols, n_rows = _mask_slots(ctx, indices, lengths, 3, count_invalid=True)
    if values.shape[:1] != (rows.size,) or values.shape[1:] != default.shape:
        raise ValueError(f"expected values ({rows.size}, {default.shape}) for {rows.size} indices, got {values.shape}")
    width = len(ctx.args["mask"])
    out = np.broadcast_to(default.astype(values.dtype), (n_rows, width) + default.shape).copy()
    present = np.zeros((n_rows, width), bool)
    hit = cols >= 0
    out[rows[hit], cols[hit]] = values[hit]
    present[rows[hit], cols[hit]] = True
    if lengths is None:
        out, present = out[0], present[0]
    return (out, present) if len(ctx.op.outputs) == 2 else out


@register_op(
    "SparseToDenseMaskGradient",
    inputs=(2, 3),
    args=_MASK_ARGS,
    inputs_doc=("indices", "dOutput", "lengths (optional)"),
    outputs_doc=("dValues",),
    doc="For each index, the gradient of the output slot its value filled (0 for ids outside mask "
    "and for repeats overwritten by a later one).",
)
def sparse_to_dense_mask_gradient(ctx: Any, indices: Any, dout: Any, lengths: Any = None) -> np.ndarray:
    dout = float_array(ctx, _np(dout), 1)
    rows, cols, _ = _mask_slots(ctx, indices, lengths, 2)
    if lengths is None:
        dout = dout[None]
    dv = np.zeros((rows.size,) + dout.shape[2:], dout.dtype)
    hit = cols >= 0
    dv[hit] = dout[rows[hit], cols[hit]]
    return dv


@register_gradient("SparseToDenseMask")
def _sparse_to_dense_mask_grad(op: OperatorDef, gout: list[Any]) -> tuple[list[OperatorDef], list[Any]]:
    n = len(op.inputs)
    if gout[0] is None:
        return [], [None] * n
    ins = [op.inputs[0], gout[0], *op.inputs[3:]]
    args = {k: v for k, v in op.args.items() if k == "mask"}
    return [OperatorDef("SparseToDenseMaskGradient", ins, ["#dv"], args)], [None, "#dv", *([None] * (n - 2))]
