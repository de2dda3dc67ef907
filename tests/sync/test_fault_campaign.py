"""Regressions found by the fault campaign (SIGKILL / SIGTERM / os._exit of a worker at chosen
points): each test kills at the point that failed, deterministically."""

from __future__ import annotations

import multiprocessing as mp

import pytest

import _fault_workers as F
from asyncnet.sync import ProcessGradientSync

pytestmark = [pytest.mark.timeout(60), pytest.mark.usefixtures("no_leaked_segments")]


def _run_by_hand(fn, n: int, timeout: float | None) -> dict[int, str]:
    """Run ``fn(sync, q)`` on ``n`` hand-started processes (no runner); their reports by id."""
    ctx = mp.get_context("spawn")
    syncs = ProcessGradientSync.new_workers(n, timeout=timeout)
    q = ctx.SimpleQueue()
    procs = [ctx.Process(target=fn, args=(s, q)) for s in syncs]
    try:
        for p in procs:
            p.start()
        for p in procs:
            p.join(30)
        assert not any(p.is_alive() for p in procs), "a worker hung"
        got = {}
        while not q.empty():
            w, msg = q.get()
            got[w] = msg
        return got
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
        ProcessGradientSync.close_group(syncs)


@pytest.mark.parametrize("timeout", [None, 10.0])
def test_death_holding_the_lock_names_the_dead_worker(timeout):
    """Found: the survivor's error said "a worker died while holding the group's lock" without
    saying which one; a hand-started group has no runner to name it."""
    got = _run_by_hand(F.die_holding_lock_by_hand, 2, timeout)
    assert list(got) == [0]
    assert got[0].startswith("SyncAbortedError")
    assert "worker(s) [1] died while holding the group's lock" in got[0]
