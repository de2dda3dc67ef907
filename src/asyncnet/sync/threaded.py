"""``ThreadedGradientSync``: an all-reduce between threads of one process.

``ThreadedGradientSync.new_workers(n, timeout)`` returns ``n`` handles on one group; give one
to each thread. Every call to ``sync_gradients`` is one round of the protocol in
:mod:`asyncnet.sync._rounds`: workers publish views of their own arrays (no copy), then each
reduces its own slice of every worker's arrays in place, in worker order, so the result is the
same bits whatever the arrival order, and the work runs in parallel (numpy releases the GIL).

    >>> import threading, numpy as np
    >>> syncs = ThreadedGradientSync.new_workers(2, timeout=5)
    >>> grads = [np.array([2.0, 4.0]), np.array([4.0, 8.0])]
    >>> ts = [threading.Thread(target=s.sync_gradients, args=(g,)) for s, g in zip(syncs, grads)]
    >>> for t in ts: t.start()
    >>> for t in ts: t.join()
    >>> grads[0], grads[1]
    (array([3., 6.]), array([3., 6.]))

A handle belongs to one thread at a time. Errors: ``SyncMismatchError`` (layouts differ; nothing
changed), ``SyncTimeoutError`` (a peer did not arrive within ``timeout``; nothing changed),
``SyncAbortedError`` (the group was aborted, see :meth:`ThreadedGradientSync.abort`).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from asyncnet.sync._bucket import Bucket, format_layout, open_bucket, slice_bounds
from asyncnet.sync._reduce import reduce_slice
from asyncnet.sync._rounds import Control, RoundEngine

__all__ = ["ThreadedGradientSync"]


class _ThreadGroup:
    """What the handles of one group share: control state, its lock, published views."""

    def __init__(self, n: int, timeout: float | None):
        self.n = n
        self.timeout = timeout
        self.control = Control(n)
        self.cond = threading.Condition(threading.Lock())
        self.views: list[list[np.ndarray] | None] = [None] * n


class ThreadedGradientSync:
    """One worker's handle on a group of threads; create the group with :meth:`new_workers`."""

    def __init__(self, group: _ThreadGroup, worker_id: int):
        self._group = group
        self._id = worker_id
        self._engine = RoundEngine(group.control, group.cond, worker_id, group.timeout)
        self._scratch: dict = {}
        self._layouts: dict[tuple, tuple[int, str]] = {}

    @classmethod
    def new_workers(cls, n: int, timeout: float | None = None) -> list[ThreadedGradientSync]:
        """``n`` handles sharing one group, with ids ``0 .. n-1``.

        ``timeout`` (seconds, None = wait forever) bounds how long a worker waits for its peers
        in one round. ``n < 1`` raises ``ValueError``.
        """
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"num_workers must be an int >= 1, got {n!r}")
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds or None, got {timeout!r}")
        group = _ThreadGroup(n, timeout)
        return [cls(group, i) for i in range(n)]

    @property
    def is_distributed(self) -> bool:
        return self._group.n > 1

    @property
    def num_workers(self) -> int:
        return self._group.n

    @property
    def worker_id(self) -> int:
        return self._id

    @property
    def timeout(self) -> float | None:
        return self._group.timeout

    def sync_gradients(self, grads: Any) -> None:
        """Replace ``grads`` (array, tensor or list of them) in place with the mean over workers."""
        self._collective(grads, "mean", 0)

    def broadcast(self, tensors: Any, root: int = 0) -> None:
        """Overwrite ``tensors`` in place on every worker with worker ``root``'s values."""
        if not 0 <= root < self._group.n:
            raise ValueError(f"root must be in [0, {self._group.n}), got {root}")
        self._collective(tensors, "broadcast", root)

    def barrier(self) -> None:
        """Return once every worker of the group called ``barrier`` (a round of its own)."""
        self._collective(np.zeros(1), "broadcast", 0, label="barrier")

    def all_reduce_mean(self, values: Any) -> None:
        """Replace the figures ``values`` in place with their mean over the workers."""
        self._collective(values, "mean", 0, label="figures")

    def abort(self, reason: str = "aborted") -> None:
        """Abort the whole group: pending and future calls of every worker raise ``SyncAbortedError``."""
        self._engine.abort(reason)

    @property
    def aborted(self) -> bool:
        """True once the group was aborted (every later collective raises ``SyncAbortedError``)."""
        return self._engine.aborted

    def _collective(self, grads: Any, op: str, root: int, label: str = "") -> None:
        bucket = open_bucket(grads)
        group = self._group
        key = (bucket.layout, op, root, label)
        info = self._layouts.get(key)
        if info is None:  # what depends only on the layout is computed once per layout
            tag = (op if op == "mean" else f"{op}:{root}") + (f", {label}" if label else "")
            info = self._layouts[key] = (bucket.digest(tag), f"{format_layout(bucket.layout)} ({tag})")
        group.views[self._id] = bucket.views
        try:
            self._engine.run(
                info[0],
                info[1],
                lambda: self._reduce(bucket, op, root),
                what="sync round" if op == "mean" else "broadcast round",
            )
            bucket.close()
        finally:
            group.views[self._id] = None

    def _reduce(self, bucket: Bucket, op: str, root: int) -> None:
        group = self._group
        if group.n == 1:
            return
        views = list(group.views)
        lo, hi = slice_bounds(bucket.size, group.n, self._id)
        reduce_slice(views, views, lo, hi, op, root, self._scratch)  # type: ignore[arg-type]

    def __repr__(self) -> str:
        return f"ThreadedGradientSync(worker_id={self._id}, num_workers={self._group.n})"
