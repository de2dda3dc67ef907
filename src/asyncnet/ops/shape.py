"""Shape operators, each beside its gradient, with Caffe2's schemas: Reshape, Flatten, ResizeLike,
Transpose, Concat, Split, Slice, ExpandDims, Squeeze.

They move data, never compute on it, so they take any dtype, on numpy arrays or torch tensors
(results keep the input's library and device; the shape outputs and inputs of Reshape, Concat,
Split and Slice are int arrays of the data's library). An out-of-place result is a copy
(as in Caffe2), so a later in-place update of the input (an optimizer step on a parameter) never
shows through it; an in-place Reshape, ExpandDims or Squeeze is a view and costs nothing.

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace(); ws.feed("x", np.arange(6.0).reshape(2, 3))
    >>> net = an.Net("shape")
    >>> _ = net.Reshape("x", ["y", "old_shape"], shape=[0, -1, 1])
    >>> ws.run_net_once(net)
    >>> ws.fetch("y").shape, ws.fetch("old_shape")
    ((2, 3, 1), array([2, 3]))
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from asyncnet.core.defs import OperatorDef
from asyncnet.core.registry import Arg, register_gradient, register_op
from asyncnet.ops._check import array, axis_of, flatten_2d
from asyncnet.ops.grad import GradOut, MakerResult, output_grad
from asyncnet.tensor.namespace import is_torch, namespace
from asyncnet.tensor.place import place_like

__all__ = ["reshape", "flatten", "resize_like", "transpose", "concat", "split", "slice_", "expand_dims", "squeeze"]


def _op(op_type: str, inputs: list[str], outputs: list[str], **args: Any) -> OperatorDef:
    return OperatorDef(op_type, list(inputs), list(outputs), args)


def _fresh(ctx: Any, x: np.ndarray, out: int = 0, inp: int = 0) -> np.ndarray:
    """A copy of view ``x`` unless output ``out`` is input ``inp`` (in place: the view is enough)."""
    if ctx.op.outputs[out] == ctx.op.inputs[inp]:
        return x
    return x.clone() if is_torch(x) else np.array(x, copy=True)


def _copy(x: Any) -> Any:
    """A contiguous copy of ``x`` in its own library."""
    return x.contiguous().clone() if is_torch(x) else np.array(x, copy=True)


def _ints(x: Any, values: list[int], dtype: Any) -> Any:
    """``values`` as a 1-D int array of ``x``'s library and device (``dtype`` a numpy dtype)."""
    out = np.array(values, dtype=dtype)
    if is_torch(x):
        import torch

        return torch.from_numpy(out).to(x.device)
    return out


def _kind(x: Any) -> str:
    return namespace(None, x).kind(x)


def _int_vector(ctx: Any, x: Any, i: int) -> list[int]:
    x = array(ctx, x, i)
    if x.ndim != 1 or _kind(x) not in "iu":
        raise TypeError(f"expected a 1-D int array in input {i} {ctx.op.inputs[i]!r}, got {x.dtype} {x.shape}")
    return [int(v) for v in x.tolist()]


# -- Reshape: Y = X with a new shape (0 copies the input's dim, -1 is inferred); dX = dY reshaped back
def new_shape(old: tuple[int, ...], spec: list[int]) -> tuple[int, ...]:
    """Caffe2's reshape rule: 0 keeps the input's dim at that position, one -1 is inferred; for an
    empty input (0 elements) a 0 stays a literal 0 and the -1 becomes 0, as Caffe2 does.

    >>> new_shape((2, 3, 4), [0, -1]), new_shape((2, 0), [-1, 0])
    ((2, 12), (0, 0))
    """
    size = math.prod(old)
    dims = []
    for i, d in enumerate(spec):
        if d == 0 and size:
            if i >= len(old):
                raise ValueError(f"shape {spec} copies dim {i} (0) but the input {old} has only {len(old)} dims")
            d = old[i]
        elif d < -1:
            raise ValueError(f"expected dims >= -1 in shape {spec}, got {d}")
        dims.append(d)
    if dims.count(-1) > 1:
        raise ValueError(f"expected at most one -1 in shape {spec}")
    if -1 in dims and not size:
        dims[dims.index(-1)] = 0
    elif -1 in dims:
        known = math.prod(d for d in dims if d != -1)
        if known == 0 or size % known:
            raise ValueError(f"cannot infer the -1 of shape {spec} for an input of shape {old} ({size} elements)")
        dims[dims.index(-1)] = size // known
    if math.prod(dims) != size:
        raise ValueError(f"cannot reshape an input of shape {old} ({size} elements) to {tuple(dims)}")
    return tuple(dims)


