"""Caffe2's selection, one-hot and segment-packing operators: Where, IsMemberOf, RowWiseArgMax,
OneHot, BatchOneHot, BatchBucketOneHot, SegmentOneHot, LengthsTile and LengthsSum (each the
other's gradient), PackSegments and UnpackSegments (the gradient of PackSegments unpacks dY,
that of UnpackSegments packs it back to the packed input's shape), Normalize (with
``NormalizeGradient``) and NormalizeL1.

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace(); ws.feed("lengths", np.array([1, 2], np.int32))
    >>> ws.feed("data", np.array([[1.0], [2.0], [3.0]], np.float32))
    >>> net = an.Net("pack"); _ = net.PackSegments(["lengths", "data"], "packed")
    >>> ws.run_net_once(net); ws.fetch("packed")[..., 0]
    array([[1., 0.],
           [2., 3.]], dtype=float32)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from asyncnet.core.defs import OperatorDef
from asyncnet.core.registry import Arg, register_gradient, register_no_gradient, register_op
from asyncnet.ops._check import array, as_array, axis_of, float_array

__all__: list[str] = []  # the ops are reached through the registry


def _np(x: Any) -> np.ndarray:
    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)


def _lengths(ctx: Any, x: Any, i: int) -> np.ndarray:
    lengths = array(ctx, _np(x), i)
    if lengths.dtype.kind not in "iu":
        raise TypeError(f"expected integer lengths in input {i} {ctx.op.inputs[i]!r}, got dtype {lengths.dtype}")
    lengths = lengths.reshape(-1).astype(np.int64)
    if lengths.size and lengths.min() < 0:
        raise ValueError(f"expected non-negative lengths, got {lengths.tolist()}")
    return lengths


def _check_total(lengths: np.ndarray, rows: int, what: str) -> None:
    if int(lengths.sum()) != rows:
        raise ValueError(f"expected the lengths to sum to the {rows} rows of {what}, got {int(lengths.sum())}")


# -- Where, IsMemberOf, RowWiseArgMax ---------------------------------------------------------------


@register_op(
    "Where",
    inputs=3,
    allow_inplace={1: 0, 2: 0},
    args=[Arg("broadcast_on_rows", bool, False, "C is 1-D: C[i] picks row i of X or Y")],
    inputs_doc=("C (bool)", "X", "Y"),
    doc="Z = X where C else Y: C of X's shape, or with broadcast_on_rows one bool per row.",
)
def where(ctx: Any, c: Any, x: Any, y: Any) -> np.ndarray:
    c, x, y = array(ctx, _np(c), 0), array(ctx, _np(x), 1), array(ctx, _np(y), 2)
    if c.dtype != np.bool_:
        raise TypeError(f"expected a bool condition, got dtype {c.dtype}")
    if x.shape != y.shape or x.dtype != y.dtype:
        raise ValueError(f"expected X and Y of one shape and dtype, got {x.dtype}{x.shape} and {y.dtype}{y.shape}")
    if ctx.args["broadcast_on_rows"]:
        if c.ndim != 1 or (x.ndim and c.shape[0] != x.shape[0]):
            raise ValueError(f"expected C of shape ({x.shape[0] if x.ndim else 1},), got {c.shape}")
        c = c.reshape(c.shape + (1,) * max(x.ndim - 1, 0)) if x.ndim else c.reshape(())
    elif c.shape != x.shape:
        raise ValueError(f"expected C of X's shape {x.shape}, got {c.shape}")
    return as_array(np.where(c, x, y))


@register_op(
    "IsMemberOf",
    args=[Arg("value", list, Arg.REQUIRED, "the set of values", item_type=(int, str, bytes))],
    doc="Y[i] = whether X[i] is one of value (bool, X's shape).",
)
def is_member_of(ctx: Any, x: Any) -> np.ndarray:
    x = array(ctx, _np(x), 0)
    values = list(ctx.args["value"])
    if x.dtype == object:
        wanted = {v.encode() if isinstance(v, str) else v for v in values}
        flat = [(v.encode() if isinstance(v, str) else v) in wanted for v in x.reshape(-1)]
        return np.array(flat, bool).reshape(x.shape)
    return as_array(np.isin(x, np.array(values, dtype=x.dtype)))


@register_op(
    "RowWiseArgMax",
    doc="The int64 index of the first largest value of each row of a 2-D X, shape (N, 1).",
)
def row_wise_arg_max(ctx: Any, x: Any) -> np.ndarray:
    x = array(ctx, _np(x), 0)
    if x.ndim != 2:
        raise ValueError(f"expected a 2-D input, got shape {x.shape}")
    return np.argmax(x, axis=1).astype(np.int64).reshape(-1, 1)


register_no_gradient("Where", "IsMemberOf", "RowWiseArgMax")


# -- one-hot encodings ------------------------------------------------------------------------------


def _size(ctx: Any, x: Any, i: int) -> int:
    size = array(ctx, _np(x), i)
    if size.size != 1 or size.dtype.kind not in "iu":
        raise ValueError(f"expected a one-element integer size in input {i}, got {size.dtype}{size.shape}")
    return int(size.reshape(-1)[0])


def _indices(ctx: Any, x: Any, i: int, size: int) -> np.ndarray:
    idx = array(ctx, _np(x), i).reshape(-1).astype(np.int64)
    if idx.size and (idx.min() < 0 or idx.max() >= size):
        raise IndexError(f"expected indices in [0, {size}), got {idx.min()}..{idx.max()}")
    return idx


@register_op(
    "OneHot",
    inputs=2,
    inputs_doc=("indices (N,)", "index_size (one int64)"),
    doc="Y (N x index_size, float32): row i is 1 at indices[i], 0 elsewhere.",
)
def one_hot(ctx: Any, indices: Any, size: Any) -> np.ndarray:
    n = _size(ctx, size, 1)
    idx = _indices(ctx, indices, 0, n)
    out = np.zeros((idx.size, n), np.float32)
    out[np.arange(idx.size), idx] = 1
    return out


@register_op(
    "SegmentOneHot",
    inputs=3,
    inputs_doc=("lengths (N,)", "indices (sum of lengths)", "index_size (one int64)"),
    doc="Y (N x index_size, float32): row i is 1 at the indices of segment i.",
)
def segment_one_hot(ctx: Any, lengths: Any, indices: Any, size: Any) -> np.ndarray:
    n = _size(ctx, size, 2)
    lengths = _lengths(ctx, lengths, 0)
    idx = _indices(ctx, indices, 1, n)
    _check_total(lengths, idx.size, "indices")
    out = np.zeros((lengths.size, n), np.float32)
    out[np.repeat(np.arange(lengths.size), lengths), idx] = 1
    return out


def _columns(ctx: Any, x: Any, lens: Any, values: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x, values = array(ctx, _np(x), 0), array(ctx, _np(values), 2).reshape(-1)
    lens = _lengths(ctx, lens, 1)
    if x.ndim != 2 or lens.size != x.shape[1]:
        raise ValueError(f"expected a 2-D X with one length per column ({lens.size}), got shape {x.shape}")
    return x, lens, values


@register_op(
    "BatchOneHot",
    inputs=3,
    inputs_doc=("X (N x D)", "LENS (D,)", "VALS (sum of LENS)"),
    doc="Y (N x sum(LENS), X's dtype): column j of X one-hot encoded against its LENS[j] values in VALS.",
)
def batch_one_hot(ctx: Any, x: Any, lens: Any, vals: Any) -> np.ndarray:
    x, lens, vals = _columns(ctx, x, lens, vals)
    _check_total(lens, vals.size, "VALS")
    out = np.zeros((x.shape[0], vals.size), x.dtype)
    col = np.repeat(np.arange(lens.size), lens)
    for k in range(vals.size):
        out[:, k] = x[:, col[k]] == vals[k]
    return out


@register_op(
    "BatchBucketOneHot",
    inputs=3,
    inputs_doc=("X (N x D)", "LENS (D,)", "BOUNDARIES (sum of LENS, sorted per column)"),
    doc="Y (N x (sum(LENS) + D), X's dtype): column j of X one-hot encoded by its bucket among its LENS[j] "
    "boundaries (bucket k: boundary[k-1] < x <= boundary[k]).",
)
def batch_bucket_one_hot(ctx: Any, x: Any, lens: Any, boundaries: Any) -> np.ndarray:
    x, lens, bounds = _columns(ctx, x, lens, boundaries)
    _check_total(lens, bounds.size, "BOUNDARIES")
    out = np.zeros((x.shape[0], int(lens.sum()) + lens.size), x.dtype)
    start = offset = 0
    for j, n in enumerate(lens.tolist()):
        bucket = np.searchsorted(bounds[start : start + n], x[:, j], side="left")
        out[np.arange(x.shape[0]), offset + bucket] = 1
        start, offset = start + n, offset + n + 1
    return out


register_no_gradient("OneHot", "SegmentOneHot", "BatchOneHot", "BatchBucketOneHot")


# -- LengthsTile / LengthsSum ---------------------------------------------------------------------


@register_op(
    "LengthsTile",
    inputs=2,
    inputs_doc=("DATA (N x ...)", "LENGTHS (N,)"),
    doc="Row i of DATA repeated LENGTHS[i] times.",
)
def lengths_tile(ctx: Any, data: Any, lengths: Any) -> np.ndarray:
    data, lengths = array(ctx, _np(data), 0), _lengths(ctx, lengths, 1)
    if data.ndim == 0 or data.shape[0] != lengths.size:
        raise ValueError(f"expected DATA with {lengths.size} rows, got shape {data.shape}")
    return np.repeat(data, lengths, axis=0)


@register_op(
    "LengthsSum",
    inputs=2,
    inputs_doc=("DATA (sum of LENGTHS x ...)", "LENGTHS (N,)"),
    doc="Row i is the sum of the i-th segment of DATA (cut along axis 0 by LENGTHS); 0 for an empty one.",
)
def lengths_sum(ctx: Any, data: Any, lengths: Any) -> np.ndarray:
    data, lengths = array(ctx, _np(data), 0), _lengths(ctx, lengths, 1)
    if data.ndim == 0:
        raise ValueError("expected DATA of at least 1 dimension, got a scalar")
    _check_total(lengths, data.shape[0], "DATA")
    out = np.zeros((lengths.size,) + data.shape[1:], data.dtype)
    np.add.at(out, np.repeat(np.arange(lengths.size), lengths), data)
    return out


def _swap_maker(grad_type: str) -> Any:
    def maker(op: OperatorDef, gout: list[Any]) -> tuple[list[OperatorDef], list[Any]]:
        if gout[0] is None:
            return [], [None, None]
        return [OperatorDef(grad_type, [gout[0], op.inputs[1]], ["#dx"])], ["#dx", None]

    return maker


register_gradient("LengthsTile")(_swap_maker("LengthsSum"))
register_gradient("LengthsSum")(_swap_maker("LengthsTile"))


# -- PackSegments / UnpackSegments ------------------------------------------------------------------

_PACK_ARGS = [
    Arg("max_length", int, -1, "the padded length (longer segments are cut); -1: the longest segment"),
    Arg("pad_minf", bool, False, "pad with -inf instead of 0"),
    Arg("return_presence_mask", bool, False, "a second output: True where a row holds data"),
]


def _pad_value(data: np.ndarray, minf: bool) -> Any:
    if data.dtype == object:
        return b""
    if minf:
        if data.dtype.kind != "f":
            raise TypeError(f"pad_minf needs float data, got dtype {data.dtype}")
        return -np.inf
    return 0


@register_op(
    "PackSegments",
    inputs=2,
    outputs=(1, 2),
    args=_PACK_ARGS,
    inputs_doc=("lengths (N,)", "tensor (sum of lengths x ...)"),
    outputs_doc=("packed (N x max_length x ...)", "presence_mask (N x max_length, bool)"),
    doc="The segments of tensor (cut along axis 0 by lengths) as rows of one padded tensor.",
)
def pack_segments(ctx: Any, lengths: Any, data: Any) -> Any:
    lengths, data = _lengths(ctx, lengths, 0), array(ctx, _np(data), 1)
    if data.ndim == 0:
        raise ValueError("expected a tensor of at least 1 dimension, got a scalar")
    _check_total(lengths, data.shape[0], "the tensor")
    longest = int(lengths.max()) if lengths.size else 0
    pad = ctx.args["max_length"] if ctx.args["max_length"] >= 0 else longest
    out = np.full((lengths.size, pad) + data.shape[1:], _pad_value(data, ctx.args["pad_minf"]), data.dtype)
    mask = np.zeros((lengths.size, pad), bool)
    start = 0
    for i, n in enumerate(lengths.tolist()):
        k = min(n, pad)
        out[i, :k] = data[start : start + k]
        mask[i, :k] = True
        start += n
    return (out, mask) if len(ctx.op.outputs) == 2 else out


@register_op(
    "UnpackSegments",
    inputs=2,
    args=_PACK_ARGS[:1],
    inputs_doc=("lengths (N,)", "packed (N x L x ...)"),
    doc="The inverse of PackSegments: the first min(lengths[i], L) rows of each packed row, concatenated.",
)
def unpack_segments(ctx: Any, lengths: Any, packed: Any) -> np.ndarray:
    lengths, packed = _lengths(ctx, lengths, 0), array(ctx, _np(packed), 1)
    if packed.ndim < 2 or packed.shape[0] != lengths.size:
        raise ValueError(f"expected a packed tensor with {lengths.size} rows, got shape {packed.shape}")
    limit = ctx.args["max_length"] if ctx.args["max_length"] >= 0 else packed.shape[1]
    keep = np.minimum(lengths, min(limit, packed.shape[1]))
    if (lengths > packed.shape[1]).any() and ctx.args["max_length"] < 0:
        raise ValueError(f"expected lengths of at most {packed.shape[1]}, got {lengths.max()}")
    parts = [packed[i, :k] for i, k in enumerate(keep.tolist())]
    return np.concatenate(parts) if parts else np.zeros((0,) + packed.shape[2:], packed.dtype)


def _pack_maker(grad_type: str) -> Any:  # PackSegments' gradient: its rows unpacked
    def maker(op: OperatorDef, gout: list[Any]) -> tuple[list[OperatorDef], list[Any]]:
        if gout[0] is None:
            return [], [None, None]
        args = {k: v for k, v in op.args.items() if k == "max_length"}
        return [OperatorDef(grad_type, [op.inputs[0], gout[0]], ["#dx"], args)], [None, "#dx"]

    return maker


register_gradient("PackSegments")(_pack_maker("UnpackSegments"))


@register_op(
    "UnpackSegmentsGradient",
    inputs=3,
    inputs_doc=("lengths (N,)", "dY (the unpacked rows)", "packed (N x L x ...), the forward input"),
    outputs_doc=("dPacked",),
    doc="dY packed back into packed's shape (zeros where no row was unpacked).",
)
def unpack_segments_gradient(ctx: Any, lengths: Any, dy: Any, packed: Any) -> np.ndarray:
    lengths, dy, packed = _lengths(ctx, lengths, 0), array(ctx, _np(dy), 1), array(ctx, _np(packed), 2)
    keep = np.minimum(lengths, packed.shape[1])
    _check_total(keep, dy.shape[0], "dY")
    out = np.zeros(packed.shape, dy.dtype)
    starts = np.concatenate([[0], np.cumsum(keep)[:-1]]).astype(np.int64)
    for i, (s, k) in enumerate(zip(starts.tolist(), keep.tolist())):
        out[i, :k] = dy[s : s + k]
    return out


@register_gradient("UnpackSegments")
def _unpack_grad(op: OperatorDef, gout: list[Any]) -> tuple[list[OperatorDef], list[Any]]:
    if gout[0] is None:
        return [], [None, None]
    return [OperatorDef("UnpackSegmentsGradient", [op.inputs[0], gout[0], op.inputs[1]], ["#dx"])], [None, "#dx"]


# -- Normalize ------------------------------------------------------------------------------------

_NORM_EPS = 1e-12  # Caffe2's kEps: the norm's floor


def _norm(x: np.ndarray, axis: int) -> np.ndarray:
    return np.maximum(np.sqrt(np.square(x).sum(axis=axis, keepdims=True)), x.dtype.type(_NORM_EPS))


@register_op(
    "Normalize",
    args=[Arg("axis", int, -1, "the axis normalized")],
    doc="Y = X / max(||X||_2 along axis, 1e-12).",
)
def normalize(ctx: Any, x: Any) -> np.ndarray:
    x = float_array(ctx, _np(x), 0)
    return as_array(x / _norm(x, axis_of(ctx, x, ctx.args["axis"])))


@register_op(
    "NormalizeGradient",
    inputs=2,
    args=[Arg("axis", int, -1, "the axis normalized")],
    inputs_doc=("X", "dY"),
    outputs_doc=("dX",),
    doc="dX = (dY - Y * sum(dY * Y along axis)) / ||X||, with Y = X / ||X||.",
)
def normalize_gradient(ctx: Any, x: Any, dy: Any) -> np.ndarray:
    x, dy = float_array(ctx, _np(x), 0), float_array(ctx, _np(dy), 1)
    if dy.shape != x.shape:
        raise ValueError(f"expected dY of X's shape {x.shape}, got {dy.shape}")
    axis = axis_of(ctx, x, ctx.args["axis"])
    norm = _norm(x, axis)
    y = x / norm
    return as_array((dy - y * (dy * y).sum(axis=axis, keepdims=True)) / norm)


@register_gradient("Normalize")
def _normalize_grad(op: OperatorDef, gout: list[Any]) -> tuple[list[OperatorDef], list[Any]]:
    if gout[0] is None:
        return [], [None]
    return [OperatorDef("NormalizeGradient", [op.inputs[0], gout[0]], ["#dx"], dict(op.args))], ["#dx"]


@register_op(
    "NormalizeL1",
    args=[Arg("axis", int, -1, "the axis normalized")],
    doc="Y = X / sum(|X|) along axis (no gradient, as in Caffe2).",
)
def normalize_l1(ctx: Any, x: Any) -> np.ndarray:
    x = float_array(ctx, _np(x), 0)
    return as_array(x / np.abs(x).sum(axis=axis_of(ctx, x, ctx.args["axis"]), keepdims=True))


register_no_gradient("NormalizeL1")


# -- ReversePackedSegs, RemoveDataBlocks, FindDuplicateElements ------------------------------------


@register_op(
    "ReversePackedSegs",
    inputs=2,
    inputs_doc=("data (T x B x ...)", "lengths (B,)"),
    doc="For each column b, the first lengths[b] time steps of data reversed; the rest unchanged.",
)
def reverse_packed_segs(ctx: Any, data: Any, lengths: Any) -> np.ndarray:
    data, lengths = array(ctx, _np(data), 0), _lengths(ctx, lengths, 1)
    if data.ndim < 2 or lengths.size != data.shape[1]:
        raise ValueError(f"expected data (T, {lengths.size}, ...), got shape {data.shape}")
    if lengths.size and lengths.max() > data.shape[0]:
        raise ValueError(f"expected lengths of at most {data.shape[0]}, got {lengths.max()}")
    out = data.copy()
    for b, n in enumerate(lengths.tolist()):
        out[:n, b] = data[:n, b][::-1]
    return out


@register_gradient("ReversePackedSegs")
def _reverse_packed_segs_grad(op: OperatorDef, gout: list[Any]) -> tuple[list[OperatorDef], list[Any]]:
    if gout[0] is None:
        return [], [None, None]
    return [OperatorDef("ReversePackedSegs", [gout[0], op.inputs[1]], ["#dx"])], ["#dx", None]


@register_op(
    "RemoveDataBlocks",
    inputs=2,
    inputs_doc=("data (N x ...)", "indices of the rows to remove (repeats allowed)"),
    doc="data without the rows at indices.",
)
def remove_data_blocks(ctx: Any, data: Any, indices: Any) -> np.ndarray:
    data, idx = array(ctx, _np(data), 0), array(ctx, _np(indices), 1).reshape(-1).astype(np.int64)
    if data.ndim == 0:
        raise ValueError("expected data of at least 1 dimension, got a scalar")
    if idx.size and (idx.min() < 0 or idx.max() >= data.shape[0]):
        raise IndexError(f"expected indices in [0, {data.shape[0]}), got {idx.min()}..{idx.max()}")
    return np.delete(data, np.unique(idx), axis=0)


@register_op(
    "FindDuplicateElements",
    doc="The int64 positions of the elements of a 1-D input equal to an earlier element.",
)
def find_duplicate_elements(ctx: Any, data: Any) -> np.ndarray:
    data = array(ctx, _np(data), 0).reshape(-1)
    seen: set[Any] = set()
    found = []
    for i, v in enumerate(data.tolist()):
        if v in seen:
            found.append(i)
        seen.add(v)
    return np.array(found, np.int64)


register_no_gradient("RemoveDataBlocks", "FindDuplicateElements")


# -- string ops -----------------------------------------------------------------------------------


def _strings(ctx: Any, x: Any) -> np.ndarray:
    x = _np(x)
    if x.dtype != object and x.dtype.kind not in "SU":
        raise TypeError(f"expected a string tensor in input 0 {ctx.op.inputs[0]!r}, got dtype {x.dtype}")
    return x


def _like(s: Any, text: str) -> Any:
    """``text`` as the type of the element ``s`` (bytes for bytes elements)."""
    return text.encode() if isinstance(s, bytes) else text


def _map_strings(x: np.ndarray, fn: Any, dtype: Any) -> np.ndarray:
    out = np.empty(x.shape, dtype)
    for idx, s in np.ndenumerate(x):
        out[idx] = fn(s)
    return out


@register_op(
    "StringPrefix", args=[Arg("length", int, Arg.REQUIRED, "bytes kept")], doc="The first length bytes of each string."
)
def string_prefix(ctx: Any, x: Any) -> np.ndarray:
    n = max(ctx.args["length"], 0)
    return _map_strings(_strings(ctx, x), lambda s: s[:n], object)


@register_op(
    "StringSuffix", args=[Arg("length", int, Arg.REQUIRED, "bytes kept")], doc="The last length bytes of each string."
)
def string_suffix(ctx: Any, x: Any) -> np.ndarray:
    n = max(ctx.args["length"], 0)
    return _map_strings(_strings(ctx, x), lambda s: s[max(len(s) - n, 0) :], object)


@register_op(
    "StringStartsWith",
    args=[Arg("prefix", str, Arg.REQUIRED, "the prefix")],
    doc="Whether each string starts with prefix.",
)
def string_starts_with(ctx: Any, x: Any) -> np.ndarray:
    p = ctx.args["prefix"]
    return _map_strings(_strings(ctx, x), lambda s: s.startswith(_like(s, p)), bool)


@register_op(
    "StringEndsWith", args=[Arg("suffix", str, Arg.REQUIRED, "the suffix")], doc="Whether each string ends with suffix."
)
def string_ends_with(ctx: Any, x: Any) -> np.ndarray:
    p = ctx.args["suffix"]
    return _map_strings(_strings(ctx, x), lambda s: s.endswith(_like(s, p)), bool)


register_no_gradient("StringPrefix", "StringSuffix", "StringStartsWith", "StringEndsWith")
