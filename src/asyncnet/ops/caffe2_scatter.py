"""Caffe2's ScatterAssign (DATA[INDICES] = SLICES, in place), SparseMomentumSGDUpdate
(MomentumSGDUpdate on the rows of the param and moment named by indices) and SparseAdam (Adam on
those rows).

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

__all__ = ["scatter_assign", "sparse_adam", "sparse_momentum_sgd_update"]


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


@register_op(
    "SparseAdam",
    inputs=7,
    outputs=(3, 4),
    enforce_inplace={0: 0, 1: 1, 2: 2},
    args=[
        Arg("beta1", float, 0.9),
        Arg("beta2", float, 0.999),
        Arg("epsilon", float, 1e-5),
        Arg("enableRAdam", bool, False, "RAdam's rectified step (Caffe2's SparseAdam option)"),
    ],
    inputs_doc=("param", "moment1", "moment2", "indices", "grad (rows of indices)", "lr (1 element)", "iter (int)"),
    outputs_doc=("param", "moment1", "moment2", "effective grad (optional, grad's shape)"),
    doc="Caffe2's SparseAdam: Adam (t = iter + 1) on param[idx], moment1[idx], moment2[idx] for each "
    "idx of indices in order (a repeated index steps twice, from the first step's result): m1 = b1 m1 + "
    "(1-b1) g; m2 = b2 m2 + (1-b2) g^2; ng = sqrt(1-b2^t)/(1-b1^t) * m1/(sqrt(m2) + eps); param += lr * ng "
    "(Caffe2 feeds a negative lr). In place, as Caffe2 enforced.",
)
def sparse_adam(ctx: Any, param: Any, m1: Any, m2: Any, indices: Any, grad: Any, lr: Any, it: Any) -> Any:
    p, a1, a2 = float_array(ctx, param, 0), float_array(ctx, m1, 1), float_array(ctx, m2, 2)
    if a1.shape != p.shape or a2.shape != p.shape or p.ndim == 0:
        raise ValueError(f"expected moments of param's shape {p.shape}, got {a1.shape} and {a2.shape}")
    rate = array(ctx, lr, 5)
    if rate.size != 1:
        raise ValueError(f"expected a one-element lr, got shape {rate.shape}")
    t = int(array(ctx, it, 6).reshape(-1)[0]) + 1
    idx = _indices(ctx, indices, 3, p.shape[0])
    g = _rows_like(ctx, float_array(ctx, grad, 4), 4, idx.size, p.shape[1:])
    a = ctx.args
    b1, b2, eps = p.dtype.type(a["beta1"]), p.dtype.type(a["beta2"]), p.dtype.type(a["epsilon"])
    factor = p.dtype.type(_adam_scale(a["beta1"], a["beta2"], t, a["enableRAdam"]))
    plain, rate_ = _plain_momentum(a, t), rate.reshape(-1)[0].astype(p.dtype)
    steps = np.empty_like(g) if len(ctx.op.outputs) == 4 else None
    rounds = [idx] if np.unique(idx).size == idx.size else [idx[k : k + 1] for k in range(idx.size)]
    start = 0
    for rows in rounds:  # one vectorized round when no index repeats, else Caffe2's order, one by one
        gr = g[start : start + rows.size]
        n1 = a1[rows] * b1 + gr * (1 - b1)
        n2 = a2[rows] * b2 + gr * gr * (1 - b2)
        a1[rows], a2[rows] = n1, n2
        step = factor * (n1 if plain else n1 / (np.sqrt(n2) + eps))
        p[rows] += rate_ * step
        if steps is not None:
            steps[start : start + rows.size] = step
        start += rows.size
    return (p, a1, a2) if steps is None else (p, a1, a2, steps.reshape(np.shape(grad)))


def _rho(beta2: float, t: int) -> tuple[float, float]:
    rho_inf = 2.0 / (1.0 - beta2) - 1.0
    return rho_inf, rho_inf - 2.0 * t * beta2**t / (1.0 - beta2**t)


def _plain_momentum(args: Any, t: int) -> bool:
    """RAdam's early steps (rho_t < 5): the step is the bias-corrected first moment alone."""
    return bool(args["enableRAdam"]) and _rho(args["beta2"], t)[1] < 5.0


def _adam_scale(beta1: float, beta2: float, t: int, radam: bool) -> float:
    """The factor of m1/(sqrt(m2) + eps) in Caffe2's SparseAdam (of m1 alone in RAdam's early steps)."""
    correction = np.sqrt(1.0 - beta2**t) / (1.0 - beta1**t)
    if not radam:
        return float(correction)
    rho_inf, rho_t = _rho(beta2, t)
    if rho_t < 5.0:
        return float(1.0 / (1.0 - beta1**t))
    r_correction = np.sqrt(rho_inf / ((rho_inf - 4.0) * (rho_inf - 2.0)))
    return float(np.sqrt((rho_t - 4.0) * (rho_t - 2.0) / rho_t) * r_correction * correction)
