"""The runnable TensorFlow examples in examples/, each in its own process with a timeout."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from _tfcheck import tensorflow_or_skip

tensorflow_or_skip()

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def _run(name: str, *args: str, timeout: float) -> str:
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args], capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc.stdout


def _accuracies(out: str) -> list[float]:
    line = next(ln for ln in out.splitlines() if "accuracy" in ln)
    return [float(a) for a in re.findall(r"([\d.]+)%", line)]


@pytest.mark.timeout(120)
def test_tensorflow_threads_example() -> None:
    """3 worker threads on 2 cores: model.fit's compiled step holds one inter-op thread per waiting
    worker, which limit_threads(3, backend="threads") provides (with 2 the workers would wait on each other)."""
    accs = _accuracies(_run("tensorflow_threads.py", "--epochs", "2", "--workers", "3", timeout=110))
    assert len(accs) == 3 and accs[0] == accs[1] == accs[2] and accs[0] > 85  # identical replicas, and they learned


@pytest.mark.timeout(150)
def test_tensorflow_processes_example_sizes_each_workers_pools() -> None:
    out = _run("tensorflow_processes.py", "--epochs", "2", timeout=140)
    share = max(1, len(os.sched_getaffinity(0)) // 2)
    assert f"intra-op {share}, inter-op {share}" in out, out
    accs = _accuracies(out.splitlines()[-1])
    assert len(accs) == 2 and accs[0] == accs[1] and accs[0] > 85


@pytest.mark.timeout(120)
def test_tensorflow_in_net_example() -> None:
    out = _run("tensorflow_in_net.py", "--iters", "120", timeout=110)
    losses = [float(x) for x in re.findall(r"loss ([\d.]+)", out)]
    assert losses[-1] < losses[0] / 3, out
    assert _accuracies(out)[0] > 85, out
