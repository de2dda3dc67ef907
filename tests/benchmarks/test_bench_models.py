"""``python -m benchmarks models --quick``: every row trains, and the torch eager peer is the same run as asyncnet local."""

import json
import statistics

import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def result():
    from benchmarks.models import _parse, run

    return run(_parse(["--quick", "--model", "cnn", "--model", "dlrm"]))


def test_every_row_of_each_model(result):
    got = [(r["model"], r["mode"], r["tensor"]) for r in result["rows"]]
    for model in ("cnn", "dlrm"):
        for mode in ("local", "sync 2", "hogwild 2"):
            assert (model, mode, "numpy") in got and (model, mode, "torch") in got
        assert (model, "torch eager", "torch") in got
    assert ("dlrm", "local simple", "numpy") in got and ("cnn", "local simple", "numpy") not in got
    assert ("dlrm", "local async", "numpy") in got
    assert all(r["samples_per_sec"] > 0 for r in result["rows"])
    assert set(result["targets"]) == {
        "cnn_best_mode_at_least_1.0x_torch_eager",
        "dlrm_best_mode_at_least_1.0x_torch_eager",
        "dlrm_async_scheduling_at_least_1.3x_simple",
    }
    pair = result["executor_pair"]
    assert [(r["net"], r["net_type"], r["split_fc_gradients"]) for r in pair] == [
        ("simple", "simple", False),
        ("simple split", "simple", True),
        ("async_scheduling", "async_scheduling", True),
    ]
    assert all(r["samples_per_sec"] > 0 for r in pair)
    simple = max(pair[0]["samples_per_sec_runs"] + pair[1]["samples_per_sec_runs"])  # the faster simple net
    assert result["ratios"]["dlrm_large_async_vs_simple"] == pytest.approx(
        max(pair[2]["samples_per_sec_runs"]) / simple
    )
    median = statistics.median
    by_median = median(pair[2]["samples_per_sec_runs"]) / max(
        median(pair[0]["samples_per_sec_runs"]), median(pair[1]["samples_per_sec_runs"])
    )
    assert result["ratios"]["dlrm_large_async_vs_simple_median_rounds"] == pytest.approx(by_median)
    assert result["targets"]["dlrm_async_scheduling_at_least_1.3x_simple"] == (
        by_median >= 1.3
    )  # judged on the large pair


def test_torch_eager_is_the_same_training_as_asyncnet_local(result):
    """Same weights, batches and optimizer: the peer ends where asyncnet local on numpy does."""
    for model in ("cnn", "dlrm"):
        by = {(r["mode"], r["tensor"]): r for r in result["rows"] if r["model"] == model}
        mine, eager = by[("local", "numpy")], by[("torch eager", "torch")]
        assert (eager["optimizer"], eager["lr"]) == (mine["optimizer"], mine["lr"])
        assert eager["final_test_accuracy"] == pytest.approx(mine["final_test_accuracy"], abs=0.006)
        if model == "dlrm":
            assert eager["final_test_auc"] == pytest.approx(mine["final_test_auc"], abs=1e-3)


def test_registered_and_printed(result):
    from benchmarks import available
    from benchmarks.models import table

    assert "models" in available()
    text = table(result)
    assert "dlrm  local simple  numpy" in text and "load average: " in text and "dlrm_async_vs_simple" in text
    json.dumps(result)  # --json prints it
