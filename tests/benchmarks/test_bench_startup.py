"""Smoke run of the start-up benchmark (timings are never asserted)."""

import json

import pytest

from benchmarks.startup import COMMANDS, main

pytestmark = pytest.mark.timeout(120)


def test_quick_json_with_breakdown(capsys):
    assert main(["--quick", "--json", "--breakdown"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert [r["command"] for r in res["rows"]] == list(COMMANDS)
    assert all(r["median_s"] > 0 and r["runs"] == 3 for r in res["rows"])
    assert any(m == "asyncnet" for m, _, _ in res["importtime"]) and len(res["load_average_before"]) == 3
