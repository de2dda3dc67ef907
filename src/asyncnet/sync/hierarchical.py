"""``HierarchicalGradientSync``: W worker threads per process x R processes (ranks).

One process per host can use every core: its W threads average their gradients in shared
memory (:class:`~asyncnet.sync.ThreadedGradientSync`), the process's first thread all-reduces
that mean across the R ranks (torch.distributed, or any GradientSync of one handle per
process), and the result is shared back to the W threads (a threaded broadcast). The group has
``W * R`` workers; worker ``rank * W + thread`` of it. The mean of the W-thread means is the
mean over all ``W * R`` workers (every process has W threads), equal to a flat all-reduce up
to float rounding.

    >>> import threading, numpy as np
    >>> from asyncnet.sync import LocalGradientSync
    >>> syncs = HierarchicalGradientSync.new_workers(2, LocalGradientSync(), timeout=5)
    >>> grads = [np.array([1.0]), np.array([3.0])]
    >>> ts = [threading.Thread(target=s.sync_gradients, args=(g,)) for s, g in zip(syncs, grads)]
    >>> for t in ts: t.start()
    >>> for t in ts: t.join()
    >>> grads, syncs[1].worker_id, syncs[1].num_workers
    ([array([2.]), array([2.])], 1, 2)

When the cross-process step fails on the first thread it aborts the threaded group, so the
other threads raise ``SyncAbortedError`` at once instead of waiting out their timeout.
"""

from __future__ import annotations

from typing import Any

from asyncnet.sync.threaded import ThreadedGradientSync

__all__ = ["HierarchicalGradientSync", "run_hierarchical"]


class HierarchicalGradientSync:
    """One thread's handle: ``local`` is its threaded handle, ``across`` the process's handle
    on the ranks (used by local worker 0 only)."""

    def __init__(self, local: ThreadedGradientSync, across: Any):
        self._local = local
        self._across = across

    @classmethod
    def new_workers(cls, threads: int, across: Any, timeout: float | None = None) -> list[HierarchicalGradientSync]:
        """``threads`` handles of this process, sharing ``across`` (e.g. a TorchDistributedGradientSync)."""
        return [cls(local, across) for local in ThreadedGradientSync.new_workers(threads, timeout)]

    @property
    def is_distributed(self) -> bool:
        return self.num_workers > 1

    @property
    def num_workers(self) -> int:
        return self._local.num_workers * self._across.num_workers

    @property
    def worker_id(self) -> int:
        return self._across.worker_id * self._local.num_workers + self._local.worker_id

    @property
    def threads(self) -> int:
        """Worker threads per process (W)."""
        return self._local.num_workers

    def sync_gradients(self, grads: Any) -> None:
        """Replace ``grads`` in place with the mean over all ``W * R`` workers."""
        self._local.sync_gradients(grads)
        if self._across.num_workers > 1:
            self._leader(lambda: self._across.sync_gradients(grads), "all-reduce")
            self._local.broadcast(grads, root=0)

    def broadcast(self, tensors: Any, root: int = 0) -> None:
        """Overwrite ``tensors`` on every worker with worker ``root``'s values."""
        if not 0 <= root < self.num_workers:
            raise ValueError(f"root must be in [0, {self.num_workers}), got {root}")
        rank, thread = divmod(root, self._local.num_workers)
        self._local.broadcast(tensors, root=thread)
        if self._across.num_workers > 1:
            self._leader(lambda: self._across.broadcast(tensors, root=rank), "broadcast")
            self._local.broadcast(tensors, root=0)

    def barrier(self) -> None:
        """The threads of this process meet, their leader meets the other ranks', they meet again."""
        self._local.barrier()
        if self._across.num_workers > 1:
            self._leader(self._across.barrier, "barrier")
            self._local.barrier()

    def all_reduce_mean(self, values: Any) -> None:
        """Replace the figures ``values`` in place with their mean over all ``W * R`` workers."""
        self.sync_gradients(values)

    def abort(self, reason: str = "aborted") -> None:
        """Abort this process's threaded group (pending and future calls raise)."""
        self._local.abort(reason)

    def _leader(self, step: Any, what: str) -> None:
        if self._local.worker_id != 0:
            return
        try:
            step()
        except BaseException as exc:
            self._local.abort(
                f"the cross-process {what} failed on worker {self.worker_id}: {type(exc).__name__}: {exc}"
            )
            raise

    def __repr__(self) -> str:
        return (
            f"HierarchicalGradientSync(worker {self.worker_id} of {self.num_workers}: "
            f"{self._local.num_workers} threads x {self._across.num_workers} ranks)"
        )


def run_hierarchical(threads: int, across: Any, fn: Any, timeout: float | None = None) -> list[Any]:
    """Run ``fn(sync)`` on ``threads`` threads of this process with hierarchical handles on
    ``across``; results in thread order. Every thread is joined before this returns or
    raises; the first failure aborts the group and is raised with the others attached."""
    import itertools
    import threading

    from asyncnet.sync._failures import attach_errors

    syncs = HierarchicalGradientSync.new_workers(threads, across, timeout)
    results: list[Any] = [None] * threads
    errors: dict[int, tuple[int, BaseException]] = {}
    seq, lock = itertools.count(), threading.Lock()

    ended = [threading.Event() for _ in range(threads)]

    def body(i: int) -> None:
        try:
            results[i] = fn(syncs[i])
        except BaseException as exc:  # noqa: BLE001 - collected and re-raised below
            with lock:
                errors[syncs[i].worker_id] = (next(seq), exc)
            syncs[i].abort(f"worker {syncs[i].worker_id} raised {type(exc).__name__}: {exc}")
        finally:
            ended[i].set()

    def wait_started() -> None:  # events, not Thread.join: see asyncnet.sync.launch._wait_all
        for t, e in zip(ts, ended):
            while t.ident is not None and not e.wait(0.5):
                pass
        for t in ts:
            if t.ident is not None:
                t.join()

    ts = [
        threading.Thread(target=body, args=(i,), name=f"asyncnet-rank-thread-{i}", daemon=True) for i in range(threads)
    ]
    try:
        for t in ts:
            t.start()
        wait_started()
    except BaseException:
        syncs[0].abort("interrupted")
        wait_started()
        raise
    if errors:
        raise attach_errors(errors)
    return results
