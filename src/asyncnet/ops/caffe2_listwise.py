"""Caffe2's listwise learning-to-rank loss ``LambdaRankNdcg`` (with ``LambdaRankNdcgGradient``).

For scores y and relevances r of n items: gains g = 2^r, discounts 1 / log2(rank + 1) (rank 1:
the largest value), idcg = sum of g times the discount of the ideal order (by r). Each ordered
pair (i, j) of items weighs w = |(g_i - g_j)(D_i - D_j)| (D: the discounts of the order by y)
and adds w * -log(sigmoid(s)) / idcg to the loss, s being y_i - y_j when r_i > r_j, else
y_j - y_i. The op also outputs dY, item i's sum over j of w * ([r_i <= r_j] - sigmoid(y_j - y_i))
/ idcg; the gradient op scales it by dLoss.

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace(); ws.feed("y", np.array([0.0, 1.0], np.float32)); ws.feed("r", np.array([1.0, 0.0], np.float32))
    >>> net = an.Net("l2r"); _ = net.LambdaRankNdcg(["y", "r"], ["loss", "dy"])
    >>> ws.run_net_once(net); round(float(ws.fetch("loss")), 4)
    0.3685
"""

from __future__ import annotations

from typing import Any

import numpy as np

from asyncnet.core.defs import OperatorDef
from asyncnet.core.registry import register_gradient, register_op
from asyncnet.ops._check import float_array

__all__ = ["lambda_rank_ndcg"]


def _discounts(values: np.ndarray) -> np.ndarray:
    """1 / log2(rank + 1) of each item, rank 1 being the largest value (ties: the later item first)."""
    n = len(values)
    out = np.empty(n)
    out[np.argsort(values, kind="stable")] = 1.0 / np.log2(np.arange(n, 0, -1) + 1.0)
    return out


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def lambda_rank_ndcg(y: np.ndarray, r: np.ndarray) -> tuple[float, np.ndarray]:
    """(loss, dY) of scores ``y`` against relevances ``r`` (see the module's docstring)."""
    y64, r64 = y.astype(np.float64), r.astype(np.float64)
    gain = np.exp2(r64)
    idcg = float(gain @ _discounts(r64))
    if len(y) == 0 or idcg == 0.0:
        return 0.0, np.zeros(len(y))
    d = _discounts(y64)
    weight = np.abs(np.subtract.outer(gain, gain) * np.subtract.outer(d, d))  # zero on the diagonal
    above = np.subtract.outer(r64, r64) > 0  # r_i > r_j
    diff = np.subtract.outer(y64, y64)  # y_i - y_j
    margin = np.where(above, diff, -diff)
    loss = float((weight * np.logaddexp(0.0, -margin)).sum() / idcg)
    dy = (weight * ((~above).astype(np.float64) - _sigmoid(-diff))).sum(axis=1) / idcg
    return loss, dy


def _vector(ctx: Any, x: Any, i: int) -> np.ndarray:
    x = float_array(ctx, np.asarray(x), i)
    if x.ndim != 1:
        raise ValueError(f"expected a 1-D input {i} {ctx.op.inputs[i]!r}, got shape {x.shape}")
    return x


@register_op(
    "LambdaRankNdcg",
    inputs=2,
    outputs=2,
    inputs_doc=("Y (scores, 1-D)", "R (relevances, 1-D)"),
    outputs_doc=("loss (scalar)", "dY (the loss's gradient as the op defines it)"),
    doc="LambdaRank's NDCG-weighted pairwise logistic loss of the scores Y against the relevances R.",
)
def lambda_rank_ndcg_op(ctx: Any, y: Any, r: Any) -> tuple[np.ndarray, np.ndarray]:
    y, r = _vector(ctx, y, 0), _vector(ctx, r, 1)
    if y.shape != r.shape:
        raise ValueError(f"expected Y and R of one length, got {y.shape} and {r.shape}")
    loss, dy = lambda_rank_ndcg(y, r)
    return np.array(loss, y.dtype), dy.astype(y.dtype)


@register_op(
    "LambdaRankNdcgGradient",
    inputs=3,
    outputs=1,
    inputs_doc=("Y", "dY (the forward op's)", "dLoss (one element)"),
    outputs_doc=("dY scaled by dLoss",),
    doc="Gradient of LambdaRankNdcg: its dY output times dLoss.",
)
def lambda_rank_ndcg_gradient(ctx: Any, y: Any, dy: Any, dloss: Any) -> np.ndarray:
    y, dy = _vector(ctx, y, 0), _vector(ctx, dy, 1)
    dloss = float_array(ctx, np.asarray(dloss), 2)
    if dy.shape != y.shape or dloss.size != 1:
        raise ValueError(f"expected dY of Y's shape {y.shape} and one dLoss, got {dy.shape} and {dloss.shape}")
    return (dy * dloss.reshape(())).astype(y.dtype)


@register_gradient("LambdaRankNdcg")
def _lambda_rank_grad(op: OperatorDef, gout: list[Any]) -> tuple[list[OperatorDef], list[Any]]:
    if gout[0] is None:
        return [], [None, None]
    return [OperatorDef("LambdaRankNdcgGradient", [op.inputs[0], op.outputs[1], gout[0]], ["#dy"])], ["#dy", None]
