"""Smoke run of the caffe2_rnn benchmark in its quick mode, through ``python -m benchmarks`` as
``all`` runs it (timings are never asserted)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import benchmarks

pytestmark = pytest.mark.timeout(300)


def test_caffe2_rnn_quick():
    assert "caffe2_rnn" in benchmarks.available()
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks", "caffe2_rnn", "--quick", "--json", "--seq", "5", "--hidden", "8"],
        env=benchmarks.child_env(),
        check=False,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(out.stdout)
    assert r["iters"] == 5 and r["rounds"] == 3 and r["seq"] == 5
    assert {"caffe2 RecurrentNetwork", "asyncnet LSTM op"} <= set(r["ms_per_pass"])
    assert all(v > 0 for v in r["ms_per_pass"].values()) and len(r["loadavg"]) == 3
