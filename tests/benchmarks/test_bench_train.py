"""Smoke test of ``python -m benchmarks train`` (figures are measured, never asserted)."""

from __future__ import annotations

import json

import pytest

from benchmarks.train import main


@pytest.mark.timeout(90)
def test_quick_json_run(capfd) -> None:
    assert main(["--quick", "--json"]) == 0  # runs in a child with single-threaded BLAS
    result = json.loads(capfd.readouterr().out)
    assert [(r["mode"], r["workers"]) for r in result["rows"]] == [
        ("local", 1),
        ("sync", 2),
        ("hogwild", 2),
        ("numpy loop", 1),
        ("torch eager", 1),
        ("local (torch)", 1),
    ]
    assert result["blas_threads"] == "1"
    for r in result["rows"]:
        assert r["samples_per_sec"] > 0 and 0 <= r["final_test_accuracy"] <= 1
        assert len(r["test_accuracy_per_epoch"]) == result["settings"]["epochs"]
    assert set(result["targets"]) == {
        "accuracy_95_every_mode",
        "sync2_speedup_at_least_1.6",
        "hogwild_same_accuracy",
        "local_at_least_0.75x_numpy_loop",
        "local_torch_at_least_1.0x_torch_eager",
    }
    # the peers start from the same weights and see the same batches: the same accuracy as local
    accs = {r["mode"]: r["test_accuracy_per_epoch"] for r in result["rows"]}
    assert accs["numpy loop"] == accs["local"] == accs["local (torch)"]


def test_table_names_every_mode(capfd) -> None:
    from benchmarks.train import table

    row = {
        "mode": "local",
        "backend": "-",
        "workers": 1,
        "samples_per_sec": 10.0,
        "speedup_vs_local": 1.0,
        "epochs_to_95": None,
        "seconds_to_95": None,
        "final_test_accuracy": 0.5,
        "best_test_accuracy": 0.5,
    }
    text = table(
        {
            "settings": {"hidden": [8], "batch_size": 4, "lr": 0.1, "epochs": 1, "net_type": "simple"},
            "dataset": "digits",
            "rows": [row],
            "targets": {"t": False},
        }
    )
    assert "local" in text and "NOT met" in text
