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
