"""``asyncnet train --backend processes`` stopped by a signal: SIGTERM to the parent (kill,
systemd, docker stop) or SIGINT to the process group (Ctrl-C in a terminal) ends the run
promptly with one line and exit 143 / 130, no traceback from any process, no worker left
running, nothing left in /dev/shm or the temp folder."""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import time

import pytest

from asyncnet.cleanup import pid_gone

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]


def _alive(pid: int) -> bool:
    return not pid_gone(pid)


def _leftovers(pid: int) -> list[str]:
    shm = [n for n in os.listdir("/dev/shm") if n.startswith("asyncnet_") and f"_{pid}_" in n]
    return shm + glob.glob(f"/tmp/asyncnet_fn_{pid}_*")


@pytest.mark.parametrize(
    "sig, target, mode",
    [
        (signal.SIGTERM, "parent", "sync"),
        (signal.SIGINT, "group", "sync"),
        (signal.SIGTERM, "parent", "hogwild"),
        (signal.SIGINT, "group", "hogwild"),
    ],
)
def test_signal_stops_the_run_cleanly(tmp_path, sig, target, mode):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    cmd = [
        sys.executable,
        "-m",
        "asyncnet",
        "train",
        "--backend",
        "processes",
        "--mode",
        mode,
        "--epochs",
        "1000",
        "--quiet",
        "--out",
        str(tmp_path / "run"),
    ]
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 60  # until the workers train (their sync segments exist)
        while not [n for n in _leftovers(proc.pid) if n.endswith(("_g1", "_a1")) or "_hw_" in n]:
            assert proc.poll() is None and time.monotonic() < deadline, "the run never started"
            time.sleep(0.05)
        time.sleep(0.5)
        kids = [
            int(p)
            for p in subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
        ]
        sent = time.monotonic()
        if target == "group":
            os.killpg(proc.pid, sig)
        else:
            os.kill(proc.pid, sig)
        out, err = proc.communicate(timeout=30)
        assert time.monotonic() - sent < 10
        assert proc.returncode == 128 + sig, err
        assert err == ("asyncnet: terminated\n" if sig == signal.SIGTERM else "asyncnet: interrupted\n")
        deadline = time.monotonic() + 5
        while any(_alive(k) for k in kids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [k for k in kids if _alive(k)] == []
        assert _leftovers(proc.pid) == []
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
