"""The runnable torch examples in examples/ (threads, and torchrun with 2 processes)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from _torchrun import run_torchrun, torchrun_cmd

pytest.importorskip("torch")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.timeout(60)
def test_torch_threads_example() -> None:
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / "torch_threads.py"), "--epochs", "3"],
        capture_output=True,
        text=True,
        timeout=50,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    accs = [float(a.strip(" %\n")) for a in proc.stdout.split(":")[-1].split(",")]
    assert len(accs) == 2 and accs[0] == accs[1] and accs[0] > 90  # identical replicas, and they learned


@pytest.mark.timeout(90)
def test_torchrun_example() -> None:
    cmd = torchrun_cmd(
        str(EXAMPLES / "torch_torchrun.py"),
    )
    proc = run_torchrun(cmd, "test accuracy")
    assert proc.stdout.count("test accuracy") == 2, proc.stdout + proc.stderr[-2000:]
