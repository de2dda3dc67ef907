"""Bad input to ``asyncnet train``: one line on stderr and exit 2, before any training step."""

import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

from asyncnet.cli import common
from asyncnet.cli.main import main

pytestmark = pytest.mark.timeout(120)

NAME_MAX = 255


def _train(argv, capsys):
    try:
        status = main(["train", "--quiet", *argv])
    except SystemExit as e:
        status = e.code
    return status, capsys.readouterr().err


def _assert_usage_line(status, err):
    assert status == 2, err
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert "Traceback" not in err and "internal error" not in err and "Warning" not in err, err


@pytest.mark.parametrize("flag", ["--out", "--resume", "--data", "--config"])
@pytest.mark.parametrize("how", ["long_name", "long_path", "nul"])
def test_unusable_path_is_one_line_exit_2(tmp_path, capsys, monkeypatch, flag, how):
    monkeypatch.chdir(tmp_path)
    path = {
        "long_name": str(tmp_path / ("r" * (NAME_MAX + 1))),
        "long_path": "/".join(["d" * 200] * 25),
        "nul": "run\0dir",
    }[how]
    status, err = _train([flag, path, "--epochs", "1"], capsys)
    _assert_usage_line(status, err)
    assert flag in err
    assert os.listdir(tmp_path) == []


def test_path_problem_names_what_is_wrong():
    assert common.path_problem("runs/ok") is None
    assert "longer than" in common.path_problem("x" * 300)
    assert "longer than" in common.path_problem("/".join(["d" * 200] * 25))
    assert "NUL" in common.path_problem("a\0b")
    assert common.path_problem("/".join(["d" * 200] * 5)) is None  # long but legal


def _npz(tmp_path, **arrays):
    path = tmp_path / "d.npz"
    np.savez(path, **arrays)
    return str(path)


@pytest.mark.parametrize("shape", [(10, 0), (10, 0, 3), (10, 4, 0)])
def test_data_with_no_features_is_refused_at_the_check(tmp_path, capsys, shape):
    data = _npz(tmp_path, x=np.zeros(shape), y=np.arange(10) % 2)
    status, err = _train(["--data", data, "--epochs", "1", "--out", str(tmp_path / "run")], capsys)
    _assert_usage_line(status, err)
    assert "feature" in err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("value", [1e300, -1e39])
def test_values_beyond_float32_are_one_line(tmp_path, capsys, value):
    x = np.ones((10, 4))
    x[3, 2] = value
    data = _npz(tmp_path, x=x, y=np.arange(10) % 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a numpy RuntimeWarning would be printed before the line
        status, err = _train(["--data", data, "--epochs", "1", "--out", str(tmp_path / "run")], capsys)
    _assert_usage_line(status, err)
    assert "float32" in err


def test_values_beyond_float32_print_one_line_as_a_program(tmp_path):
    x = np.ones((10, 4))
    x[0, 0] = 1e300
    data = _npz(tmp_path, x=x, y=np.arange(10) % 2)
    proc = subprocess.run(
        [sys.executable, "-m", "asyncnet", "train", "--data", data, "--quiet", "--out", str(tmp_path / "run")],
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    _assert_usage_line(proc.returncode, proc.stderr)
