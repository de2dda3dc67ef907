"""The hybrid-parallel (all-to-all) cost model: the formula against a pairwise all-to-all run
step by step, hand-worked steps, and the validation against measured hybrid dlrm runs on 1 and
2 gloo ranks (structure; the figures go to the report, never asserted)."""

import math

import numpy as np
import pytest

from asyncnet.simulate import HybridWorkload, Network, alltoall_cpu_seconds, alltoall_seconds, hybrid_step_seconds

pytestmark = pytest.mark.timeout(60)


def pairwise_alltoall(bufs):
    """Rank r sends its chunk j to rank j in p - 1 rounds (round s: to r + s); returns
    (received, messages per rank, bytes sent per rank)."""
    p = len(bufs)
    chunks = [np.array_split(b, p) for b in bufs]
    got = [[None] * p for _ in range(p)]
    for r in range(p):
        got[r][r] = chunks[r][r]
    msgs, sent = 0, 0
    for s in range(1, p):
        for r in range(p):
            got[(r + s) % p][r] = chunks[r][(r + s) % p]
        msgs, sent = msgs + 1, sent + chunks[0][s % p].nbytes
    return [np.concatenate(g) for g in got], msgs, sent


@pytest.mark.parametrize("p", [2, 3, 4, 8])
def test_alltoall_formula_counts_the_pairwise_exchange(p):
    n = 16 * p
    bufs = [np.arange(n, dtype=np.float64) + 1000 * r for r in range(p)]
    out, msgs, sent = pairwise_alltoall(bufs)
    for r in range(p):
        np.testing.assert_array_equal(out[r], np.concatenate([np.array_split(b, p)[r] for b in bufs]))
    net = Network(bandwidth=1e9, latency=1e-5, cpu_per_byte=2e-9, cpu_per_message=7e-6)
    assert alltoall_seconds(n * 8, p, net) == pytest.approx(msgs * net.latency + sent / net.bandwidth)
    assert alltoall_cpu_seconds(n * 8, p, net) == pytest.approx(msgs * 7e-6 + sent * 2e-9)
    assert alltoall_seconds(n * 8, p, Network(1e9, 1e-5, wakeup=1e-3)) == pytest.approx(
        alltoall_seconds(n * 8, p, Network(1e9, 1e-5)) + 1e-3
    )
    assert alltoall_seconds(n * 8, 1, net) == 0.0
    with pytest.raises(ValueError, match="ranks >= 1"):
        alltoall_seconds(8, 0, net)


def test_hybrid_step_by_hand():
    w = HybridWorkload(
        lookup=0.004, dense=0.020, update=0.006, tables=3, dim=16, batch=256, grad_bytes=4096 + 64 + 4, call=1e-4
    )
    net = Network(bandwidth=1e9, latency=5e-5, wakeup=1e-3)
    assert w.calls == 3
    assert hybrid_step_seconds(w, 1, net) == pytest.approx(0.030 + 3e-4)
    # 2 ranks: the busier owns 2 of 3 tables; it sends half of 2 x 256 x 16 x 4 bytes, twice
    sent = 2 * 256 * 16 * 4
    a2a = 5e-5 + sent / 2 / 1e9 + 1e-3
    grads = 2 * 5e-5 + (4096 + 64 + 4) / 1e9 + 1e-3  # ring, p = 2: 2 alpha + n beta, the wake-up once
    compute = 0.010 * 2 / 3 + 0.010 + 3e-4
    assert hybrid_step_seconds(w, 2, net) == pytest.approx(compute + 2 * a2a + grads)
    # 2 ranks on 1 core: compute twice as slow; a CPU-hungry network sets a floor on the communication
    assert hybrid_step_seconds(w, 2, net, cores_per_host=1) == pytest.approx(2 * compute + 2 * a2a + grads)
    hungry = Network(1e12, 0.0, cpu_per_byte=1e-6)
    cpu = 2 * alltoall_cpu_seconds(sent, 2, hungry) + (4096 + 64 + 4) * 1e-6
    assert hybrid_step_seconds(w, 2, hungry, cores_per_host=2) == pytest.approx(compute + 2 * cpu / 2)
    with pytest.raises(ValueError, match="ranks >= 1"):
        hybrid_step_seconds(w, 0, net)


def test_many_ranks_share_the_tables_and_pay_more_messages():
    w = HybridWorkload(lookup=0.01, dense=0.05, update=0.02, tables=26, dim=64, batch=65536, grad_bytes=6 * 2**20)
    net = Network(bandwidth=12.5e9, latency=5e-6)
    steps = {p: hybrid_step_seconds(w, p, net) for p in (1, 2, 26, 1000)}
    assert steps[2] < steps[1] and steps[26] < steps[2]
    # past one table per rank the tables no longer split: the lookup share stays 1/26
    comp26 = 0.03 / 26 + 0.05 / 26
    assert steps[1000] > 0.03 / 26 + 0.05 / 1000
    assert steps[26] > comp26
    assert math.isclose(hybrid_step_seconds(w, 1, net), 0.08)


@pytest.mark.timeout(600)
def test_validation_runs_hybrid_dlrm_on_1_and_2_ranks():
    pytest.importorskip("torch.distributed")
    from asyncnet.simulate.measure import validate_hybrid

    res = validate_hybrid(
        "random:tables=200-200-200-200,dense=4,batches=4,batch=64",
        64,
        steps=3,
        dims={"dim": 8, "bottom": [16], "top": [16]},
    )
    rows = {r["ranks"]: r for r in res["rows"]}
    assert sorted(rows) == [1, 2]
    for r in rows.values():
        assert r["measured_s"] > 0 and r["predicted_s"] > 0 and r["predicted_here_s"] > 0
        assert set(r["phases_s"]) == {"lookup", "alltoall", "dense", "allreduce", "update"}
        assert r["error"] == pytest.approx(r["predicted_s"] / r["measured_s"] - 1)
    assert res["workload"]["tables"] == 4 and res["workload"]["grad_bytes"] == 4 * (
        1 + (4 * 16 + 16) + (16 * 8 + 8) + (16 * 18 + 16) + (16 + 1)
    )
    assert res["network"]["latency"] > 0 and res["network_after_compute"] is True
