"""Module-level worker functions for the process tests (spawned processes must import them)."""

import os
import signal
import time

import numpy as np

from asyncnet.errors import SyncAbortedError, SyncMismatchError, SyncTimeoutError


def mean_of_ids(sync):
    g = np.full(5, float(sync.worker_id), np.float32)
    h = [np.full((2, 3), 2.0 * sync.worker_id), np.arange(4.0) * sync.worker_id]
    sync.sync_gradients(g)
    sync.sync_gradients(h)
    return g, h


def seeded_rounds(sync, rounds=3, size=1000):
    """Random gradients (seeded per worker and round); returns every round's result."""
    out = []
    for r in range(rounds):
        g = np.random.default_rng(1000 * r + sync.worker_id).standard_normal(size).astype(np.float32)
        sync.sync_gradients(g)
        out.append(g)
    return out


def arena_rounds(sync, rounds=3, size=1000):
    out = []
    g = sync.shared_empty(size, np.float32)
    for r in range(rounds):
        g[:] = np.random.default_rng(1000 * r + sync.worker_id).standard_normal(size).astype(np.float32)
        sync.sync_gradients(g)
        out.append(g.copy())
    return out


def mismatch_then_recover(sync):
    g = np.zeros([4, 7, 4][sync.worker_id], np.float32)
    try:
        sync.sync_gradients(g)
        first = "no error"
    except SyncMismatchError as exc:
        first = str(exc)
    h = np.full(3, float(sync.worker_id))
    sync.sync_gradients(h)
    return first, g, h


def one_raises(sync):
    if sync.worker_id == 1:
        raise ValueError("worker one failed")
    sync.sync_gradients(np.ones(8))
    return "unreachable"


def one_killed(sync):
    if sync.worker_id == 1:
        time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGKILL)
    sync.sync_gradients(np.ones(8))
    return "unreachable"


def one_never_comes(flags, sync):
    """Worker 2 arrives only once workers 0 and 1 have left their round (each touches
    ``<flags>/<id>`` then), or after 30 s: the others must time out naming it, whatever the
    machine's load, and its own late call must fail too."""
    g = np.full(4, float(sync.worker_id))
    if sync.worker_id == 2:
        deadline = time.monotonic() + 30.0
        while not all(os.path.exists(os.path.join(flags, str(i))) for i in (0, 1)) and time.monotonic() < deadline:
            time.sleep(0.01)
    start = time.monotonic()
    try:
        sync.sync_gradients(g)
        return ("ok", None, g, time.monotonic() - start)
    except SyncTimeoutError as exc:
        return ("timeout", exc.missing, g, time.monotonic() - start)
    finally:
        open(os.path.join(flags, str(sync.worker_id)), "w").close()


def dies_mid_training(sync):
    g = np.ones(1000)
    sync.sync_gradients(g)
    if sync.worker_id == 0:
        os._exit(3)
    try:
        sync.sync_gradients(g)
    except SyncAbortedError:
        raise
    return "unreachable"


def one_stuck_forever(sync):
    """Worker 1 hangs in user code; the others time out; the runner must still return."""
    if sync.worker_id == 1:
        time.sleep(3600)
    sync.sync_gradients(np.ones(4))


def one_stopped(sync):
    """Worker 1 stops itself (SIGSTOP: SIGTERM stays pending); the runner must still return."""
    if sync.worker_id == 1:
        os.kill(os.getpid(), signal.SIGSTOP)
    sync.sync_gradients(np.ones(4))


class NeedsTwoArgs(Exception):
    """Pickles (as ``cls(*args)``) but cannot be rebuilt: ``__init__`` takes other arguments."""

    def __init__(self, a, b):
        super().__init__(f"{a}+{b}")


def raises_unrebuildable(sync):
    raise NeedsTwoArgs(1, 2)


def leaves_a_thread_running(sync):
    import threading

    threading.Thread(target=time.sleep, args=(60,)).start()  # non-daemon: the child cannot exit
    return sync.worker_id


class UnloadableFn:
    """Pickles in the parent but fails to unpickle in the child."""

    def __reduce__(self):
        return (UnloadableFn, (1, 2))

    def __call__(self, sync):
        return 0


def sum_of(data, sync):
    return float(data.sum())


def rounds_forever(sync, seconds=60.0):
    """Sync rounds of the default model's size until ``seconds`` pass (a target to kill)."""
    g = np.ones(9610, np.float32)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        sync.sync_gradients(g)
        time.sleep(0.001)
    return "finished"


class SlowToStart:
    """A picklable ``fn`` whose unpickling takes ``delay`` seconds in exactly one worker (the
    first to create ``marker``): a worker that is slow to start, as under load."""

    def __init__(self, marker, delay):
        self.marker, self.delay = marker, delay

    def __setstate__(self, state):
        self.__dict__.update(state)
        try:
            os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL))
            time.sleep(self.delay)
        except FileExistsError:
            pass

    def __call__(self, sync):
        g = np.full(4, float(sync.worker_id))
        sync.sync_gradients(g)
        return g


def torch_result(sync):
    import torch

    t = torch.full((3,), float(sync.worker_id))
    sync.sync_gradients(t)
    return {"tensor": t, "worker": sync.worker_id}


def hold_lock_and_die(sync):
    """Worker 1 takes the group's lock and dies holding it; worker 0 then tries a round."""
    if sync.worker_id == 1:
        engine = sync._bind()
        engine.cond.acquire(True, 5.0)
        os._exit(5)
    time.sleep(1.0)
    sync.sync_gradients(np.ones(4))
