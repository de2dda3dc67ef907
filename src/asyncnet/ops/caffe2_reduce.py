"""Caffe2's ReduceFront{Sum,Mean,Max} and ReduceBack{Sum,Mean,Max}: reduce the first (front)
or last (back) ``num_reduce_dim`` dims of X. With a ``lengths`` input, one per kept position,
only the first ``lengths[i]`` reduced positions count. Their gradients take (dY, X or X's shape
[, lengths]) for Sum and Mean, and (dY, X, Y [, lengths]) for Max, as in Caffe2.

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace(); ws.feed("x", np.arange(6, dtype=np.float32).reshape(2, 3))
    >>> ws.feed("n", np.array([1, 2, 2], np.int32))
    >>> net = an.Net("reduce"); _ = net.ReduceFrontSum("x", "s"); _ = net.ReduceBackMax("x", "m")
    >>> _ = net.ReduceFrontMean(["x", "n"], "l")
    >>> ws.run_net_once(net); ws.fetch("s"), ws.fetch("m"), ws.fetch("l")
    (array([3., 5., 7.], dtype=float32), array([2., 5.], dtype=float32), array([0. , 2.5, 3.5], dtype=float32))
"""

from __future__ import annotations

from typing import Any

import numpy as np

from asyncnet.core.defs import OperatorDef
from asyncnet.core.registry import Arg, register_gradient, register_op
from asyncnet.ops._check import array, float_array

__all__ = ["KINDS"]

KINDS = ("Sum", "Mean", "Max")
_ARGS = [Arg("num_reduce_dim", int, 1, "how many leading (Front) or trailing (Back) dims to reduce")]


