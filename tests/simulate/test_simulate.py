"""The cost model: alpha-beta formulas checked against the algorithms run step by step, the
overlap schedule's bounds, and the command line."""

import math
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from asyncnet.simulate import (
    Network,
    Workload,
    allreduce_cpu_seconds,
    allreduce_seconds,
    parse_bandwidth,
    scaling_curve,
    step_seconds,
)

pytestmark = pytest.mark.timeout(60)


def ring_allreduce(bufs):
    """Reduce-scatter then all-gather on a ring; returns (results, steps, bytes sent per rank)."""
    p = len(bufs)
    chunks = [np.array_split(b.astype(np.float64), p) for b in bufs]
    steps, sent = 0, 0
    for phase in ("reduce", "gather"):
        for s in range(p - 1):
            msgs = []
            for r in range(p):
                c = (r - s + (0 if phase == "reduce" else 1)) % p
                msgs.append(((r + 1) % p, c, chunks[r][c].copy()))
            sent += msgs[0][2].nbytes
            for dst, c, data in msgs:
                chunks[dst][c] = chunks[dst][c] + data if phase == "reduce" else data
            steps += 1
    return [np.concatenate(ch) for ch in chunks], steps, sent


def doubling_allreduce(bufs):
    p = len(bufs)
    vals = [b.astype(np.float64) for b in bufs]
    steps, sent, d = 0, 0, 1
    while d < p:
        vals = [vals[r] + vals[r ^ d] for r in range(p)]
        sent += vals[0].nbytes
        steps, d = steps + 1, d * 2
    return vals, steps, sent


@pytest.mark.parametrize("p", [2, 3, 4, 8])
def test_ring_formula_counts_the_ring_algorithms_steps_and_bytes(p):
    n = 24 * p  # float64 elements, divisible by p
    bufs = [np.random.default_rng(r).standard_normal(n) for r in range(p)]
    out, steps, sent = ring_allreduce(bufs)
    for o in out:
        np.testing.assert_allclose(o, sum(bufs))
    net = Network(bandwidth=1e9, latency=1e-5)
    assert allreduce_seconds(n * 8, p, net, "ring") == pytest.approx(steps * net.latency + sent / net.bandwidth)


@pytest.mark.parametrize("p", [2, 4, 16])
def test_tree_formula_counts_recursive_doubling(p):
    bufs = [np.full(10, float(r)) for r in range(p)]
    out, steps, sent = doubling_allreduce(bufs)
    assert all(np.all(o == sum(range(p))) for o in out)
    net = Network(bandwidth=2e9, latency=3e-6)
    assert allreduce_seconds(80, p, net, "tree") == pytest.approx(steps * net.latency + sent / net.bandwidth)
    assert allreduce_seconds(80, p + 1, net, "tree") == pytest.approx(math.ceil(math.log2(p + 1)) * (3e-6 + 40e-9))


@pytest.mark.parametrize("p", [2, 3, 8])
def test_cpu_cost_counts_the_ring_algorithms_messages_and_bytes(p):
    n = 24 * p
    _, steps, sent = ring_allreduce([np.zeros(n)] * p)
    net = Network(1e9, 1e-5, cpu_per_byte=2e-9, cpu_per_message=7e-6)
    assert allreduce_cpu_seconds(n * 8, p, net, "ring") == pytest.approx(steps * 7e-6 + sent * 2e-9)
    assert allreduce_cpu_seconds(n * 8, p, Network(1e9, 1e-5), "ring") == 0.0  # RDMA: no CPU


