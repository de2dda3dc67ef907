"""Caffe2's ``RowWiseSparseAdam``: sparse Adam with one second moment per parameter row.

For each index i (row ``r = INDICES[i]``, gradient row ``g = GRAD[i]``), with ``t = ITER + 1``::

    mom1[r] = beta1 * mom1[r] + (1 - beta1) * g
    mom2[r] = beta2 * mom2[r] + (1 - beta2) * mean(g ** 2)        # a scalar per row
    param[r] += LR * sqrt(1 - beta2^t) / (1 - beta1^t) * mom1[r] / (sqrt(mom2[r]) + epsilon)

PARAM, MOMENT_1 and MOMENT_2 are updated in place (outputs 0-2 are inputs 0-2).

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace()
    >>> for k, v in {"w": np.zeros((2, 2), np.float32), "m1": np.zeros((2, 2), np.float32),
    ...              "m2": np.zeros(2, np.float32), "i": np.array([1]), "g": np.ones((1, 2), np.float32),
    ...              "lr": np.array([0.1], np.float32), "it": np.array([0])}.items():
    ...     ws.feed(k, v)
    >>> net = an.Net("adam")
    >>> _ = net.RowWiseSparseAdam(["w", "m1", "m2", "i", "g", "lr", "it"], ["w", "m1", "m2"], epsilon=0.0)
    >>> ws.run_net_once(net); ws.fetch("w").round(6)
    array([[0. , 0. ],
           [0.1, 0.1]], dtype=float32)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from asyncnet.core.registry import Arg, register_no_gradient, register_op

__all__: list[str] = []  # the ops are reached through the registry


def _np(x: Any) -> np.ndarray:
    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)


def _check(ctx: Any, w: np.ndarray, m1: np.ndarray, m2: np.ndarray, idx: np.ndarray, g: np.ndarray) -> None:
    if m1.shape != w.shape or m2.shape != w.shape[:1]:
        raise ValueError(f"expected MOMENT_1 {w.shape} and MOMENT_2 {w.shape[:1]}, got {m1.shape} and {m2.shape}")
    if idx.ndim != 1 or idx.dtype.kind not in "iu":
        raise TypeError(f"expected 1-D int INDICES in input 3 {ctx.op.inputs[3]!r}, got {idx.dtype} {idx.shape}")
    if g.shape != (idx.size, *w.shape[1:]):
        raise ValueError(f"expected GRAD of shape {(idx.size, *w.shape[1:])}, got {g.shape}")
    if idx.size and (idx.min() < 0 or idx.max() >= w.shape[0]):
        raise ValueError(f"expected indices in [0, {w.shape[0]}), got [{idx.min()}, {idx.max()}]")


@register_op(
    "RowWiseSparseAdam",
    inputs=7,
    outputs=3,
    enforce_inplace={0: 0, 1: 1, 2: 2},
    args=[
        Arg("beta1", float, 0.9, "the first moment's decay"),
        Arg("beta2", float, 0.999, "the second moment's decay"),
        Arg("epsilon", float, 1e-5, "added to the root of the second moment"),
    ],
    inputs_doc=(
        "PARAM [N, ...]",
        "MOMENT_1 [N, ...]",
        "MOMENT_2 [N]",
        "INDICES [K]",
        "GRAD [K, ...]",
        "LR [1]",
        "ITER [1]",
    ),
    outputs_doc=("PARAM", "MOMENT_1", "MOMENT_2"),
    doc="Sparse Adam on the rows INDICES with one second moment (the mean squared gradient) per row.",
)
def row_wise_sparse_adam(
    ctx: Any, param: Any, mom1: Any, mom2: Any, indices: Any, grad: Any, lr: Any, it: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    w, m1, m2, idx, g = _np(param).copy(), _np(mom1).copy(), _np(mom2).copy(), _np(indices), _np(grad)
    _check(ctx, w, m1, m2, idx, g)
    b1, b2, eps = ctx.args["beta1"], ctx.args["beta2"], ctx.args["epsilon"]
    t = float(_np(it).reshape(-1)[0]) + 1
    rate = float(_np(lr).reshape(-1)[0]) * np.sqrt(1 - b2**t) / (1 - b1**t)
    for i, r in enumerate(idx):
        row = g[i]
        m1[r] = b1 * m1[r] + (1 - b1) * row
        m2[r] = b2 * m2[r] + (1 - b2) * np.mean(np.square(row))
        w[r] = w[r] + rate * m1[r] / (np.sqrt(m2[r]) + eps)
    return w, m1, m2


register_no_gradient("RowWiseSparseAdam")
