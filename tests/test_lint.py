"""The tree is ruff-clean: lint (the rules in pyproject.toml) and format."""

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[1]
TREES = ["src", "tests", "benchmarks", "examples"]


def _ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ruff", *args, *TREES], cwd=ROOT, capture_output=True, text=True)


def test_ruff_check_is_clean():
    done = _ruff("check", "--output-format", "concise")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_ruff_format_is_clean():
    done = _ruff("format", "--check")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
