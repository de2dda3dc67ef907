"""Smoke run of the all-reduce benchmark (timings are never asserted)."""

import json

import pytest

from benchmarks.allreduce import main

pytestmark = pytest.mark.timeout(60)


def test_quick_json(capsys):
    assert main(["--quick", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["benchmark"] == "allreduce" and out["rows"]
    row = out["rows"][0]
    for key in ("limit_ms", "threads_ms", "procs_ms", "procs_shm_ms", "threads_pct_of_limit"):
        assert row[key] > 0
    assert set(out["targets"]) >= {"threads >= 60% of limit", "threads >= 3x gloo"}


def test_quick_table(capsys):
    assert main(["--quick"]) == 0
    assert "threads ms" in capsys.readouterr().out
