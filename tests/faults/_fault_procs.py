"""Module-level functions the fault tests run in spawned processes (they must be importable)."""

from __future__ import annotations

import os
import sys
import time


def wait_forever(flags: str, sync) -> None:
    """A worker that says it has started (``<flags>/<id>`` holding its pid) and then waits."""
    path = os.path.join(flags, str(sync.worker_id))
    with open(path + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(path + ".tmp", path)
    time.sleep(120)


def parent_with_tracked_segments(flags: str, workers: int) -> None:
    """A parent owning an anonymous shared atomic and Hogwild-style segment (both registered with
    the resource tracker) that runs ``workers`` waiting worker processes; the test kills it."""
    import functools

    from asyncnet.atomic import SharedAtomicInt, SharedMutex
    from asyncnet.sync import run_parallel_workers

    held = [SharedAtomicInt(), SharedMutex()]
    print("segments", *[h.name for h in held], file=sys.stderr, flush=True)
    run_parallel_workers(workers, functools.partial(wait_forever, flags), backend="processes", timeout=60)


if __name__ == "__main__":
    parent_with_tracked_segments(sys.argv[1], int(sys.argv[2]))