def test_communication_cpu_competes_with_compute_when_ranks_fill_the_cores():
    w = Workload(0.010, 0.040, 0.0, 4 * 2**20, bucket_bytes=2**20)
    fast = Network(1e12, 1e-6)  # the wire costs ~nothing
    tcp = Network(1e12, 1e-6, cpu_per_byte=1e-3 / 2**20, cpu_per_message=0.0)  # 1 ms of CPU per MiB
    comm_cpu = 4e-3  # 2 ranks: 2(p-1)/p n = n bytes each
    # 2 ranks on 2 cores, overlapped: every CPU second is spent in the step: compute + comm_cpu
    assert step_seconds(w, 2, tcp, overlap=True, cores_per_host=2) == pytest.approx(w.compute + comm_cpu)
    # not overlapped: the all-reduce phase takes at least the ranks' CPU time over the cores
    assert step_seconds(w, 2, tcp, cores_per_host=2) == pytest.approx(w.compute + comm_cpu)
    # 4 ranks on 2 cores: compute twice as slow, and 4 ranks' communication on 2 cores
    cpu4 = allreduce_cpu_seconds(4 * 2**20, 4, tcp)
    assert step_seconds(w, 4, tcp, cores_per_host=2) == pytest.approx(2 * w.compute + 4 * cpu4 / 2)
    # cores to spare (or unknown), or no CPU cost: the communication's CPU is free
    for kw in ({"cores_per_host": 8}, {}):
        assert step_seconds(w, 2, tcp, overlap=True, **kw) == pytest.approx(
            step_seconds(w, 2, fast, overlap=True, **kw)
        )
    assert step_seconds(w, 2, fast, overlap=True, cores_per_host=2) == pytest.approx(
        step_seconds(w, 2, fast, overlap=True), abs=1e-5
    )
    with pytest.raises(ValueError, match="cpu_per_byte >= 0"):
        Network(1e9, 0.0, cpu_per_byte=-1.0)


_works = st.builds(
    Workload,
    st.floats(0, 0.1),
    st.floats(1e-4, 0.1),
    st.floats(0, 0.01),
    st.integers(1, 2**28),
    st.integers(2**10, 2**26),
)


@given(
    _works,
    st.integers(1, 64),
    st.integers(1, 8),
    st.integers(1, 16),
    st.floats(0, 1e-8),
    st.floats(0, 1e-4),
    st.booleans(),
)
def test_cpu_cost_never_lowers_a_step_and_bounds_it_by_the_hosts_cpu(w, p, threads, cores, per_byte, per_msg, overlap):
    free, costly = Network(1e9, 1e-5), Network(1e9, 1e-5, per_byte, per_msg)
    kw = dict(overlap=overlap, threads=threads, cores_per_host=cores)
    s = step_seconds(w, p, costly, **kw)
    assert s >= step_seconds(w, p, free, **kw) - 1e-12
    if overlap:  # every CPU second of the host (p ranks on it) fits in the step
        buckets = _bucket_sizes(w)
        demand = p * threads * w.compute + p * sum(allreduce_cpu_seconds(b, p, costly) for b in buckets)
        assert s >= demand / cores - 1e-12


def test_one_rank_costs_nothing_and_bad_input_is_refused():
    net = Network(1e9, 1e-6)
    assert allreduce_seconds(10**9, 1, net) == 0.0
    with pytest.raises(ValueError, match="algorithm"):
        allreduce_seconds(8, 4, net, "butterfly")
    with pytest.raises(ValueError, match="bandwidth > 0"):
        Network(0, 1e-6)


@given(_works, st.integers(1, 1024), st.floats(1e8, 1e11), st.floats(0, 1e-4))
def test_overlap_lies_between_the_bound_and_no_overlap_plus_latencies(w, p, bw, lat):
    net = Network(bw, lat)
    over, plain = step_seconds(w, p, net, overlap=True), step_seconds(w, p, net)
    comm_total = sum(allreduce_seconds(b, p, net) for b in _bucket_sizes(w))
    assert over >= max(w.compute, w.forward + w.update + comm_total) - 1e-12  # never beats the bound
    assert over <= plain + (len(_bucket_sizes(w)) - 1) * 2 * (p - 1) * lat + 1e-9  # only extra latencies cost


def _bucket_sizes(w):
    full, rest = divmod(w.grad_bytes, w.bucket_bytes)
    return [w.bucket_bytes] * full + ([rest] if rest else [])


def test_one_bucket_overlaps_nothing_and_threads_add_the_local_reduction():
    w = Workload(0.01, 0.02, 0.001, 2**20, bucket_bytes=2**30, local_bandwidth=1e9)
    net = Network(1e9, 1e-5)
    assert step_seconds(w, 8, net, overlap=True) == pytest.approx(step_seconds(w, 8, net))
    extra = step_seconds(w, 8, net, threads=4) - step_seconds(w, 8, net)
    assert extra == pytest.approx(3 * 2**20 / 1e9)
    # 4 ranks x 1 thread on 2 cores: compute twice as slow
    assert step_seconds(w, 4, net, cores_per_host=2) - step_seconds(w, 4, net) == pytest.approx(w.compute)


