"""Test-only operators for the executor tests (registered once, names prefixed ``ExecTest``).

``ExecTestWork``: outputs[i] = sum of inputs (float64 arrays) + index-dependent constant, after
an optional sleep; ``fail=1`` raises; ``block=1`` waits on :data:`RELEASE` (set in teardown).
``meet="key"`` waits (after the sleep) until as many ops as :data:`MEETINGS` ``[key]`` (a
``threading.Barrier``) holds parties met there, and raises if they do not within its timeout:
ops that must run at the same time on different threads. Every run appends ``(op name, start,
end, thread ident)`` to :data:`LOG`.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from asyncnet.core.registry import Arg, register_op, registered_ops

LOG: list[tuple[str, float, float, int]] = []
RELEASE = threading.Event()
STARTED = threading.Event()
MEETINGS: dict[str, threading.Barrier] = {}

if "ExecTestWork" not in registered_ops():

    @register_op(
        "ExecTestWork",
        inputs=(0, None),
        outputs=(0, None),
        allow_inplace=lambda i, o: True,
        args=[
            Arg("sleep", float, 0.0),
            Arg("fail", bool, False),
            Arg("block", bool, False),
            Arg("add", float, 1.0),
            Arg("meet", str, ""),
        ],
        doc="test op",
    )
    def _work(ctx, *xs):
        start = time.perf_counter()
        a = ctx.args
        try:
            if a["block"]:
                STARTED.set()
                RELEASE.wait(30)
            if a["sleep"]:
                time.sleep(a["sleep"])
            if a["meet"]:
                MEETINGS[a["meet"]].wait()  # the Barrier's own timeout: a missing party raises BrokenBarrierError
            if a["fail"]:
                raise ValueError(f"planned failure in {ctx.op.name or ctx.index}")
            base = np.zeros(2)
            for x in xs:
                base = base + np.asarray(x, dtype=np.float64)
            outs = [base * (i + 1) + a["add"] for i in range(len(ctx.op.outputs))]
        finally:
            LOG.append((ctx.op.name, start, time.perf_counter(), threading.get_ident()))
        if not outs:
            return None
        return outs[0] if len(outs) == 1 else tuple(outs)


class Counter:
    """A lock-guarded int (stands in for the atomics of another module in these tests)."""

    def __init__(self, value: int = 0):
        self.value = value
        self.lock = threading.Lock()


if "ExecTestFetchAdd" not in registered_ops():

    @register_op("ExecTestFetchAdd", inputs=2, outputs=1, doc="out = counter.value; counter.value += int(delta)")
    def _fetch_add(ctx, counter, delta):
        with counter.lock:
            old = counter.value
            counter.value = old + int(np.asarray(delta))
        return np.array(old, dtype=np.int64)
