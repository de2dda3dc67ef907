"""A process-shared, robust POSIX mutex living inside a shared-memory buffer (via ctypes).

Why this lock: it is a real ``pthread_mutex_t`` (``PTHREAD_PROCESS_SHARED``), so it is atomic
across threads and processes without any help from the GIL; it is *robust*
(``PTHREAD_MUTEX_ROBUST``), so when a process or thread dies while holding it the next
locker gets it (``EOWNERDEAD``), marks it consistent and goes on instead of deadlocking; the
uncontended path is a user-space compare-and-swap (about 0.7 us for lock+unlock from Python,
about half the cost of ``flock``). ctypes releases the GIL around every call, so a blocked
locker never stalls the other threads. Linux (glibc or musl) is the supported platform.

    >>> import mmap
    >>> buf = mmap.mmap(-1, MUTEX_BYTES)
    >>> m = PSharedMutex(buf, 0, init=True)
    >>> m.try_lock(), m.try_lock()
    (True, False)
    >>> m.unlock()
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import time
import warnings
from typing import Any

__all__ = ["MUTEX_BYTES", "PSharedMutex", "OwnerDiedWarning"]

MUTEX_BYTES = 64  # room for pthread_mutex_t on every Linux ABI (40 on x86-64, 48 on arm64)
_SLICE = 0.1  # a blocking wait is cut in slices so Ctrl-C (signal handlers) still gets through
_PTHREAD_PROCESS_SHARED = 1
_PTHREAD_MUTEX_ROBUST = 1
_EOWNERDEAD = getattr(errno, "EOWNERDEAD", 130)
_ENOTRECOVERABLE = getattr(errno, "ENOTRECOVERABLE", 131)


class OwnerDiedWarning(RuntimeWarning):
    """A shared mutex was taken over from a holder that died without releasing it."""


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Unsupported:
    """Stands in for libc where process-shared robust mutexes are missing: fails on first use."""

    def __init__(self, why: str) -> None:
        self.why = why

    def __getattr__(self, name: str) -> object:
        raise OSError(f"asyncnet shared atomics are not supported on this platform: {self.why}")


def _load_libc() -> object:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError as e:  # pragma: no cover - Windows
        return _Unsupported(str(e))
    if not hasattr(libc, "pthread_mutex_timedlock"):  # glibc < 2.34 keeps them in libpthread
        name = ctypes.util.find_library("pthread")
        if name is None:
            return _Unsupported("no pthread_mutex_timedlock in the C library")
        libc = ctypes.CDLL(name, use_errno=True)
        if not hasattr(libc, "pthread_mutex_timedlock"):  # pragma: no cover - macOS
            return _Unsupported("no pthread_mutex_timedlock in the C library")
    return libc


_libc: Any = _load_libc()
if isinstance(_libc, _Unsupported):  # pragma: no cover
    _trylock = _timedlock = _unlock = _consistent = None
    _HAS_ROBUST = False
else:
    _HAS_ROBUST = hasattr(_libc, "pthread_mutexattr_setrobust") and hasattr(_libc, "pthread_mutex_consistent")
    _trylock = _libc.pthread_mutex_trylock
    _timedlock = _libc.pthread_mutex_timedlock
    _unlock = _libc.pthread_mutex_unlock
    _consistent = getattr(_libc, "pthread_mutex_consistent", None)


def _init_mutex(addr: ctypes.Array) -> None:
    attr = ctypes.create_string_buffer(64)  # pthread_mutexattr_t is 4 or 8 bytes; be generous
    rc = _libc.pthread_mutexattr_init(attr)
    rc = rc or _libc.pthread_mutexattr_setpshared(attr, _PTHREAD_PROCESS_SHARED)
    if _HAS_ROBUST:
        rc = rc or _libc.pthread_mutexattr_setrobust(attr, _PTHREAD_MUTEX_ROBUST)
    rc = rc or _libc.pthread_mutex_init(addr, attr)
    _libc.pthread_mutexattr_destroy(attr)
    if rc:
        raise OSError(rc, f"pthread_mutex_init failed: {errno.errorcode.get(rc, rc)}")


class PSharedMutex:
    """A robust process-shared mutex at ``offset`` in a writable buffer (an ``mmap``).

    The object keeps a ctypes view exported from the buffer; the buffer cannot be closed
    while the view lives, which turns a close-while-in-use into a ``BufferError`` instead of
    a crash. Call :meth:`detach` before closing the buffer.
    """

    __slots__ = ("_m", "label", "warn", "recovered")

    def __init__(self, buf: object, offset: int, init: bool = False, label: str = "mutex", warn: bool = True) -> None:
        self._m = (ctypes.c_ubyte * MUTEX_BYTES).from_buffer(buf, offset)  # type: ignore[arg-type]
        self.label = label
        self.warn = warn  # False when the guarded data is one aligned store (always consistent)
        self.recovered = 0  # how many times this handle took the lock over from a dead holder
        if init:
            _init_mutex(self._m)

    def detach(self) -> None:
        """Drop the view of the buffer (the mutex object is unusable afterwards)."""
        self._m = None

    def _check(self, rc: int, m: ctypes.Array) -> bool:
        """Map a pthread return code to True (locked) / False (busy or timed out)."""
        if rc == 0:
            return True
        if rc in (errno.EBUSY, errno.ETIMEDOUT):
            return False
        if rc == _EOWNERDEAD:
            _consistent(m)
            self.recovered += 1
            if self.warn:
                warnings.warn(
                    f"{self.label}: its previous holder died while holding it; the lock was "
                    "recovered, but the data it guards may be half-updated",
                    OwnerDiedWarning,
                    stacklevel=4,
                )
            return True
        if rc == _ENOTRECOVERABLE:
            raise RuntimeError(f"{self.label} is not recoverable (a holder died and it was not repaired)")
        raise OSError(rc, f"{self.label}: pthread mutex error {errno.errorcode.get(rc, rc)}")

    def try_lock(self) -> bool:
        """Take the lock if it is free; never blocks."""
        m = self._m
        if m is None:
            raise ValueError(f"{self.label} is closed")
        return self._check(_trylock(m), m)

    def lock(self, timeout: float | None = None) -> bool:
        """Take the lock, waiting at most ``timeout`` seconds (None: as long as needed)."""
        m = self._m
        if m is None:
            raise ValueError(f"{self.label} is closed")
        rc = _trylock(m)
        if rc != errno.EBUSY:
            return self._check(rc, m)
        if timeout is not None and timeout <= 0:
            return False
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            step = _SLICE if deadline is None else min(_SLICE, deadline - time.monotonic())
            if step <= 0:
                return False
            ts = _timed(step)
            if self._check(_timedlock(m, ctypes.byref(ts)), m):
                return True

    def unlock(self) -> None:
        """Release the lock; ``RuntimeError`` if this thread does not hold it."""
        m = self._m
        if m is None:
            raise ValueError(f"{self.label} is closed")
        rc = _unlock(m)
        if rc == errno.EPERM:
            raise RuntimeError(f"{self.label} is not held by this thread (release from the owner thread)")
        if rc:
            raise OSError(rc, f"{self.label}: pthread_mutex_unlock failed: {errno.errorcode.get(rc, rc)}")


def _timed(seconds: float) -> _Timespec:
    """Absolute CLOCK_REALTIME deadline ``seconds`` from now, as pthread_mutex_timedlock wants."""
    ns = time.time_ns() + int(seconds * 1e9)
    return _Timespec(ns // 1_000_000_000, ns % 1_000_000_000)
