"""Functions run in spawned processes by the shared-memory tests (importable by children)."""

from __future__ import annotations

import os
import signal
import time
from multiprocessing import shared_memory

import numpy as np


def shm_entries() -> set[str]:
    """Shared-memory segments that asyncnet.atomic created (other areas use other prefixes)."""
    if not os.path.isdir("/dev/shm"):
        return set()
    return {n for n in os.listdir("/dev/shm") if n.startswith("asyncnet_atomic_")}


def hammer(counter, mutex, array_name, stop, rank, n, stopper_rank):
    """fetch_add ``n`` times; bump a mutex-guarded shared array; one rank raises the stop flag.

    Returns (via exit code) 0 on success. The stop flag: every rank except ``stopper_rank``
    keeps spinning after its ``n`` updates until the flag is set, so they only finish because
    the stopper set it.
    """
    shm = shared_memory.SharedMemory(name=array_name)
    try:
        arr = np.ndarray((4,), dtype=np.int64, buffer=shm.buf)
        for _ in range(n):
            counter.fetch_add(1)
            with mutex:
                for j in range(4):  # several writes per critical section: torn updates would show
                    v = arr[j]
                    arr[j] = v + j + 1
        if rank == stopper_rank:
            stop.set_if(True)
        deadline = time.monotonic() + 60
        while not stop.load():
            if time.monotonic() > deadline:
                os._exit(3)
            time.sleep(0.001)
        del arr
    finally:
        shm.close()
        counter.close()
        mutex.close()
        stop.close()


def die_holding(mutex, how):
    """Acquire the shared mutex and die without releasing it."""
    mutex.acquire()
    if how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    os._exit(7)


def die_inside_int_lock(counter):
    """Take the atomic int's internal lock, then die (a crash in the middle of an operation)."""
    counter._mx.lock()
    os._exit(9)


def add_then_exit(counter, n):
    for _ in range(n):
        counter.fetch_add(1)
    counter.close()


def attach_by_name(name, n):
    from asyncnet.atomic import SharedAtomicInt

    with SharedAtomicInt.attach(name) as c:
        for _ in range(n):
            c.add_fetch(2)
