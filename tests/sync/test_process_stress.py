"""SIGKILL a random worker at a random moment, over and over: through run_parallel_workers and
both process trainers, every call must return within timeout + 5 s of the kill, with an error
naming the dead worker, and leave no process, segment or folder behind.

``ASYNCNET_STRESS_RUNS`` sets the runs per scenario (default 2 here; the issue's figure is 50:
``ASYNCNET_STRESS_RUNS=50 pytest tests/sync/test_process_stress.py``).
"""

from __future__ import annotations

import glob
import os
import random
import signal
import threading
import time
from functools import partial

import _sync_workers as W
import pytest

from asyncnet.cleanup import pid_gone
from asyncnet.sync import WorkerDiedError, run_parallel_workers

RUNS = int(os.environ.get("ASYNCNET_STRESS_RUNS", "2"))
TIMEOUT = 10.0

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120 + 60 * RUNS)]


def _children() -> list[int]:
    """This process's worker children (not multiprocessing's resource tracker)."""
    me, kids = str(os.getpid()), []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if fields[1] == me and fields[0] not in ("Z", "X") and b"resource_tracker" not in cmd:
            kids.append(int(pid))
    return kids


def _alive(pid: int) -> bool:
    return not pid_gone(pid)


def _ours() -> set[str]:
    pid = os.getpid()
    shm = {n for n in os.listdir("/dev/shm") if n.startswith("asyncnet_") and f"_{pid}_" in n}
    return shm | set(glob.glob(f"/tmp/asyncnet_fn_{pid}_*"))


def _killer(rng: random.Random, n: int, out: dict) -> None:
    """Wait for the ``n`` workers to exist, then SIGKILL one of them at a random moment in
    the next 3 s (start-up included)."""
    deadline = time.monotonic() + 60
    while len(_children()) < n and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(rng.uniform(0.0, 3.0))
    kids = _children()
    if kids:
        victim = rng.choice(kids)
        os.kill(victim, signal.SIGKILL)
        out["pid"], out["at"] = victim, time.monotonic()


def _stress(call, n: int, seed: int) -> None:
    rng = random.Random(seed)
    before = _ours()
    for run in range(RUNS):
        killed: dict = {}
        t = threading.Thread(target=_killer, args=(rng, n, killed))
        t.start()
        try:
            with pytest.raises(WorkerDiedError) as info:
                call()
        finally:
            t.join()
        returned = time.monotonic()
        assert "pid" in killed, f"run {run}: nothing was killed"
        assert returned - killed["at"] <= TIMEOUT + 5, (
            f"run {run}: returned {returned - killed['at']:.1f} s after the kill"
        )
        assert f"(pid {killed['pid']})" in str(info.value), f"run {run}: {info.value}"
        assert not [p for p in _children() if _alive(p)], f"run {run}: workers left running"
        assert _ours() == before, f"run {run}: left behind {_ours() - before}"


def test_stress_run_parallel_workers():
    _stress(
        partial(run_parallel_workers, 3, partial(W.rounds_forever, seconds=60.0), backend="processes", timeout=TIMEOUT),
        3,
        seed=1,
    )


@pytest.mark.parametrize("mode", ["sync", "hogwild"])
def test_stress_process_trainers(mode):
    from asyncnet.train.trainers import TrainConfig, train

    cfg = TrainConfig(mode=mode, backend="processes", workers=2, epochs=1000, timeout=TIMEOUT, trace=False)
    _stress(partial(train, cfg), 2, seed=2 if mode == "sync" else 3)
