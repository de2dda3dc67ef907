"""Ctrl-C while the threads backend waits for its workers: every worker has ended when the
interrupt reaches the caller (no worker left running into interpreter exit, where a thread
inside a C++ extension aborts the process)."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(120)

SCRIPT = r"""
import signal, sys, threading, time
from asyncnet.sync import LocalGradientSync, run_parallel_workers
from asyncnet.sync.hierarchical import run_hierarchical

started = threading.Barrier(3)
main = threading.main_thread().ident

def fn(sync):
    started.wait()
    while not (sync.aborted if hasattr(sync, "aborted") else sync._local.aborted):
        time.sleep(0.01)
    time.sleep(2.0 if sync.worker_id == 0 else 0.2)  # finishing its step before it sees the abort
    return 0

def interrupt():
    started.wait()
    time.sleep(0.7)  # the caller is inside its wait for the workers
    signal.pthread_kill(main, signal.SIGINT)

threading.Thread(target=interrupt, daemon=True).start()
try:
    if sys.argv[1] == "threads":
        run_parallel_workers(2, fn, backend="threads")
    else:
        run_hierarchical(2, LocalGradientSync(), fn)
except KeyboardInterrupt:
    print("interrupted", sorted(t.name for t in threading.enumerate() if t.name.startswith(("asyncnet-sync-worker",
                                                                                          "asyncnet-rank-thread"))))
"""


@pytest.mark.parametrize("attempt", range(2))
@pytest.mark.parametrize("runner", ["threads", "hierarchical"])
def test_interrupt_returns_after_every_worker_ended(runner: str, attempt: int) -> None:
    p = subprocess.run(
        [sys.executable, "-c", SCRIPT, runner],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": ":".join(sys.path)},
    )
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip() == "interrupted []", p.stdout + p.stderr[-2000:]