@register_op(
    "Reshape",
    inputs=(1, 2),
    outputs=2,
    allow_inplace={0: 0},
    args=[
        Arg(
            "shape",
            list,
            [],
            "the new shape (0 copies the input's dim, -1 is inferred); or give it as input 1",
            item_type=int,
        )
    ],
    inputs_doc=("data", "new_shape (optional 1-D int)"),
    outputs_doc=("reshaped", "old_shape (1-D int64)"),
    doc="Caffe2's Reshape: the data with a new shape, from the `shape` argument or input 1 (not both); "
    "0 copies the input's dim at that position, one -1 is inferred. Output 1 is the old shape.",
)
def reshape(ctx: Any, x: Any, shape_in: Any = None) -> tuple[np.ndarray, np.ndarray]:
    x = array(ctx, x, 0)
    if (shape_in is None) == (not ctx.args["shape"]):
        raise ValueError("expected the new shape either in the `shape` argument or in input 1, not both or neither")
    spec = ctx.args["shape"] if shape_in is None else _int_vector(ctx, shape_in, 1)
    return _fresh(ctx, x.reshape(new_shape(tuple(x.shape), spec))), _ints(x, list(x.shape), np.int64)


@register_gradient("Reshape")
def _reshape_grad(op: OperatorDef, gout: GradOut) -> MakerResult:
    _only_first_output(op, gout)
    ops = [_op("Reshape", [output_grad(op, gout), op.outputs[1]], ["#dx", "#old"])]
    return ops, ["#dx"] + [None] * (len(op.inputs) - 1)


def _only_first_output(op: OperatorDef, gout: GradOut) -> None:
    if any(g is not None for g in gout[1:]):
        raise ValueError(f"{op.type}: only output 0 {op.outputs[0]!r} is differentiable")


# -- Flatten: Y = X viewed as [prod(dims[:axis]), prod(dims[axis:])]; dX = ResizeLike(dY, X) --------
@register_op(
    "Flatten",
    inputs=1,
    outputs=1,
    args=[Arg("axis", int, 1, "dims before it become rows, the rest columns")],
    doc="Caffe2's Flatten: X as a 2-D [prod(dims[:axis]), prod(dims[axis:])] array.",
)
def flatten(ctx: Any, x: Any) -> np.ndarray:
    x = array(ctx, x, 0)
    return _fresh(ctx, flatten_2d(x, axis_of(ctx, x, ctx.args["axis"])))


@register_op(
    "ResizeLike",
    inputs=2,
    outputs=1,
    inputs_doc=("X", "like"),
    outputs_doc=("Y, X with like's shape",),
    doc="Caffe2's ResizeLike (as Flatten's gradient uses it): X reshaped to the shape of `like` (same size).",
)
def resize_like(ctx: Any, x: Any, like: Any) -> np.ndarray:
    x = array(ctx, x, 0)
    shape = tuple(like.shape) if is_torch(like) else np.shape(like)
    if namespace(ctx, x).size(x) != int(np.prod(shape, dtype=np.int64)):
        raise ValueError(
            f"cannot resize {ctx.op.inputs[0]!r} of shape {tuple(x.shape)} like {ctx.op.inputs[1]!r} of shape {shape}"
        )
    return _copy(x.reshape(shape))


@register_gradient("Flatten")
def _flatten_grad(op: OperatorDef, gout: GradOut) -> MakerResult:
    return [_op("ResizeLike", [output_grad(op, gout), op.inputs[0]], ["#dx"])], ["#dx"]


# -- Transpose: Y = X permuted by axes (default: reversed); dX = dY permuted by the inverse --------
def _axes(ctx: Any, x: np.ndarray) -> list[int]:
    axes = ctx.args["axes"] or list(range(x.ndim))[::-1]
    if sorted(axes) != list(range(x.ndim)):
        raise ValueError(
            f"expected axes to be a permutation of 0..{x.ndim - 1} for an input of shape {x.shape}, got {axes}"
        )
    return axes


