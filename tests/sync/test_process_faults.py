"""The process backend when processes die: a killed worker frees its peers (with or without the
runner, with or without a timeout), a killed parent takes its workers and segments with it,
load cannot fool the timeouts, torch tensors come back whole, and nothing is left behind."""

from __future__ import annotations

import glob
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import textwrap
import time

import _sync_workers as W
import numpy as np
import pytest

from asyncnet.cleanup import pid_gone
from asyncnet.errors import SyncAbortedError
from asyncnet.sync import ProcessGradientSync, WorkerDiedError, run_parallel_workers

pytestmark = [pytest.mark.timeout(90), pytest.mark.usefixtures("no_leaked_segments")]


def _alive(pid: int) -> bool:
    return not pid_gone(pid)


def _leftovers(pid: int) -> list[str]:
    """Segments and runner folders named after the creator ``pid``."""
    segs = [
        n
        for n in os.listdir("/dev/shm")
        if n.startswith(("asyncnet_sync_", "asyncnet_hw_", "asyncnet_atomic_")) and f"_{pid}_" in n
    ]
    return segs + glob.glob(f"/tmp/asyncnet_fn_{pid}_*")


def _wait_for_training(prefix: str, n: int, limit: float = 60.0) -> None:
    """Until every worker of the group made its staging segment (it is in its rounds)."""
    deadline = time.monotonic() + limit
    while len([s for s in os.listdir("/dev/shm") if s.startswith(prefix) and s.endswith("_g1")]) < n:
        assert time.monotonic() < deadline, "the workers never started their rounds"
        time.sleep(0.05)


def _sync_loop(sync, q):
    """A worker started by hand (no runner): rounds until its group is aborted."""
    try:
        W.rounds_forever(sync, 60)
        q.put((sync.worker_id, "finished"))
    except SyncAbortedError as exc:
        q.put((sync.worker_id, str(exc)))


@pytest.mark.parametrize("timeout", [None, 30])
def test_killed_worker_frees_its_peers_without_the_runner(timeout):
    """The module docstring's usage (own processes, no timeout): SIGKILL one worker mid-training;
    the survivors' calls end promptly with an error naming it."""
    ctx = mp.get_context("spawn")
    syncs = ProcessGradientSync.new_workers(3, timeout=timeout)
    q = ctx.SimpleQueue()
    procs = [ctx.Process(target=_sync_loop, args=(s, q)) for s in syncs]
    try:
        for p in procs:
            p.start()
        _wait_for_training(syncs[0]._prefix, 3)
        time.sleep(0.5)
        os.kill(procs[1].pid, signal.SIGKILL)
        killed_at = time.monotonic()
        for p in (procs[0], procs[2]):
            p.join(10)
        assert time.monotonic() - killed_at < 10
        got = dict(q.get() for _ in range(2))
        assert set(got) == {0, 2}
        for msg in got.values():
            assert "[1]" in msg and "died" in msg
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
            p.join()
        ProcessGradientSync.close_group(syncs)


def test_worker_that_dies_holding_the_group_lock_aborts_the_group():
    start = time.monotonic()
    with pytest.raises(WorkerDiedError, match="exit code 5") as info:
        run_parallel_workers(2, W.hold_lock_and_die, backend="processes", timeout=20)
    assert time.monotonic() - start < 20
    assert isinstance(info.value.worker_errors[0], SyncAbortedError)


def test_worker_slow_to_start_is_not_blamed(tmp_path):
    """One worker takes 2 s to start (its fn loads slowly); the timeout is 0.5 s: it counts from
    the moment every worker has started, so no round times out."""
    fn = W.SlowToStart(str(tmp_path / "marker"), 2.0)
    results = run_parallel_workers(3, fn, backend="processes", timeout=0.5)
    for g in results:
        assert np.array_equal(g, np.full(4, 1.0))


def test_torch_tensors_come_back_as_results():
    torch = pytest.importorskip("torch")
    results = run_parallel_workers(2, W.torch_result, backend="processes", timeout=30)
    for i, r in enumerate(results):
        assert r["worker"] == i and isinstance(r["tensor"], torch.Tensor)
        assert r["tensor"].tolist() == [0.5, 0.5, 0.5]


PARENT = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {tests!r})
    import _sync_workers as W
    from asyncnet.sync import run_parallel_workers
    if __name__ == "__main__":
        run_parallel_workers(3, W.rounds_forever, backend="processes", timeout={timeout})
""")


@pytest.mark.parametrize("timeout", [None, 10])
def test_killed_parent_takes_its_workers_and_segments_with_it(tmp_path, timeout):
    script = tmp_path / "parent.py"
    script.write_text(PARENT.format(tests=os.path.dirname(__file__), timeout=timeout))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    parent = subprocess.Popen([sys.executable, str(script)], env=env, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_training(f"asyncnet_sync_{parent.pid}_", 3)
        kids = [
            int(p)
            for p in subprocess.run(["pgrep", "-P", str(parent.pid)], capture_output=True, text=True).stdout.split()
        ]
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and (any(_alive(k) for k in kids) or _leftovers(parent.pid)):
            time.sleep(0.1)
        err = parent.stderr.read()
        assert [k for k in kids if _alive(k)] == []
        assert _leftovers(parent.pid) == [], err
        assert "Traceback" not in err, err
    finally:
        if parent.poll() is None:
            parent.kill()
        parent.wait()
        parent.stderr.close()