def test_scaling_curve_efficiency_and_throughput():
    w = Workload(0.01, 0.02, 0.0, 10 * 2**20, batch=64)
    rows = scaling_curve(w, Network(12.5e9, 5e-6), [1, 2, 1000])
    assert rows[0]["efficiency"] == 1.0 and rows[0]["samples_per_s"] == pytest.approx(64 / 0.03)
    assert (
        rows[2]["efficiency"] == pytest.approx(0.03 / rows[2]["step_s"])
        and rows[2]["efficiency"] < rows[1]["efficiency"] < 1
    )


def test_parse_bandwidth_units():
    assert parse_bandwidth("100Gb/s") == 12.5e9
    assert parse_bandwidth("12.5GB/s") == 12.5e9
    assert parse_bandwidth("800 Mbps") == 1e8
    assert parse_bandwidth("1e9") == 1e9
    with pytest.raises(ValueError, match="expected a bandwidth"):
        parse_bandwidth("fast")


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "asyncnet", "simulate", *args], capture_output=True, text=True, timeout=60
    )


def test_cli_prints_the_curve_to_1000_ranks_and_one_line_errors():
    r = _cli(
        "--forward-ms",
        "10",
        "--backward-ms",
        "20",
        "--grad-mb",
        "100",
        "--bandwidth",
        "100Gb/s",
        "--latency-us",
        "5",
        "--algorithm",
        "ring",
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert lines[-1].split()[0] == "1000" and lines[2].split()[0] == "1" and "ring+overlap" in lines[1]
    cpu = _cli(
        "--forward-ms",
        "10",
        "--backward-ms",
        "20",
        "--grad-mb",
        "4",
        "--bandwidth",
        "10Gb/s",
        "--latency-us",
        "5",
        "--cpu-ms-per-mb",
        "1",
        "--cores-per-host",
        "2",
        "--ranks-per-host",
        "2",
        "--max-ranks",
        "2",
        "--json",
    )
    assert cpu.returncode == 0, cpu.stderr
    import json

    out = json.loads(cpu.stdout)
    assert out["network"]["cpu_per_byte"] == pytest.approx(1e-3 / 2**20)
    assert out["curves"]["ring+overlap"][1]["step_s"] == pytest.approx(0.030 + 4e-3)  # compute + comm CPU
    bad = _cli("--forward-ms", "10")
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and "--profile" in bad.stderr


def test_wakeup_is_paid_once_per_allreduce_and_not_by_one_rank():
    warm = Network(1e9, 100e-6)
    cold = Network(1e9, 100e-6, wakeup=2e-3)
    for p in (2, 8, 1000):
        for alg in ("ring", "tree"):
            assert allreduce_seconds(2**20, p, cold, alg) == pytest.approx(
                allreduce_seconds(2**20, p, warm, alg) + 2e-3
            )
    assert allreduce_seconds(2**20, 1, cold) == 0.0
    w = Workload(0.01, 0.02, 0.0, 4 * 2**20, bucket_bytes=2**20)
    # four buckets: each pays the wake-up; the overlapped step can only get longer
    assert step_seconds(w, 4, cold, overlap=True) >= step_seconds(w, 4, warm, overlap=True)
    with pytest.raises(ValueError, match="wakeup"):
        Network(1e9, 1e-6, wakeup=-1.0)


def test_network_probe_separates_latency_wakeup_and_bandwidth():
    from asyncnet.simulate.measure import PROBE_BYTES
    from asyncnet.simulate.measure import network_from as _network

    alpha, wake, beta = 150e-6, 1.5e-3, 1 / 2e9
    r = {
        "small_s": 2 * alpha,
        "small_cold_s": 2 * alpha + wake,
        "big_s": 2 * alpha + wake + PROBE_BYTES * beta,
        "small_cpu_s": 2e-4,
        "small_cold_cpu_s": 2e-4,
        "big_cpu_s": 2e-4 + 1e-3,
    }
    net = _network(r)
    assert net.latency == pytest.approx(alpha) and net.wakeup == pytest.approx(wake)
    assert net.bandwidth == pytest.approx(2e9)
    assert allreduce_seconds(PROBE_BYTES, 2, net) == pytest.approx(r["big_s"])  # the model gives back the probe
    r_warm = {k: v for k, v in r.items() if not k.startswith("small_cold")}
    assert _network(r_warm).wakeup == 0.0  # an old probe: no wake-up term
