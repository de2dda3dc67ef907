"""A torchrun rank whose agent is killed stops: SIGKILL of torchrun's agent leaves no rank
training as an orphan and no shared-memory segment behind (everything on 127.0.0.1)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _torchrun import torchrun_cmd

from asyncnet.cleanup import pid_gone

pytestmark = pytest.mark.timeout(180)


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p), "GLOO_SOCKET_IFNAME": "lo"}


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except OSError:
        return []


def _wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def _epochs(run: Path) -> int:
    try:
        return len(json.loads((run / "metrics.json").read_text())["epochs"])
    except (OSError, ValueError, KeyError):
        return 0


def _segments_of(pids: list[int]) -> list[str]:
    return sorted(n for n in os.listdir("/dev/shm") if any(f"_{p}_" in n for p in pids))


@pytest.mark.parametrize("when", ["training", "starting"])
def test_sigkill_of_torchrun_agent_stops_both_ranks(tmp_path: Path, when: str) -> None:
    run = tmp_path / "run"
    cmd = torchrun_cmd(
        "-m",
        "asyncnet",
        "train",
        "--backend",
        "torch",
        "--epochs",
        "400",
        "--hidden",
        "16",
        "--quiet",
        "--out",
        str(run),
    )
    agent = subprocess.Popen(
        cmd,
        cwd=tmp_path,
        env=_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    ranks: list[int] = []
    try:
        if when == "training":
            _wait_for(lambda: _epochs(run) >= 1 or agent.poll() is not None, 120, "the first epoch")
        else:  # the ranks are importing asyncnet, before anything of theirs runs
            _wait_for(lambda: len(_children(agent.pid)) == 2 or agent.poll() is not None, 120, "the ranks")
        assert agent.poll() is None, agent.stderr.read().decode()[-2000:] if agent.stderr else ""
        ranks = _children(agent.pid)
        assert len(ranks) == 2, ranks
        agent.send_signal(signal.SIGKILL)
        agent.wait(10)
        killed = time.monotonic()
        _wait_for(lambda: all(pid_gone(p) for p in ranks), 20, f"ranks {ranks} to stop")
        took = time.monotonic() - killed
        err = agent.stderr.read().decode() if agent.stderr else ""
    finally:
        for p in [agent.pid, *ranks]:
            if not pid_gone(p):
                os.kill(p, signal.SIGKILL)
        agent.wait()
    assert took < 10, f"the ranks took {took:.1f} s to stop"
    assert _segments_of([agent.pid, *ranks]) == []
    assert "Traceback" not in err, err[-2000:]
    if when == "training":
        saved = json.loads((run / "metrics.json").read_text())
        assert saved["status"] in ("interrupted", "running") and len(saved["epochs"]) >= 1


def test_a_rank_that_ignores_the_stop_is_ended_after_the_grace(tmp_path: Path) -> None:
    """The watch's backstop: a process that ignores SIGTERM exits 143 ``grace`` s after its parent died."""
    code = (
        "import os, signal, subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import signal, time, sys\\n"
        "from asyncnet._parent_watch import watch_parent\\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\\n"
        "with watch_parent(grace=1.0):\\n"
        '    print("ready", flush=True); time.sleep(60)\'], stdout=subprocess.PIPE)\n'
        "child.stdout.readline(); print(child.pid, flush=True); time.sleep(60)\n"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", code], env=_env(), stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        child = int(parent.stdout.readline())
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        killed = time.monotonic()
        _wait_for(lambda: pid_gone(child), 15, "the watched child to end")
        assert 0.9 < time.monotonic() - killed < 10
    finally:
        os.killpg(parent.pid, signal.SIGKILL)
        parent.wait()