@register_op(
    "Transpose",
    inputs=1,
    outputs=1,
    args=[Arg("axes", list, [], "the permutation; empty reverses the dims", item_type=int)],
    doc="Caffe2's Transpose: Y = X with its dims permuted by `axes` (reversed when not given), as a contiguous copy.",
)
def transpose(ctx: Any, x: Any) -> np.ndarray:
    x = array(ctx, x, 0)
    if is_torch(x):
        return x.permute(_axes(ctx, x)).contiguous()
    return x.transpose(_axes(ctx, x)).copy(order="C")  # not ascontiguousarray: it makes a 0-d input 1-D


@register_gradient("Transpose")
def _transpose_grad(op: OperatorDef, gout: GradOut) -> MakerResult:
    axes = list(op.args.get("axes", []))
    args = {"axes": [int(i) for i in np.argsort(axes)]} if axes else {}
    return [_op("Transpose", [output_grad(op, gout)], ["#dx"], **args)], ["#dx"]


# -- Concat: Y = the inputs joined along axis (or stacked on a new one); dXi = the pieces of dY -----
_AXIS = Arg("axis", int, 1, "the axis to join or split along")
_ADD_AXIS = Arg("add_axis", bool, False, "stack on a new axis at `axis` instead of joining along an existing one")
_ORDER = Arg(
    "order",
    str,
    None,
    "Caffe2's legacy form of the axis, instead of `axis`: NCHW is axis 1, NHWC axis 3 (add_axis is then ignored)",
    choices=("NCHW", "NHWC", "nchw", "nhwc"),
)


def _axis_or_order(op: OperatorDef) -> None:
    if "axis" in op.args and "order" in op.args:
        raise ValueError("expected either `axis` or `order` (the axis of 4-D images), not both")


def _axis_args(ctx: Any) -> tuple[int, bool]:
    """(axis, add_axis) as Caffe2's Concat and Split read them: `order` gives axis 1 (NCHW) or 3
    (NHWC) and no added axis."""
    order = ctx.args["order"]
    if order is not None:
        return (3 if order.upper() == "NHWC" else 1), False
    return ctx.args["axis"], ctx.args["add_axis"]


@register_op(
    "Concat",
    inputs=(1, None),
    outputs=2,
    args=[_AXIS, _ADD_AXIS, _ORDER],
    validate=_axis_or_order,
    inputs_doc=("X0", "X1", "..."),
    outputs_doc=("concat_result", "split_info (1-D int32: each input's size along axis)"),
    doc="Caffe2's Concat: the inputs joined along `axis` (stacked on a new axis with add_axis=1; or Caffe2's "
    "legacy `order`, NCHW: axis 1, NHWC: axis 3); output 1 holds each input's size along the axis, for "
    "the gradient's Split.",
)
def concat(ctx: Any, *xs: Any) -> tuple[np.ndarray, np.ndarray]:
    arrays = [array(ctx, x, i) for i, x in enumerate(xs)]
    first = arrays[0]
    given, add_axis = _axis_args(ctx)
    nd = first.ndim + (1 if add_axis else 0)
    axis = given + nd if given < 0 else given
    if not 0 <= axis < nd:
        raise ValueError(f"axis {given} is out of range for inputs of shape {first.shape}")
    xp = namespace(ctx, *arrays)
    for i, x in enumerate(arrays):
        if x.dtype != first.dtype:
            raise TypeError(
                f"expected every input of dtype {first.dtype}, got {x.dtype} in input {i} {ctx.op.inputs[i]!r}"
            )
        same = (
            x.shape == first.shape
            if add_axis
            else (
                x.ndim == first.ndim and all(a == b for k, (a, b) in enumerate(zip(x.shape, first.shape)) if k != axis)
            )
        )
        if not same:
            raise ValueError(
                f"expected input {i} {ctx.op.inputs[i]!r} to match input 0's shape {first.shape} "
                f"{'exactly' if add_axis else f'except along axis {axis}'}, got {x.shape}"
            )
    if xp.name == "torch":
        joined = xp.lib.stack(arrays, dim=axis) if add_axis else xp.lib.cat(arrays, dim=axis)
        sizes = [1] * len(arrays) if add_axis else [x.shape[axis] for x in arrays]
        return joined, _ints(first, sizes, np.int32)
    if add_axis:
        return np.stack(arrays, axis=axis), np.ones(len(arrays), dtype=np.int32)
    return np.concatenate(arrays, axis=axis), np.array([x.shape[axis] for x in arrays], dtype=np.int32)


