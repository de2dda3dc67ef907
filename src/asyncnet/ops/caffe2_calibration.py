"""Caffe2's calibration operators: ``Percentile`` (raw values to percentiles by interpolating
in sampled (value, percentile) pairs, one distribution per column) and
``PiecewiseLinearTransform`` (one piecewise linear function per column, or Caffe2's binary form).
Neither has a gradient, as in Caffe2.

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace(); ws.feed("x", np.array([[0.25], [2.0]], np.float32))
    >>> net = an.Net("pw")
    >>> _ = net.PiecewiseLinearTransform("x", "y", bounds=[0.0, 0.5, 1.0], slopes=[1.0, 2.0], intercepts=[0.0, -0.5])
    >>> ws.run_net_once(net); ws.fetch("y")
    array([[0.25],
           [1.5 ]], dtype=float32)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from asyncnet.core.registry import Arg, register_no_gradient, register_op
from asyncnet.ops._check import array, float_array

__all__: list[str] = []  # the ops are reached through the registry


def _np(x: Any) -> np.ndarray:
    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)


# -- Percentile -----------------------------------------------------------------------------------


def _percentile_column(x: np.ndarray, values: np.ndarray, pcts: np.ndarray) -> np.ndarray:
    """Caffe2's rule for one column: a sampled value gives its percentile; above every sample 1,
    below every sample 0; else linear interpolation between the two neighbouring samples."""
    out = np.empty(x.shape, np.float32)
    n = values.size
    at = np.searchsorted(values, x, side="left")
    for k, (v, i) in enumerate(zip(x.tolist(), at.tolist())):
        if i == n:
            out[k] = 1.0
        elif v == values[i]:
            out[k] = pcts[i]
        elif i == 0:
            out[k] = 0.0
        else:
            frac = np.float32(v - values[i - 1]) / np.float32(values[i] - values[i - 1])
            out[k] = pcts[i - 1] + frac * (pcts[i] - pcts[i - 1])
    return out


@register_op(
    "Percentile",
    inputs=3,
    inputs_doc=("original_values (N x D)", "value_to_pct (K x 2, sorted values per distribution)", "lengths (D,)"),
    outputs_doc=("percentile_values (N x D)",),
    doc="The percentile of each value of column j in distribution j (lengths[j] (value, percentile) rows).",
)
def percentile(ctx: Any, x: Any, pairs: Any, lengths: Any) -> np.ndarray:
    x, pairs = float_array(ctx, _np(x), 0), float_array(ctx, _np(pairs), 1)
    lengths = array(ctx, _np(lengths), 2).reshape(-1).astype(np.int64)
    if x.ndim != 2:
        raise ValueError(f"expected a 2-D original_values, got shape {x.shape}")
    if pairs.ndim != 2 or pairs.shape[1] != 2:
        raise ValueError(f"expected value_to_pct of shape (K, 2), got {pairs.shape}")
    if lengths.size != x.shape[1] or int(lengths.sum()) != pairs.shape[0]:
        raise ValueError(
            f"expected {x.shape[1]} lengths summing to the {pairs.shape[0]} rows of value_to_pct, "
            f"got {lengths.tolist()}"
        )
    out = np.empty(x.shape, np.float32)
    start = 0
    for j, n in enumerate(lengths.tolist()):
        values, pcts = pairs[start : start + n, 0], pairs[start : start + n, 1]
        out[:, j] = _percentile_column(x[:, j], values, pcts)
        start += n
    return out.astype(x.dtype, copy=False)


# -- PiecewiseLinearTransform ---------------------------------------------------------------------


def _transform(x: np.ndarray, bounds: np.ndarray, slopes: np.ndarray, intercepts: np.ndarray) -> np.ndarray:
    """One piecewise linear function: clamped to its end values outside [bounds[0], bounds[-1]]."""
    n = slopes.size
    idx = np.clip(np.searchsorted(bounds, x, side="left") - 1, 0, n - 1)
    y = slopes[idx] * x + intercepts[idx]
    y = np.where(x <= bounds[0], slopes[0] * bounds[0] + intercepts[0], y)
    return np.where(x >= bounds[n], slopes[n - 1] * bounds[n] + intercepts[n - 1], y).astype(x.dtype)


def _params(ctx: Any, extra: tuple[Any, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int]:
    a = ctx.args
    given = [len(a["bounds"]) > 0, len(a["slopes"]) > 0, len(a["intercepts"]) > 0]
    if any(given) and not all(given):
        raise ValueError("bounds, slopes, intercepts must be all set or all not set")
    if all(given):
        if extra:
            raise ValueError("expected one input when the functions are given as arguments")
        b, s, i = (np.asarray(a[k], np.float64) for k in ("bounds", "slopes", "intercepts"))
    else:
        if len(extra) != 3:
            raise ValueError("expected the inputs X, bounds, slopes, intercepts (or the three arguments)")
        b, s, i = (float_array(ctx, _np(v), k + 1).reshape(-1).astype(np.float64) for k, v in enumerate(extra))
    if s.size != i.size:
        raise ValueError(f"expected as many slopes as intercepts, got {s.size} and {i.size}")
    groups = b.size - s.size
    if groups <= 0 or s.size % groups:
        raise ValueError(f"{b.size} bounds and {s.size} slopes do not make groups of n + 1 bounds and n slopes")
    pieces = s.size // groups
    b = b.reshape(groups, pieces + 1)
    if (np.diff(b, axis=1) < 0).any():
        raise ValueError("bounds must be sorted for each group")
    return b, s.reshape(groups, pieces), i.reshape(groups, pieces), groups, pieces


@register_op(
    "PiecewiseLinearTransform",
    inputs=(1, 4),
    args=[
        Arg("bounds", list, [], "n + 1 sorted bounds per group", item_type=(float, int)),
        Arg("slopes", list, [], "n slopes per group", item_type=(float, int)),
        Arg("intercepts", list, [], "n intercepts per group", item_type=(float, int)),
        Arg("binary", bool, False, "one function on column 1 (or the only column); column 0 = 1 - column 1"),
        Arg("pieces", int, 0, "accepted: the number of pieces follows from the bounds"),
    ],
    inputs_doc=("X (N x M)", "bounds", "slopes", "intercepts (the functions as inputs)"),
    doc="Column j of X through group j's piecewise linear function (clamped at the end bounds).",
)
def piecewise_linear_transform(ctx: Any, x: Any, *extra: Any) -> np.ndarray:
    x = float_array(ctx, _np(x), 0)
    b, s, i, groups, _ = _params(ctx, extra)
    if ctx.args["binary"]:
        if groups != 1 or x.ndim not in (1, 2) or (x.ndim == 2 and x.shape[1] not in (1, 2)):
            raise ValueError(f"binary: expected one group and an N x 1 or N x 2 input, got {groups}, {x.shape}")
        if x.ndim == 1 or x.shape[1] == 1:
            return _transform(x, b[0], s[0], i[0])
        y1 = _transform(x[:, 1], b[0], s[0], i[0])
        return np.stack([1 - y1, y1], axis=1).astype(x.dtype)
    if x.ndim != 2 or x.shape[1] != groups:
        raise ValueError(f"expected X of shape (N, {groups}), one column per group, got {x.shape}")
    return np.stack([_transform(x[:, j], b[j], s[j], i[j]) for j in range(groups)], axis=1).reshape(x.shape)


register_no_gradient("Percentile", "PiecewiseLinearTransform")
