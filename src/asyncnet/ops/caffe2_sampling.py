"""Caffe2's weighted sampling ops (an index drawn with probability proportional to its weight;
a zero weight is never drawn). The random stream is the op instance's own, seeded from its
``DeviceOption.random_seed`` when there is one (fresh entropy otherwise).

- ``WeightedSample(WEIGHTS [B, N][, VALUES [B, N]])``: one index per row (int32), and the row's
  value at it; empty outputs when B or N is 0.
- ``WeightedMultiSampling(WEIGHTS [N][, SHAPE])``: ``num_samples`` indices (int32) drawn with
  replacement, or as many as SHAPE has elements (in SHAPE's shape); empty when N is 0.
- ``UniqueUniformFill([X][, AVOID])``: distinct ints drawn uniformly from [min, max], none of them
  in AVOID; the shape from ``shape``, or X's shape (X's values with ``input_as_shape=1``).

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


# -- UniqueUniformFill ------------------------------------------------------------------------------

_DENSE_RANGE = 1 << 20  # at most this many candidates are listed; a wider range is drawn by rejection


def unique_draw(rng: np.random.Generator, low: int, high: int, avoid: np.ndarray, n: int) -> np.ndarray:
    """``n`` distinct ints drawn uniformly from [low, high] outside ``avoid`` (int64).

    >>> sorted(unique_draw(np.random.default_rng(0), 1, 4, np.array([2]), 3).tolist())
    [1, 3, 4]
    """
    avoid = np.unique(avoid[(avoid >= low) & (avoid <= high)])
    free = high - low + 1 - len(avoid)
    if n > free:
        raise ValueError(f"cannot draw {n} distinct values from [{low}, {high}] less {len(avoid)} avoided: {free} left")
    if high - low + 1 <= _DENSE_RANGE:
        pool = np.setdiff1d(np.arange(low, high + 1, dtype=np.int64), avoid, assume_unique=True)
        return rng.choice(pool, size=n, replace=False)
    taken = set(avoid.tolist())
    out: list[int] = []
    while len(out) < n:
        for v in rng.integers(low, high + 1, size=2 * (n - len(out)) + 8).tolist():
            if v not in taken and len(out) < n:
                taken.add(v)
                out.append(v)
    return np.array(out, np.int64)


def _fill_shape(ctx: Any, shape_source: Any) -> tuple[int, ...]:
    a = ctx.args
    if shape_source is None:
        return tuple(a["shape"])
    x = np.asarray(shape_source)
    if not a["input_as_shape"]:
        return tuple(x.shape)
    if x.ndim != 1 or x.dtype.kind not in "iu" or (x < 0).any():
        raise ValueError(f"expected a 1-D array of non-negative ints as the shape in input 0, got {x.dtype} {x}")
    return tuple(int(d) for d in x)


@register_op(
    "UniqueUniformFill",
    inputs=(0, 2),
    outputs=1,
    args=[
        Arg("min", int, 0, "the smallest value"),
        Arg("max", int, 0, "the largest value"),
        Arg("dtype", (int, str), "int32", "int32 or int64 (or TensorProto.DataType INT32 = 2, INT64 = 10)"),
        Arg("shape", list, [], "the output shape (without an input)", item_type=int),
        Arg("input_as_shape", bool, False, "input 0 holds the shape as 1-D ints"),
    ],
    inputs_doc=("X (the shape, or its values with input_as_shape=1; optional)", "AVOID (values never drawn)"),
    outputs_doc=("Y: distinct values",),
    doc="Distinct ints drawn uniformly from [min, max], none in AVOID.",
)
def unique_uniform_fill(ctx: Any, *inputs: Any) -> np.ndarray:
    from asyncnet.ops.fill import fill_dtype

    dtype = fill_dtype(ctx.args["dtype"])
    if dtype not in (np.dtype(np.int32), np.dtype(np.int64)):
        raise ValueError(f"expected dtype int32 or int64, got {dtype}")
    low, high = ctx.args["min"], ctx.args["max"]
    if low > high:
        raise ValueError(f"expected min <= max, got [{low}, {high}]")
    shape = _fill_shape(ctx, inputs[0] if inputs else None)
    avoid = np.asarray(inputs[1]).reshape(-1).astype(np.int64) if len(inputs) > 1 else np.zeros(0, np.int64)
    return unique_draw(_rng(ctx), low, high, avoid, int(np.prod(shape))).astype(dtype).reshape(shape)


register_no_gradient("WeightedSample", "WeightedMultiSampling", "UniqueUniformFill")
