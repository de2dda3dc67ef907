"""Per-op timings and Chrome-trace timelines.

Profiling uses the executors' ``recorder`` hook (``net.recorder = fn(op, start, end)``): a
:class:`Timeline` is such a recorder. It keeps one event per op run with the thread that ran
it, and writes Chrome-trace JSON (one track per worker thread, one slice per op) that opens in
Perfetto (https://ui.perfetto.dev) or chrome://tracing::

    >>> import numpy as np, asyncnet as an
    >>> ws = an.Workspace(); ws.feed("x", np.ones(3))
    >>> net = an.Net("n", type="async_scheduling"); _ = net.Relu("x", "y")
    >>> inst = ws.create_net(net)
    >>> with profile(inst) as tl:
    ...     ws.run_net("n")
    >>> [e.op_type for e in tl.events]
    ['Relu']
    >>> tl.to_chrome()["traceEvents"][-1]["name"]
    'Relu'
    >>> ws.close()
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

__all__ = ["OpEvent", "Timeline", "profile", "chrome_trace", "merge_chrome_traces", "write_chrome_trace"]


@dataclass(frozen=True)
class OpEvent:
    """One op run: which op, on which thread, from ``start`` to ``end`` (perf_counter seconds)."""

    net: str
    op_index: int
    op_type: str
    op_name: str
    thread_id: int
    thread_name: str
    start: float
    end: float

    @property
    def duration(self) -> float:
        return self.end - self.start


class Timeline:
    """A recorder collecting :class:`OpEvent` s; safe to share between threads and nets."""

    def __init__(self) -> None:
        self.events: list[OpEvent] = []
        self.origin = time.perf_counter()

    def __call__(self, op: Any, start: float, end: float) -> None:
        t = threading.current_thread()
        self.events.append(OpEvent(op.net_name, op.index, op.type, op.name, t.ident or 0, t.name, start, end))

    def clear(self) -> None:
        self.events = []
        self.origin = time.perf_counter()

    def op_stats(self) -> dict[str, dict[str, float]]:
        """Per op type: count, total and mean seconds, sorted by total time (largest first)."""
        stats: dict[str, dict[str, float]] = {}
        for e in self.events:
            s = stats.setdefault(e.op_type, {"count": 0, "total": 0.0})
            s["count"] += 1
            s["total"] += e.duration
        for s in stats.values():
            s["mean"] = s["total"] / s["count"]
        return dict(sorted(stats.items(), key=lambda kv: -kv[1]["total"]))

    def to_chrome(self) -> dict[str, Any]:
        """The Chrome-trace document (``traceEvents`` with thread-name metadata and ``X`` slices)."""
        return chrome_trace(self.events, self.origin)

    def write(self, path: str | os.PathLike[str]) -> None:
        """Write the Chrome-trace JSON to ``path``."""
        write_chrome_trace(self.events, path, self.origin)


def chrome_trace(
    events: Iterable[OpEvent], origin: float | None = None, pid: int = 1, process_name: str = "asyncnet"
) -> dict[str, Any]:
    """Chrome-trace JSON for ``events``: one process ``pid`` named ``process_name``, one tid per
    thread (named), times in us from ``origin`` (perf_counter seconds; default: the first start)."""
    events = sorted(events, key=lambda e: e.start)
    if origin is None:
        origin = events[0].start if events else 0.0
    tids: dict[int, int] = {}
    out: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": process_name}},
        {"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0, "args": {"sort_index": pid}},
    ]
    for e in events:
        if e.thread_id not in tids:
            tids[e.thread_id] = tid = len(tids) + 1
            out.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": e.thread_name}})
            out.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid, "args": {"sort_index": tid}})
    for e in events:
        out.append(
            {
                "name": e.op_type,
                "cat": e.net or "net",
                "ph": "X",
                "pid": pid,
                "tid": tids[e.thread_id],
                "ts": round((e.start - origin) * 1e6, 3),
                "dur": round(max(0.0, e.end - e.start) * 1e6, 3),
                "args": {"net": e.net, "op_index": e.op_index, "op_name": e.op_name},
            }
        )
    return {"traceEvents": out, "displayTimeUnit": "ms"}


def merge_chrome_traces(traces: Iterable[list[dict[str, Any]]]) -> dict[str, Any]:
    """One Chrome-trace document from the ``traceEvents`` of several :func:`chrome_trace` calls
    made with ``origin=0`` (absolute perf_counter times; CLOCK_MONOTONIC is shared by the
    processes of one machine) and distinct ``pid`` s: times shift so the earliest slice is at 0,
    and Perfetto shows one track group per process side by side.

        >>> a = [{"ph": "X", "pid": 1, "tid": 1, "ts": 10.0, "dur": 1.0, "name": "FC"}]
        >>> b = [{"ph": "X", "pid": 2, "tid": 1, "ts": 12.5, "dur": 1.0, "name": "FC"}]
        >>> [e["ts"] for e in merge_chrome_traces([a, b])["traceEvents"]]
        [0.0, 2.5]
    """
    traces = [list(t) for t in traces]
    starts = [e["ts"] for t in traces for e in t if e.get("ph") == "X"]
    zero = min(starts, default=0.0)
    out = []
    for t in traces:
        for e in t:
            out.append(dict(e, ts=round(e["ts"] - zero, 3)) if e.get("ph") == "X" else e)
    return {"traceEvents": out, "displayTimeUnit": "ms"}


def write_chrome_trace(events: Iterable[OpEvent], path: str | os.PathLike[str], origin: float | None = None) -> None:
    """Write ``events`` as Chrome-trace JSON to ``path``."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(chrome_trace(events, origin), f)


@contextmanager
def profile(*nets: Any, timeline: Timeline | None = None) -> Iterator[Timeline]:
    """Turn per-op timing on for ``nets`` (net instances) inside the block; yields the Timeline."""
    tl = timeline or Timeline()
    previous = [net.recorder for net in nets]
    for net in nets:
        net.recorder = tl
    try:
        yield tl
    finally:
        for net, rec in zip(nets, previous):
            net.recorder = rec
