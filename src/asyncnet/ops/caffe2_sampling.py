"""Caffe2's weighted sampling ops (an index drawn with probability proportional to its weight;
a zero weight is never drawn). The random stream is the op instance's own, seeded from its
``DeviceOption.random_seed`` when there is one (fresh entropy otherwise).

- ``WeightedSample(WEIGHTS [B, N][, VALUES [B, N]])``: one index per row (int32), and the row's
  value at it; empty outputs when B or N is 0.
- ``WeightedMultiSampling(WEIGHTS [N][, SHAPE])``: ``num_samples`` indices (int32) drawn with
  replacement, or as many as SHAPE has elements (in SHAPE's shape); empty when N is 0.

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace(); ws.feed("w", np.array([[0.0, 0.0, 2.0], [1.0, 0.0, 0.0]], np.float32))
    >>> net = an.Net("s"); _ = net.WeightedSample("w", "i")
    >>> ws.run_net_once(net); ws.fetch("i")
    array([2, 0], dtype=int32)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from asyncnet.core.registry import Arg, register_no_gradient, register_op

__all__: list[str] = []  # the ops are reached through the registry

_STREAM = "_sampling_stream"  # key in the op instance's own args dict holding its generator


def _np(x: Any) -> np.ndarray:
    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)


def _rng(ctx: Any) -> np.random.Generator:
    if ctx.device.random_seed is None:
        return np.random.default_rng()
    stream = ctx.args.get(_STREAM)
    if stream is None:
        stream = ctx.args[_STREAM] = np.random.default_rng(ctx.device.random_seed)
    return stream


def _draw(rng: np.random.Generator, weights: np.ndarray, n: int) -> np.ndarray:
    """``n`` indices of ``weights`` (1-D, non-negative, positive sum) drawn with replacement."""
    cum = np.cumsum(weights.astype(np.float64))
    r = rng.uniform(0.0, cum[-1], n)
    return np.minimum(np.searchsorted(cum, r, side="right"), weights.size - 1)


def _weights(ctx: Any, w: Any, ndim: int) -> np.ndarray:
    w = _np(w)
    if w.ndim != ndim or w.dtype.kind != "f":
        raise ValueError(f"expected {ndim}-D float weights in input 0 {ctx.op.inputs[0]!r}, got {w.dtype} {w.shape}")
    if w.size and (w.min() < 0 or np.any(w.reshape(-1, w.shape[-1]).sum(axis=-1) <= 0)):
        raise ValueError(f"expected non-negative weights with a positive sum in every row of {ctx.op.inputs[0]!r}")
    return w


@register_op(
    "WeightedSample",
    inputs=(1, 2),
    outputs=(1, 2),
    inputs_doc=("WEIGHTS [B, N]", "VALUES [B, N] (optional)"),
    outputs_doc=("INDICES [B] int32", "VALUES_AT [B] (with VALUES)"),
    doc="Draw one index per row with probability proportional to its weight (and the value there).",
)
def weighted_sample(ctx: Any, weights: Any, *values: Any) -> Any:
    w = _weights(ctx, weights, 2)
    if len(values) != len(ctx.op.outputs) - 1:
        raise ValueError("expected a VALUES input exactly when there is a second output")
    if w.size == 0:
        idx = np.zeros(0, np.int32)
        return (idx, np.zeros(0, np.float32)) if values else idx
    rng = _rng(ctx)
    idx = np.array([_draw(rng, row, 1)[0] for row in w], np.int32)
    if not values:
        return idx
    v = _np(values[0])
    if v.shape != w.shape:
        raise ValueError(f"expected VALUES of the weights' shape {w.shape}, got {v.shape}")
    return idx, v[np.arange(w.shape[0]), idx]


@register_op(
    "WeightedMultiSampling",
    inputs=(1, 2),
    args=[Arg("num_samples", int, 0, "how many indices (without a SHAPE input)")],
    inputs_doc=("WEIGHTS [N]", "SHAPE (optional: the output takes its shape)"),
    outputs_doc=("INDICES int32",),
    doc="Draw indices with replacement, each with probability proportional to its weight.",
)
def weighted_multi_sampling(ctx: Any, weights: Any, *shape: Any) -> np.ndarray:
    w = _weights(ctx, weights, 1)
    out_shape = _np(shape[0]).shape if shape else (ctx.args["num_samples"],)
    if w.size == 0:
        return np.zeros(0, np.int32)
    n = int(np.prod(out_shape))
    return _draw(_rng(ctx), w, n).astype(np.int32).reshape(out_shape)


register_no_gradient("WeightedSample", "WeightedMultiSampling")
