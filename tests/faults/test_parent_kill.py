"""A parent killed with SIGKILL while its worker processes run: the workers clean up the
parent's shared memory in its place, and nothing warns about a leak that did not happen."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from asyncnet.cleanup import pid_gone

pytestmark = pytest.mark.timeout(120)

HERE = os.path.dirname(os.path.abspath(__file__))


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([HERE, *sys.path])
    return env


def _wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _mine(pid: int) -> list[str]:
    return sorted(n for n in os.listdir("/dev/shm") if f"_{pid}_" in n and n.startswith("asyncnet_"))


def test_parent_kill_leaves_nothing_and_warns_nothing(tmp_path):
    workers = 2
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import _fault_procs as P; P.parent_with_tracked_segments({str(tmp_path)!r}, {workers})",
        ],
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        _wait_for(lambda: all((tmp_path / str(i)).exists() for i in range(workers)), 90, "the workers to start")
        pids = [int((tmp_path / str(i)).read_text()) for i in range(workers)]
        assert len(_mine(parent.pid)) >= 3  # the atomic, the mutex and the sync group's control segment
        parent.send_signal(signal.SIGKILL)
        _, err = parent.communicate(timeout=60)  # EOF once the workers and the tracker are gone too
    finally:
        if parent.poll() is None:
            os.killpg(parent.pid, signal.SIGKILL)
            parent.wait()
    err = "".join(line for line in err.decode().splitlines(True) if not line.startswith("segments "))
    _wait_for(lambda: all(pid_gone(p) for p in pids), 10, "the workers to exit")
    assert _mine(parent.pid) == []
    assert "leaked" not in err and "Traceback" not in err and "Warning" not in err, err
