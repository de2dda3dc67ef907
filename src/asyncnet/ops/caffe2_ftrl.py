"""Caffe2's Ftrl and SparseFtrl: FTRL-proximal updates of a parameter and its accumulators
``nz`` (shape ``param.shape + [2]``: n, the sum of squared gradients, then z), in place. The
learning rate alpha is an argument, or a one-element last input.

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace(); ws.feed("w", np.zeros(2, np.float32))
    >>> ws.feed("nz", np.zeros((2, 2), np.float32)); ws.feed("g", np.array([1.0, -0.5], np.float32))
    >>> net = an.Net("ftrl"); _ = net.Ftrl(["w", "nz", "g"], ["w", "nz"], alpha=0.1, beta=1.0, lambda1=0.1)
    >>> ws.run_net_once(net); ws.fetch("w").round(4), ws.fetch("nz")[:, 0]
    (array([-0.045 ,  0.0267], dtype=float32), array([1.  , 0.25], dtype=float32))
"""

from __future__ import annotations

from typing import Any

import numpy as np

from asyncnet.core.registry import Arg, register_op
from asyncnet.ops._check import array, float_array

__all__ = ["ftrl", "ftrl_step", "sparse_ftrl"]

_ARGS = [
    Arg("alpha", float, 0.005, "the learning rate (unless given as the last input)"),
    Arg("beta", float, 1.0, "added to sqrt(n) in the per-coordinate rate"),
    Arg("lambda1", float, 0.001, "L1 strength: w = 0 where |z| <= lambda1"),
    Arg("lambda2", float, 0.001, "L2 strength"),
]


def ftrl_step(
    w: np.ndarray, nz: np.ndarray, g: np.ndarray, alpha: float, beta: float, l1: float, l2: float
) -> tuple[np.ndarray, np.ndarray]:
    """(new w, new nz) of one FTRL-proximal step, computed in w's dtype.

    sigma = (sqrt(n + g^2) - sqrt(n)) / alpha; z += g - sigma w; n += g^2;
    w = (sign(z) l1 - z) / ((beta + sqrt(n)) / alpha + l2), and 0 where |z| <= l1.
    """
    n, z = nz[..., 0], nz[..., 1]
    g2 = g * g
    sigma = (np.sqrt(n + g2) - np.sqrt(n)) / alpha
    z = z + g - sigma * w
    n = n + g2
    w_new = (np.sign(z) * l1 - z) / ((beta + np.sqrt(n)) / alpha + l2)
    w_new = np.where(np.abs(z) <= l1, 0, w_new).astype(w.dtype)
    return w_new, np.stack([n, z], axis=-1).astype(nz.dtype)


def _alpha(ctx: Any, rest: tuple[Any, ...], i: int) -> float:
    if not rest:
        return ctx.args["alpha"]
    a = array(ctx, rest[0], i)
    if a.size != 1:
        raise ValueError(f"expected a one-element alpha in input {i} {ctx.op.inputs[i]!r}, got shape {a.shape}")
    return float(a.reshape(-1)[0])


def _state(ctx: Any, var: Any, nz: Any) -> tuple[np.ndarray, np.ndarray]:
    w, acc = float_array(ctx, var, 0), float_array(ctx, nz, 1)
    if acc.shape != (*w.shape, 2):
        raise ValueError(f"expected nz of shape {(*w.shape, 2)} (param {w.shape} + [2]), got {acc.shape}")
    return w, acc


def _hyper(ctx: Any) -> tuple[float, float, float]:
    return ctx.args["beta"], ctx.args["lambda1"], ctx.args["lambda2"]


@register_op(
    "Ftrl",
    inputs=(3, 4),
    outputs=2,
    allow_inplace={0: 0, 1: 1},
    args=_ARGS,
    inputs_doc=("var", "nz (var's shape + [2])", "grad", "alpha (optional, 1 element)"),
    outputs_doc=("var", "nz"),
    doc="FTRL-proximal: sigma = (sqrt(n + g^2) - sqrt(n)) / alpha; z += g - sigma w; n += g^2; "
    "w = (sign(z) lambda1 - z) / ((beta + sqrt(n)) / alpha + lambda2), 0 where |z| <= lambda1.",
)
def ftrl(ctx: Any, var: Any, nz: Any, grad: Any, *rest: Any) -> tuple[np.ndarray, np.ndarray]:
    w, acc = _state(ctx, var, nz)
    g = float_array(ctx, grad, 2)
    if g.shape != w.shape:
        raise ValueError(f"expected grad of var's shape {w.shape}, got {g.shape}")
    return ftrl_step(w, acc, g, _alpha(ctx, rest, 3), *_hyper(ctx))


@register_op(
    "SparseFtrl",
    inputs=(4, 5),
    outputs=2,
    enforce_inplace={0: 0, 1: 1},
    args=_ARGS,
    inputs_doc=("var", "nz", "indices", "grad (one row per index)", "alpha (optional, 1 element)"),
    outputs_doc=("var", "nz"),
    doc="Ftrl on the rows of var and nz named by indices, in place.",
)
def sparse_ftrl(ctx: Any, var: Any, nz: Any, indices: Any, grad: Any, *rest: Any) -> tuple[np.ndarray, np.ndarray]:
    w, acc = _state(ctx, var, nz)
    idx = array(ctx, indices, 2)
    if idx.dtype.kind not in "iu":
        raise TypeError(f"expected integer indices, got dtype {idx.dtype}")
    idx = idx.reshape(-1).astype(np.int64)
    if w.ndim == 0 or (idx.size and (idx.min() < 0 or idx.max() >= w.shape[0])):
        raise ValueError(f"expected indices in [0, {w.shape[0] if w.ndim else 0}), got {idx.tolist()}")
    g = float_array(ctx, grad, 3)
    if g.size != idx.size * int(np.prod(w.shape[1:])):
        raise ValueError(f"expected grad of {idx.size} rows of shape {w.shape[1:]}, got {g.shape}")
    g = g.reshape((idx.size, *w.shape[1:]))
    alpha, hyper = _alpha(ctx, rest, 4), _hyper(ctx)
    for k, row in enumerate(idx.tolist()):  # in order, so a repeated index sees the earlier update
        w[row], acc[row] = ftrl_step(w[row], acc[row], g[k], alpha, *hyper)
    return w, acc
