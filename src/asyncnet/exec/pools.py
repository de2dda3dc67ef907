"""Per-device worker pools for the async executor.

One pool per device key: ``("cpu", numa_node_id)`` for CPU ops, ``("cuda", device_id)`` for
CUDA ops (only when torch with CUDA is available). Pools are bounded (``size`` threads, started
lazily, only when no worker is idle) and shared between nets that ask for the same device and
size; a net with ``own_pool=True`` gets a private one. Shared pools are reference counted: the
last net to close (or be garbage collected) shuts its pool down and joins its threads. At
interpreter exit every pool still open is shut down before threads are joined, so no worker
outlives its owner::

    >>> from asyncnet.core.defs import DeviceOption
    >>> lease = acquire_pool(DeviceOption(), size=2)
    >>> done = threading.Event()
    >>> lease.pool.submit(lambda ev: ev.set(), done)
    >>> done.wait(5)
    True
    >>> lease.release()          # the last lease joins the threads

Work items are ``(fn, arg)`` pairs; ``fn`` must not raise (the executor catches everything).
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import weakref
from typing import Any, Callable, Hashable

from asyncnet.core.defs import DeviceOption
from asyncnet.errors import ExecutionError, NetDefinitionError

__all__ = ["WorkerPool", "PoolLease", "acquire_pool", "device_key", "default_pool_size", "check_device", "live_pools"]

_STOP = None


def default_pool_size() -> int:
    """Number of cores this process may use (the default pool size)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def device_key(device: DeviceOption) -> Hashable:
    """The pool a device's ops run on: ``("cpu", numa_node_id)`` or ``("cuda", device_id)``."""
    if device.device_type == "cuda":
        return ("cuda", device.device_id)
    return ("cpu", device.numa_node_id)


def check_device(device: DeviceOption) -> None:
    """Raise :class:`NetDefinitionError` when ``device`` cannot run here (CUDA without torch.cuda)."""
    if device.device_type != "cuda":
        return
    torch = sys.modules.get("torch")
    if torch is None:
        try:
            import torch  # noqa: F811 - imported only when a net asks for CUDA
        except ImportError:
            torch = None
    if torch is None or not torch.cuda.is_available():
        raise NetDefinitionError(f"device cuda:{device.device_id} requested but torch with CUDA is not available", "device_option")
    if device.device_id >= torch.cuda.device_count():
        raise NetDefinitionError(
            f"device cuda:{device.device_id} requested but only {torch.cuda.device_count()} CUDA device(s) exist", "device_option")


class WorkerPool:
    """A bounded pool of worker threads fed through one queue (lock-free ``SimpleQueue``)."""

    def __init__(self, name: str, size: int):
        if size < 1:
            raise ValueError(f"pool size must be >= 1, got {size}")
        self.name = name
        self.size = size
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._closed = False
        _ALL_POOLS.add(self)

    def submit(self, fn: Callable[[Any], None], arg: Any) -> None:
        """Queue ``fn(arg)``; starts a thread when none is idle and the pool is not full."""
        if self._closed:
            raise ExecutionError(f"pool {self.name!r} is shut down")
        self._queue.put((fn, arg))
        if not self._idle.acquire(False):
            self._grow()

    def _grow(self) -> None:
        with self._lock:
            if self._closed or len(self._threads) >= self.size:
                return
            t = threading.Thread(target=_worker, args=(self._queue, self._idle),
                                 name=f"{self.name}-{len(self._threads)}")
            try:
                t.start()
            except RuntimeError as e:  # thread limit, or interpreter shutdown
                if not self._threads:  # nobody will ever take the item: the caller must know
                    raise ExecutionError(f"pool {self.name!r} cannot start a worker thread: {e}") from e
                return  # the running workers will take it
            self._threads.append(t)

    @property
    def num_threads(self) -> int:
        return len(self._threads)

    def shutdown(self, timeout: float | None = 10.0) -> None:
        """Stop accepting work, let queued work finish, join every thread (not the caller's own)."""
        with self._lock:
            if self._closed:
                threads: list[threading.Thread] = []
            else:
                self._closed = True
                threads = list(self._threads)
                for _ in threads:
                    self._queue.put(_STOP)
        me = threading.current_thread()
        for t in threads:
            if t is not me:
                t.join(timeout)
        _ALL_POOLS.discard(self)

    def __repr__(self) -> str:
        return f"WorkerPool({self.name!r}, size={self.size}, threads={len(self._threads)})"


def _worker(q: "queue.SimpleQueue[Any]", idle: threading.Semaphore) -> None:
    while True:
        item = q.get()
        if item is _STOP:
            return
        fn, arg = item
        del item
        fn(arg)
        del fn, arg
        idle.release()


class PoolLease:
    """A net's claim on a pool; :meth:`release` (idempotent) gives it back."""

    def __init__(self, pool: WorkerPool, key: tuple[Hashable, int] | None):
        self.pool = pool
        self._key = key
        self._released = False

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        _release(self.pool, self._key)


_ALL_POOLS: "weakref.WeakSet[WorkerPool]" = weakref.WeakSet()
_SHARED: dict[tuple[Hashable, int], list[Any]] = {}  # key -> [pool, refcount]
_SHARED_LOCK = threading.Lock()


def acquire_pool(device: DeviceOption, size: int | None = None, own: bool = False) -> PoolLease:
    """Lease the pool for ``device`` with ``size`` workers (default: the number of cores)."""
    check_device(device)
    size = size or default_pool_size()
    dkey = device_key(device)
    name = f"asyncnet-{dkey[0]}{dkey[1]}"  # type: ignore[index]
    if own:
        return PoolLease(WorkerPool(name + "-own", size), None)
    key = (dkey, size)
    with _SHARED_LOCK:
        entry = _SHARED.get(key)
        if entry is None:
            entry = _SHARED[key] = [WorkerPool(name, size), 0]
        entry[1] += 1
        return PoolLease(entry[0], key)


def _release(pool: WorkerPool, key: tuple[Hashable, int] | None) -> None:
    if key is not None:
        with _SHARED_LOCK:
            entry = _SHARED.get(key)
            if entry is None or entry[0] is not pool:
                return
            entry[1] -= 1
            if entry[1] > 0:
                return
            del _SHARED[key]
    pool.shutdown()


def live_pools() -> list[WorkerPool]:
    """Every pool not yet shut down (for tests and diagnostics)."""
    return list(_ALL_POOLS)


def _shutdown_all() -> None:
    with _SHARED_LOCK:
        _SHARED.clear()
    for pool in list(_ALL_POOLS):
        pool.shutdown(timeout=5.0)


# Runs before the interpreter joins non-daemon threads (the way concurrent.futures does it).
try:
    threading._register_atexit(_shutdown_all)  # type: ignore[attr-defined]
except AttributeError:  # pragma: no cover - other Python implementations
    import atexit

    atexit.register(_shutdown_all)
