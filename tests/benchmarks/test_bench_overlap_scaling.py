"""The overlap and scaling benchmarks: the job's figure is the slower rank's per round, and the
cost-model validation runs with a network probed after compute (figures never asserted)."""

import pytest

pytestmark = pytest.mark.timeout(120)


def test_bench_overlap_figures_are_the_slower_rank_per_round():
    from benchmarks.overlap import job_medians

    r0 = {"compute": [0.030, 0.031, 0.029, 0.040], "compute_cpu": [0.03] * 4}
    r1 = {"compute": [0.033, 0.030, 0.032, 0.030], "compute_cpu": [0.02] * 4}
    out = job_medians([r0, r1])
    assert out["compute_s"] == pytest.approx(0.0325)  # median of 0.033, 0.031, 0.032, 0.040
    assert out["compute_rank0_s"] == pytest.approx(0.0305)  # each rank's own median, kept beside it
    assert out["compute_rank1_s"] == pytest.approx(0.031)
    assert out["compute_cpu_s"] == pytest.approx(0.03)
    assert out["compute_s"] >= max(out["compute_rank0_s"], out["compute_rank1_s"])


@pytest.mark.timeout(180)
def test_bench_scaling_validates_with_a_network_probed_after_compute():
    pytest.importorskip("torch")
    from benchmarks.scaling import _table, validate

    res = validate([1, 2], batch=16, bucket_mb=1.0, steps=1)
    assert res["network_after_compute"] is True
    assert [(r["ranks"], r["overlap"]) for r in res["rows"]] == [(1, False), (1, True), (2, False), (2, True)]
    assert all(r["measured_s"] > 0 and r["predicted_s"] > 0 for r in res["rows"])
    net = res["network"]
    assert net["latency"] > 0 and net["bandwidth"] > 0
    assert "(after compute)" in _table(res)
