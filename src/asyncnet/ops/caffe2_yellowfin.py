"""Caffe2's ``YellowFin`` operator (https://arxiv.org/abs/1706.03471): a momentum-SGD step with
the learning rate and momentum tuned per parameter from moving averages of the gradient, its
squared norm, the curvature range over a window and the distance to the optimum.

Inputs ``param, moment, lr_avg, mu_avg, curv_win, g_avg, g2_avg, scalars_memory, grad, iter``;
outputs the first eight, updated (in place in Caffe2's ``YellowFinOptimizer``).
``scalars_memory`` holds the averages of ``[|g|, |g|^2, log min |g|^2, log max |g|^2, distance]``.
The step uses the ``lr_avg`` and ``mu_avg`` of the previous iteration; the tuning (from the second
iteration on) runs after it, as in Caffe2's kernel.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from asyncnet.core.registry import Arg, register_op
from asyncnet.ops._check import array, float_array

__all__ = ["SCALARS"]

SCALARS = 5  # the length of scalars_memory


def _lr_mu(distance: float, variance: float, h_min: float, h_max: float) -> tuple[float, float]:
    """The learning rate and momentum of one tuning step (the cubic root of YellowFin's SingleStep)."""
    curv_ratio = math.sqrt(h_max / h_min)
    mu_limit = (curv_ratio - 1.0) / (curv_ratio + 1.0)
    p = (distance * h_min) ** 2 / (2.0 * variance)
    w3 = (-math.sqrt(p * p + 4.0 / 27.0 * p * p * p) - p) / 2.0
    w = (1.0 if w3 > 0 else -1.0) * abs(w3) ** (1.0 / 3.0)
    root = w - p / 3.0 / w + 1.0
    mu = max(root * root, mu_limit * mu_limit)
    return (1.0 - math.sqrt(mu)) ** 2 / h_min, mu


def _check_shapes(ctx: Any, param: np.ndarray, vectors: tuple[np.ndarray, ...], lr: Any, mu: Any) -> None:
    for i, v in zip((1, 5, 6, 8), vectors):
        if v.shape != param.shape:
            raise ValueError(f"expected input {i} of the shape of param {param.shape}, got {v.shape}")
    for i, v in ((2, lr), (3, mu)):
        if v.size != 1:
            raise ValueError(f"expected a one-element input {i}, got shape {v.shape}")


@register_op(
    "YellowFin",
    inputs=10,
    outputs=8,
    allow_inplace={i: i for i in range(8)},
    args=[
        Arg("beta", float, 0.999, "coefficient of the moving averages"),
        Arg("curv_win_width", int, 20, "iterations whose log squared gradient norm the curvature window keeps"),
        Arg("epsilon", float, 1e-6, "lower bound of the norms, curvatures and variance"),
        Arg("nesterov", int, 0, "Nesterov momentum step"),
        Arg("zero_debias", int, 1, "divide the moving averages by 1 - beta^iter"),
    ],
    inputs_doc=("param", "moment", "lr", "mu", "curv_win", "g_avg", "g2_avg", "scalars_memory", "grad", "iter"),
    outputs_doc=(
        "output_param",
        "output_moment",
        "output_lr",
        "output_mu",
        "output_curv_win",
        "output_g_avg",
        "output_g2_avg",
        "output_scalars_memory",
    ),
    doc="YellowFin: momentum SGD step with the previous lr/mu, then lr and mu tuned from moving averages.",
)
def yellow_fin(ctx: Any, *inputs: Any) -> tuple[np.ndarray, ...]:
    param, moment, g_avg, g2_avg, grad = (float_array(ctx, inputs[i], i) for i in (0, 1, 5, 6, 8))
    lr_avg, mu_avg = float_array(ctx, inputs[2], 2), float_array(ctx, inputs[3], 3)
    curv_win, memory = float_array(ctx, inputs[4], 4), float_array(ctx, inputs[7], 7)
    _check_shapes(ctx, param, (moment, g_avg, g2_avg, grad), lr_avg, mu_avg)
    a = ctx.args
    width, beta, eps = int(a["curv_win_width"]), float(a["beta"]), float(a["epsilon"])
    if curv_win.size != width or memory.size != SCALARS:
        raise ValueError(
            f"expected curv_win of {width} and scalars_memory of {SCALARS} elements, "
            f"got {curv_win.size} and {memory.size}"
        )
    it = int(array(ctx, inputs[9], 9).reshape(-1)[0])
    lr, mu = float(lr_avg.reshape(-1)[0]), float(mu_avg.reshape(-1)[0])
    new_moment = mu * moment + lr * grad
    new_param = param - (1 + mu) * new_moment + mu * moment if a["nesterov"] else param - new_moment

    debias = 1.0 / (1.0 - beta**it) if a["zero_debias"] else 1.0

    def avg(old: Any, new: Any) -> Any:
        return beta * old + (1.0 - beta) * new

    g = grad.astype(np.float64).reshape(-1)
    new_g_avg = avg(g_avg.astype(np.float64).reshape(-1), g)
    new_g2_avg = avg(g2_avg.astype(np.float64).reshape(-1), g * g)
    g_norm2 = max(eps, float(g @ g))
    g_norm_avg, g_norm2_avg, min_avg, max_avg, distance_avg = (float(v) for v in memory.reshape(-1))
    g_norm2_avg = avg(g_norm2_avg, g_norm2)
    g_norm_avg = avg(g_norm_avg, math.sqrt(g_norm2))
    window = curv_win.astype(np.float64).reshape(-1).copy()
    window[(it - 1) % width] = math.log(g_norm2)
    valid = window[: min(width, it)]
    min_avg, max_avg = avg(min_avg, float(valid.min())), avg(max_avg, float(valid.max()))
    h_min = max(eps, math.exp(min_avg * debias))
    h_max = max(eps, math.exp(max_avg * debias))
    g_deb = new_g_avg * debias
    variance = max(eps, g_norm2_avg * debias - float(g_deb @ g_deb))
    distance_avg = avg(distance_avg, g_norm_avg / g_norm2_avg)
    if it > 1:
        lr_t, mu_t = _lr_mu(distance_avg * debias, variance, h_min, h_max)
        mu, lr = avg(mu, mu_t), avg(lr, lr_t)
    scalars = np.array([g_norm_avg, g_norm2_avg, min_avg, max_avg, distance_avg])
    f32 = np.float32
    return (
        new_param.astype(f32),
        new_moment.astype(f32),
        np.full(lr_avg.shape, lr, f32),
        np.full(mu_avg.shape, mu, f32),
        window.reshape(curv_win.shape).astype(f32),
        new_g_avg.reshape(param.shape).astype(f32),
        new_g2_avg.reshape(param.shape).astype(f32),
        scalars.reshape(memory.shape).astype(f32),
    )