def _split(shape: tuple[int, ...], k: int, front: bool) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(kept dims, reduced dims) of ``shape``."""
    if not 0 <= k <= len(shape):
        raise ValueError(f"num_reduce_dim={k} for an input of {len(shape)} dims")
    return (shape[k:], shape[:k]) if front else (shape[: len(shape) - k], shape[len(shape) - k :])


def _rows(x: np.ndarray, k: int, front: bool) -> np.ndarray:
    """X as [kept positions, reduced positions]."""
    kept, red = _split(x.shape, k, front)
    b, d = int(np.prod(kept)), int(np.prod(red))
    return x.reshape(d, b).T if front else x.reshape(b, d)


def _from_rows(m: np.ndarray, shape: tuple[int, ...], front: bool) -> np.ndarray:
    return np.ascontiguousarray(m.T).reshape(shape) if front else m.reshape(shape)


def _mask(ctx: Any, lengths: tuple[Any, ...], b: int, d: int, index: int) -> np.ndarray | None:
    if not lengths:
        return None
    n = array(ctx, lengths[0], index).reshape(-1).astype(np.int64)
    if n.shape[0] != b or (n.size and (n.min() < 0 or n.max() > d)):
        raise ValueError(f"expected {b} lengths in [0, {d}], got {n.tolist()}")
    return np.arange(d)[None, :] < n[:, None]


def _forward(kind: str, front: bool) -> Any:
    def kernel(ctx: Any, x: Any, *lengths: Any) -> np.ndarray:
        x = float_array(ctx, x, 0)
        k = ctx.args["num_reduce_dim"]
        kept, _ = _split(x.shape, k, front)
        m = _rows(x, k, front)
        mask = _mask(ctx, lengths, m.shape[0], m.shape[1], 1)
        if kind == "Max":
            y = np.where(mask, m, -np.inf).max(axis=1) if mask is not None else m.max(axis=1)
        else:
            y = (m * mask).sum(axis=1) if mask is not None else m.sum(axis=1)
            if kind == "Mean":
                count = mask.sum(axis=1) if mask is not None else m.shape[1]
                y = y / np.maximum(count, 1)
        return np.asarray(y, dtype=x.dtype).reshape(kept)

    return kernel


def _shape_of(ctx: Any, x_or_shape: Any) -> tuple[int, ...]:
    a = np.asarray(x_or_shape)
    if a.dtype.kind in "iu" and a.ndim == 1:
        return tuple(int(v) for v in a)
    return tuple(a.shape)


def _sum_mean_grad(kind: str, front: bool) -> Any:
    def kernel(ctx: Any, dy: Any, x_or_shape: Any, *lengths: Any) -> np.ndarray:
        dy = float_array(ctx, dy, 0)
        shape = _shape_of(ctx, x_or_shape)
        k = ctx.args["num_reduce_dim"]
        kept, red = _split(shape, k, front)
        b, d = int(np.prod(kept)), int(np.prod(red))
        if dy.size != b:
            raise ValueError(f"expected dY of {b} values (X's kept dims {kept}), got shape {tuple(dy.shape)}")
        g = np.broadcast_to(dy.reshape(b, 1), (b, d)).astype(dy.dtype)
        mask = _mask(ctx, lengths, b, d, 2)
        if mask is not None:
            g = g * mask
        if kind == "Mean":
            count = mask.sum(axis=1, keepdims=True) if mask is not None else d
            g = g / np.maximum(count, 1)
        return _from_rows(np.asarray(g, dtype=dy.dtype), shape, front)

    return kernel


def _max_grad(front: bool) -> Any:
    def kernel(ctx: Any, dy: Any, x: Any, y: Any, *lengths: Any) -> np.ndarray:
        dy, x, y = float_array(ctx, dy, 0), float_array(ctx, x, 1), float_array(ctx, y, 2)
        k = ctx.args["num_reduce_dim"]
        m = _rows(x, k, front)
        b, d = m.shape
        hit = m == y.reshape(b, 1)
        mask = _mask(ctx, lengths, b, d, 3)
        if mask is not None:
            hit &= mask
        g = np.where(hit, dy.reshape(b, 1), 0).astype(dy.dtype)
        return _from_rows(g, x.shape, front)

    return kernel


def _maker(name: str, kind: str) -> Any:
    def maker(op: OperatorDef, gout: list[Any]) -> tuple[list[OperatorDef], list[Any]]:
        if gout[0] is None:
            return [], [None] * len(op.inputs)
        lengths = list(op.inputs[1:])
        first = [gout[0], op.inputs[0], op.outputs[0]] if kind == "Max" else [gout[0], op.inputs[0]]
        grad = OperatorDef(f"{name}Gradient", first + lengths, ["#dx"], dict(op.args))
        return [grad], ["#dx"] + [None] * len(lengths)

    return maker


def _register(side: str, kind: str) -> None:
    front = side == "Front"
    name = f"Reduce{side}{kind}"
    what = "first" if front else "last"
    register_op(
        name,
        inputs=(1, 2),
        outputs=1,
        args=_ARGS,
        inputs_doc=("X", "lengths (optional)"),
        doc=f"{kind} over the {what} num_reduce_dim dims of X (the first lengths[i] positions with lengths).",
    )(_forward(kind, front))
    if kind == "Max":
        register_op(
            f"{name}Gradient",
            inputs=(3, 4),
            outputs=1,
            args=_ARGS,
            inputs_doc=("dY", "X", "Y", "lengths (optional)"),
            doc=f"Gradient of {name}: dY where X equals the maximum, 0 elsewhere.",
        )(_max_grad(front))
    else:
        register_op(
            f"{name}Gradient",
            inputs=(2, 3),
            outputs=1,
            args=_ARGS,
            inputs_doc=("dY", "X or X's shape (int64)", "lengths (optional)"),
            doc=f"Gradient of {name}: dY spread over the reduced positions"
            + (", divided by their count." if kind == "Mean" else "."),
        )(_sum_mean_grad(kind, front))
    register_gradient(name)(_maker(name, kind))


for _side in ("Front", "Back"):
    for _kind in KINDS:
        _register(_side, _kind)
