"""Smoke run of the sparse-ops-on-two-threads benchmark (timings are never asserted)."""

import pytest

pytestmark = [pytest.mark.timeout(120), pytest.mark.usefixtures("no_thread_leak")]


def test_benchmark_smoke(capfd):
    from benchmarks.sparse_threads import main

    assert main(["--quick"]) == 0
    out = capfd.readouterr().out
    for op in ("SparseLengthsSum", "SparseAdagrad", "ScatterWeightedSum", "SparseSGDFused", "FC"):
        assert f"{op} " in out
    assert "load average" in out
