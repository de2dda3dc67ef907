"""Per-device worker pools for the async executor.

One pool per device key: ``("cpu", numa_node_id)`` for CPU ops, ``("cuda", device_id)`` for
CUDA ops (only when torch with CUDA is available). Pools are bounded (``size`` threads, started
lazily, only when no worker is idle) and shared between nets that ask for the same device and
size; a net with ``own_pool=True`` gets a private one. Shared pools are reference counted: the
last net to close (or be garbage collected) shuts its pool down and joins its threads::

    >>> from asyncnet.core.defs import DeviceOption
    >>> lease = acquire_pool(DeviceOption(), size=2)
    >>> done = threading.Event()
    >>> lease.pool.submit(lambda ev: ev.set(), done)
    >>> done.wait(5)
    True
    >>> lease.release()          # the last lease joins the threads

Work items are ``(fn, arg)`` pairs; ``fn`` must not raise (the executor catches everything).

Exit policy
-----------
Nothing waits forever, and no worker outlives its owner unreported:

* ``shutdown(timeout)`` (what ``net.close()`` ends in) stops the pool, lets queued work finish
  and joins every thread within ``timeout`` seconds *in total*. A thread still running then is
  stuck in an op that never returns; it is reported with a :class:`RuntimeWarning` naming that
  op (net, op index, type, name: the executor writes it to the worker's :class:`Activity`
  before each op) and left behind.
* At interpreter exit a hook registered with ``threading._register_atexit`` (it runs before
  Python joins non-daemon threads, as in ``concurrent.futures``) stops every pool still open and
  joins all their threads, and those left behind by ``shutdown``, within :data:`EXIT_TIMEOUT`
  seconds overall; the ones still alive are reported the same way and the process exits anyway.

Workers are therefore *daemon* threads. Python joins non-daemon threads without a timeout
after the exit hooks ran, so one op blocked forever (an event nobody sets) would hang the
process at exit however bounded our own joins are; only a daemon thread can be abandoned.
Daemon threads are otherwise dangerous because they can be killed mid-work at exit; here they
never are silently: the exit hook has already stopped and joined every worker that could end,
so only threads reported as stuck remain when the interpreter finalizes.
"""

from __future__ import annotations

import logging
import os
import queue
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Hashable, Iterable
from typing import Any

from asyncnet.core.defs import DeviceOption, NetDef
from asyncnet.errors import ExecutionError, NetDefinitionError
from asyncnet.tensor.threads import ThreadClaim, claim_threads, follow_torch_threads

_log = logging.getLogger(__name__)

__all__ = [
    "WorkerPool",
    "PoolLease",
    "Activity",
    "activity",
    "acquire_pool",
    "device_key",
    "default_pool_size",
    "check_device",
    "live_pools",
    "claim_net_threads",
    "EXIT_TIMEOUT",
    "SHUTDOWN_TIMEOUT",
]

EXIT_TIMEOUT = 5.0  # seconds the interpreter-exit hook waits for all pool threads together
SHUTDOWN_TIMEOUT = 10.0  # default bound of WorkerPool.shutdown (all its threads together)

_STOP = None
_exiting = False  # set by the exit hook: no pool starts a thread after it


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
            import torch
        except ImportError:
            torch = None
    if torch is None or not torch.cuda.is_available():
        raise NetDefinitionError(
            f"device cuda:{device.device_id} requested but torch with CUDA is not available", "device_option"
        )
    if device.device_id >= torch.cuda.device_count():
        raise NetDefinitionError(
            f"device cuda:{device.device_id} requested but only {torch.cuda.device_count()} CUDA device(s) exist",
            "device_option",
        )


class Activity:
    """What a thread is running, for the stuck-thread report: ``op`` is the Operator or None.

    The executor sets ``op`` before each op and clears it after the chain (one attribute
    write per op); :func:`activity` gives a worker its own, any other thread a throwaway one.
    """

    __slots__ = ("op",)

    def __init__(self) -> None:
        self.op: Any = None

    def describe(self) -> str:
        op = self.op
        if op is None:
            return "no op (between ops)"
        name = f" {op.name!r}" if getattr(op, "name", "") else ""
        return f"op {op.index} ({op.type}{name}) of net {getattr(op, 'net_name', '')!r}"


