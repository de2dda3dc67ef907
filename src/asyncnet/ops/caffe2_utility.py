"""Caffe2 utility operators: Alias (Y is X), Range (numpy.arange of 1 to 3 scalar inputs, the
inputs' dtype), LengthsGather (the segments of ITEMS, cut by LENGTHS, picked by INDICES),
UnsafeCoalesce (the inputs' bytes in one uint8 buffer, each padded to 32 bytes, the outputs
views of it).

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace(); ws.feed("stop", np.array(4, np.int64))
    >>> ws.feed("items", np.arange(6, dtype=np.float32)); ws.feed("lengths", np.array([2, 1, 3], np.int32))
    >>> ws.feed("idx", np.array([2, 0], np.int64))
    >>> net = an.Net("util"); _ = net.Range("stop", "r"); _ = net.LengthsGather(["items", "lengths", "idx"], "g")
    >>> ws.run_net_once(net); ws.fetch("r"), ws.fetch("g")
    (array([0, 1, 2, 3]), array([3., 4., 5., 0., 1.], dtype=float32))
"""

from __future__ import annotations

from typing import Any

import numpy as np

from asyncnet.core.registry import register_no_gradient, register_op
from asyncnet.ops._check import array

__all__: list[str] = []  # the ops are reached through the registry


@register_op("Alias", inputs=1, outputs=1, allow_inplace={0: 0}, doc="Y is X (the same array, not a copy).")
def alias(ctx: Any, x: Any) -> Any:
    return x


@register_op(
    "Range",
    inputs=(1, 3),
    outputs=1,
    inputs_doc=("start or stop", "stop (optional)", "step (optional)"),
    doc="numpy.arange(start, stop, step) of scalar inputs of one dtype; one input is the stop.",
)
def range_op(ctx: Any, *bounds: Any) -> np.ndarray:
    values = [array(ctx, b, i) for i, b in enumerate(bounds)]
    if any(v.size != 1 for v in values):
        raise ValueError(f"expected scalar inputs, got shapes {[tuple(v.shape) for v in values]}")
    dtypes = {v.dtype for v in values}
    if len(dtypes) > 1:
        raise TypeError(f"expected inputs of one dtype, got {sorted(str(d) for d in dtypes)}")
    scalars = [v.reshape(()).item() for v in values]
    if len(scalars) == 3 and scalars[2] == 0:
        raise ValueError("Step size cannot be 0")  # Caffe2's message
    return np.arange(*scalars, dtype=values[0].dtype)


@register_op(
    "LengthsGather",
    inputs=3,
    outputs=1,
    inputs_doc=("ITEMS", "LENGTHS", "INDICES"),
    doc="The segments INDICES of ITEMS (cut along axis 0 by LENGTHS), concatenated.",
)
def lengths_gather(ctx: Any, items: Any, lengths: Any, indices: Any) -> np.ndarray:
    items, lengths, indices = array(ctx, items, 0), array(ctx, lengths, 1), array(ctx, indices, 2)
    lengths = lengths.reshape(-1).astype(np.int64)
    if lengths.sum() != items.shape[0] or (lengths.size and lengths.min() < 0):
        raise ValueError(f"LENGTHS {lengths.tolist()} do not cut the {items.shape[0]} items")
    ends = np.cumsum(lengths)
    idx = indices.reshape(-1).astype(np.int64)
    if idx.size and (idx.min() < 0 or idx.max() >= lengths.size):
        raise IndexError(f"INDICES {idx.tolist()} out of range for {lengths.size} segments")
    rows = [np.arange(ends[i] - lengths[i], ends[i]) for i in idx]
    return items[np.concatenate(rows) if rows else np.zeros(0, np.int64)]


register_no_gradient("Range")


# -- UnsafeCoalesce ---------------------------------------------------------------------------------

COALESCE_ALIGNMENT = 32  # bytes: each input starts at a multiple of this in the buffer


def _validate_coalesce(op: Any) -> None:
    if len(op.outputs) != len(op.inputs) + 1:
        raise ValueError(
            f"expected {len(op.inputs) + 1} outputs (one per input, then the buffer), got {len(op.outputs)}"
        )


@register_op(
    "UnsafeCoalesce",
    inputs=(1, None),
    outputs=(2, None),
    validate=_validate_coalesce,
    allow_inplace=lambda i, o: i == o,
    inputs_doc=("X_0 .. X_n-1 (numpy arrays)",),
    outputs_doc=("Y_0 .. Y_n-1: X_i's values, views of the buffer", "the buffer (uint8)"),
    doc="Copy the inputs into one uint8 buffer (each padded to 32 bytes); the outputs are views of it, so "
    "writing one writes the buffer (Caffe2's shared storage).",
)
def unsafe_coalesce(ctx: Any, *xs: Any) -> tuple[np.ndarray, ...]:
    arrays = []
    for i, x in enumerate(xs):
        if not isinstance(array(ctx, x, i), np.ndarray):
            raise TypeError(f"expected numpy arrays, got a {type(x).__name__} in input {i} {ctx.op.inputs[i]!r}")
        arrays.append(x)
    sizes = [-(-a.nbytes // COALESCE_ALIGNMENT) * COALESCE_ALIGNMENT for a in arrays]
    buffer = np.zeros(sum(sizes), np.uint8)
    views, at = [], 0
    for a, size in zip(arrays, sizes):
        view = buffer[at : at + a.nbytes].view(a.dtype).reshape(a.shape)
        view[...] = a
        views.append(view)
        at += size
    return (*views, buffer)


register_no_gradient("UnsafeCoalesce")
