"""``python -m benchmarks``: one benchmark by name, or every one with ``all``; usage errors exit 2."""

import subprocess
import sys

import pytest

import benchmarks
from benchmarks import __main__ as runner

pytestmark = pytest.mark.timeout(120)


def _run(*args):
    return subprocess.run(
        [sys.executable, "-m", "benchmarks", *args],
        env=benchmarks.child_env(),
        capture_output=True,
        text=True,
        timeout=100,
    )


def test_every_module_with_a_main_is_listed():
    import importlib

    names = benchmarks.available()
    assert {
        "executor",
        "atomics",
        "allreduce",
        "train",
        "models",
        "layers",
        "netsize",
        "overlap",
        "scaling",
        "startup",
    } <= set(names)
    assert all(callable(importlib.import_module(f"benchmarks.{n}").main) for n in names)


def test_usage_and_unknown_names_exit_2():
    assert _run().returncode == 2
    out = _run("nosuch")
    assert out.returncode == 2 and "unknown benchmark 'nosuch'" in out.stderr and "startup" in out.stderr
    assert _run("--help").returncode == 0


def test_all_runs_each_in_a_child_and_reports_failures(monkeypatch, capfd):
    monkeypatch.setattr(runner, "available", lambda: ["startup", "nosuch"])
    assert runner.run_all(["--quick"]) == 1
    out, err = capfd.readouterr()
    assert "== startup --quick (load average" in out and "import asyncnet" in out
    assert "failed: nosuch" in err
