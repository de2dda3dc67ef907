"""Caffe2's net transforms by name (``workspace.ApplyTransform``, ``ApplyTransformIfFaster``).

A transform takes a ``caffe2_pb2.NetDef`` and returns a rewritten copy:

* ``ConvToNNPack``: every ``Conv`` on the CPU gets the ``NNPACK`` engine (asyncnet has one
  implementation per op and ignores other engine names, so results are unchanged).

    >>> from caffe2.proto import caffe2_pb2
    >>> net = caffe2_pb2.NetDef(op=[caffe2_pb2.OperatorDef(type="Conv", input=["x", "w"], output=["y"])])
    >>> apply_transform("ConvToNNPack", net).op[0].engine
    'NNPACK'
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from caffe2.proto import caffe2_pb2


def _conv_to_nnpack(net: Any) -> Any:
    out = caffe2_pb2.NetDef()
    out.CopyFrom(net)
    for op in out.op:
        if op.type == "Conv" and op.device_option.device_type == caffe2_pb2.CPU:
            op.engine = "NNPACK"
    return out


TRANSFORMS: dict[str, Callable[[Any], Any]] = {
    "ConvToNNPack": _conv_to_nnpack,
}


def apply_transform(name: str, net: Any) -> Any:
    """The NetDef ``net`` rewritten by the transform ``name`` (RuntimeError for an unknown name)."""
    transform = TRANSFORMS.get(name)
    if transform is None:
        raise RuntimeError(f"no transform named {name!r}; the registered ones are {sorted(TRANSFORMS)}")
    return transform(net)


def faster(
    run_first: Callable[[], None], run_second: Callable[[], None], warmup: int, runs: int
) -> tuple[float, float]:
    """Median seconds per run of two callables, measured interleaved after ``warmup`` runs each."""
    for _ in range(warmup):
        run_first()
        run_second()
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(max(runs, 1)):
        for fn, acc in ((run_first, times[0]), (run_second, times[1])):
            start = time.perf_counter()
            fn()
            acc.append(time.perf_counter() - start)
    return tuple(sorted(t)[len(t) // 2] for t in times)  # type: ignore[return-value]
