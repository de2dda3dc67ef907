"""Smoke run of the zoo step-parts benchmark: its rows and the parallel shadow figures (timings
are never asserted)."""

import pytest

pytestmark = [pytest.mark.timeout(120), pytest.mark.usefixtures("no_thread_leak")]


def test_parts_give_feed_run_and_fetch_for_each_library_and_net():
    from benchmarks.zoo_executors_parts import parts

    rows = parts("mlp", ["straight"], rounds=1, steps=3)
    assert {(r["tensor"], r["net_type"]) for r in rows} == {("numpy", "straight"), ("torch", "straight")}
    assert all(r["feed_us"] > 0 and r["run_us"] > 0 and r["fetch_us"] > 0 for r in rows)


def test_the_parallel_figures_leave_the_shadow_switch_as_it_was():
    from asyncnet.tensor import shadow
    from benchmarks.zoo_executors_parts import parallel_shadow

    r = parallel_shadow("mlp", rounds=1, steps=3)
    assert r["shadow_us"] > 0 and r["op_by_op_us"] > 0 and r["speedup"] == r["op_by_op_us"] / r["shadow_us"]
    assert shadow.ENABLED is True
