"""Sleep until a shared 32-bit word changes, with a deadline: Linux futexes through ctypes.

``futex_wait(addr, expected, timeout)`` sleeps while the word at ``addr`` still holds
``expected``, at most ``timeout`` seconds (it returns at once if the word already differs, and
may return early: callers re-check the word); ``futex_wake(addr)`` wakes every sleeper on it.
The word lives in shared memory, so sleepers and wakers may be different processes (the futexes
are not ``FUTEX_PRIVATE``). A futex holds no state of its own beyond the word: a process that
dies while sleeping on it, or before waking anyone, leaves nothing broken, which is why the
process backend's barrier sleeps on one instead of on a ``multiprocessing.Condition``.

ctypes releases the GIL around the system call, so a sleeping thread stalls no other thread.
Where the futex system call is unknown (not Linux, or an architecture missing from the table),
``futex_wait`` falls back to a short ``time.sleep`` and ``futex_wake`` does nothing: slower to
notice a change, never wrong.

    >>> import ctypes, mmap
    >>> buf = mmap.mmap(-1, 64)
    >>> word = ctypes.c_uint32.from_buffer(buf, 0)
    >>> futex_wait(ctypes.addressof(word), 1, 0.01)   # the word holds 0, not 1: returns at once
    >>> futex_wake(ctypes.addressof(word))
    >>> del word; buf.close()
"""

from __future__ import annotations

import ctypes
import platform
import sys
import time

__all__ = ["futex_wait", "futex_wake", "HAVE_FUTEX"]

_FUTEX_WAIT, _FUTEX_WAKE = 0, 1
_WAKE_ALL = 0x7FFFFFFF
# SYS_futex by machine (the generic table of the newer ports uses 98).
_SYSCALLS = {
    "x86_64": 202,
    "amd64": 202,
    "aarch64": 98,
    "arm64": 98,
    "riscv64": 98,
    "loongarch64": 98,
    "i386": 240,
    "i686": 240,
    "armv7l": 240,
    "armv6l": 240,
    "ppc64le": 221,
    "ppc64": 221,
    "s390x": 238,
}


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def _load() -> tuple[object, int] | None:
    if not sys.platform.startswith("linux"):
        return None
    nr = _SYSCALLS.get(platform.machine().lower())
    if nr is None:
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.syscall, nr
    except (OSError, AttributeError):  # pragma: no cover - no syscall() in the C library
        return None


_loaded = _load()
HAVE_FUTEX = _loaded is not None


def futex_wait(addr: int, expected: int, timeout: float) -> None:
    """Sleep while the uint32 at ``addr`` equals ``expected``, at most ``timeout`` seconds."""
    if timeout <= 0:
        return
    if _loaded is None:
        time.sleep(min(timeout, 0.001))
        return
    syscall, nr = _loaded
    sec = int(timeout)
    ts = _Timespec(sec, int((timeout - sec) * 1e9))
    # the result does not matter: woken, timed out, EAGAIN (the word changed) or EINTR all mean
    # "look at the word again"
    syscall(
        ctypes.c_long(nr),
        ctypes.c_void_p(addr),
        _FUTEX_WAIT,
        ctypes.c_uint32(expected & 0xFFFFFFFF),
        ctypes.byref(ts),
        None,
        0,
    )


def futex_wake(addr: int) -> None:
    """Wake every process or thread sleeping on the word at ``addr``."""
    if _loaded is not None:
        syscall, nr = _loaded
        syscall(ctypes.c_long(nr), ctypes.c_void_p(addr), _FUTEX_WAKE, _WAKE_ALL, None, None, 0)