def activity() -> Activity:
    """The calling worker thread's :class:`Activity` (a fresh one on a non-pool thread)."""
    act = getattr(threading.current_thread(), "activity", None)
    return act if act is not None else Activity()


class _Worker(threading.Thread):
    """A pool thread (daemon: see the module docstring) with an :class:`Activity`."""

    def __init__(self, q: queue.SimpleQueue[Any], idle: threading.Semaphore, name: str):
        super().__init__(target=_worker, args=(q, idle), name=name, daemon=True)
        self.activity = Activity()

    def describe(self) -> str:
        return f"thread {self.name!r} runs {self.activity.describe()}"


class WorkerPool:
    """A bounded pool of worker threads fed through one queue (lock-free ``SimpleQueue``).

    While it lives, a pool claims its size on the intra-op thread budget
    (:mod:`asyncnet.tensor.threads`), so its workers x BLAS threads stay within the cores."""

    def __init__(self, name: str, size: int):
        if size < 1:
            raise ValueError(f"pool size must be >= 1, got {size}")
        self.name = name
        self.size = size
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._lock = threading.Lock()
        self._threads: list[_Worker] = []
        self._closed = False
        self._thread_claim: ThreadClaim = claim_threads(workers=size)
        _ALL_POOLS.add(self)

    def submit(self, fn: Callable[[Any], None], arg: Any) -> None:
        """Queue ``fn(arg)``; starts a thread when none is idle and the pool is not full."""
        if self._closed:
            raise ExecutionError(f"pool {self.name!r} is shut down")
        self._queue.put((fn, arg))
        if not self._idle.acquire(False):
            self._grow()

    def offer(self, fn: Callable[[], None]) -> bool:
        """Queue ``fn()`` only when a worker is idle to take it now (an intra-op half, see
        :mod:`asyncnet.tensor.parallel`); False, queueing nothing, when none is."""
        if self._closed or not self._idle.acquire(False):
            return False
        self._queue.put((_call, fn))
        return True

    def _grow(self) -> None:
        with self._lock:
            if self._closed or len(self._threads) >= self.size:
                return
            t = _Worker(self._queue, self._idle, f"{self.name}-{len(self._threads)}")
            try:
                if _exiting:
                    raise RuntimeError("the interpreter is exiting")
                t.start()
            except RuntimeError as e:  # thread limit, or interpreter shutdown
                if not self._threads:  # nobody will ever take the item: the caller must know
                    raise ExecutionError(f"pool {self.name!r} cannot start a worker thread: {e}") from e
                return  # the running workers will take it
            self._threads.append(t)

    @property
    def num_threads(self) -> int:
        return len(self._threads)

    def running(self) -> list[Activity]:
        """The activities of this pool's live threads (which op each runs, if any)."""
        return [t.activity for t in self._threads if t.is_alive()]

    def _stop(self) -> list[_Worker]:
        """Refuse new work and queue one stop per thread; the threads to join (first call only)."""
        with self._lock:
            if self._closed:
                return []
            self._closed = True
            for _ in self._threads:
                self._queue.put(_STOP)
            _ALL_POOLS.discard(self)
            self._thread_claim.release()
            return list(self._threads)

    def shutdown(self, timeout: float = SHUTDOWN_TIMEOUT, warn: bool = True) -> list[threading.Thread]:
        """Stop accepting work, let queued work finish, join every thread (not the caller's own)
        within ``timeout`` s in total. Returns the threads still running (stuck in an op), which
        are reported with a RuntimeWarning unless ``warn`` is False, and left behind."""
        stuck = _join_all(self._stop(), time.monotonic() + timeout)
        if stuck:
            _STRAGGLERS.update(stuck)
            if warn:
                _warn(
                    stuck,
                    f"pool {self.name!r} shut down with {len(stuck)} thread(s) still running after "
                    f"{timeout:g} s; left behind",
                    stacklevel=3,
                )
        return stuck

    def __repr__(self) -> str:
        return f"WorkerPool({self.name!r}, size={self.size}, threads={len(self._threads)})"


def _worker(q: queue.SimpleQueue[Any], idle: threading.Semaphore) -> None:
    while True:
        item = q.get()
        if item is _STOP:
            return
        fn, arg = item
        del item
        follow_torch_threads()
        fn(arg)
        del fn, arg
        idle.release()


