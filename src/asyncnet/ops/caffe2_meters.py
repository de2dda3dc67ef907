"""Caffe2's ``APMeter``: average precision per class over the last ``buffer_size`` examples.

Each run appends its PREDICTIONS [N, D] scores and LABELS [N, D] (0/1) to the op's buffer,
which keeps the newest ``buffer_size`` rows (the buffer belongs to the op instance and lasts as
long as its net). The output AP [D] (float32): for class k, the examples sorted by decreasing
score (ties in arrival order), ``sum of precision@i over the positives i / max(1, positives)``.

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace(); ws.feed("p", np.array([[0.9], [0.8], [0.1]], np.float32))
    >>> ws.feed("l", np.array([[1], [0], [1]], np.int32))
    >>> net = an.Net("ap"); _ = net.APMeter(["p", "l"], "ap", buffer_size=10)
    >>> ws.run_net_once(net); ws.fetch("ap")
    array([0.8333333], dtype=float32)
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import numpy as np

from asyncnet.core.registry import Arg, register_no_gradient, register_op

__all__: list[str] = []  # the ops are reached through the registry

_BUFFERS: weakref.WeakKeyDictionary[Any, tuple[np.ndarray, np.ndarray]] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def _np(x: Any) -> np.ndarray:
    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)


def average_precision(scores: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """AP per column of ``scores`` [N, D] with 0/1 ``labels`` [N, D].

    >>> average_precision(np.array([[0.9], [0.8], [0.1]]), np.array([[1], [0], [1]]))
    array([0.83333333])
    """
    n, d = scores.shape
    ranks = np.arange(1, n + 1, dtype=np.float64)
    ap = np.zeros(d)
    for k in range(d):
        truth = labels[np.argsort(-scores[:, k], kind="stable"), k].astype(np.float64)
        precision = np.cumsum(truth) / ranks
        ap[k] = precision[truth > 0].sum() / max(1.0, truth.sum())
    return ap


@register_op(
    "APMeter",
    inputs=2,
    args=[Arg("buffer_size", int, 1000, "how many of the newest examples the meter keeps")],
    inputs_doc=("PREDICTIONS [N, D] scores", "LABELS [N, D] 0/1 ints"),
    outputs_doc=("AP [D] float32",),
    doc="Average precision per class over the newest buffer_size examples seen by this op.",
)
def ap_meter(ctx: Any, predictions: Any, labels: Any) -> np.ndarray:
    p, y = _np(predictions), _np(labels)
    if p.ndim != 2 or y.shape != p.shape:
        raise ValueError(f"expected PREDICTIONS [N, D] and LABELS of its shape, got {p.shape} and {y.shape}")
    size = ctx.args["buffer_size"]
    if size < 1:
        raise ValueError(f"expected buffer_size >= 1, got {size}")
    with _LOCK:
        old = _BUFFERS.get(ctx)
        if old is not None and old[0].shape[1] != p.shape[1]:
            raise ValueError(f"expected {old[0].shape[1]} classes as in earlier runs, got {p.shape[1]}")
        scores = p if old is None else np.concatenate([old[0], p])
        truth = y if old is None else np.concatenate([old[1], y])
        scores, truth = scores[-size:], truth[-size:]
        _BUFFERS[ctx] = (scores, truth)
    return average_precision(scores.astype(np.float64), truth).astype(np.float32)


register_no_gradient("APMeter")
