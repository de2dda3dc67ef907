"""Sparse operators with Caffe2's schemas: lookups (Gather, SparseLengthsSum,
SparseLengthsWeightedSum) whose gradients are sparse, and in-place sparse updates
(ScatterWeightedSum, SparseAdagrad), plus SparseToDense.

A sparse gradient is a :class:`GradientSlice`, as in Caffe2: a pair of blobs, ``indices`` [K]
(int) and ``values`` [K, *row] (the gradient of rows ``indices[k]`` of the table), never a
dense table-sized array. An index may appear several times; its rows add up.
:func:`asyncnet.autodiff.add_gradient_ops` returns one for a table that only lookups read.

Sparse updates write the touched rows INTO the parameter's array and return that same array,
like the dense optimizers of ``optim.py``: Hogwild! workers that share one table see each
other's rows (a float32 row store does not tear per element). A sparse SGD step is Caffe2's
``ScatterWeightedSum([param, one, indices, values, neg_lr], param)`` with ``neg_lr = -lr``;
the updates fused with SparseLengthsSumGradient (Caffe2's SparseAdagrad... and
RowWiseSparseAdagradFusedWithSparseLengthsSumGradient, asyncnet's SparseSGDFused...) read the
pooled gradient and the bag lengths instead of one gradient row per index, with the same result.
Repeated indices are applied one after another in order, exactly as Caffe2's loops do, and a
bag's rows are summed one after another from zero, as Caffe2's SparseLengthsSum loop does: on
numpy these are the bits of those loops, computed by numpy calls that release the GIL for most
of their time (padded bag slots, rounds of distinct rows; np.add.at for small inputs), or,
when torch is there, by one torch call on views of the arrays (``embedding_bag`` for a float32
lookup, ``index_add_`` for the SGD row updates), so an executor thread can run them beside the
dense layers.

Every op runs on numpy arrays or torch tensors (results keep the inputs' library and device;
updates stay in the torch tensor's own storage). On torch the lookups use ``index_select`` and
the segment sums ``index_add_``, whose order of additions is torch's, so the sums agree with
numpy's within float rounding, not bit for bit.

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace()
    >>> ws.feed("table", np.arange(8.0).reshape(4, 2)); ws.feed("idx", np.array([3, 0, 3]))
    >>> ws.feed("lengths", np.array([2, 1], np.int32))
    >>> net = an.Net("bags"); _ = net.SparseLengthsSum(["table", "idx", "lengths"], "pooled")
    >>> ws.run_net_once(net)
    >>> ws.fetch("pooled")
    array([[6., 8.],
           [6., 7.]])
"""

from __future__ import annotations

import importlib.util
import math
import threading
from typing import Any, NamedTuple

import numpy as np

from asyncnet.core.defs import OperatorDef
from asyncnet.core.registry import Arg, register_gradient, register_op
from asyncnet.ops._check import array, check_alloc, float_array
from asyncnet.ops.grad import GradOut, MakerResult, output_grad
from asyncnet.ops.optim import _FORMULA  # one definition of the caffe2 | torch switch
from asyncnet.tensor.namespace import is_torch, loaded_torch, namespace

__all__ = [
    "GradientSlice",
    "coalesce",
    "gather",
    "sparse_lengths_sum",
    "sparse_lengths_weighted_sum",
    "sparse_lengths_mean",
    "sparse_to_dense",
    "scatter_weighted_sum",
    "sparse_adagrad",
    "rowwise_sparse_adagrad",
    "occurrence_rounds",
    "first_occurrences",
]


class GradientSlice(NamedTuple):
    """A sparse gradient: blob ``indices`` [K] and blob ``values`` [K, *row] (Caffe2's GradientSlice)."""

    indices: str
    values: str


def _table_rows(x: np.ndarray) -> np.ndarray:
    """``x`` as a 2-D [rows, row size] view, also when it has no rows (``reshape(rows, -1)``
    cannot size an empty array)."""
    return x.reshape(x.shape[0], math.prod(x.shape[1:]))


def _indices(ctx: Any, x: Any, i: int, rows: int) -> np.ndarray:
    x = array(ctx, x, i)
    if is_torch(x):
        return _torch_indices(ctx, x, i, rows)
    if x.dtype not in (np.int32, np.int64):
        raise TypeError(f"expected int32 or int64 indices in input {i} {ctx.op.inputs[i]!r}, got dtype {x.dtype}")
    if x.size and (x.min() < 0 or x.max() >= rows):
        raise ValueError(
            f"expected indices in [0, {rows}) in input {i} {ctx.op.inputs[i]!r}, got range [{x.min()}, {x.max()}]"
        )
    return x


def _torch_indices(ctx: Any, x: Any, i: int, rows: int) -> Any:
    import torch

    if x.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"expected int32 or int64 indices in input {i} {ctx.op.inputs[i]!r}, got dtype {x.dtype}")
    if x.numel():
        lo, hi = int(x.min()), int(x.max())
        if lo < 0 or hi >= rows:
            raise ValueError(
                f"expected indices in [0, {rows}) in input {i} {ctx.op.inputs[i]!r}, got range [{lo}, {hi}]"
            )
    return x


def _table(ctx: Any, x: Any, i: int) -> np.ndarray:
    x = array(ctx, x, i)
    if x.ndim < 1:
        raise ValueError(f"expected a table of at least 1 dim in input {i} {ctx.op.inputs[i]!r}, got a scalar")
    return x


def _lengths(ctx: Any, x: Any, i: int, total: int) -> np.ndarray:
    x = array(ctx, x, i)
    if x.ndim != 1 or namespace(ctx, x).kind(x) not in "iu":
        raise TypeError(f"expected 1-D int lengths in input {i} {ctx.op.inputs[i]!r}, got {x.dtype} {tuple(x.shape)}")
    if x.shape[0] and int(x.min()) < 0 or int(x.sum()) != total:
        raise ValueError(
            f"expected non-negative lengths in input {i} {ctx.op.inputs[i]!r} summing to {total} "
            f"(the number of indices), got sum {int(x.sum())}"
        )
    return x


# -- Gather: Y = DATA[INDICES] (rows);  dDATA = GradientSlice(INDICES flattened, dY as rows) --------
_WRAP = Arg("wrap_indices", bool, None, "a negative index i means dim + i (Caffe2's; default: on for axis 0 only)")
_MATCH_OUTER = Arg(
    "match_outer",
    bool,
    False,
    "INDICES has DATA's dims before axis and each outer position picks with its own indices (Caffe2's)",
)


@register_op(
    "Gather",
    inputs=2,
    outputs=1,
    inputs_doc=("DATA [R, ...]", "INDICES (int, any shape)"),
    outputs_doc=("OUTPUT [*DATA.shape[:axis], *INDICES.shape, *DATA.shape[axis + 1:]]",),
    args=[
        Arg("axis", int, 0, "the axis of DATA the indices pick along (Caffe2's; negative counts from the end)"),
        _WRAP,
        _MATCH_OUTER,
        Arg(
            "dense_gradient",
            bool,
            False,
            "axis 0: a dense gradient (Caffe2's SparseToDense) instead of the sparse one; other axes are always dense",
        ),
    ],
    doc="Caffe2's Gather: the slices of DATA along `axis` (rows by default) picked by INDICES (any shape; "
    "each in [0, DATA.shape[axis]), or in [-dim, dim) with wrap_indices, on by default on axis 0; with "
    "match_outer INDICES starts with DATA's dims before axis and OUTPUT is [*DATA.shape[:axis], "
    "*INDICES.shape[axis:], *DATA.shape[axis + 1:]]). An empty DATA axis gives an empty output of "
    "DATA's shape, as Caffe2's. Its gradient is sparse (indices, rows) on axis 0 unless dense_gradient, "
    "dense (BatchGatherGradient) on another axis, as in Caffe2.",
)
def gather(ctx: Any, data: Any, indices: Any) -> np.ndarray:
    data = _table(ctx, data, 0)
    namespace(ctx, data, indices)
    axis = _gather_axis(ctx, data)
    wrap = ctx.args["wrap_indices"]
    return _gather_impl(ctx, data, indices, axis, axis == 0 if wrap is None else wrap, ctx.args["match_outer"])


def _gather_impl(ctx: Any, data: Any, indices: Any, axis: int, wrap: bool, match_outer: bool = False) -> Any:
    """Caffe2's gather_impl: an empty DATA axis gives DATA's shape (no index is read), an empty
    output is returned before the indices are checked, negative indices wrap when ``wrap``."""
    dim = data.shape[axis]
    indices = array(ctx, indices, 1)
    _indices(ctx, indices.reshape(-1)[:0], 1, dim)  # the dtype (int32 or int64), whatever the output's size
    if match_outer:
        _check_outer(ctx, data, indices, axis)
    if dim == 0:
        return data.clone() if is_torch(data) else data.copy()
    picked = indices.shape[axis:] if match_outer else indices.shape
    shape = (*data.shape[:axis], *picked, *data.shape[axis + 1 :])
    if math.prod(shape) == 0:
        return namespace(ctx, data).full(shape, 0, like=data)
    idx = _indices(ctx, _wrapped(indices, dim) if wrap else indices, 1, dim)
    if match_outer:
        outer = math.prod(data.shape[:axis])
        flat = data.reshape(outer, dim, *data.shape[axis + 1 :])
        rows = _outer_rows(idx, outer)
        return flat[rows, idx.reshape(outer, -1)].reshape(shape)
    if axis == 0:
        return _rows(data, idx)
    if is_torch(data):
        picked_slices = data.index_select(axis, idx.reshape(-1).long())
        return picked_slices.reshape(shape)
    return np.take(data, idx, axis=axis)


def _check_outer(ctx: Any, data: Any, indices: Any, axis: int) -> None:
    if tuple(indices.shape[:axis]) != tuple(data.shape[:axis]) or indices.ndim < axis:
        raise ValueError(
            f"with match_outer, expected INDICES {ctx.op.inputs[1]!r} to start with DATA's dims before "
            f"axis {axis}, {tuple(data.shape[:axis])}, got {tuple(indices.shape)}"
        )


def _outer_rows(idx: Any, outer: int) -> Any:
    """The outer position of each index of ``idx`` viewed as [outer, k]: a column to broadcast."""
    if is_torch(idx):
        import torch

        return torch.arange(outer, device=idx.device)[:, None]
    return np.arange(outer)[:, None]


def _wrapped(indices: Any, dim: int) -> Any:
    """``indices`` with each negative i read as dim + i (a new array only when one is negative)."""
    if not (indices < 0).any():
        return indices
    if is_torch(indices):
        import torch

        return torch.where(indices < 0, indices + dim, indices)
    return np.where(indices < 0, indices + dim, indices)


