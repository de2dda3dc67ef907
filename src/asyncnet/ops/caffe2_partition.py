"""Caffe2's sharding by key: ``Partition``, ``LengthsPartition`` and their inverse ``GatherByKey``.

``Partition(KEYS, X_1, ..., X_m)`` with ``P * (m + 1)`` outputs sends entry i of KEYS (int32 or
int64, any shape) and the matching rows of every X_j (whose shapes start with KEYS's) to
partition ``KEYS[i] mod P`` (a non-negative remainder), keeping their order; the outputs come
partition by partition: ``KEYS_p0, X_1_p0, ..., KEYS_p1, ...``. With ``pack_first_input`` the
keys are stored as ``(key - shard) / P``. ``LengthsPartition(LENGTHS, KEYS, X_1, ...)`` also
splits LENGTHS: each partition's lengths count its keys in every segment (1-D KEYS only).
``GatherByKey(KEYS, PART_0, ..., PART_{P-1})`` puts 1-D-keyed partitions back in KEYS's order.

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace(); ws.feed("k", np.array([3, 4, -1, 6], np.int32))
    >>> net = an.Net("p"); _ = net.Partition(["k"], ["k0", "k1"])
    >>> ws.run_net_once(net); ws.fetch("k0"), ws.fetch("k1")
    (array([4, 6], dtype=int32), array([ 3, -1], dtype=int32))
"""

from __future__ import annotations

from typing import Any

import numpy as np

from asyncnet.core.registry import Arg, register_no_gradient, register_op

__all__: list[str] = []  # the ops are reached through the registry


def _np(x: Any) -> np.ndarray:
    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)


def _keys(ctx: Any, x: Any, i: int) -> np.ndarray:
    x = _np(x)
    if x.dtype not in (np.int32, np.int64):
        raise TypeError(f"expected int32 or int64 keys in input {i} {ctx.op.inputs[i]!r}, got {x.dtype}")
    return x


def _partitions(ctx: Any, n_in: int) -> int:
    n_out = len(ctx.op.outputs)
    if n_out % n_in or n_out == 0:
        raise ValueError(f"expected a multiple of the {n_in} inputs as outputs (one set per partition), got {n_out}")
    return n_out // n_in


def _split(ctx: Any, keys: np.ndarray, extras: list[np.ndarray], parts: int, first: int) -> list[list[np.ndarray]]:
    """Per partition: [keys_p, extra_1_p, ...]."""
    shards = np.mod(keys.reshape(-1), parts)
    packed = ((keys.reshape(-1) - shards) // parts).astype(keys.dtype) if ctx.args["pack_first_input"] else None
    rows = []
    for j, x in enumerate(extras):
        if x.shape[: keys.ndim] != keys.shape:
            raise ValueError(
                f"expected input {first + 1 + j} {ctx.op.inputs[first + 1 + j]!r} to start with the keys' shape "
                f"{keys.shape}, got {x.shape}"
            )
        rows.append(x.reshape(-1, *x.shape[keys.ndim :]))
    out = []
    for p in range(parts):
        pick = shards == p
        head = (packed if packed is not None else keys.reshape(-1))[pick]
        out.append([head] + [r[pick] for r in rows])
    return out


_PACK = [Arg("pack_first_input", int, 0, "store each key as (key - shard) / partitions")]


@register_op(
    "Partition",
    inputs=(1, None),
    outputs=(1, None),
    args=_PACK,
    inputs_doc=("KEYS (int32/int64)", "X_1, ... (shapes starting with KEYS's)"),
    outputs_doc=("per partition p: KEYS_p, X_1_p, ...",),
    doc="Shard KEYS and the rows of the other inputs by KEYS mod the number of partitions.",
)
def partition(ctx: Any, keys: Any, *extras: Any) -> Any:
    keys = _keys(ctx, keys, 0)
    parts = _partitions(ctx, 1 + len(extras))
    out = tuple(a for group in _split(ctx, keys, [_np(x) for x in extras], parts, 0) for a in group)
    return out[0] if len(out) == 1 else out  # one output: the array itself


@register_op(
    "LengthsPartition",
    inputs=(2, None),
    outputs=(2, None),
    args=_PACK,
    inputs_doc=("LENGTHS (int32)", "KEYS (1-D int32/int64)", "X_1, ... (rows matching KEYS)"),
    outputs_doc=("per partition p: LENGTHS_p, KEYS_p, X_1_p, ...",),
    doc="Partition, also splitting LENGTHS: each partition's count of keys in every segment.",
)
def lengths_partition(ctx: Any, lengths: Any, keys: Any, *extras: Any) -> tuple[np.ndarray, ...]:
    lens, keys = _np(lengths), _keys(ctx, keys, 1)
    if keys.ndim != 1:
        raise ValueError(f"expected 1-D keys in input 1 {ctx.op.inputs[1]!r}, got shape {keys.shape}")
    if lens.ndim != 1 or lens.dtype.kind not in "iu" or int(lens.sum()) != keys.size or (lens.size and lens.min() < 0):
        raise ValueError(
            f"expected 1-D non-negative int lengths summing to {keys.size} (the keys), got {lens.tolist()}"
        )
    parts = _partitions(ctx, 2 + len(extras))
    if parts == 1:
        return (lens.copy(), keys.copy(), *(_np(x).copy() for x in extras))
    groups = _split(ctx, keys, [_np(x) for x in extras], parts, 1)
    seg = np.repeat(np.arange(lens.size), lens)
    shards = np.mod(keys, parts)
    out: list[np.ndarray] = []
    for p, group in enumerate(groups):
        out.append(np.bincount(seg[shards == p], minlength=lens.size).astype(np.int32))
        out.extend(group)
    return tuple(out)


@register_op(
    "GatherByKey",
    inputs=(2, None),
    inputs_doc=("KEYS (1-D int32/int64)", "PART_0, ..., PART_{P-1} (Partition's outputs for one input)"),
    outputs_doc=("OUT: the partitions' rows back in KEYS's order",),
    doc="The inverse of Partition for one input: row i of OUT is the next row of partition KEYS[i] mod P.",
)
def gather_by_key(ctx: Any, keys: Any, *parts: Any) -> np.ndarray:
    keys = _keys(ctx, keys, 0)
    if keys.ndim != 1:
        raise ValueError(f"expected 1-D keys in input 0 {ctx.op.inputs[0]!r}, got shape {keys.shape}")
    arrays = [_np(p) for p in parts]
    shards = np.mod(keys, len(arrays))
    suffix = arrays[0].shape[1:]
    out = np.empty((keys.size, *suffix), arrays[0].dtype)
    for p, a in enumerate(arrays):
        pick = shards == p
        if a.ndim < 1 or a.shape[1:] != suffix or a.dtype != arrays[0].dtype or a.shape[0] != int(pick.sum()):
            raise ValueError(
                f"expected {int(pick.sum())} rows of shape {suffix} ({arrays[0].dtype}) in partition {p} "
                f"{ctx.op.inputs[p + 1]!r}, got {a.dtype} {a.shape}"
            )
        out[pick] = a
    return out


register_no_gradient("Partition", "LengthsPartition", "GatherByKey")
