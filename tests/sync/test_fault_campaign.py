"""Regressions found by the fault campaign (SIGKILL / SIGTERM / os._exit of a worker at chosen
points): each test kills at the point that failed, deterministically."""

from __future__ import annotations

import multiprocessing as mp
import os

import _fault_workers as F
import numpy as np
import pytest

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


def test_no_segment_is_created_after_the_orphan_cleanup(tmp_path):
    """Found: a runner's parent killed while a worker started created its first arena; the
    watchdog's clean-up (the parent died) ran just before the creation, so the new segment
    outlived the whole group. After the clean-up a worker now creates nothing; its collectives
    raise SyncAbortedError."""
    from asyncnet.errors import SyncAbortedError
    from asyncnet.sync import launch as P

    syncs = ProcessGradientSync.new_workers(2, timeout=5)
    prefix = syncs[0]._prefix
    worker = P.ProcessGradientSync(prefix, 2, 0, 5, None)  # as a child sees it (no ownership)
    try:
        worker._bind(ready=False)
        P._cleanup_orphaned(worker, str(tmp_path / "payload"))
        with pytest.raises(SyncAbortedError, match="parent process died"):
            worker.shared_empty(10)
        with pytest.raises(SyncAbortedError):
            worker.sync_gradients(np.ones(3))
        assert [n for n in os.listdir("/dev/shm") if n.startswith(prefix)] == []
    finally:
        worker._detach()
        ProcessGradientSync.close_group(syncs)


def test_round_closed_then_aborted_says_why():
    """Found: a worker that found its round closed and the group aborted (its peer had recovered
    the lock of a worker that died holding it) raised "round 0 was aborted", with no reason and
    no name; it now carries the abort's reason, which names the dead worker."""
    got = _run_by_hand(F.last_arrives_then_dies_holding_lock, 3, 10.0)
    assert sorted(got) == [0, 1]
    for msg in got.values():
        assert msg.startswith("SyncAbortedError")
        assert "worker(s) [2] died while holding the group's lock" in msg, msg