def _gather_axis(ctx: Any, data: Any) -> int:
    axis = ctx.args["axis"]
    if not -data.ndim <= axis < data.ndim:
        raise ValueError(f"argument axis={axis} is out of range for DATA of shape {tuple(data.shape)}")
    return axis % data.ndim


# -- BatchGather: Gather along axis 1 (Caffe2's name); its gradient is BatchGatherGradient --------
@register_op(
    "BatchGather",
    inputs=2,
    outputs=1,
    inputs_doc=("DATA [B, R, ...]", "INDICES (int, any shape)"),
    outputs_doc=("OUTPUT [*DATA.shape[:axis], *INDICES.shape, *DATA.shape[axis + 1:]]",),
    args=[Arg("axis", int, 1, "the axis of DATA the indices pick along (negative counts from the end)"), _MATCH_OUTER],
    doc="Caffe2's BatchGather: Gather along `axis` (1 by default: the same indices in every batch row, or "
    "each row its own with match_outer) of a DATA of at least 2 dims; indices in [0, DATA.shape[axis]).",
)
def batch_gather(ctx: Any, data: Any, indices: Any) -> np.ndarray:
    data = _table(ctx, data, 0)
    namespace(ctx, data, indices)
    if data.ndim < 2:
        raise ValueError(
            f"expected DATA of at least 2 dims in input 0 {ctx.op.inputs[0]!r}, got shape {tuple(data.shape)}"
        )
    return _gather_impl(ctx, data, indices, _gather_axis(ctx, data), False, ctx.args["match_outer"])


@register_gradient("BatchGather")
def _batch_gather_grad(op: OperatorDef, gout: GradOut) -> MakerResult:
    args = {"axis": op.args.get("axis", 1), "match_outer": bool(op.args.get("match_outer", False))}
    gop = OperatorDef("BatchGatherGradient", [*op.inputs, output_grad(op, gout)], ["#ddata"], args)
    return [gop], ["#ddata", None]


@register_op(
    "BatchGatherGradient",
    inputs=3,
    outputs=1,
    args=[
        Arg("axis", int, 1, "the forward Gather's axis"),
        Arg("wrap_indices", bool, False, "the forward op wrapped negative indices"),
        _MATCH_OUTER,
    ],
    inputs_doc=("DATA", "INDICES", "dY"),
    outputs_doc=("dDATA, DATA's shape",),
    doc="Dense gradient of Gather along `axis` (Caffe2's name): dDATA is zero but for the picked "
    "slices, which receive dY; an index picked twice receives both, in order.",
)
def batch_gather_gradient(ctx: Any, data: Any, indices: Any, dy: Any) -> np.ndarray:
    data = _table(ctx, data, 0)
    xp = namespace(ctx, data, indices, dy)
    axis = _gather_axis(ctx, data)
    dy = float_array(ctx, dy, 2)
    match_outer = ctx.args["match_outer"]
    indices = array(ctx, indices, 1)
    if match_outer:
        _check_outer(ctx, data, indices, axis)
    picked = indices.shape[axis:] if match_outer else indices.shape
    want = tuple(data.shape) if data.shape[axis] == 0 else (*data.shape[:axis], *picked, *data.shape[axis + 1 :])
    if tuple(dy.shape) != want:
        raise ValueError(f"expected dY of shape {want} in input 2 {ctx.op.inputs[2]!r}, got {tuple(dy.shape)}")
    if data.shape[axis] == 0 or math.prod(dy.shape) == 0:  # an empty forward output: nothing was picked
        return xp.full(tuple(data.shape), 0, like=dy)
    wrap = ctx.args["wrap_indices"]
    idx = _indices(ctx, _wrapped(indices, data.shape[axis]) if wrap else indices, 1, data.shape[axis])
    if match_outer:
        return _match_outer_grad(xp, data, idx, dy, axis)
    flat_dy = dy.reshape(*data.shape[:axis], -1, *data.shape[axis + 1 :])  # the index dims as one
    if xp.name == "torch":
        return xp.lib.zeros_like(data, dtype=dy.dtype).index_add_(axis, idx.reshape(-1).long(), flat_dy)
    out = np.zeros(data.shape, dy.dtype)
    np.add.at(np.moveaxis(out, axis, 0), idx.reshape(-1), np.moveaxis(flat_dy, axis, 0))
    return out


def _match_outer_grad(xp: Any, data: Any, idx: Any, dy: Any, axis: int) -> Any:
    """dDATA[o, idx[o, k]] += dY[o, k] for each outer position o (repeats add up)."""
    outer, dim, inner = math.prod(data.shape[:axis]), data.shape[axis], tuple(data.shape[axis + 1 :])
    flat_idx = idx.reshape(outer, -1)
    flat_dy = dy.reshape(outer, -1, *inner)
    rows = _outer_rows(idx, outer)
    if xp.name == "torch":
        out = xp.lib.zeros((outer, dim, *inner), dtype=dy.dtype, device=dy.device)
        rows_b = rows.expand(outer, flat_idx.shape[1])
        out.index_put_((rows_b, flat_idx.long()), flat_dy, accumulate=True)
        return out.reshape(data.shape)
    out = np.zeros((outer, dim, *inner), dy.dtype)
    np.add.at(out, (np.broadcast_to(rows, flat_idx.shape), flat_idx), flat_dy)
    return out.reshape(data.shape)


def _rows(data: Any, idx: Any) -> Any:
    """``data[idx]``: the rows picked by an int array of any shape (a new array)."""
    if is_torch(data):
        return data.index_select(0, idx.reshape(-1).long()).reshape(
            (*idx.shape, *data.shape[1:])
        )  # a tuple: () for 0-d
    return data.take(idx, axis=0)  # numpy's take copies rows about twice as fast as fancy indexing


@register_op(
    "GatherGradient",
    inputs=2,
    outputs=2,
    inputs_doc=("dY [*INDICES.shape, ...]", "INDICES"),
    outputs_doc=("indices [K] (INDICES flattened)", "values [K, ...] (dY as rows)"),
    doc="Gradient of Gather as a GradientSlice: the indices flattened and dY viewed as one row per index.",
)
def gather_gradient(ctx: Any, dy: Any, indices: Any) -> tuple[np.ndarray, np.ndarray]:
    dy, idx = array(ctx, dy, 0), array(ctx, indices, 1)
    xp = namespace(ctx, dy, idx)
    if dy.shape[: idx.ndim] != idx.shape:
        raise ValueError(f"expected dY of shape {tuple(idx.shape)} + row, got {tuple(dy.shape)}")
    return xp.copy(idx.reshape(-1)), xp.copy(dy.reshape(xp.size(idx), *dy.shape[idx.ndim :]))


@register_gradient("Gather")
def _gather_grad(op: OperatorDef, gout: GradOut) -> MakerResult:
    axis = op.args.get("axis", 0)
    dense = op.args.get("dense_gradient")
    if (
        axis != 0 or dense
    ):  # Caffe2's GetGatherGradient: dense on any other axis (a negative one may still be 0: the kernel resolves it)
        if axis != 0 and dense is not None and not dense:
            raise ValueError("Gather with axis > 0 must use dense_gradient (Caffe2's rule)")
        args = {
            "axis": axis,
            "wrap_indices": bool(op.args.get("wrap_indices", axis == 0)),
            "match_outer": bool(op.args.get("match_outer", False)),
        }
        gop = OperatorDef("BatchGatherGradient", [*op.inputs, output_grad(op, gout)], ["#ddata"], args)
        return [gop], ["#ddata", None]
    gop = OperatorDef("GatherGradient", [output_grad(op, gout), op.inputs[1]], ["#idx", "#rows"])
    return [gop], [GradientSlice("#idx", "#rows"), None]  # type: ignore[list-item]


