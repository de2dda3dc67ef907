"""Caffe2's ``Free``: releases the memory of its blobs (each input is also its output, in
place). A freed blob still exists and holds an empty float32 array, so the executors' dependency
tracking sees an ordinary write; ``caffe2.python.memonger.release_blobs_when_used`` puts one
after the last use of each intermediate blob.

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace(); ws.feed("big", np.ones((1000, 1000), np.float32))
    >>> net = an.Net("free"); _ = net.Free("big", "big")
    >>> ws.run_net_once(net); ws.fetch("big").shape
    (0,)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from asyncnet.core.registry import register_no_gradient, register_op

__all__: list[str] = []  # the op is reached through the registry


@register_op(
    "Free",
    inputs=(1, None),
    outputs=(1, None),
    enforce_inplace=lambda i, o: i == o,
    devices=("cpu", "cuda"),
    inputs_doc=("the blobs to free",),
    outputs_doc=("the same blobs, each now an empty array",),
    doc="Release the content of each blob: it holds an empty float32 array afterwards.",
)
def free(ctx: Any, *blobs: Any) -> Any:
    if len(ctx.op.outputs) != len(blobs):
        raise ValueError(
            f"expected one output per input (in place), got {len(blobs)} inputs, {len(ctx.op.outputs)} outputs"
        )
    empty = [np.empty(0, np.float32) for _ in blobs]
    return empty[0] if len(empty) == 1 else tuple(empty)


register_no_gradient("Free")