@register_gradient("Concat")
def _concat_grad(op: OperatorDef, gout: GradOut) -> MakerResult:
    _only_first_output(op, gout)
    names = [f"#dx{i}" for i in range(len(op.inputs))]
    args = {k: op.args[k] for k in ("axis", "add_axis", "order") if k in op.args}
    return [_op("Split", [output_grad(op, gout), op.outputs[1]], names, **args)], list(names)


# -- Split: Yi = consecutive pieces of X along axis; dX = the dYi joined (zeros for the missing) ---
def _split_sizes(ctx: Any, x: np.ndarray, axis: int, n: int, split_in: Any) -> list[int]:
    a = ctx.args
    if split_in is not None and a["split"]:
        raise ValueError("expected the split sizes either in the `split` argument or in input 1, not both")
    sizes = _int_vector(ctx, split_in, 1) if split_in is not None else list(a["split"])
    if _axis_args(ctx)[1]:
        if sizes and any(s != 1 for s in sizes):
            raise ValueError(f"with add_axis=1 every split size must be 1, got {sizes}")
        sizes = [1] * x.shape[axis]
    elif not sizes:
        if n == 0:
            raise ValueError("expected at least one piece (argument present is empty)")
        if x.shape[axis] % n:
            raise ValueError(f"cannot split axis {axis} of size {x.shape[axis]} into {n} equal pieces")
        sizes = [x.shape[axis] // n] * n
    if len(sizes) != n or sum(sizes) != x.shape[axis] or min(sizes) < 0:
        raise ValueError(
            f"expected {n} non-negative split sizes summing to {x.shape[axis]} (axis {axis} of {x.shape}), got {sizes}"
        )
    return sizes


def _split_axis(ctx: Any, x: np.ndarray) -> int:
    axis = _axis_args(ctx)[0]
    a = axis + x.ndim if axis < 0 else axis
    if not 0 <= a < x.ndim:
        raise ValueError(f"axis {axis} is out of range for an input of shape {x.shape}")
    return a


def split_pieces(x: np.ndarray, axis: int, sizes: list[int], add_axis: bool) -> list[np.ndarray]:
    """The pieces of ``x`` along ``axis`` (copies), squeezed on that axis with ``add_axis``."""
    if is_torch(x):
        pieces = [p.clone() for p in x.split(sizes, dim=axis)]
        return [p.squeeze(axis) for p in pieces] if add_axis else pieces
    lead, pieces, lo = (slice(None),) * axis, [], 0
    for size in sizes:
        pieces.append(x[(*lead, slice(lo, lo + size))].copy())
        lo += size
    return [np.squeeze(p, axis=axis) for p in pieces] if add_axis else pieces


_SPLIT = Arg(
    "split",
    list,
    [],
    "the size of each piece along axis (or give them as input 1); empty splits into equal pieces",
    item_type=int,
)


@register_op(
    "Split",
    inputs=(1, 2),
    outputs=(1, None),
    args=[_AXIS, _SPLIT, _ADD_AXIS, _ORDER],
    validate=_axis_or_order,
    inputs_doc=("input", "split (optional 1-D int sizes)"),
    outputs_doc=("output_0", "output_1", "..."),
    doc="Caffe2's Split: consecutive pieces of the input along `axis`, of the sizes in `split` (argument or "
    "input 1) or equal; with add_axis=1 every piece has size 1 and that axis is removed. Caffe2's legacy "
    "`order` (NCHW: axis 1, NHWC: axis 3) may replace `axis`.",
)
def split(ctx: Any, x: Any, split_in: Any = None) -> tuple[np.ndarray, ...]:
    x = array(ctx, x, 0)
    axis = _split_axis(ctx, x)
    sizes = _split_sizes(ctx, x, axis, len(ctx.op.outputs), split_in)
    pieces = split_pieces(x, axis, sizes, _axis_args(ctx)[1])
    return pieces[0] if len(pieces) == 1 else tuple(pieces)  # one output is returned bare


@register_op(
    "SplitGradient",
    inputs=(2, None),
    outputs=1,
    args=[
        _AXIS,
        _SPLIT,
        _ADD_AXIS,
        _ORDER,
        Arg("present", list, [], "1 for each forward output with a gradient input", item_type=int),
        Arg("split_input", bool, False, "input 1 is the forward op's split sizes"),
    ],
    inputs_doc=("X (the forward input)", "split (if split_input)", "dY for each present output"),
    outputs_doc=("dX",),
    doc="Gradient of Split: the output gradients joined along axis, zeros where an output has none.",
)
def split_gradient(ctx: Any, x: Any, *rest: Any) -> np.ndarray:
    x = array(ctx, x, 0)
    axis = _split_axis(ctx, x)
    split_in, grads = (rest[0], list(rest[1:])) if ctx.args["split_input"] else (None, list(rest))
    present = ctx.args["present"]
    sizes = _split_sizes(ctx, x, axis, len(present), split_in)
    pieces = []
    xp = namespace(ctx, x, *grads)
    shape = list(x.shape)
    for k, (p, s) in enumerate(zip(present, sizes)):
        shape[axis] = s
        piece_shape = tuple(d for j, d in enumerate(shape) if not (_axis_args(ctx)[1] and j == axis))
        if p:
            dy = array(ctx, grads.pop(0), 0)
            if tuple(dy.shape) != piece_shape:
                raise ValueError(f"expected the gradient of output {k} of shape {piece_shape}, got {tuple(dy.shape)}")
            pieces.append(dy.reshape(shape))
        else:
            pieces.append(xp.full(shape, 0, like=x))
    dtype = next((p.dtype for p, on in zip(pieces, present) if on), x.dtype)
    if xp.name == "torch":
        return xp.lib.cat([p.to(dtype) for p in pieces], dim=axis)
    return np.concatenate([p.astype(dtype, copy=False) for p in pieces], axis=axis)


@register_gradient("Split")
def _split_grad(op: OperatorDef, gout: GradOut) -> MakerResult:
    present = [0 if g is None else 1 for g in gout]
    has_split = len(op.inputs) > 1
    inputs = [op.inputs[0], *op.inputs[1:2], *(g for g in gout if g is not None)]
    args = {k: op.args[k] for k in ("axis", "split", "add_axis", "order") if k in op.args}
    ops = [_op("SplitGradient", inputs, ["#dx"], present=present, split_input=has_split, **args)]
    return ops, ["#dx"] + [None] * (len(op.inputs) - 1)


# Caffe2's backward-compatible names (concat_split_op.cc): DepthConcat is Concat, DepthSplit is Split
register_op(
    "DepthConcat",
    inputs=(1, None),
    outputs=2,
    args=[_AXIS, _ADD_AXIS, _ORDER],
    validate=_axis_or_order,
    inputs_doc=("X0", "X1", "..."),
    outputs_doc=("concat_result", "split_info"),
    doc="Caffe2's DepthConcat: Concat under its old name.",
)(concat)
register_gradient("DepthConcat")(_concat_grad)
register_op(
    "DepthSplit",
    inputs=(1, 2),
    outputs=(1, None),
    args=[_AXIS, _SPLIT, _ADD_AXIS, _ORDER],
    validate=_axis_or_order,
    inputs_doc=("input", "split (optional)"),
    outputs_doc=("output_0", "..."),
    doc="Caffe2's DepthSplit: Split under its old name.",
)(split)
register_gradient("DepthSplit")(_split_grad)


# -- Slice: Y = X[starts:ends] per dim (Caffe2's negative rule: end -1 is the dim's end) -----------
def slice_bounds(shape: tuple[int, ...], starts: list[int], ends: list[int]) -> tuple[slice, ...]:
    """Caffe2's slice bounds: a negative index i means dim + 1 + i (so end -1 is the dim's end);
    dims past the lists are taken whole.

    >>> slice_bounds((5, 4), [1], [-2])
    (slice(1, 4, None), slice(0, 4, None))
    """
    if len(starts) != len(ends) or len(starts) > len(shape):
        raise ValueError(
            f"expected starts and ends of one length <= {len(shape)} (the input's dims), got {starts} and {ends}"
        )
    out = []
    for d, dim in enumerate(shape):
        if d >= len(starts) or dim == 0:
            out.append(slice(0, dim))
            continue
        lo, hi = (min(dim + 1 + v if v < 0 else v, dim) for v in (starts[d], ends[d]))
        if lo < 0 or hi < lo:
            raise ValueError(
                f"slice {starts[d]}:{ends[d]} of dim {d} (size {dim}) gives {lo}:{hi}; expected 0 <= start <= end"
            )
        out.append(slice(lo, hi))
    return tuple(out)


def _starts_ends(ctx: Any, rest: tuple[Any, ...], first: int) -> tuple[list[int], list[int]]:
    if rest:
        if len(rest) != 2:
            raise ValueError("expected both starts and ends as inputs, or neither")
        if ctx.args["starts"] or ctx.args["ends"]:
            raise ValueError("expected starts/ends either as arguments or as inputs, not both")
        return _int_vector(ctx, rest[0], first), _int_vector(ctx, rest[1], first + 1)
    return list(ctx.args["starts"]), list(ctx.args["ends"])


_STARTS = Arg("starts", list, [], "start index per dim (or input 1)", item_type=int)
_ENDS = Arg("ends", list, [], "end index per dim, exclusive; -1 is the dim's end (or input 2)", item_type=int)


@register_op(
    "Slice",
    inputs=(1, 3),
    outputs=1,
    args=[_STARTS, _ENDS],
    inputs_doc=("data", "starts (optional 1-D int)", "ends (optional 1-D int)"),
    outputs_doc=("output",),
    doc="Caffe2's Slice: data[starts[i]:ends[i]] in each of the first len(starts) dims; a negative index i "
    "means dim + 1 + i (end -1 = through the end). Unlike Caffe2, more than one dim may be sliced.",
)
def slice_(ctx: Any, x: Any, *rest: Any) -> np.ndarray:
    x = array(ctx, x, 0)
    starts, ends = _starts_ends(ctx, rest, 1)
    return _copy(x[slice_bounds(tuple(x.shape), starts, ends)])


@register_op(
    "SliceGradient",
    inputs=(2, 4),
    outputs=1,
    args=[_STARTS, _ENDS],
    inputs_doc=("data", "starts (optional)", "ends (optional)", "dY"),
    outputs_doc=("dX",),
    doc="Gradient of Slice: zeros shaped like data with dY written into the sliced window.",
)
def slice_gradient(ctx: Any, x: Any, *rest: Any) -> np.ndarray:
    x = array(ctx, x, 0)
    dy = array(ctx, rest[-1], len(rest))
    starts, ends = _starts_ends(ctx, rest[:-1], 1)
    window = slice_bounds(tuple(x.shape), starts, ends)
    dx = namespace(ctx, x, dy).full(tuple(x.shape), 0, like=dy)
    if dx[window].shape != dy.shape:
        raise ValueError(f"expected dY of the slice's shape {tuple(dx[window].shape)}, got {tuple(dy.shape)}")
    dx[window] = dy
    return dx


@register_gradient("Slice")
def _slice_grad(op: OperatorDef, gout: GradOut) -> MakerResult:
    ops = [_op("SliceGradient", [*op.inputs, output_grad(op, gout)], ["#dx"], **op.args)]
    return ops, ["#dx"] + [None] * (len(op.inputs) - 1)


# -- ExpandDims / Squeeze: insert / remove size-1 dims; each is the other's gradient ---------------
_DIMS = Arg("dims", list, Arg.REQUIRED, "the dims to insert or remove", item_type=int)


def _sorted_dims(ctx: Any) -> list[int]:
    dims = sorted(set(ctx.args["dims"]))
    if not dims or dims[0] < 0:
        raise ValueError(f"expected a non-empty list of non-negative dims, got {ctx.args['dims']}")
    return dims


@register_op(
    "ExpandDims",
    inputs=1,
    outputs=1,
    allow_inplace={0: 0},
    args=[_DIMS],
    doc="Caffe2's ExpandDims: inserts a size-1 dim at each of `dims` (sorted, each an index of the output).",
)
def expand_dims(ctx: Any, x: Any) -> np.ndarray:
    x = array(ctx, x, 0)
    dims = _sorted_dims(ctx)
    if dims[-1] >= x.ndim + len(dims):
        raise ValueError(f"dims {dims} out of range for an input of shape {x.shape} (output rank {x.ndim + len(dims)})")
    if is_torch(x):
        for d in dims:
            x = x.unsqueeze(d)
        return _fresh(ctx, x)
    return _fresh(ctx, np.expand_dims(x, tuple(dims)))


@register_op(
    "Squeeze",
    inputs=1,
    outputs=1,
    allow_inplace={0: 0},
    args=[_DIMS],
    doc="Caffe2's Squeeze: removes the size-1 dims listed in `dims`.",
)
def squeeze(ctx: Any, x: Any) -> np.ndarray:
    x = array(ctx, x, 0)
    dims = _sorted_dims(ctx)
    if dims[-1] >= x.ndim or any(x.shape[d] != 1 for d in dims):
        raise ValueError(f"expected dims {dims} of size 1 in an input of shape {x.shape}")
    return _fresh(ctx, x.squeeze(tuple(dims)) if is_torch(x) else np.squeeze(x, tuple(dims)))


@register_gradient("ExpandDims")
def _expand_dims_grad(op: OperatorDef, gout: GradOut) -> MakerResult:
    return [_op("Squeeze", [output_grad(op, gout)], ["#dx"], dims=op.args["dims"])], ["#dx"]


@register_gradient("Squeeze")
def _squeeze_grad(op: OperatorDef, gout: GradOut) -> MakerResult:
    return [_op("ExpandDims", [output_grad(op, gout)], ["#dx"], dims=op.args["dims"])], ["#dx"]


# -- Shape, Size, HasElements, IsEmpty: facts about a tensor, as tensors (Caffe2's; no gradient) --
def _like_input(value: np.ndarray, x: Any) -> Any:
    """``value`` in ``x``'s library (a torch input gives a torch tensor on its device)."""
    return place_like(value, x) if is_torch(x) else value


@register_op(
    "Shape",
    inputs=1,
    outputs=1,
    args=[Arg("axes", list, [], "only these dims (>= 0), in this order; empty: every dim", item_type=int)],
    inputs_doc=("X",),
    outputs_doc=("X's dims, 1-D int64",),
    doc="X's shape as a 1-D int64 tensor, or only the dims listed in `axes` (Caffe2's Shape).",
)
def shape_op(ctx: Any, x: Any) -> Any:
    x, axes = array(ctx, x, 0), ctx.args["axes"]
    bad = [a for a in axes if not 0 <= a < x.ndim]
    if bad:
        raise ValueError(f"axes {bad} out of range for a {x.ndim}-D input (Caffe2's Shape takes axes >= 0)")
    dims = tuple(x.shape)
    return _like_input(np.array([dims[a] for a in axes] if axes else dims, np.int64), x)


@register_op(
    "Size",
    inputs=1,
    outputs=1,
    inputs_doc=("X",),
    outputs_doc=("the number of elements, 0-d int64",),
    doc="The number of elements of X as a 0-d int64 tensor (Caffe2's Size).",
)
def size_op(ctx: Any, x: Any) -> Any:
    x = array(ctx, x, 0)
    return _like_input(np.array(math.prod(x.shape), np.int64), x)


@register_op(
    "HasElements",
    inputs=(1, None),
    outputs=1,
    inputs_doc=("X_0", "X_1 ..."),
    outputs_doc=("0-d bool",),
    doc="True when any input has at least one element (Caffe2's HasElements, one input or more).",
)
def has_elements(ctx: Any, *xs: Any) -> Any:
    arrays = [array(ctx, x, i) for i, x in enumerate(xs)]
    return _like_input(np.array(any(math.prod(x.shape) > 0 for x in arrays)), arrays[0])


@register_op(
    "IsEmpty",
    inputs=1,
    outputs=1,
    inputs_doc=("X",),
    outputs_doc=("0-d bool",),
    doc="True when X has no element (Caffe2's IsEmpty).",
)
def is_empty(ctx: Any, x: Any) -> Any:
    x = array(ctx, x, 0)
    return _like_input(np.array(math.prod(x.shape) == 0), x)