# -- SparseLengthsSum: OUTPUT[b] = sum of DATA[INDICES[k]] over the k of segment b ------------------
def segment_sum(rows: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Sum consecutive runs of ``rows`` of the given ``lengths`` (empty runs give zeros), each
    run's rows added one after another from zero: Caffe2's loop order, bit for bit.

    >>> segment_sum(np.arange(4.0)[:, None], np.array([1, 0, 3]))
    array([[0.],
           [0.],
           [6.]])
    """
    if is_torch(rows):
        return _segment_sum_torch(rows, lengths)
    out = np.zeros((lengths.size, *rows.shape[1:]), dtype=rows.dtype)
    used = _bag_slots(lengths, rows.shape[0], math.prod(rows.shape[1:]))
    if used is None:
        _add_rows(out, _segments(lengths), rows)
        return out
    padded = np.full((*used.shape, *rows.shape[1:]), -0.0, dtype=rows.dtype)
    padded.swapaxes(0, 1)[used.T] = rows  # bag by bag, as the rows come
    return _sum_slots(out, padded)


def _bag_slots(lengths: np.ndarray, k: int, row: int) -> np.ndarray | None:
    """The padded layout of bags ``used`` [L, B] (slot t of bag b holds its t-th index, L the
    longest bag), or None when that layout costs more than adding the ``k`` rows one by one.

    Summing slot by slot (one numpy call per slot over every bag) releases the GIL for the
    copies and adds; np.add.reduceat holds it and sums in another order. Measured here: a slot
    call costs ~1 us of Python and a padded element ~1 ns; np.add.at ~8 us plus ~3 ns an
    element, with the GIL held. Bags of even length pad nothing; one long bag among short
    ones pads a lot.
    """
    if k == 0 or lengths.size == 0:
        return None
    longest = int(lengths.max())
    if longest * (1000 + lengths.size * row) >= 3 * k * row + 8000:
        return None
    return np.arange(longest)[:, None] < lengths


def _sum_slots(out: np.ndarray, padded: np.ndarray) -> np.ndarray:
    """``out + padded[0] + padded[1] + ...`` slot by slot, in one numpy reduction over the
    outermost axis (numpy adds along it one slot after another, from ``initial``; the GIL is
    released). A single-element bag would make that axis the contiguous one, which numpy sums
    pairwise: it is accumulated in order instead. Empty slots hold -0.0, which adds exactly nothing (x + -0.0 == x, -0.0
    included), so each bag's sum is its rows added in order from ``out`` (zeros)."""
    if padded.shape[0] == 0:
        return out
    if out.size == 1:  # one bag of one element: numpy would sum the contiguous slots pairwise
        flat = np.concatenate([np.zeros(1, padded.dtype), padded.reshape(-1)])
        out.reshape(-1)[0] = np.add.accumulate(flat)[-1]
        return out
    return np.add.reduce(padded, axis=0, dtype=padded.dtype, out=out, initial=0)


def _segment_sum_torch(rows: Any, lengths: Any) -> Any:
    out = rows.new_zeros((lengths.shape[0], *rows.shape[1:]))
    return out.index_add_(0, _segments(lengths), rows) if rows.shape[0] else out


def _torch_bags(data: Any, idx: Any, lengths: Any, weights: Any = None) -> Any:
    """One ``torch.nn.functional.embedding_bag`` call (mode "sum"): each bag's rows gathered and
    summed in one kernel (no [K, row] copy), weighted by ``weights`` when given. Tables that
    are not floating point go through index_select and index_add_."""
    import torch

    if not data.is_floating_point() or data.shape[0] == 0 or data.ndim < 1:
        rows = _rows(data, idx)
        if weights is not None:
            rows = rows * weights.reshape(-1, *([1] * (data.ndim - 1)))
        return segment_sum(rows, lengths)
    flat = _table_rows(data)
    lens = lengths.long()
    offsets = torch.cumsum(lens, 0) - lens
    out = torch.nn.functional.embedding_bag(idx.long(), flat, offsets, mode="sum", per_sample_weights=weights)
    return out.reshape(lengths.shape[0], *data.shape[1:])


def _bag_sums_by_slot(data: np.ndarray, idx: np.ndarray, lengths: np.ndarray, used: np.ndarray) -> np.ndarray:
    """Each bag's rows added in order from zero, slot by slot of the layout ``used`` [L, B]:
    slot t's rows (one per bag, -0.0 where a bag is shorter) are gathered into a buffer of one
    row per bag, which stays in cache, and added to the sums. Bags of one length need no mask.
    Each take and add releases the GIL."""
    b = lengths.size
    if b and int(lengths.min()) == used.shape[0]:
        slot_idx = np.ascontiguousarray(idx.reshape(b, used.shape[0]).T)
    else:
        slot_idx = np.zeros(used.shape, dtype=idx.dtype)
        slot_idx.T[used.T] = idx
    full = int(lengths.min()) if b else 0
    out = np.zeros((b, *data.shape[1:]), dtype=data.dtype)
    buf = np.empty_like(out)
    for t in range(used.shape[0]):
        np.take(
            data, slot_idx[t], axis=0, out=buf, mode="clip"
        )  # indices checked: clip never clips; it skips take's buffering
        if t >= full:
            buf[~used[t]] = -0.0
        out += buf
    return out


def _grad_lengths(ctx: Any, x: Any, i: int, dy: Any) -> Any:
    """LENGTHS of a SparseLengths*Gradient: 1-D non-negative ints, one per row of dOUTPUT (input 0)."""
    x = array(ctx, x, i)
    if x.ndim != 1 or namespace(ctx, x).kind(x) not in "iu":
        raise TypeError(f"expected 1-D int lengths in input {i} {ctx.op.inputs[i]!r}, got {x.dtype} {tuple(x.shape)}")
    if x.shape[0] and int(x.min()) < 0:
        raise ValueError(f"expected non-negative lengths in input {i} {ctx.op.inputs[i]!r}, got min {int(x.min())}")
    if tuple(dy.shape[:1]) != tuple(x.shape):
        raise ValueError(f"expected dOUTPUT with {x.shape[0]} rows (one per length), got {tuple(dy.shape)}")
    return x


def _segments(lengths: np.ndarray) -> np.ndarray:
    """The segment of each index: [0]*lengths[0] + [1]*lengths[1] + ..."""
    if is_torch(lengths):
        import torch

        return torch.repeat_interleave(torch.arange(lengths.shape[0], device=lengths.device), lengths.long())
    return np.repeat(np.arange(lengths.size), lengths)


@register_op(
    "SparseLengthsSum",
    inputs=3,
    outputs=1,
    inputs_doc=("DATA [R, ...]", "INDICES [K] int", "LENGTHS [B] int"),
    outputs_doc=("OUTPUT [B, ...]",),
    doc="Caffe2's SparseLengthsSum (an embedding bag): OUTPUT[b] sums the DATA rows of the b-th run of "
    "LENGTHS[b] consecutive INDICES.",
)
def sparse_lengths_sum(ctx: Any, data: Any, indices: Any, lengths: Any) -> np.ndarray:
    if type(data) is np.ndarray:
        torch = _torch_for_bags(data, indices, lengths)
        if torch is not None:  # torch's embedding_bag on views of the arrays: the same bits
            return _host_bags(ctx, torch, data, indices, lengths)
    data = _table(ctx, data, 0)
    namespace(ctx, data, indices, lengths)
    idx = _indices(ctx, indices, 1, data.shape[0])
    if idx.ndim != 1:
        raise ValueError(f"expected 1-D INDICES, got shape {tuple(idx.shape)}")
    lengths = _lengths(ctx, lengths, 2, idx.shape[0])
    if is_torch(data):
        return _torch_bags(data, idx, lengths)
    used = _bag_slots(lengths, idx.shape[0], math.prod(data.shape[1:]))
    if used is None:
        return segment_sum(data.take(idx, axis=0), lengths)
    # gather straight into the padded layout (no [K, row] copy in between)
    return _bag_sums_by_slot(data, idx, lengths, used)


#: numpy float32 lookups run torch's embedding_bag when torch is already imported (it costs less
#: than numpy's calls at every size), and import it from this many elements (indices x row) on
TORCH_BAG_MIN = 16384
#: False: numpy float32 lookups never use torch (the tests' way to reach the numpy layouts)
TORCH_BAGS = True
_HAS_TORCH: list[bool] = []  # [installed?] once looked up


def _writable(a: np.ndarray) -> np.ndarray:
    """``a``, or a copy of it when it is read-only (torch.from_numpy warns on those)."""
    return a if a.flags.writeable else np.array(a)


def _int_indices(ctx: Any, x: Any, i: int) -> np.ndarray:
    """1-D int32 or int64 numpy INDICES (input ``i``), their range not checked."""
    x = array(ctx, x, i)
    if x.dtype not in (np.int32, np.int64):
        raise TypeError(f"expected int32 or int64 indices in input {i} {ctx.op.inputs[i]!r}, got dtype {x.dtype}")
    if x.ndim != 1:
        raise ValueError(f"expected 1-D INDICES, got shape {tuple(x.shape)}")
    return x


def _torch_for_bags(data: np.ndarray, idx: Any, lengths: Any) -> Any:
    """torch, when a numpy float32 lookup is better pooled by its ``embedding_bag``: torch is
    imported, or installed and the lookup has at least :data:`TORCH_BAG_MIN` elements. Its
    float32 sum adds each bag's rows one after another from zero, the bits of Caffe2's loop
    (tested against :func:`_bag_sums_by_slot`), in one pass with no padded copy."""
    if data.dtype != np.float32 or type(idx) is not np.ndarray or type(lengths) is not np.ndarray:
        return None
    if idx.ndim != 1 or data.ndim < 1 or data.shape[0] == 0 or not TORCH_BAGS:
        return None
    if not (data.flags.c_contiguous and data.flags.writeable):  # torch views writable arrays only
        return None
    return host_torch(idx.shape[0] * (data.size // data.shape[0]))


def host_torch(elements: int) -> Any:
    """torch, to run a kernel on views of numpy arrays: when it is imported, or installed and
    the kernel touches at least :data:`TORCH_BAG_MIN` elements (then imported here); else None.

    >>> host_torch(0) is None or host_torch(0).__name__ == "torch"
    True
    """
    torch = loaded_torch()
    if torch is not None:
        return torch
    if elements < TORCH_BAG_MIN:
        return None
    if not _HAS_TORCH:
        _HAS_TORCH.append(importlib.util.find_spec("torch") is not None)
    if not _HAS_TORCH[0]:
        return None
    import torch  # a large lookup on numpy arrays: torch's fused kernel wins

    from asyncnet.tensor.threads import torch_loaded

    torch_loaded()
    return torch


def _host_bags(ctx: Any, torch: Any, data: np.ndarray, indices: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """SparseLengthsSum of numpy arrays by one ``torch.embedding_bag`` call on views of them.

    The checks cost one pass over LENGTHS (their running sum gives the bag offsets, its last
    value is checked against the number of indices, their minimum against 0) and none over the
    indices: embedding_bag checks each index's range in its loop, and on its error the indices
    are checked here for asyncnet's message."""
    idx = _int_indices(ctx, indices, 1)
    offsets = _bag_offsets(ctx, lengths, 2, idx.shape[0])
    flat = data if data.ndim == 2 else _table_rows(data)
    t = torch.from_numpy
    try:
        out = torch.embedding_bag(t(flat), t(_writable(idx)), t(offsets), False, 0, False, None, True)[0]
    except RuntimeError:
        _indices(ctx, idx, 1, data.shape[0])  # our message for an index out of range
        raise
    pooled = out.numpy()
    return pooled if data.ndim == 2 else pooled.reshape(offsets.shape[0] - 1, *data.shape[1:])


def _bag_offsets(ctx: Any, x: np.ndarray, i: int, total: int) -> np.ndarray:
    """[0, cumsum(LENGTHS)...] as int64 (input ``i``, 1-D ints), the error of :func:`_lengths`
    when a length is negative or they do not sum to ``total``. Bags of one length (a Criteo
    lookup: one id per example and table) take a cached ``arange`` after two reductions."""
    kind = x.dtype.kind
    if x.ndim != 1 or kind not in "iu":
        raise TypeError(f"expected 1-D int lengths in input {i} {ctx.op.inputs[i]!r}, got {x.dtype} {tuple(x.shape)}")
    b = x.shape[0]
    low = int(x.min()) if b else 0
    if low < 0:
        _lengths(ctx, x, i, total)
    if b and low * b == total and total and int(x.max()) == low:
        return _even_offsets(b, low)
    offsets = np.empty(b + 1, np.int64)
    offsets[0] = 0
    np.cumsum(x, out=offsets[1:])
    if offsets[-1] != total:
        _lengths(ctx, x, i, total)
        raise ValueError(f"expected lengths in input {i} {ctx.op.inputs[i]!r} that fit in int64")
    return offsets


_EVEN_OFFSETS: dict[tuple[int, int], np.ndarray] = {}


def _even_offsets(b: int, n: int) -> np.ndarray:
    """``[0, n, 2n, ..., b * n]`` (int64), made once per (b, n); nobody writes it."""
    offsets = _EVEN_OFFSETS.get((b, n))
    if offsets is None:
        if len(_EVEN_OFFSETS) >= 64:
            _EVEN_OFFSETS.clear()
        offsets = _EVEN_OFFSETS[b, n] = np.arange(0, (b + 1) * n, n, dtype=np.int64)
    return offsets


@register_op(
    "SparseLengthsSumGradient",
    inputs=2,
    outputs=1,
    inputs_doc=("dOUTPUT [B, ...]", "LENGTHS [B]"),
    outputs_doc=("values [K, ...]",),
    doc="Gradient of SparseLengthsSum: the values of its GradientSlice, dOUTPUT[b] for each index of segment b.",
)
def sparse_lengths_sum_gradient(ctx: Any, dy: Any, lengths: Any) -> np.ndarray:
    dy = float_array(ctx, dy, 0)
    namespace(ctx, dy, lengths)
    lengths = _grad_lengths(ctx, lengths, 1, dy)
    return _rows(dy, _segments(lengths))


@register_gradient("SparseLengthsSum")
def _sls_grad(op: OperatorDef, gout: GradOut) -> MakerResult:
    _, indices, lengths = op.inputs
    gop = OperatorDef("SparseLengthsSumGradient", [output_grad(op, gout), lengths], ["#rows"])
    return [gop], [GradientSlice(indices, "#rows"), None, None]  # type: ignore[list-item]


# -- SparseLengthsMean: OUTPUT[b] = (sum of DATA[INDICES[k]] over segment b) * (1 / LENGTHS[b]) ----
def _inverse_lengths(lengths: Any, dtype: Any) -> Any:
    """1 / LENGTHS[b] in the data's dtype (0 for an empty bag), one per bag, shaped to scale rows:
    Caffe2 multiplies by the rounded reciprocal (``1.0f / length``), it does not divide."""
    if is_torch(lengths):
        return _torch_inverse(lengths.to(dtype))
    n = lengths.astype(dtype)
    return np.divide(np.ones_like(n), n, out=np.zeros_like(n), where=n > 0)


def _torch_inverse(n: Any) -> Any:
    """1 / n where n > 0, else 0, on a torch tensor."""
    import torch

    return torch.where(n > 0, 1 / torch.where(n > 0, n, torch.ones_like(n)), torch.zeros_like(n))


@register_op(
    "SparseLengthsMean",
    inputs=3,
    outputs=1,
    inputs_doc=("DATA [R, ...] float", "INDICES [K] int", "LENGTHS [B] int"),
    outputs_doc=("OUTPUT [B, ...]",),
    doc="Caffe2's SparseLengthsMean: OUTPUT[b] is the mean of the DATA rows of the b-th run of LENGTHS[b] "
    "consecutive INDICES (their sum, rows added in order, times the rounded 1 / LENGTHS[b], as Caffe2's "
    "kernel); an empty bag gives zeros. torch's embedding_bag(mode='mean') computes the same within "
    "rounding.",
)
def sparse_lengths_mean(ctx: Any, data: Any, indices: Any, lengths: Any) -> Any:
    data = float_array(ctx, _table(ctx, data, 0), 0)
    summed = sparse_lengths_sum(ctx, data, indices, lengths)
    inv = _inverse_lengths(array(ctx, lengths, 2), data.dtype)
    return summed * inv.reshape(-1, *([1] * (summed.ndim - 1)))


@register_op(
    "SparseLengthsMeanGradient",
    inputs=2,
    outputs=1,
    inputs_doc=("dOUTPUT [B, ...]", "LENGTHS [B]"),
    outputs_doc=("values [K, ...]",),
    doc="Gradient of SparseLengthsMean: the values of its GradientSlice, dOUTPUT[b] * (1 / LENGTHS[b]) "
    "for each index of segment b (Caffe2's MeanReducerGradient).",
)
def sparse_lengths_mean_gradient(ctx: Any, dy: Any, lengths: Any) -> Any:
    dy = float_array(ctx, dy, 0)
    namespace(ctx, dy, lengths)
    lengths = _grad_lengths(ctx, lengths, 1, dy)
    scaled = dy * _inverse_lengths(lengths, dy.dtype).reshape(-1, *([1] * (dy.ndim - 1)))
    return _rows(scaled, _segments(lengths))


@register_gradient("SparseLengthsMean")
def _slm_grad(op: OperatorDef, gout: GradOut) -> MakerResult:
    _, indices, lengths = op.inputs
    gop = OperatorDef("SparseLengthsMeanGradient", [output_grad(op, gout), lengths], ["#rows"])
    return [gop], [GradientSlice(indices, "#rows"), None, None]  # type: ignore[list-item]


# -- SparseLengthsWeightedSum: OUTPUT[b] = sum of WEIGHTS[k] * DATA[INDICES[k]] over segment b ------
@register_op(
    "SparseLengthsWeightedSum",
    inputs=4,
    outputs=1,
    args=[Arg("grad_on_weights", bool, False, "also differentiate with respect to WEIGHTS")],
    inputs_doc=("DATA [R, ...]", "WEIGHTS [K]", "INDICES [K] int", "LENGTHS [B] int"),
    outputs_doc=("OUTPUT [B, ...]",),
    doc="Caffe2's SparseLengthsWeightedSum: like SparseLengthsSum with each row scaled by its WEIGHTS[k].",
)
def sparse_lengths_weighted_sum(ctx: Any, data: Any, weights: Any, indices: Any, lengths: Any) -> np.ndarray:
    data = float_array(ctx, _table(ctx, data, 0), 0)
    namespace(ctx, data, weights, indices, lengths)
    idx = _indices(ctx, indices, 2, data.shape[0])
    w = _weights(ctx, weights, 1, idx, data.dtype)
    lengths = _lengths(ctx, lengths, 3, idx.shape[0])
    if is_torch(data):
        return _torch_bags(data, idx, lengths, w)
    return segment_sum(_rows(data, idx) * w.reshape(-1, *([1] * (data.ndim - 1))), lengths)


def _weights(ctx: Any, w: Any, i: int, idx: np.ndarray, dtype: np.dtype) -> np.ndarray:
    w = float_array(ctx, w, i)
    if idx.ndim != 1 or w.shape != idx.shape or w.dtype != dtype:
        raise ValueError(
            f"expected 1-D INDICES and WEIGHTS {ctx.op.inputs[i]!r} of their shape and dtype {dtype}, "
            f"got indices {tuple(idx.shape)} and weights {tuple(w.shape)} {w.dtype}"
        )
    return w


@register_op(
    "SparseLengthsWeightedSumGradient",
    inputs=(3, 5),
    outputs=(1, 2),
    inputs_doc=("dOUTPUT [B, ...]", "WEIGHTS [K]", "LENGTHS [B]", "DATA (for dWEIGHTS)", "INDICES (for dWEIGHTS)"),
    outputs_doc=("values [K, ...]", "dWEIGHTS [K] (with DATA and INDICES given)"),
    doc="Gradient of SparseLengthsWeightedSum: the GradientSlice values WEIGHTS[k] * dOUTPUT[segment k], and with "
    "DATA and INDICES given, dWEIGHTS[k] = <dOUTPUT[segment k], DATA[INDICES[k]]>.",
)
def sparse_lengths_weighted_sum_gradient(ctx: Any, dy: Any, weights: Any, lengths: Any, *main: Any) -> Any:
    dy = float_array(ctx, dy, 0)
    namespace(ctx, dy, weights, lengths, *main)
    lengths = _grad_lengths(ctx, lengths, 2, dy)
    w = float_array(ctx, weights, 1)
    total = int(lengths.sum())
    if tuple(w.shape) != (total,):
        raise ValueError(
            f"expected WEIGHTS {ctx.op.inputs[1]!r} of shape ({total},) (the sum of the lengths), got {tuple(w.shape)}"
        )
    g = _rows(dy, _segments(lengths))
    values = g * w.reshape(-1, *([1] * (dy.ndim - 1)))
    if not main:
        return values
    if len(main) != 2:
        raise ValueError("expected DATA and INDICES (inputs 3 and 4) together for dWEIGHTS, got DATA alone")
    data = _table(ctx, main[0], 3)
    idx = _indices(ctx, main[1], 4, data.shape[0])
    if tuple(idx.shape) != (total,) or tuple(data.shape[1:]) != tuple(dy.shape[1:]):
        raise ValueError(
            f"expected INDICES of shape ({total},) and DATA rows of shape {tuple(dy.shape[1:])} (dOUTPUT's), "
            f"got {tuple(idx.shape)} and {tuple(data.shape)}"
        )
    rows = _rows(data, idx)
    return values, (g * rows).reshape(w.shape[0], int(np.prod(rows.shape[1:], dtype=np.int64))).sum(axis=1)


@register_gradient("SparseLengthsWeightedSum")
def _slws_grad(op: OperatorDef, gout: GradOut) -> MakerResult:
    data, weights, indices, lengths = op.inputs
    dy = output_grad(op, gout)
    if op.args.get("grad_on_weights"):
        gop = OperatorDef("SparseLengthsWeightedSumGradient", [dy, weights, lengths, data, indices], ["#rows", "#dw"])
        return [gop], [GradientSlice(indices, "#rows"), "#dw", None, None]  # type: ignore[list-item]
    gop = OperatorDef("SparseLengthsWeightedSumGradient", [dy, weights, lengths], ["#rows"])
    return [gop], [GradientSlice(indices, "#rows"), None, None, None]  # type: ignore[list-item]


# -- SparseToDense: a dense array with the values added at their indices ----------------------------
@register_op(
    "SparseToDense",
    inputs=(2, 3),
    outputs=1,
    inputs_doc=("indices [K] int", "values [K, ...]", "data_to_infer_dim (optional: its dim 0 is the row count)"),
    outputs_doc=("output [R, ...]",),
    doc="Caffe2's SparseToDense: zeros with values[k] added at row indices[k] (repeats add up); R is "
    "data_to_infer_dim's first dim, or max(indices) + 1.",
)
def sparse_to_dense(ctx: Any, indices: Any, values: Any, like: Any = None) -> np.ndarray:
    values = array(ctx, values, 1)
    idx = array(ctx, indices, 0)
    xp = namespace(ctx, idx, values, like)
    if xp.kind(idx) != "i" or idx.dtype not in (np.int32, np.int64) and not is_torch(idx):
        raise TypeError(f"expected int32 or int64 indices in input 0 {ctx.op.inputs[0]!r}, got dtype {idx.dtype}")
    if like is not None:
        like = _table(ctx, like, 2)
    rows = like.shape[0] if like is not None else (int(idx.max()) + 1 if xp.size(idx) else 0)
    idx = _indices(ctx, idx, 0, rows)
    if idx.ndim != 1 or values.shape[:1] != idx.shape:
        raise ValueError(
            f"expected 1-D indices and values with one row per index, got {tuple(idx.shape)} and {tuple(values.shape)}"
        )
    check_alloc(
        rows * math.prod(values.shape[1:]),
        values.dtype.itemsize,
        f"an output of {rows} rows (max(indices) + 1, or data_to_infer_dim's dim 0)",
    )
    try:
        out = xp.full((rows, *values.shape[1:]), 0, like=values)
    except MemoryError as exc:
        raise ValueError(
            f"an output of {rows} rows (max(indices) + 1, or data_to_infer_dim's dim 0) of shape "
            f"{tuple(values.shape[1:])} is too large to allocate"
        ) from exc
    _add_at(out, idx, values)
    return out


@register_gradient("SparseToDense")
def _sparse_to_dense_grad(op: OperatorDef, gout: GradOut) -> MakerResult:
    """Caffe2's GetSparseToDenseGradient: dvalues = Gather(dY, indices); no gradient for the rest."""
    gop = OperatorDef("Gather", [output_grad(op, gout), op.inputs[0]], ["#dvalues"], {})
    return [gop], [None, "#dvalues"] + [None] * (len(op.inputs) - 2)


def _torch_scatter_add(p: Any, idx: Any, x: Any, w: Any) -> None:
    """``p[idx[k]] += w * x[k]`` for every k in order on torch tensors: torch's dense += sparse
    kernel (one axpy per row, no per-row tensor as index_add_ builds on the CPU)."""
    import torch

    if p.ndim < 2 or p.is_cuda:
        p.index_add_(0, idx.long(), x, alpha=w)
        return
    grad = torch.sparse_coo_tensor(idx.long().reshape(1, -1), x, tuple(p.shape), check_invariants=False)
    p.add_(grad, alpha=w)


def _add_at(out: Any, idx: Any, values: Any) -> None:
    """``out[idx[k]] += values[k]`` for every k in order, in place (repeats add up)."""
    if is_torch(out):
        out.index_add_(0, idx.long(), values)
    else:
        _add_rows(out, idx, values)


#: numpy's calls cost a few us of Python each: below this many elements (indices x row) one
#: np.add.at is quicker than the GIL-releasing rounds of :func:`_add_rows`
SMALL_SCATTER = 16384
#: rounds of distinct rows before the remaining repeats go through np.add.at
SCATTER_ROUNDS = 3


def _add_rows(
    out: np.ndarray,
    idx: np.ndarray,
    values: np.ndarray,
    rounds: int = SCATTER_ROUNDS,
    scale: Any = None,
    vmap: np.ndarray | None = None,
) -> None:
    """``out[idx[k]] += values[k]`` (``values[k] * scale`` with a scale) for every k in order on
    numpy arrays: the bits of adding the rows one by one (Caffe2's loop), with the GIL released
    for most of the time. A scale multiplies each row once. With ``vmap``, position k adds row
    ``values[vmap[k]]`` (a fused SparseLengthsSumGradient: the pooled gradient's row of k's bag,
    never copied out into [K, row]).

    The first occurrence of each index is added in chunks of :data:`SCATTER_CHUNK` rows: a
    chunk's table rows are gathered, their values added, and the rows written back while they
    are still in cache (one random access per row, as an in-place axpy; gathering every row
    first and scattering them all at the end misses the cache twice). The later occurrences
    follow the same way, in k order, for ``rounds`` rounds; np.add.at (which holds the GIL) takes
    what is left. Each index's additions keep their k order, so the result is the sequential one.

    >>> out = np.zeros((3, 1)); _add_rows(out, np.array([2, 0, 2]), np.array([[1.0], [2.0], [4.0]])); out[:, 0]
    array([2., 0., 5.])
    """
    if vmap is not None and (out.ndim == 0 or not out.flags.c_contiguous):
        values, vmap = values.take(vmap, axis=0), None
    if out.ndim == 0 or not out.flags.c_contiguous:
        np.add.at(out, idx, values if scale is None else values * scale)
        return
    if out.ndim != 2:
        out = _table_rows(out)  # a view: the rows of the table, flattened
    values = values.reshape(-1, out.shape[1])
    if _torch_add_rows(out, idx, values, scale, vmap):
        return
    if idx.shape[0] * out.shape[1] < SMALL_SCATTER or rounds == 0:
        rows = values if vmap is None else values.take(vmap, axis=0)
        _flat_add_at(out, idx, rows if scale is None else rows * scale)
        return
    first, _ = first_occurrences(idx, out.shape[0])
    if first.all():
        _add_distinct(out, idx, values, vmap, scale)
        return
    at = np.flatnonzero(first)
    _add_distinct(out, idx[at], values, at if vmap is None else vmap[at], scale)
    later = np.flatnonzero(~first)  # each index's later positions, still in k order
    _add_rows(out, idx[later], values, rounds - 1, scale, later if vmap is None else vmap[later])


#: False: numpy row updates never run torch's kernels (the tests' way to reach the numpy rounds)
TORCH_ROWS = True


def _torch_add_rows(out: np.ndarray, idx: np.ndarray, values: np.ndarray, scale: Any, vmap: Any) -> bool:
    """:func:`_add_rows` on a 2-D C-contiguous float ``out`` as torch calls on views of the
    arrays, when :func:`host_torch` gives torch for this size (False otherwise, nothing done).

    ``index_add_`` on the CPU adds the rows one after another in index order (the bits of
    np.add.at, so of Caffe2's loop, repeats included), and each torch call releases the GIL for
    its whole kernel: one call per update instead of a few hundred short numpy calls that two
    executor threads would take turns on. The rows are scaled first, once each, as the numpy
    path does (``index_add_``'s ``alpha`` might fuse the product into the sum)."""
    if not TORCH_ROWS or out.dtype not in (np.float32, np.float64) or values.dtype != out.dtype:
        return False
    if not out.flags.writeable:
        return False
    if idx.shape[0] * out.shape[1] < SMALL_SCATTER or out.shape[1] == 0:
        return False
    torch = host_torch(idx.shape[0] * out.shape[1])
    if torch is None:
        return False
    t = torch.from_numpy
    rows = t(_writable(np.ascontiguousarray(values)))
    if vmap is not None:  # B rows scaled (the same products), then gathered into K rows
        if scale is not None:
            rows = torch.mul(rows, float(scale))
        at = t(_writable(np.ascontiguousarray(vmap, dtype=np.int64)))
        rows = torch.index_select(rows, 0, at, out=_scratch(torch, at.shape[0], out))
    elif scale is not None:
        rows = torch.mul(rows, float(scale), out=_scratch(torch, rows.shape[0], out))
    t(out).index_add_(0, t(_writable(np.ascontiguousarray(idx, dtype=np.int64))), rows)
    return True


_SCRATCH = threading.local()
_SCRATCH_KINDS = 8


def _scratch(torch: Any, rows: int, like: np.ndarray) -> Any:
    """A [rows, like.shape[1]] torch buffer of ``like``'s dtype, this thread's own, reused by its
    next update: a fresh buffer of a few MB each call is mapped and faulted in each time, and
    two threads doing that at once slow each other down (measured: 0.4x one after the other)."""
    kinds = _SCRATCH.__dict__.setdefault("bufs", {})
    key = (like.dtype.str, like.shape[1])
    buf = kinds.get(key)
    if buf is None or buf.shape[0] < rows:
        if len(kinds) >= _SCRATCH_KINDS:
            kinds.clear()
        buf = kinds[key] = torch.from_numpy(np.empty((rows, like.shape[1]), like.dtype))
    return buf[:rows]


#: rows per chunk of :func:`_add_distinct`: the chunk's table rows stay in cache between their
#: gather and their write (256 rows of 64 float32 are 64 KiB)
SCATTER_CHUNK = 256


def _add_distinct(out: np.ndarray, rows: np.ndarray, values: np.ndarray, at: np.ndarray | None, scale: Any) -> None:
    """``out[rows[j]] += values[at[j]]`` (``values[j]`` without ``at``; times ``scale`` first)
    for distinct ``rows`` of a 2-D C-contiguous ``out``, chunk by chunk."""
    n = rows.shape[0]
    if n == 0:
        return
    step = min(SCATTER_CHUNK, n)
    buf = np.empty((step, out.shape[1]), out.dtype)
    add = np.empty_like(buf)
    for start in range(0, n, step):
        r = rows[start : start + step]
        k = r.shape[0]
        got = np.take(out, r, axis=0, out=buf[:k], mode="clip")  # rows checked by the kernels' callers
        if at is None:
            term = values[start : start + k]
        else:
            term = np.take(values, at[start : start + k], axis=0, out=add[:k], mode="clip")
        if scale is not None:
            term = np.multiply(term, scale, out=add[:k])
        got += term
        out[r] = got


#: a scratch array of one int64 per table row finds repeats in O(K) up to this many rows per
#: index (or up to _SCRATCH_MIN_ROWS rows); past it (a huge table, a small batch) a sort finds them
_SCRATCH_ROWS_PER_INDEX = 64
_SCRATCH_MIN_ROWS = 65536


def first_occurrences(idx: np.ndarray, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """``first[k]``: ``idx[k]`` appears nowhere before k; ``slot[k]``: the rank of ``idx[k]``
    among the distinct indices in order of first occurrence (its row in a compact buffer
    ``table[idx[first]]``). Indices lie in [0, rows).

    >>> first, slot = first_occurrences(np.array([5, 2, 5, 7]), 8); first.tolist(), slot.tolist()
    ([True, True, False, True], [0, 1, 0, 2])
    """
    k = idx.shape[0]
    position = np.arange(k)
    if rows <= max(_SCRATCH_ROWS_PER_INDEX * k, _SCRATCH_MIN_ROWS):
        earliest = np.full(rows, k, dtype=np.int64)
        np.minimum.at(earliest, idx, position)  # ufunc.at: every position counts, whatever the repeats
        first_pos = earliest[idx]
    else:
        order = np.argsort(idx, kind="stable")
        ids = idx[order]
        starts = np.r_[True, ids[1:] != ids[:-1]]
        first_pos = np.empty(k, dtype=np.int64)
        first_pos[order] = order[np.maximum.accumulate(np.where(starts, position, 0))]
    first = first_pos == position
    rank = np.cumsum(first) - 1
    return first, rank[first_pos]


def _flat_add_at(out: np.ndarray, idx: np.ndarray, values: np.ndarray) -> None:
    """np.add.at on 2-D ``out`` through its flat view: element (i, j) is i * D + j, and each
    element still receives its additions in k order (the same bits); numpy's add.at is several
    times faster on 1-D."""
    d = out.shape[1]
    flat = (idx.astype(np.int64, copy=False)[:, None] * d + np.arange(d)).reshape(-1)
    np.add.at(out.reshape(-1), flat, np.ascontiguousarray(values).reshape(-1))


# -- in-place sparse updates ------------------------------------------------------------------------
def occurrence_rounds(idx: np.ndarray) -> list[np.ndarray]:
    """Positions of ``idx`` grouped so that no round repeats an index and, for each index, its
    occurrences come in order: applying the rounds one after another is applying the positions
    one after another (what Caffe2's loops do), with one vectorized step per round.

    >>> [r.tolist() for r in occurrence_rounds(np.array([5, 2, 5, 5]))]
    [[0, 1], [2], [3]]
    """
    if idx.size == 0:
        return []
    order = np.argsort(idx, kind="stable")
    sorted_idx = idx[order]
    first = np.r_[True, sorted_idx[1:] != sorted_idx[:-1]]
    group_start = np.maximum.accumulate(np.where(first, np.arange(idx.size), 0))
    occurrence = np.empty(idx.size, dtype=np.int64)
    occurrence[order] = np.arange(idx.size) - group_start
    if occurrence.max() == 0:
        return [np.arange(idx.size)]
    return [np.flatnonzero(occurrence == k) for k in range(int(occurrence.max()) + 1)]


def _param(ctx: Any, x: Any, i: int) -> np.ndarray:
    x = float_array(ctx, x, i)
    if not namespace(ctx, x).writable(x):
        raise ValueError(f"input {i} {ctx.op.inputs[i]!r} is a read-only array; a sparse update writes it in place")
    if x.ndim < 1:
        raise ValueError(f"expected a table of at least 1 dim in input {i} {ctx.op.inputs[i]!r}, got a scalar")
    return x


def _rows_of(ctx: Any, x: Any, i: int, k: int, param: np.ndarray) -> np.ndarray:
    """Input ``i`` as [k, *param.shape[1:]] rows of param's dtype (any shape with that many elements)."""
    x = float_array(ctx, x, i)
    row = tuple(param.shape[1:])
    if namespace(ctx, x).size(x) != k * math.prod(row) or x.dtype != param.dtype:
        raise ValueError(
            f"expected input {i} {ctx.op.inputs[i]!r} to hold {k} rows of shape {row} and dtype {param.dtype}, "
            f"got {tuple(x.shape)} {x.dtype}"
        )
    return x.reshape(k, *row)


def _scalar(ctx: Any, x: Any, i: int, dtype: np.dtype) -> Any:
    x = array(ctx, x, i)
    xp = namespace(ctx, x)
    if xp.size(x) != 1:
        raise ValueError(f"expected a one-element array in input {i} {ctx.op.inputs[i]!r}, got shape {tuple(x.shape)}")
    if xp.name == "numpy" and isinstance(dtype, np.dtype):
        return dtype.type(x.reshape(-1)[0])
    return xp.item(x)  # a Python number: the (torch) parameter's dtype wins


# -- ScatterWeightedSum (Caffe2's loops): X0[idx[k]] *= w0 for every k (a repeated row is scaled ----
#    once per occurrence), then for each pair i and each k in order X0[idx[k]] += w_i * X_i[k]
def _scatter_weighted_sum_validate(op: OperatorDef) -> None:
    if len(op.inputs) < 5 or len(op.inputs) % 2 == 0:
        raise ValueError(
            f"expected inputs X0, w0, INDICES, then (X, w) pairs: an odd number >= 5, got {len(op.inputs)}"
        )


@register_op(
    "ScatterWeightedSum",
    inputs=(5, None),
    outputs=1,
    enforce_inplace={0: 0},
    validate=_scatter_weighted_sum_validate,
    inputs_doc=(
        "X_0 [R, ...] (updated in place)",
        "Weight_0 (1 element)",
        "INDICES [K] int",
        "X_1 [K, ...]",
        "Weight_1 (1 element)",
        "...",
    ),
    outputs_doc=("X_0 (the same array)",),
    doc="Caffe2's ScatterWeightedSum, written into X_0's array: first X_0[INDICES[k]] *= Weight_0 for "
    "every k (a row indexed twice is scaled twice, as Caffe2's loop does), then for each pair i and "
    "each k in order X_0[INDICES[k]] += Weight_i * X_i[k]. A sparse SGD step is "
    "ScatterWeightedSum([param, one, indices, grad, neg_lr], param).",
)
def scatter_weighted_sum(ctx: Any, x0: Any, w0: Any, indices: Any, *pairs: Any) -> np.ndarray:
    p = _param(ctx, x0, 0)
    xp = namespace(ctx, x0, None, indices, *(None if j % 2 else x for j, x in enumerate(pairs)))  # weights: numbers
    idx = _indices(ctx, indices, 2, p.shape[0]).reshape(-1)
    a0 = _scalar(ctx, w0, 1, p.dtype)
    k = xp.size(idx)
    terms = [
        (_rows_of(ctx, pairs[j], 3 + j, k, p), _scalar(ctx, pairs[j + 1], 4 + j, p.dtype))
        for j in range(0, len(pairs), 2)
    ]
    if a0 != 1:  # Caffe2 skips the scaling when w0 is exactly 1
        for r in _rounds(idx):
            rows = idx[r]
            p[rows] = p[rows] * a0
    for x, w in terms:  # Caffe2's Axpy per pair, rows in k order: repeats add up
        if is_torch(p):
            _torch_scatter_add(p, idx, x, w)
        else:
            _add_rows(p, idx, x, scale=w)  # each gathered row scaled once
    return p


# -- SparseAdagrad: for each k in order, m[i] += g_k^2; param[i] += lr * g_k / (sqrt(m[i]) + eps) ---
def _sparse_adagrad_validate(op: OperatorDef) -> None:
    halflife = op.args.get("counter_halflife", -1)
    if (halflife != -1) != (len(op.inputs) == 6):
        raise ValueError(
            "expected the count input (input 5) exactly when counter_halflife is not -1, got "
            f"{len(op.inputs)} inputs and counter_halflife={halflife}"
        )
    if halflife != -1 and op.args.get("formula", "caffe2") == "torch":
        raise ValueError("counter_halflife is Caffe2's; it does not apply with formula='torch'")


@register_op(
    "SparseAdagrad",
    inputs=(5, 6),
    outputs=2,
    enforce_inplace={0: 0, 1: 1},
    validate=_sparse_adagrad_validate,
    args=[
        Arg(
            "epsilon",
            float,
            None,
            "added to sqrt(moment); default: Caffe2's 1e-5 (formula caffe2) or torch's 1e-10 (formula torch)",
        ),
        Arg("weight_decay", float, 0.0, "L2 penalty on the touched rows: g + weight_decay * param[i]"),
        _FORMULA,
        Arg(
            "counter_halflife",
            int,
            -1,
            "Caffe2's: when > 0, a row's weight_decay is scaled by "
            "counter_halflife / count[i] (rows with count[i] > 0); -1: no count input",
        ),
    ],
    inputs_doc=(
        "param [R, ...]",
        "moment [R, ...]",
        "indices [K] int",
        "grad [K, ...]",
        "lr (1 element)",
        "count [R] (only with counter_halflife != -1)",
    ),
    outputs_doc=("param (in place)", "moment (in place)"),
    doc="Caffe2's SparseAdagrad on the rows in indices, written into param's and moment's arrays: "
    "moment[i] += g^2; param[i] += lr * g / (sqrt(moment[i]) + epsilon) (Caffe2 feeds a negative lr), "
    "repeats applied in order. formula='torch' is torch.optim.Adagrad's on a sparse gradient: repeats "
    "summed first (coalesced), then param[i] -= lr * g / (sqrt(moment[i]) + epsilon) with a positive lr.",
)
def sparse_adagrad(
    ctx: Any, param: Any, moment: Any, indices: Any, grad: Any, lr: Any, count: Any = None
) -> tuple[np.ndarray, np.ndarray]:
    p, m = _param(ctx, param, 0), _param(ctx, moment, 1)
    xp = namespace(ctx, param, moment, indices, grad)
    if m.shape != p.shape or m.dtype != p.dtype:
        raise ValueError(
            f"expected moment {ctx.op.inputs[1]!r} of param's shape {tuple(p.shape)} and dtype {p.dtype}, "
            f"got {tuple(m.shape)} {m.dtype}"
        )
    idx = _indices(ctx, indices, 2, p.shape[0]).reshape(-1)
    g = _rows_of(ctx, grad, 3, xp.size(idx), p)
    return _adagrad_rows(ctx, xp, p, m, idx, g, None, lr, count)


def _adagrad_rows(
    ctx: Any, xp: Any, p: Any, m: Any, idx: Any, g: Any, gmap: Any, lr: Any, count: Any = None, lr_at: int = 4
) -> tuple[Any, Any]:
    """SparseAdagrad's step on the rows ``idx`` (gradient rows ``g``, or ``g[gmap]``; the
    learning rate is input ``lr_at``)."""
    f, a = (p.dtype.type if xp.name == "numpy" else float), ctx.args
    torch_formula = a.get("formula", "caffe2") == "torch"
    eps = f(a["epsilon"] if a["epsilon"] is not None else (1e-10 if torch_formula else 1e-5))
    rate, wd = _scalar(ctx, lr, lr_at, p.dtype) * f(-1 if torch_formula else 1), f(a["weight_decay"])
    if torch_formula:  # torch coalesces a sparse gradient: one step per row with its summed gradient
        idx, g = coalesce(idx, g if gmap is None else g.take(gmap, axis=0))
        gmap = None
    decay = _row_decay(ctx, count, p, wd) if count is not None and a.get("counter_halflife", -1) > 0 and wd else None

    def step(pr: Any, mr: Any, gr: Any, rows: Any) -> tuple[Any, Any]:  # the rows `rows` of p and m
        if decay is not None:
            gr = gr + decay[rows].reshape(-1, *[1] * (p.ndim - 1)) * pr
        elif wd:
            gr = gr + wd * pr
        mr += gr * gr
        pr += rate * gr / (xp.sqrt(mr) + eps)
        return pr, mr

    _compact_steps(p, m, idx, g, step, gmap)
    return p, m


# -- RowWiseSparseAdagrad: one moment per row, m[i] += mean(g_k^2); param[i] += lr * g_k / (sqrt(m[i]) + eps)
def _rowwise_validate(op: OperatorDef) -> None:
    if op.args.get("formula", "caffe2") == "torch" and op.args.get("weight_decay", 0.0):
        raise ValueError(
            "weight_decay does not apply with formula='torch' (the reference's row-wise sparse Adagrad "
            "refuses it on sparse gradients)"
        )


@register_op(
    "RowWiseSparseAdagrad",
    inputs=5,
    outputs=2,
    enforce_inplace={0: 0, 1: 1},
    validate=_rowwise_validate,
    args=[
        Arg(
            "epsilon",
            float,
            None,
            "added to sqrt(moment); default: Caffe2's 1e-5 (formula caffe2) or 1e-10 (formula torch)",
        ),
        Arg(
            "weight_decay",
            float,
            0.0,
            "L2 penalty on the touched rows: g + weight_decay * param[i] (formula caffe2 only)",
        ),
        _FORMULA,
    ],
    inputs_doc=("param [R, ...]", "moment [R] (one per row)", "indices [K] int", "grad [K, ...]", "lr (1 element)"),
    outputs_doc=("param (in place)", "moment (in place)"),
    doc="Caffe2's RowWiseSparseAdagrad, written into param's and moment's arrays: for each k in order, "
    "with g = grad[k] (+ weight_decay * param[i]), moment[i] += mean(g^2) over the row, then "
    "param[i] += lr * g / (sqrt(moment[i]) + epsilon) (Caffe2 feeds a negative lr). formula='torch' "
    "is facebookresearch/dlrm's RWSAdagrad: repeats summed first (coalesced), then "
    "param[i] -= lr * g / (sqrt(moment[i]) + epsilon) with a positive lr.",
)
def rowwise_sparse_adagrad(ctx: Any, param: Any, moment: Any, indices: Any, grad: Any, lr: Any) -> tuple[Any, Any]:
    p, m = _param(ctx, param, 0), _param(ctx, moment, 1)
    xp = namespace(ctx, param, moment, indices, grad)
    if tuple(m.shape) != (p.shape[0],) or m.dtype != p.dtype:
        raise ValueError(
            f"expected moment {ctx.op.inputs[1]!r} of shape ({p.shape[0]},) (one per row of param) and "
            f"dtype {p.dtype}, got {tuple(m.shape)} {m.dtype}"
        )
    idx = _indices(ctx, indices, 2, p.shape[0]).reshape(-1)
    g = _rows_of(ctx, grad, 3, xp.size(idx), p)
    return _rowwise_rows(ctx, xp, p, m, idx, g, None, lr)


def _rowwise_rows(
    ctx: Any, xp: Any, p: Any, m: Any, idx: Any, g: Any, gmap: Any, lr: Any, lr_at: int = 4
) -> tuple[Any, Any]:
    """RowWiseSparseAdagrad's step on the rows ``idx`` (gradient rows ``g``, or ``g[gmap]``; the
    learning rate is input ``lr_at``)."""
    f, a = (p.dtype.type if xp.name == "numpy" else float), ctx.args
    torch_formula = a.get("formula", "caffe2") == "torch"
    eps = f(a["epsilon"] if a["epsilon"] is not None else (1e-10 if torch_formula else 1e-5))
    rate, wd = _scalar(ctx, lr, lr_at, p.dtype) * f(-1 if torch_formula else 1), f(a["weight_decay"])
    if torch_formula:
        idx, g = coalesce(idx, g if gmap is None else g.take(gmap, axis=0))
        gmap = None
    shape = (-1, *[1] * (p.ndim - 1))

    def step(pr: Any, mr: Any, gr: Any, rows: Any) -> tuple[Any, Any]:
        if wd:
            gr = gr + wd * pr
        mr += (gr * gr).reshape(gr.shape[0], -1).mean(1)
        std = xp.sqrt(mr) + eps
        if torch_formula:
            pr += rate * (gr / std.reshape(shape))
        else:
            pr += gr * (rate / std).reshape(shape)
        return pr, mr

    _compact_steps(p, m, idx, g, step, gmap)
    return p, m


# -- the updates fused with SparseLengthsSumGradient: the gradient rows of index k are dY[b], b its bag
def _fused_grad(ctx: Any, p: Any, dy: Any, lengths: Any, k: int, i: int) -> tuple[Any, Any]:
    """(gradient rows, their map or None) of a fused update: input ``i`` dY [B, *row] and the
    last input LENGTHS [B] summing to the ``k`` indices. On numpy the rows stay dY with the map
    (each index's bag); on torch they are gathered."""
    j = len(ctx.op.inputs) - 1
    dy = float_array(ctx, dy, i)
    lengths = _lengths(ctx, lengths, j, k)
    if tuple(dy.shape) != (lengths.shape[0], *p.shape[1:]) or dy.dtype != p.dtype:
        raise ValueError(
            f"expected input {i} {ctx.op.inputs[i]!r} (the pooled gradient) of shape "
            f"{(lengths.shape[0], *p.shape[1:])} (one row per length) and dtype {p.dtype}, "
            f"got {tuple(dy.shape)} {dy.dtype}"
        )
    seg = _segments(lengths)
    if is_torch(dy):
        return _rows(dy, seg), None
    return dy, seg


def _host_views(*xs: Any) -> list[np.ndarray] | None:
    """numpy views of CPU torch tensors (the same memory: an update through them lands in the
    tensors), so a fused update runs the numpy kernel, which reads each touched row once; None
    for anything else."""
    if not is_torch(xs[0]) or not all(
        isinstance(x, np.ndarray) or (is_torch(x) and x.device.type == "cpu" and not x.requires_grad) for x in xs
    ):
        return None
    return [x if isinstance(x, np.ndarray) else x.numpy() for x in xs]


_FUSED_DOC = (
    " fused with SparseLengthsSumGradient: the gradient of index k is the row grad[b] of the bag b "
    "holding it (LENGTHS gives the bags), never written out as [K, ...] rows; the same result as "
    "SparseLengthsSumGradient followed by the unfused op."
)


@register_op(
    "SparseAdagradFusedWithSparseLengthsSumGradient",
    inputs=6,
    outputs=2,
    enforce_inplace={0: 0, 1: 1},
    args=[
        Arg("epsilon", float, None, "as SparseAdagrad's"),
        Arg("weight_decay", float, 0.0, "as SparseAdagrad's"),
        _FORMULA,
    ],
    inputs_doc=(
        "param [R, ...]",
        "moment [R, ...]",
        "indices [K] int",
        "grad [B, ...]",
        "lr (1 element)",
        "lengths [B]",
    ),
    outputs_doc=("param (in place)", "moment (in place)"),
    doc="Caffe2's SparseAdagradFusedWithSparseLengthsSumGradient: SparseAdagrad" + _FUSED_DOC,
)
def sparse_adagrad_fused(ctx: Any, param: Any, moment: Any, indices: Any, grad: Any, lr: Any, lengths: Any) -> Any:
    host = _host_views(param, moment, indices, grad, lr, lengths)
    if host is not None:
        sparse_adagrad_fused(ctx, *host)
        return param, moment
    p, m = _param(ctx, param, 0), _param(ctx, moment, 1)
    xp = namespace(ctx, param, moment, indices, grad, lengths)
    if m.shape != p.shape or m.dtype != p.dtype:
        raise ValueError(
            f"expected moment {ctx.op.inputs[1]!r} of param's shape {tuple(p.shape)} and dtype {p.dtype}, "
            f"got {tuple(m.shape)} {m.dtype}"
        )
    idx = _indices(ctx, indices, 2, p.shape[0]).reshape(-1)
    g, gmap = _fused_grad(ctx, p, grad, lengths, xp.size(idx), 3)
    return _adagrad_rows(ctx, xp, p, m, idx, g, gmap, lr)


@register_op(
    "RowWiseSparseAdagradFusedWithSparseLengthsSumGradient",
    inputs=6,
    outputs=2,
    enforce_inplace={0: 0, 1: 1},
    validate=_rowwise_validate,
    args=[
        Arg("epsilon", float, None, "as RowWiseSparseAdagrad's"),
        Arg("weight_decay", float, 0.0, "as RowWiseSparseAdagrad's"),
        _FORMULA,
    ],
    inputs_doc=("param [R, ...]", "moment [R]", "indices [K] int", "grad [B, ...]", "lr (1 element)", "lengths [B]"),
    outputs_doc=("param (in place)", "moment (in place)"),
    doc="Caffe2's RowWiseSparseAdagradFusedWithSparseLengthsSumGradient: RowWiseSparseAdagrad" + _FUSED_DOC,
)
def rowwise_sparse_adagrad_fused(
    ctx: Any, param: Any, moment: Any, indices: Any, grad: Any, lr: Any, lengths: Any
) -> Any:
    host = _host_views(param, moment, indices, grad, lr, lengths)
    if host is not None:
        rowwise_sparse_adagrad_fused(ctx, *host)
        return param, moment
    p, m = _param(ctx, param, 0), _param(ctx, moment, 1)
    xp = namespace(ctx, param, moment, indices, grad, lengths)
    if tuple(m.shape) != (p.shape[0],) or m.dtype != p.dtype:
        raise ValueError(
            f"expected moment {ctx.op.inputs[1]!r} of shape ({p.shape[0]},) (one per row of param) and "
            f"dtype {p.dtype}, got {tuple(m.shape)} {m.dtype}"
        )
    idx = _indices(ctx, indices, 2, p.shape[0]).reshape(-1)
    g, gmap = _fused_grad(ctx, p, grad, lengths, xp.size(idx), 3)
    return _rowwise_rows(ctx, xp, p, m, idx, g, gmap, lr)


@register_op(
    "SparseSGDFusedWithSparseLengthsSumGradient",
    inputs=5,
    outputs=1,
    enforce_inplace={0: 0},
    inputs_doc=(
        "param [R, ...]",
        "indices [K] int",
        "grad [B, ...]",
        "lr (1 element; negative for a descent)",
        "lengths [B]",
    ),
    outputs_doc=("param (in place)",),
    doc="asyncnet's sparse SGD step ScatterWeightedSum([param, one, indices, rows, lr], param)"
    + _FUSED_DOC
    + " (Caffe2 has no such op; its fused ops are the Adagrad ones.)",
)
def sparse_sgd_fused(ctx: Any, param: Any, indices: Any, grad: Any, lr: Any, lengths: Any) -> Any:
    host = _host_views(param, indices, grad, lr, lengths)
    if host is not None:
        sparse_sgd_fused(ctx, *host)
        return param
    p = _param(ctx, param, 0)
    xp = namespace(ctx, param, indices, grad, lengths)
    idx = _indices(ctx, indices, 1, p.shape[0]).reshape(-1)
    g, gmap = _fused_grad(ctx, p, grad, lengths, xp.size(idx), 2)
    w = _scalar(ctx, lr, 3, p.dtype)
    if is_torch(p):
        _torch_scatter_add(p, idx, g, w)
    elif xp.size(idx):  # the scaled rows are dY's rows scaled (the same products), B rows instead of K
        _add_rows(p, idx, g * w, vmap=gmap)
    return p


# -- the Adagrad updates fused with SparseLengthsWeightedSum's gradient (positional weights) --------
_WEIGHTED_DOC = (
    " fused with the gradient of SparseLengthsWeightedSum whose weights are positional: index k, "
    "the j-th of its bag b, has weight aux_param[j] (Caffe2's LengthsRangeFill + Gather pattern), "
    "so its gradient row is aux_param[j] * grad[b] and aux_grad[k] = <grad[b], param[INDICES[k]]>. "
    "The same values as LengthsRangeFill, Gather, SparseLengthsWeightedSumGradient (with DATA and "
    "INDICES) and the unfused update"
)
_EXACT_DOC = ", every aux_grad read from param before any row is updated."
_APPROX_DOC = (
    " (Caffe2's Approx: index k's aux_grad reads param after the updates of the indices before k, "
    "which differs only where an index repeats)."
)
_WEIGHTED_INPUTS = (
    "param [R, ...]",
    "moment",
    "aux_param [L] (the positional weights; L at least the longest bag)",
    "indices [K] int",
    "grad [B, ...] (the pooled gradient)",
    "lr (1 element)",
    "lengths [B]",
)
_WEIGHTED_OUTPUTS = ("param (in place)", "moment (in place)", "aux_grad [K]")


def _weighted_terms(ctx: Any, xp: Any, p: Any, aux: Any, idx: Any, grad: Any, lengths: Any) -> tuple[Any, Any]:
    """(gradient rows grad[b] of each index [K, ...], each index's weight aux_param[j] [K])."""
    rows, gmap = _fused_grad(ctx, p, grad, lengths, xp.size(idx), 4)
    if gmap is not None:
        rows = rows.take(gmap, axis=0)
    aux = float_array(ctx, aux, 2)
    host = lengths.cpu().numpy() if is_torch(lengths) else np.asarray(lengths)
    longest = int(host.max()) if host.size else 0
    if aux.ndim != 1 or aux.shape[0] < longest or aux.dtype != p.dtype:
        raise ValueError(
            f"expected aux_param {ctx.op.inputs[2]!r} 1-D of dtype {p.dtype} with at least {longest} weights "
            f"(the longest bag), got {tuple(aux.shape)} {aux.dtype}"
        )
    starts = np.cumsum(host, dtype=np.int64) - host
    position = np.arange(int(host.sum()), dtype=np.int64) - np.repeat(starts, host)
    if is_torch(aux):
        import torch

        position = torch.from_numpy(position).to(aux.device)
    return rows, aux[position]


def _dots(rows: Any, table_rows: Any) -> Any:
    """<rows[k], table_rows[k]> for each k: SparseLengthsWeightedSumGradient's dWEIGHTS bits."""
    return (rows * table_rows).reshape(rows.shape[0], math.prod(rows.shape[1:])).sum(1)


def _weighted_fused(
    ctx: Any,
    param: Any,
    moment: Any,
    aux: Any,
    indices: Any,
    grad: Any,
    lr: Any,
    lengths: Any,
    rowwise: bool,
    approx: bool,
) -> tuple[Any, Any, Any]:
    p, m = _param(ctx, param, 0), _param(ctx, moment, 1)
    xp = namespace(ctx, param, moment, aux, indices, grad, lengths)
    want = (p.shape[0],) if rowwise else tuple(p.shape)
    if tuple(m.shape) != want or m.dtype != p.dtype:
        raise ValueError(
            f"expected moment {ctx.op.inputs[1]!r} of shape {want} and dtype {p.dtype}, got {tuple(m.shape)} {m.dtype}"
        )
    idx = _indices(ctx, indices, 3, p.shape[0]).reshape(-1)
    rows, w = _weighted_terms(ctx, xp, p, aux, idx, grad, lengths)
    values = rows * w.reshape(-1, *[1] * (p.ndim - 1))
    update = _rowwise_rows if rowwise else _adagrad_rows
    if not approx:
        aux_grad = _dots(rows, _rows(p, idx))
        update(ctx, xp, p, m, idx, values, None, lr, lr_at=5)
        return p, m, aux_grad
    aux_grad = xp.full((xp.size(idx),), 0, like=values)
    for r in _rounds(idx):  # round j: the j-th occurrence of each index, after the earlier ones' updates
        at = idx[r]
        aux_grad[r] = _dots(rows[r], _rows(p, at))
        update(ctx, xp, p, m, at, values[r], None, lr, lr_at=5)
    return p, m, aux_grad


def _register_weighted(name: str, rowwise: bool, approx: bool) -> None:
    base = "RowWiseSparseAdagrad" if rowwise else "SparseAdagrad"

    def kernel(ctx: Any, param: Any, moment: Any, aux: Any, indices: Any, grad: Any, lr: Any, lengths: Any) -> Any:
        host = _host_views(param, moment, aux, indices, grad, lr, lengths)
        if host is not None:  # CPU tensors: numpy's kernel on their memory, numpy's bits
            aux_grad = _weighted_fused(ctx, *host, rowwise, approx)[2]
            return param, moment, loaded_torch().from_numpy(aux_grad)
        return _weighted_fused(ctx, param, moment, aux, indices, grad, lr, lengths, rowwise, approx)

    kernel.__name__ = kernel.__qualname__ = name
    register_op(
        name,
        inputs=7,
        outputs=3,
        enforce_inplace={0: 0, 1: 1},
        args=[
            Arg("epsilon", float, None, "added to sqrt(moment); default 1e-5"),
            Arg("weight_decay", float, 0.0, f"as {base}'s"),
        ],
        inputs_doc=(*_WEIGHTED_INPUTS[:1], "moment [R]" if rowwise else "moment [R, ...]", *_WEIGHTED_INPUTS[2:]),
        outputs_doc=_WEIGHTED_OUTPUTS,
        doc=f"Caffe2's {name}: {base}" + _WEIGHTED_DOC + (_APPROX_DOC if approx else _EXACT_DOC),
    )(kernel)


for _rowwise in (False, True):
    for _approx in (False, True):
        _register_weighted(
            ("RowWise" if _rowwise else "")
            + "SparseAdagradFusedWithSparseLengthsWeightedSumGradient"
            + ("Approx" if _approx else ""),
            _rowwise,
            _approx,
        )


def _compact_steps(p: Any, m: Any, idx: Any, g: Any, step: Any, gmap: np.ndarray | None = None) -> None:
    """Apply ``step(param_rows, moment_rows, grad_rows, table_rows) -> (param_rows, moment_rows)``
    to the rows ``idx`` of ``p`` and ``m`` with gradient rows ``g`` (``g[gmap[k]]`` for
    position k with a numpy ``gmap``), repeats one after another in k order (Caffe2's loop).
    On numpy with few repeats, the first occurrences go chunk by chunk
    (:func:`_chunked_steps`), then the later ones; otherwise each touched row of ``p`` and
    ``m`` is read into a compact buffer once and written back once, and the rounds of repeats
    run on the buffers."""
    host = idx.cpu().numpy() if is_torch(idx) else idx
    if host.size == 0:
        return
    first, slot = first_occurrences(host, p.shape[0])
    later = np.flatnonzero(~first)
    if gmap is not None and later.size * 4 > host.size:
        g, gmap = g.take(gmap, axis=0), None  # the compact path reads g[k]
    if is_torch(idx):
        import torch

        def dev(a: np.ndarray) -> Any:
            return torch.from_numpy(a).to(idx.device)
    else:

        def dev(a: np.ndarray) -> Any:
            return a

    if not is_torch(idx) and later.size * 4 <= host.size:
        at = None if later.size == 0 else np.flatnonzero(first)
        rows_at = at if gmap is None else (gmap if at is None else gmap[at])
        _chunked_steps(p, m, idx if at is None else idx[at], g, rows_at, step)
        if later.size:  # the later occurrences, in order, after every first one
            if gmap is None:
                _compact_steps(p, m, idx[later], g[later], step)
            else:
                _compact_steps(p, m, idx[later], g, step, gmap[later])
        return
    if first.all():
        p[idx], m[idx] = step(p[idx], m[idx], g, idx)
        return
    uniq = idx[dev(first)]
    pb, mb, slots = p[uniq], m[uniq], dev(slot)
    for r in occurrence_rounds(slot):
        rr = dev(r)
        at = slots[rr]
        pb[at], mb[at] = step(pb[at], mb[at], g[rr], uniq[at])
    p[uniq], m[uniq] = pb, mb


def _chunked_steps(p: np.ndarray, m: np.ndarray, rows: np.ndarray, g: np.ndarray, at: Any, step: Any) -> None:
    """:func:`_compact_steps` on distinct numpy ``rows`` (gradient rows ``g[at]``, or ``g``
    without ``at``), :data:`SCATTER_CHUNK` rows at a time: a chunk's rows of ``p`` and ``m``
    are read, stepped and written back while they are in cache."""
    for start in range(0, rows.shape[0], SCATTER_CHUNK):
        r = rows[start : start + SCATTER_CHUNK]
        gr = g[start : start + SCATTER_CHUNK] if at is None else g.take(at[start : start + SCATTER_CHUNK], axis=0)
        pr, mr = step(p.take(r, axis=0), m.take(r, axis=0), gr, r)
        p[r], m[r] = pr, mr


def _row_decay(ctx: Any, count: Any, p: Any, wd: Any) -> Any:
    """Caffe2's counter-scaled weight decay per row: wd * counter_halflife / count[i] where count[i] > 0, else wd."""
    c = array(ctx, count, 5)
    if tuple(c.shape) != (p.shape[0],):
        raise ValueError(
            f"expected count {ctx.op.inputs[5]!r} of shape ({p.shape[0]},) (one per row), got {tuple(c.shape)}"
        )
    halflife = ctx.args["counter_halflife"]
    if is_torch(c):
        import torch

        c = c.to(torch.float64)
        return (float(wd) * torch.where(c > 0, halflife / torch.where(c > 0, c, 1.0), 1.0)).to(p.dtype)
    c = c.astype(np.float64)
    return (float(wd) * np.where(c > 0, halflife / np.where(c > 0, c, 1.0), 1.0)).astype(p.dtype)


def _rounds(idx: Any) -> list[Any]:
    """:func:`occurrence_rounds` of numpy or torch indices (torch's computed on the host)."""
    if not is_torch(idx):
        return occurrence_rounds(idx)
    import torch

    return [torch.from_numpy(r).to(idx.device) for r in occurrence_rounds(idx.cpu().numpy())]


def coalesce(idx: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Unique indices and their summed rows (torch's ``Tensor.coalesce``).

    >>> coalesce(np.array([3, 1, 3]), np.array([[1.0], [2.0], [4.0]]))
    (array([1, 3]), array([[2.],
           [5.]]))
    """
    if is_torch(idx):
        uniq, inverse = idx.unique(sorted=True, return_inverse=True)
        if uniq.numel() == idx.numel():
            return idx, values
        return uniq, values.new_zeros((uniq.numel(), *values.shape[1:])).index_add_(0, inverse.reshape(-1), values)
    uniq, inverse = np.unique(idx, return_inverse=True)
    if uniq.size == idx.size:
        return idx, values
    summed = np.zeros((uniq.size, *values.shape[1:]), dtype=values.dtype)
    _add_rows(summed, inverse.reshape(-1), values)  # repeats added in k order: np.add.at's bits
    return uniq, summed
