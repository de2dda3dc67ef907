"""Caffe2's ScatterAssign (DATA[INDICES] = SLICES, in place) and SparseMomentumSGDUpdate
(MomentumSGDUpdate on the rows of the param and moment named by indices).

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace(); ws.feed("d", np.zeros((3, 2), np.float32))
    >>> ws.feed("i", np.array([2, 0], np.int64)); ws.feed("s", np.array([[1, 2], [3, 4]], np.float32))
    >>> net = an.Net("scatter"); _ = net.ScatterAssign(["d", "i", "s"], "d")
    >>> ws.run_net_once(net); ws.fetch("d")
    array([[3., 4.],
           [0., 0.],
           [1., 2.]], dtype=float32)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from asyncnet.core.registry import Arg, register_op
from asyncnet.ops._check import array, float_array

__all__ = ["scatter_assign", "sparse_momentum_sgd_update"]


def _indices(ctx: Any, x: Any, i: int, rows: int) -> np.ndarray:
    idx = array(ctx, x, i)
    if idx.dtype.kind not in "iu":
        raise TypeError(f"expected integer indices in input {i} {ctx.op.inputs[i]!r}, got dtype {idx.dtype}")
    flat = idx.reshape(-1).astype(np.int64)
    if flat.size and (flat.min() < 0 or flat.max() >= rows):
        raise ValueError(f"expected indices in [0, {rows}) in input {i} {ctx.op.inputs[i]!r}, got {flat.tolist()}")
    return flat


def _rows_like(ctx: Any, x: np.ndarray, i: int, n: int, row_shape: tuple[int, ...]) -> np.ndarray:
    if x.size != n * int(np.prod(row_shape)):
        raise ValueError(
            f"expected input {i} {ctx.op.inputs[i]!r} to hold {n} rows of shape {row_shape}, got shape {x.shape}"
        )
    return x.reshape((n, *row_shape))


@register_op(
    "ScatterAssign",
    inputs=3,
    outputs=1,
    enforce_inplace={0: 0},
    inputs_doc=("DATA", "INDICES", "SLICES"),
    outputs_doc=("DATA",),
    doc="DATA[INDICES] = SLICES in place: SLICES holds one row of DATA's shape per index.",
)
def scatter_assign(ctx: Any, data: Any, indices: Any, slices: Any) -> np.ndarray:
    d, s = array(ctx, data, 0), array(ctx, slices, 2)
    if d.ndim == 0:
        raise ValueError(f"expected DATA {ctx.op.inputs[0]!r} of at least 1 dim, got a scalar")
    if s.dtype != d.dtype:
        raise TypeError(f"expected SLICES of DATA's dtype {d.dtype}, got {s.dtype}")
    idx = _indices(ctx, indices, 1, d.shape[0])
    d[idx] = _rows_like(ctx, s, 2, idx.size, d.shape[1:])
    return d


@register_op(
    "SparseMomentumSGDUpdate",
    inputs=5,
    outputs=3,
    allow_inplace={0: 0, 1: 1, 3: 2},
    args=[
        Arg("momentum", float, 0.0, "momentum coefficient mu"),
        Arg("nesterov", bool, False, "Nesterov momentum"),
    ],
    inputs_doc=("grad (rows of indices)", "moment", "lr (1 element)", "param", "indices"),
    outputs_doc=("grad: the step taken", "moment", "param"),
    doc="MomentumSGDUpdate on param[indices] and moment[indices]: step = lr*grad + mu*m (nesterov: "
    "m' = mu*m + lr*grad, step = (1+mu)*m' - mu*m); param[indices] -= step.",
)
def sparse_momentum_sgd_update(ctx: Any, grad: Any, moment: Any, lr: Any, param: Any, indices: Any) -> Any:
    p, m = float_array(ctx, param, 3), float_array(ctx, moment, 1)
    p = p if ctx.op.outputs[2] == ctx.op.inputs[3] else p.copy()
    m = m if ctx.op.outputs[1] == ctx.op.inputs[1] else m.copy()
    if m.shape != p.shape or p.ndim == 0:
        raise ValueError(f"expected moment of param's shape {p.shape}, got {m.shape}")
    rate = array(ctx, lr, 2)
    if rate.size != 1:
        raise ValueError(f"expected a one-element lr, got shape {rate.shape}")
    idx = _indices(ctx, indices, 4, p.shape[0])
    g = _rows_like(ctx, float_array(ctx, grad, 0), 0, idx.size, p.shape[1:])
    lr_, mu = rate.reshape(-1)[0].astype(p.dtype), p.dtype.type(ctx.args["momentum"])
    m_old = m[idx]
    if ctx.args["nesterov"]:
        m_new = mu * m_old + lr_ * g
        step = (1 + mu) * m_new - mu * m_old
    else:
        step = m_new = lr_ * g + mu * m_old
    m[idx] = m_new
    np.subtract.at(p, idx, step)
    return np.asarray(step, dtype=p.dtype).reshape(np.shape(grad)), m, p