def _call(fn: Callable[[], None]) -> None:
    fn()


def _join_all(threads: Iterable[threading.Thread], deadline: float) -> list[threading.Thread]:
    """Join ``threads`` until ``deadline`` (monotonic) in total; the ones still alive."""
    me = threading.current_thread()
    stuck = []
    for t in threads:
        if t is me:
            continue
        t.join(max(0.0, deadline - time.monotonic()))
        if t.is_alive():
            stuck.append(t)
    return stuck


def _warn(stuck: list[threading.Thread], what: str, stacklevel: int) -> None:
    lines = "; ".join(t.describe() if isinstance(t, _Worker) else f"thread {t.name!r}" for t in stuck)
    msg = f"asyncnet: {what}: {lines}"
    try:
        warnings.warn(msg, RuntimeWarning, stacklevel=stacklevel)
    except Exception:  # noqa: BLE001 - e.g. -W error at exit: the report must still get out
        _log.warning("RuntimeWarning: %s", msg)


class PoolLease:
    """A net's claim on a pool; :meth:`release` (idempotent) gives it back."""

    def __init__(self, pool: WorkerPool, key: tuple[Hashable, int] | None):
        self.pool = pool
        self._key = key
        self._released = False

    def release(self, timeout: float = SHUTDOWN_TIMEOUT, warn: bool = True) -> None:
        """Give the pool back; the last lease shuts it down (``timeout``, ``warn``: as shutdown)."""
        if self._released:
            return
        self._released = True
        _release(self.pool, self._key, timeout, warn)


_ALL_POOLS: weakref.WeakSet[WorkerPool] = weakref.WeakSet()
_SHARED: dict[tuple[Hashable, int], list[Any]] = {}  # key -> [pool, refcount]
_SHARED_LOCK = threading.Lock()
_STRAGGLERS: set[threading.Thread] = set()  # threads a shutdown left behind, rejoined at exit


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


def _release(pool: WorkerPool, key: tuple[Hashable, int] | None, timeout: float, warn: bool) -> None:
    if key is not None:
        with _SHARED_LOCK:
            entry = _SHARED.get(key)
            if entry is None or entry[0] is not pool:
                return
            entry[1] -= 1
            if entry[1] > 0:
                return
            del _SHARED[key]
    pool.shutdown(timeout, warn)


def claim_net_threads(net_def: NetDef, caller_helps: bool = False) -> ThreadClaim | None:
    """The claim of a net that asks for ``intra_op_threads`` explicitly, and of the caller's
    thread when it runs ops beside the pool's (``caller_helps``: the async executor's
    ``net.run()``), so that every thread running ops counts; None when there is neither."""
    n = net_def.intra_op_threads
    if n is None and not caller_helps:
        return None
    return claim_threads(workers=1 if caller_helps else 0, threads=n)


def live_pools() -> list[WorkerPool]:
    """Every pool not yet shut down (for tests and diagnostics)."""
    return list(_ALL_POOLS)


def _shutdown_all(timeout: float | None = None) -> None:
    """The exit hook: stop every pool, join all threads within ``EXIT_TIMEOUT`` s, report the rest."""
    global _exiting
    _exiting = True
    timeout = EXIT_TIMEOUT if timeout is None else timeout
    deadline = time.monotonic() + timeout
    with _SHARED_LOCK:
        _SHARED.clear()
    threads: list[threading.Thread] = [t for pool in list(_ALL_POOLS) for t in pool._stop()]
    threads += [t for t in _STRAGGLERS if t not in threads]
    stuck = _join_all(threads, deadline)
    _STRAGGLERS.clear()
    if stuck:
        _warn(
            stuck,
            f"{len(stuck)} worker thread(s) still running {timeout:g} s after interpreter exit began; "
            "the process exits without them",
            stacklevel=2,
        )


# Runs before the interpreter joins non-daemon threads (the way concurrent.futures does it).
try:
    threading._register_atexit(_shutdown_all)  # type: ignore[attr-defined]
except AttributeError:  # pragma: no cover - other Python implementations
    import atexit

    atexit.register(_shutdown_all)
