"""Caffe2's ``TopK`` (with ``TopKGradient``) and ``Tile`` (with ``TileGradient``).

``TopK``: the k largest values along ``axis`` (default the last), in decreasing order, a tie
going to the smaller index; outputs Values, Indices (int64) and optionally FlattenIndices (the
int64 positions in the flattened X, as one vector). ``Tile``: X repeated ``tiles`` times along
``axis`` (both arguments, or the int inputs 1 and 2).

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace(); ws.feed("x", np.array([[1.0, 3.0, 3.0, 2.0]], np.float32))
    >>> net = an.Net("topk"); _ = net.TopK("x", ["v", "i"], k=2)
    >>> ws.run_net_once(net); ws.fetch("v"), ws.fetch("i")
    (array([[3., 3.]], dtype=float32), array([[1, 2]]))
"""

from __future__ import annotations

from typing import Any

import numpy as np

from asyncnet.core.defs import OperatorDef
from asyncnet.core.registry import Arg, register_gradient, register_op
from asyncnet.ops._check import array, axis_of, float_array

__all__: list[str] = []  # the ops are reached through the registry


def _np(x: Any) -> np.ndarray:
    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)


# -- TopK -----------------------------------------------------------------------------------------


@register_op(
    "TopK",
    outputs=(2, 3),
    args=[Arg("k", int, -1, "how many values to keep"), Arg("axis", int, -1, "the axis searched")],
    outputs_doc=("Values", "Indices (int64)", "FlattenIndices (int64, optional)"),
    doc="The k largest values along axis in decreasing order (ties: the smaller index first), their indices.",
)
def top_k(ctx: Any, x: Any) -> tuple[np.ndarray, ...]:
    x = array(ctx, _np(x), 0)
    if x.ndim == 0:
        raise ValueError("expected an input of at least 1 dimension, got a scalar")
    axis = axis_of(ctx, x, ctx.args["axis"])
    k = ctx.args["k"]
    if not 1 <= k <= x.shape[axis]:
        raise ValueError(f"expected k in [1, {x.shape[axis]}] (the size of axis {axis}), got {k}")
    order = np.argsort(-x, axis=axis, kind="stable") if x.dtype.kind != "u" else None
    if order is None:
        order = np.flip(np.argsort(np.flip(x, axis=axis), axis=axis, kind="stable"), axis=axis)
        order = x.shape[axis] - 1 - order
    indices = np.take(order, np.arange(k), axis=axis).astype(np.int64)
    values = np.take_along_axis(x, indices, axis=axis)
    if len(ctx.op.outputs) == 2:
        return values, indices
    grid = np.indices(indices.shape, dtype=np.int64)
    grid[axis] = indices
    flat = np.ravel_multi_index(tuple(grid), x.shape).reshape(-1).astype(np.int64)
    return values, indices, flat


@register_op(
    "TopKGradient",
    inputs=3,
    args=[Arg("axis", int, -1, "the axis searched")],
    inputs_doc=("dValues", "Indices", "X (the forward input, for its shape)"),
    outputs_doc=("dX",),
    doc="dValues scattered back to the positions Indices picked; zeros elsewhere.",
)
def top_k_gradient(ctx: Any, dv: Any, indices: Any, x: Any) -> np.ndarray:
    dv, indices, x = float_array(ctx, _np(dv), 0), array(ctx, _np(indices), 1), _np(x)
    if dv.shape != indices.shape:
        raise ValueError(f"expected dValues of the shape of Indices {indices.shape}, got {dv.shape}")
    axis = axis_of(ctx, x, ctx.args["axis"])
    dx = np.zeros(x.shape, dv.dtype)
    np.put_along_axis(dx, indices.astype(np.int64), dv, axis=axis)
    return dx


@register_gradient("TopK")
def _top_k_grad(op: OperatorDef, gout: list[Any]) -> tuple[list[OperatorDef], list[Any]]:
    if gout[0] is None:
        return [], [None]
    args = {k: v for k, v in op.args.items() if k == "axis"}
    return [OperatorDef("TopKGradient", [gout[0], op.outputs[1], op.inputs[0]], ["#dx"], args)], ["#dx"]


# -- Tile -----------------------------------------------------------------------------------------

_TILE_ARGS = [Arg("tiles", int, 1, "the number of copies"), Arg("axis", int, 0, "the axis tiled")]


def _tiles_axis(ctx: Any, extra: tuple[Any, ...], ndim: int) -> tuple[int, int]:
    if extra:
        if len(extra) != 2:
            raise ValueError("expected the inputs X, tiles, axis (or X alone with the arguments)")
        tiles, axis = (int(array(ctx, _np(v), i + 1).reshape(-1)[0]) for i, v in enumerate(extra))
    else:
        tiles, axis = ctx.args["tiles"], ctx.args["axis"]
    if tiles < 0:
        raise ValueError(f"expected tiles >= 0, got {tiles}")
    if not -ndim <= axis < ndim:
        raise ValueError(f"expected an axis in [{-ndim}, {ndim}), got {axis}")
    return tiles, axis % ndim


@register_op(
    "Tile",
    inputs=(1, 3),
    args=_TILE_ARGS,
    inputs_doc=("X", "tiles (one int, optional)", "axis (one int, optional)"),
    doc="X repeated tiles times along axis (numpy.tile on that axis).",
)
def tile(ctx: Any, x: Any, *extra: Any) -> np.ndarray:
    x = array(ctx, _np(x), 0)
    if x.ndim == 0:
        raise ValueError("expected an input of at least 1 dimension, got a scalar")
    tiles, axis = _tiles_axis(ctx, extra, x.ndim)
    reps = [1] * x.ndim
    reps[axis] = tiles
    return np.tile(x, reps)


@register_op(
    "TileGradient",
    inputs=(1, 3),
    args=_TILE_ARGS,
    inputs_doc=("dY", "tiles (optional)", "axis (optional)"),
    outputs_doc=("dX",),
    doc="The sum of the tiles copies of dY along axis.",
)
def tile_gradient(ctx: Any, dy: Any, *extra: Any) -> np.ndarray:
    dy = float_array(ctx, _np(dy), 0)
    tiles, axis = _tiles_axis(ctx, extra, dy.ndim)
    if tiles == 0 or dy.shape[axis] % tiles:
        raise ValueError(f"expected dY's axis {axis} ({dy.shape[axis]}) to be a multiple of tiles {tiles}")
    shape = dy.shape[:axis] + (tiles, dy.shape[axis] // tiles) + dy.shape[axis + 1 :]
    return dy.reshape(shape).sum(axis=axis)


@register_gradient("Tile")
def _tile_grad(op: OperatorDef, gout: list[Any]) -> tuple[list[OperatorDef], list[Any]]:
    if gout[0] is None:
        return [], [None] * len(op.inputs)
    ins = [gout[0], *op.inputs[1:]]
    return [OperatorDef("TileGradient", ins, ["#dx"], dict(op.args))], ["#dx"] + [None] * (len(op.inputs) - 1)
