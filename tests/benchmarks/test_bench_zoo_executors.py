"""Smoke run of the zoo executors benchmark: the rows it reports, the policy's state and the
per-round lines (timings are never asserted)."""

import pytest

pytestmark = [pytest.mark.timeout(120), pytest.mark.usefixtures("no_thread_leak")]


def test_rows_carry_each_rounds_figure_and_the_async_policy():
    from benchmarks.zoo_executors import measure

    rows = measure(["mlp"], ["numpy"], ["simple", "async_scheduling"], rounds=2, steps=3)
    by_type = {r["net_type"]: r for r in rows}
    assert set(by_type) == {"simple", "async_scheduling"}
    assert all(len(r["runs"]) == 2 and len(r["modes"]) == 2 for r in rows)
    assert by_type["simple"]["modes"] == ["", ""] and "policy" not in by_type["simple"]
    policy = by_type["async_scheduling"]
    assert policy["policy"] in ("warmup", "trial", "inline", "parallel")
    assert set(policy["modes"]) <= {"warmup", "trial", "inline", "parallel"}
    assert policy["trials"] >= 0 and set(policy["figures_us"]) <= {"inline", "parallel"}
    assert by_type["simple"]["vs_first"] == 1.0


def test_per_round_lines_mark_the_policy_mode(capsys):
    from benchmarks.zoo_executors import _print_rounds

    _print_rounds(
        [
            {"model": "m", "tensor": "t", "net_type": "simple", "runs": [1000, 2000], "modes": ["", ""]},
            {
                "model": "m",
                "tensor": "t",
                "net_type": "async_scheduling",
                "runs": [900, 2100],
                "modes": ["trial", "inline"],
            },
        ]
    )
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["m/t/simple", "1,000", "2,000"]
    assert lines[1].split() == ["m/t/async_scheduling", "900t", "2,100i"]
