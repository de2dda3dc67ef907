"""Caffe2's stat registry (caffe2/core/stats.h, caffe2/operators/stats_ops.cc): named int64
counters that ops bump and a net exports.

One process-wide registry (:data:`DEFAULT`) holds the counters ops publish: ``AtomicIter``
adds 1 to ``atomic_iter/stats/<its iter blob>/num_iter`` at every run, as Caffe2's did.
``StatRegistryCreate`` makes a private registry (a blob); ``StatRegistryUpdate`` adds values to
keys; ``StatRegistryExport`` gives (keys, values, timestamps in ns) and, unless ``reset=0``,
sets the exported values back to 0.

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace()
    >>> net = an.Net("stats")
    >>> _ = net.StatRegistryCreate([], "reg")
    >>> ws.feed("k", np.array(["a", "b"], object)); ws.feed("v", np.array([3, 4], np.int64))
    >>> _ = net.StatRegistryUpdate(["k", "v", "reg"], [])
    >>> _ = net.StatRegistryExport(["reg"], ["keys", "values", "ts"])
    >>> ws.run_net_once(net)
    >>> list(ws.fetch("keys")), ws.fetch("values").tolist()
    (['a', 'b'], [3, 4])
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np

from asyncnet.core.registry import Arg, register_no_gradient, register_op
from asyncnet.ops._check import array

__all__ = ["DEFAULT", "StatRegistry", "atomic_iter_key"]


class StatRegistry:
    """Thread-safe int64 counters by key, with the time each was last changed (ns since the epoch).

    >>> r = StatRegistry(); r.add("x/num", 2); r.add("x/num", 1)
    >>> [(k, v) for k, v, _ in r.publish(reset=True)], [v for _, v, _ in r.publish()]
    ([('x/num', 3)], [0])
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, int] = {}
        self._stamps: dict[str, int] = {}

    def add(self, key: str, value: int) -> None:
        """Add ``value`` to counter ``key`` (created at 0)."""
        with self._lock:
            self._values[key] = self._values.get(key, 0) + int(value)
            self._stamps[key] = time.time_ns()

    def publish(self, reset: bool = False) -> list[tuple[str, int, int]]:
        """(key, value, timestamp) of every counter, sorted by key; ``reset`` sets each to 0."""
        with self._lock:
            out = sorted((k, v, self._stamps[k]) for k, v in self._values.items())
            if reset:
                self._values = dict.fromkeys(self._values, 0)
        return out


DEFAULT = StatRegistry()


def atomic_iter_key(iter_blob: str) -> str:
    """The key under which ``AtomicIter`` counts its runs (Caffe2's ``atomic_iter/stats/<iter>/num_iter``)."""
    return f"atomic_iter/stats/{iter_blob}/num_iter"


def _registry(ctx: Any, arrays: tuple[Any, ...], i: int) -> StatRegistry:
    if len(arrays) <= i:
        return DEFAULT
    if not isinstance(arrays[i], StatRegistry):
        raise TypeError(
            f"expected a stat registry (made by StatRegistryCreate) in input {i} {ctx.op.inputs[i]!r}, "
            f"got {type(arrays[i]).__name__}"
        )
    return arrays[i]


@register_op(
    "StatRegistryCreate",
    inputs=0,
    outputs=1,
    outputs_doc=("handle (a stat registry)",),
    doc="A new, empty stat registry (Caffe2's StatRegistryCreate).",
)
def stat_registry_create(ctx: Any) -> StatRegistry:
    return StatRegistry()


@register_op(
    "StatRegistryUpdate",
    inputs=(2, 3),
    outputs=0,
    inputs_doc=("keys [K] strings", "values [K] int64", "handle (optional; default: the process's registry)"),
    doc="Add each value to the counter of its key (Caffe2's StatRegistryUpdate).",
)
def stat_registry_update(ctx: Any, *arrays: Any) -> None:
    keys, values = np.asarray(array(ctx, arrays[0], 0)), np.asarray(array(ctx, arrays[1], 1))
    if keys.size != values.size or values.dtype.kind not in "iu":
        raise ValueError(
            f"expected as many integer values as keys, got {keys.size} keys and {values.size} values of dtype {values.dtype}"
        )
    reg = _registry(ctx, arrays, 2)
    for k, v in zip(keys.reshape(-1), values.reshape(-1)):
        reg.add(k.decode() if isinstance(k, bytes) else str(k), int(v))


@register_op(
    "StatRegistryExport",
    inputs=(0, 1),
    outputs=3,
    args=[Arg("reset", bool, True, "set every exported counter back to 0")],
    inputs_doc=("handle (optional; default: the process's registry, where AtomicIter counts)",),
    outputs_doc=("keys [K] strings", "values [K] int64", "timestamps [K] int64 (ns since the epoch)"),
    doc="Every counter of a stat registry as (keys, values, timestamps), sorted by key; reset=1 (the "
    "default) zeroes them (Caffe2's StatRegistryExport).",
)
def stat_registry_export(ctx: Any, *arrays: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    data = _registry(ctx, arrays, 0).publish(ctx.args["reset"])
    keys = np.empty(len(data), object)
    keys[:] = [k for k, _, _ in data]
    return keys, np.array([v for _, v, _ in data], np.int64), np.array([t for _, _, t in data], np.int64)


register_no_gradient("StatRegistryCreate", "StatRegistryUpdate", "StatRegistryExport")
