"""``asyncnet train --data FILE.npz``: arrays x and y checked against the model before the first
step; dtypes converted or refused, shapes checked, every problem one line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from asyncnet.cli.main import main
from asyncnet.errors import TrainConfigError
from asyncnet.train.data import load_digits, load_npz

pytestmark = pytest.mark.timeout(60)


def _digits(path: Path, shape: tuple[int, ...] = (64,), **extra: np.ndarray) -> Path:
    ds = load_digits()
    x = np.concatenate([ds.x_train, ds.x_test]).astype(np.float64).reshape(-1, *shape)  # numpy's default dtype
    y = np.concatenate([ds.y_train, ds.y_test]).astype(np.int64)
    np.savez(path, **{"x": x, "y": y, **extra})
    return path


def test_float64_images_train_the_cnn(tmp_path: Path, capsys) -> None:
    data, out = _digits(tmp_path / "d.npz", (1, 8, 8)), tmp_path / "run"
    assert main(["train", "--model", "cnn", "--data", str(data), "--epochs", "1", "--out", str(out), "--quiet"]) == 0
    final = json.loads((out / "metrics.json").read_text())["final"]
    assert final["test_accuracy"] > 0.6 and final["samples"] == 1438  # 80% of 1,797 trained, 20% held out


def test_load_npz_converts_and_keeps_a_given_test_set(tmp_path: Path) -> None:
    x = np.arange(40, dtype=np.int16).reshape(5, 8)
    p = tmp_path / "d.npz"
    np.savez(p, x=x, y=np.array([0, 1, 2, 1, 0], np.uint8), x_test=x[:2] * 1.0, y_test=np.array([[1.0], [0.0]]))
    ds = load_npz(str(p))
    assert (ds.x_train.dtype, ds.y_train.dtype, ds.num_classes) == (np.float32, np.int32, 3)
    np.testing.assert_array_equal(ds.x_train, x.astype(np.float32))
    np.testing.assert_array_equal(ds.y_test, [1, 0])


BAD = [
    (
        {"x": np.zeros((4, 64), complex), "y": np.zeros(4, int)},
        "mlp",
        "expected real numbers (float or int), found dtype complex128",
    ),
    ({"x": np.zeros((4, 63)), "y": np.arange(4) % 2}, "cnn", "model cnn reads [N, 64] or [N, 1, 8, 8], found [4, 63]"),
    (
        {"x": np.zeros((4, 8, 9)), "y": np.arange(4) % 2},
        "lstm",
        "model lstm reads [N, 64] or [N, 8, 8], found [4, 8, 9]",
    ),
    ({"x": np.zeros((4, 5))}, "mlp", "expected arrays x and y"),
    (
        {"x": np.zeros((4, 5)), "y": np.array(["a", "b", "a", "b"])},
        "mlp",
        "expected integer class ids, found dtype <U1",
    ),
    ({"x": np.zeros((4, 5)), "y": np.array([0.5, 1, 0, 1])}, "mlp", "expected integral class ids"),
    (
        {"x": np.zeros((4, 5)), "y": np.array([0, -1, 0, 1])},
        "mlp",
        "expected class ids 0..C-1, found values from -1 to 1",
    ),
    ({"x": np.full((4, 5), np.nan), "y": np.arange(4) % 2}, "mlp", "expected finite values"),
    ({"x": np.zeros((4, 5)), "y": np.arange(3) % 2}, "mlp", "x has 4 examples, y has 3"),
    ({"x": np.zeros((4, 5)), "y": np.zeros(4, int)}, "mlp", "at least 2 classes"),
    ({"x": np.zeros((4, 5)), "y": np.arange(4) % 2}, "dlrm", "--data feeds mlp, cnn or lstm"),
]


@pytest.mark.parametrize("arrays,model,message", BAD)
def test_bad_data_is_one_line_and_exit_2(tmp_path: Path, capsys, arrays, model, message) -> None:
    p = tmp_path / "bad.npz"
    np.savez(p, **arrays)
    with pytest.raises(TrainConfigError, match=None) as e:
        load_npz(str(p), model)
    assert message in str(e.value) and "\n" not in str(e.value)
    assert main(["train", "--model", model, "--data", str(p), "--out", str(tmp_path / "run"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "run").exists()  # refused before anything was written


def test_a_missing_or_unreadable_file_is_one_line(tmp_path: Path, capsys) -> None:
    (tmp_path / "junk.npz").write_bytes(b"not an archive")
    for name, message in (("none.npz", "no such file"), ("junk.npz", "not a readable npz archive")):
        assert main(["train", "--data", str(tmp_path / name), "--out", str(tmp_path / "run"), "--quiet"]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1
