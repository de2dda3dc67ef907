"""RobustCondition: wake-ups across processes, deadlines, and a holder that dies."""

from __future__ import annotations

import mmap
import multiprocessing as mp
import os
import time

import pytest

from asyncnet._shm import open_segment, unlink_segment
from asyncnet.sync._robustcond import RobustCondition

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def segment():
    name = f"asyncnet_sync_{os.getpid()}_condtest{time.monotonic_ns() % 10**9}_ctl"
    seg = open_segment(name, create=True, size=RobustCondition.BYTES)
    yield name, seg
    seg.close()
    unlink_segment(name)


def _take_and_die(name):
    seg = open_segment(name)
    cond = RobustCondition(seg.buf, 0)
    assert cond.acquire(True, 5.0)
    os._exit(3)


def _notify_later(name, delay):
    seg = open_segment(name)
    cond = RobustCondition(seg.buf, 0)
    time.sleep(delay)
    cond.acquire(True, 5.0)
    cond.notify_all()
    cond.release()


def test_wait_times_out_holding_the_lock_again():
    buf = mmap.mmap(-1, RobustCondition.BYTES)
    cond = RobustCondition(buf, 0, init=True)
    assert cond.acquire(True, 1.0)
    start = time.monotonic()
    cond.wait(0.2)
    assert 0.15 < time.monotonic() - start < 10.0
    assert not RobustCondition(buf, 0).acquire(False)  # still ours
    cond.release()
    cond.detach()


def test_notify_from_another_process_wakes_a_sleeper(segment):
    name, seg = segment
    cond = RobustCondition(seg.buf, 0, init=True)
    p = mp.get_context("spawn").Process(target=_notify_later, args=(name, 0.5))
    p.start()
    try:
        cond.acquire(True, 5.0)
        start = time.monotonic()
        cond.wait(20.0)  # sleeps on the futex once the spin is over
        assert time.monotonic() - start < 10
        cond.release()
    finally:
        p.join()
        cond.detach()


def test_a_holder_that_dies_hands_the_lock_over(segment):
    name, seg = segment
    cond = RobustCondition(seg.buf, 0, init=True)
    p = mp.get_context("spawn").Process(target=_take_and_die, args=(name,))
    p.start()
    p.join()
    assert p.exitcode == 3
    assert cond.recovered == 0
    assert cond.acquire(True, 2.0)  # EOWNERDEAD: taken over, not a deadlock
    assert cond.recovered == 1
    cond.release()
    cond.detach()


class _HandOverOnUnlock:
    """Wraps a condition's mutex: its ``at``-th unlock (1-based) lets a child process take the
    lock and die holding it, so the next taking of the lock is a take-over. Logs each call."""

    def __init__(self, mx, name: str, at: int):
        self._inner, self._name, self._at = mx, name, at
        self.log: list[tuple[str, int]] = []

    @property
    def recovered(self) -> int:
        return self._inner.recovered

    def lock(self, timeout=None):
        got = self._inner.lock(timeout)
        self.log.append(("lock", self._inner.recovered))
        return got

    def unlock(self):
        self._inner.unlock()
        self.log.append(("unlock", self._inner.recovered))
        if sum(op == "unlock" for op, _ in self.log) == self._at:
            p = mp.get_context("spawn").Process(target=_take_and_die, args=(self._name,))
            p.start()
            p.join()
            assert p.exitcode == 3


@pytest.mark.parametrize("at", [1, 2], ids=["before-sleeping", "after-sleeping"])
def test_a_wait_that_takes_over_keeps_the_lock(segment, at):
    """Found by a fault campaign: a waiter took the lock over from a dead holder inside wait()
    (the sleeper count is kept under the lock) and released it again before returning; a third
    process then took the lock, saw no take-over and read the dead holder's half-written round
    as a finished one. A take-over inside wait() must return at once, the lock kept."""
    name, seg = segment
    cond = RobustCondition(seg.buf, 0, init=True, spin=0.0)
    spy = cond._mx = _HandOverOnUnlock(cond._mx, name, at)
    try:
        assert cond.acquire(True, 2.0)
        cond.wait(0.2)
        assert cond.recovered == 1
        first = next(i for i, (_, rec) in enumerate(spy.log) if rec == 1)
        assert spy.log[first:] == [("lock", 1)], spy.log  # taken over, and never released since
        cond.release()  # raises unless this thread holds the lock
    finally:
        cond._mx = spy._inner
        cond.detach()
