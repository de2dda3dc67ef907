"""Smoke test of ``python -m benchmarks layers`` (figures are measured, never asserted)."""

from __future__ import annotations

import json

import pytest

from benchmarks.layers import CASES, main, table


@pytest.mark.timeout(120)
def test_quick_json_run(capfd) -> None:
    assert main(["--quick", "--json"]) == 0  # runs in a child with single-threaded BLAS
    result = json.loads(capfd.readouterr().out)
    assert [r["case"] for r in result["rows"]] == list(CASES)
    assert result["blas_threads"] == "1" and len(result["load_average"]) == 3
    for r in result["rows"]:
        assert r["asyncnet_ms"] > 0 and r["torch_ms"] > 0 and r["speed_vs_torch"] > 0
    text = table(result)
    assert "load average" in text and all(c in text for c in CASES)


@pytest.mark.timeout(120)
def test_cpu_time_and_only(capfd) -> None:
    assert main(["--quick", "--json", "--cpu-time", "--only", "SpatialBN"]) == 0
    result = json.loads(capfd.readouterr().out)
    assert [r["case"] for r in result["rows"]] == [c for c in CASES if "SpatialBN" in c]
    assert result["clock"] == "cpu" and "CPU time" in table(result)
