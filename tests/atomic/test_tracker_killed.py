"""multiprocessing's resource tracker killed under a process that owns shared segments
(asyncnet._tracker): nothing printed, nothing left in /dev/shm, whether the owner then exits
normally or is killed too (the new tracker must know the segments made before it)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

pytestmark = pytest.mark.timeout(60)

SCRIPT = textwrap.dedent("""
    import os, signal, sys, time
    import numpy as np
    from multiprocessing import resource_tracker
    from asyncnet.atomic import SharedAtomicInt
    from asyncnet._shm import SharedArrays

    before = [SharedAtomicInt(1), SharedArrays.create({"w": np.ones(4, np.float32)})]
    tracker = resource_tracker._resource_tracker._pid
    os.kill(tracker, signal.SIGKILL)
    os.waitpid(tracker, 0)
    after = [SharedAtomicInt(2), SharedArrays.create({"w": np.zeros(4, np.float32)})]
    print(" ".join([before[0].name, before[1].spec[0], after[0].name, after[1].spec[0]]), flush=True)
    if sys.argv[1] == "crash":
        os.kill(os.getpid(), signal.SIGKILL)
    before[0].exchange(3)
    for h in before + after:
        h.close()
""")


def _gone(names: list[str], within: float) -> list[str]:
    deadline = time.monotonic() + within
    while True:
        left = [n for n in names if os.path.exists(f"/dev/shm/{n}")]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="POSIX shared memory under /dev/shm")
@pytest.mark.parametrize("end", ["exit", "crash"])
def test_a_killed_resource_tracker_is_replaced_silently_and_still_cleans_up(end: str) -> None:
    p = subprocess.run([sys.executable, "-c", SCRIPT, end], capture_output=True, text=True, timeout=50)
    names = p.stdout.split()
    assert len(names) == 4, p.stderr
    assert p.returncode == (0 if end == "exit" else -9)
    # neither Python's "might leak" warning nor the new tracker's KeyError tracebacks; after a crash
    # the tracker's own notice that it cleans up the 4 segments is expected
    crash_notice = "UserWarning: resource_tracker: There appear to be 4 leaked shared_memory objects"
    assert p.stderr == "" if end == "exit" else (crash_notice in p.stderr and "Traceback" not in p.stderr), p.stderr
    assert _gone(names, within=10) == []  # on a crash the new tracker unlinks the old segments too
