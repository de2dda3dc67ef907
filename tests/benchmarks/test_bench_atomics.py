"""Smoke test of ``python -m benchmarks atomics``: it runs, prints JSON rows, and leaks nothing."""

from __future__ import annotations

import json

import pytest

from benchmarks.atomics import main


@pytest.mark.timeout(90)
def test_bench_atomics_quick_json(capsys, no_shm_leak, no_thread_leak):
    assert main(["--quick", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = out["rows"]
    modes = {(r["what"], r["mode"]) for r in rows}
    for what in (
        "AtomicInt",
        "threading.Lock + int",
        "multiprocessing.Value + lock",
        "SharedAtomicInt",
        "AtomicFetchAdd op (ws.run_net)",
    ):
        assert (what, "1 thread") in modes and (what, "2 threads") in modes
    assert ("SharedAtomicInt", "2 processes") in modes
    assert all(r["ops_per_s"] > 0 and r["ratio"] > 0 for r in rows)
