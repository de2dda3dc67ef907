"""``RobustCondition``: a condition variable for processes that no dead process can break.

The process backend's barrier needs a lock around the group state and a way to sleep until a
peer changes it. ``multiprocessing.Condition`` is the wrong tool for that: its ``notify`` waits,
without a timeout, for every woken sleeper to acknowledge, and its ``wait`` re-takes its lock
without a timeout, so a process that dies inside either leaves every peer blocked for good. This
condition is made of two things that a death cannot leave in a bad state:

- the **lock** is the robust process-shared pthread mutex of :mod:`asyncnet.atomic` (a holder
  that dies hands the lock to the next locker, who learns of it through :attr:`recovered`);
- the **wake-up word** is a 32-bit sequence number beside it, bumped under the lock by
  :meth:`notify_all`. A waiter remembers the number, releases the lock, polls the word for up
  to ``SPIN_SECONDS`` (two cores see each other's store in well under a microsecond; each
  empty poll yields the core to whoever else wants it), then sleeps on it with a futex and a
  deadline, and re-takes the lock. Nobody counts on anybody: a sleeper that dies leaves
  nothing to clean, a notifier that dies before waking anyone only makes the waiters sleep to
  their next deadline.

A second word counts the sleepers, so :meth:`notify_all` makes the wake-up system call only when
somebody is (or may be) asleep: in a busy group the waiters are still spinning when the last
peer arrives, and a round needs no system call at all. A sleeper that dies leaves the count too
high, which costs a wake-up call per notify, nothing else.

Layout at ``offset`` in a writable shared buffer (``BYTES`` bytes): the mutex (64 bytes), the
sequence word (uint32, offset 64), the sleeper count (int32, offset 68).

    >>> import mmap
    >>> buf = mmap.mmap(-1, RobustCondition.BYTES)
    >>> cond = RobustCondition(buf, 0, init=True)
    >>> cond.acquire(True, 1.0)
    True
    >>> cond.wait(0.01)          # nobody notifies: returns after the timeout, lock held again
    >>> cond.notify_all(); cond.release(); cond.detach(); buf.close()
"""

from __future__ import annotations

import ctypes
import errno
import os
import time
from typing import Any

from asyncnet.atomic import _pshared
from asyncnet.atomic._futex import futex_wait, futex_wake
from asyncnet.atomic._pshared import MUTEX_BYTES, PSharedMutex

__all__ = ["RobustCondition"]

_yield = getattr(os, "sched_yield", lambda: None)

# How long a waiter (and a contended locker) polls before it sleeps on the futex. Every poll
# that finds nothing yields the core (sched_yield): on an idle core that returns at once, so
# the change is seen within a microsecond or two; when other tasks want the core (a peer of
# an oversubscribed group among them) they get it, where a pure spin would starve a peer that
# shares the core for the rest of its time slice. Long enough to cover the usual skew between
# workers that arrive at a round together: on this project's 2-vCPU virtual machines waking a
# sleeper costs from 50 us to milliseconds (an idle vCPU halts), and with 50 us most waits of a
# loaded machine ended up asleep; 500 us made a 10k-float round 2-4x faster.
SPIN_SECONDS = 500e-6


class RobustCondition:
    """``acquire(blocking, timeout)``, ``release()``, ``wait(timeout)``, ``notify_all()`` over
    shared memory, usable from any number of processes (and threads); see the module doc."""

    BYTES = 128

    def __init__(self, buf: Any, offset: int = 0, init: bool = False, spin: float | None = None):
        self._mx = PSharedMutex(buf, offset, init=init, label="the sync group's lock", warn=False)
        self._m = self._mx._m  # the raw pthread calls below skip PSharedMutex's checks when all is well
        self._seq = ctypes.c_uint32.from_buffer(buf, offset + MUTEX_BYTES)
        self._sleepers = ctypes.c_int32.from_buffer(buf, offset + MUTEX_BYTES + 4)
        self._addr = ctypes.addressof(self._seq)
        self.spin = SPIN_SECONDS if spin is None else spin
        if init:
            self._seq.value = 0
            self._sleepers.value = 0

    @property
    def recovered(self) -> int:
        """How often this handle took the lock over from a holder that had died."""
        return self._mx.recovered

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        """Take the lock; False when ``timeout`` (None: no limit) passed first."""
        m = self._m  # a local reference keeps the mapping alive whatever another thread does
        mx = self._mx
        if m is None:
            return mx.try_lock()  # raises: closed
        rc = _pshared._trylock(m)
        if rc == 0:
            return True
        if rc != errno.EBUSY:
            return mx._check(rc, m)  # EOWNERDEAD (taken over, counted in ``recovered``) or an error
        if not blocking:
            return False
        if self.spin:
            end = time.perf_counter() + self.spin
            while time.perf_counter() < end:
                if mx.try_lock():
                    return True
                _yield()
        return mx.lock(None if timeout is None else max(0.0, timeout - self.spin))

    def release(self) -> None:
        m = self._m
        if m is None or _pshared._unlock(m):
            self._mx.unlock()  # raises the right error

    def wait(self, timeout: float) -> None:
        """Release the lock, return after a :meth:`notify_all` or ``timeout`` seconds, holding
        the lock again. Like every condition, it may return early: re-check the state.

        A wait that takes the lock over from a dead holder returns at once and keeps the lock
        from that moment on: the caller sees :attr:`recovered` change before any other process
        can take the lock and read the half-written state as if nothing had happened."""
        seq = self._seq
        start = seq.value
        before = self._mx.recovered
        self._mx.unlock()
        held = [False]  # set by _sleep when it returns (or raises) holding the lock
        try:
            end = time.perf_counter() + timeout
            spin_end = min(end, time.perf_counter() + self.spin)
            while seq.value == start:
                if time.perf_counter() >= spin_end:
                    self._sleep(start, end, before, held)
                    break
                _yield()  # a peer waiting for a core gets this one (an idle system returns at once)
        finally:
            if not held[0]:
                self._relock()

    def _sleep(self, start: int, end: float, before: int, held: list[bool]) -> None:
        """Sleep on the wake-up word, counted among the sleepers (the count is guarded by the
        lock). ``held[0]`` becomes True when one of the lock's takings here was a take-over
        (``recovered`` moved past ``before``): the lock is then kept, not released."""
        sleepers = self._sleepers
        self._relock()
        if self._mx.recovered != before:
            held[0] = True
            return
        sleepers.value += 1
        self._mx.unlock()
        try:
            futex_wait(self._addr, start, end - time.perf_counter())
        finally:
            self._relock()
            sleepers.value -= 1
            if self._mx.recovered != before:
                held[0] = True
            else:
                self._mx.unlock()

    def _relock(self) -> None:
        """Take the lock back even if a signal handler raises meanwhile (then re-raise it), so
        the caller's ``finally: release()`` always holds what it releases."""
        pending: BaseException | None = None
        while True:
            try:
                if self._mx.lock(None):
                    break
            except (KeyboardInterrupt, SystemExit) as exc:
                pending = exc
        if pending is not None:
            raise pending

    def notify_all(self) -> None:
        """Wake every waiter (call it holding the lock; an abort may call it without)."""
        self._seq.value = (self._seq.value + 1) & 0xFFFFFFFF
        if self._sleepers.value > 0:
            futex_wake(self._addr)

    def detach(self) -> None:
        """Drop the views of the buffer, so it can be closed; the object is unusable after."""
        self._mx.detach()
        self._m = self._seq = self._sleepers = None  # type: ignore[assignment]
