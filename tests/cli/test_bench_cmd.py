"""``asyncnet bench``: a launcher of the source checkout's ``python -m benchmarks``, never an import."""

import subprocess
import sys
from pathlib import Path

import pytest

from asyncnet.cli import bench_cmd
from asyncnet.cli.main import main as cli_main

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]


def test_finds_the_checkout_from_a_subfolder_and_from_elsewhere(tmp_path):
    assert bench_cmd.find_checkout(ROOT / "tests" / "cli") == ROOT
    assert bench_cmd.find_checkout(tmp_path) in (ROOT, None)  # the installed package's repository, if any


def test_without_a_checkout_one_line_and_exit_2(monkeypatch, capsys):
    monkeypatch.setattr(bench_cmd, "find_checkout", lambda cwd=None: None)
    assert cli_main(["bench", "atomics", "--quick"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "source repository" in err and "Traceback" not in err


def test_runs_the_benchmark_in_a_child_from_another_directory(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "asyncnet", "bench", "atomics", "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if bench_cmd.find_checkout(tmp_path) is None:
        pytest.skip("asyncnet is not installed from a source checkout here")
    assert out.returncode == 0 and "python -m benchmarks atomics" in out.stdout


def test_an_unknown_benchmark_lists_the_known_ones():
    out = subprocess.run(
        [sys.executable, "-m", "asyncnet", "bench", "nosuch"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2 and "atomics" in out.stderr and out.stderr.count("\n") == 1


def test_the_package_never_imports_benchmarks():
    code = "import sys, asyncnet, asyncnet.cli.main, asyncnet.cli.bench_cmd; print('benchmarks' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr
