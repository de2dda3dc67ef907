"""Worker functions for tests/sync/test_fault_campaign.py (spawned processes import them).

Each one kills a worker at a chosen point, deterministically: the victim exits itself there."""

from __future__ import annotations

import os
import time

import numpy as np

from asyncnet.errors import SyncError


def die_holding_lock_by_hand(sync, q):
    """Worker 1 takes the group's lock and exits holding it; worker 0 then tries a round.
    Run without the runner, so only the lock's recovery can tell worker 0 what happened."""
    try:
        if sync.worker_id == 1:
            sync._bind().cond.acquire(True, 5.0)
            os._exit(5)
        sync._bind()
        while not sync._peer_dead(1):  # the holder is gone before worker 0 takes the lock
            time.sleep(0.01)
        sync.sync_gradients(np.ones(4))
        q.put((sync.worker_id, "ok"))
    except SyncError as exc:
        q.put((sync.worker_id, f"{type(exc).__name__}: {exc}"))


def last_arrives_then_dies_holding_lock(sync, q):
    """Worker 2 arrives last at a small round (closing it) and exits still holding the group's
    lock; workers 0 and 1 are waiting in that round. One of them recovers the lock and aborts
    the group; the other then finds the round closed and the group aborted."""
    import time as _time

    from asyncnet.sync import _rounds

    try:
        if sync.worker_id == 2:
            original = _rounds.RoundEngine._arrive

            def arrive_and_die(self, *args, **kwargs):
                original(self, *args, **kwargs)
                os._exit(5)  # the lock is held here: run() releases it after _arrive returns

            _rounds.RoundEngine._arrive = arrive_and_die
            sync._bind()
            while sync._control.ints[_rounds.ARRIVED] < 2:  # both peers wait in round 0
                _time.sleep(0.01)
        sync.sync_gradients(np.ones(4))
        q.put((sync.worker_id, "ok"))
    except SyncError as exc:
        q.put((sync.worker_id, f"{type(exc).__name__}: {exc}"))
