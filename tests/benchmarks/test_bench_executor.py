"""Smoke run of the executor benchmark (timings are never asserted)."""

import pytest

pytestmark = [pytest.mark.timeout(90), pytest.mark.usefixtures("no_thread_leak")]


def test_benchmark_smoke():
    from benchmarks.executor import main

    assert main(["--quick", "--json", "--repeats", "1"]) == 0
