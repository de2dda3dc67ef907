"""The one-op runner of the ported Caffe2 operator tests (Caffe2's RunOperatorOnce and FetchBlob)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import asyncnet as an


def run_op(op: str, inputs: dict[str, Any], outs: Sequence[str] = ("out",), **args: Any) -> list[Any]:
    """Feed ``inputs`` (in order), run one ``op`` writing ``outs``, return their values."""
    ws = an.Workspace()
    for k, v in inputs.items():
        ws.feed(k, v)
    net = an.Net("t")
    getattr(net, op)(list(inputs), list(outs), **args)
    ws.run_net_once(net)
    return [ws.fetch(o) for o in outs]
