"""The Criteo readers: the Kaggle text format (a sample written here, no download) against the
reference's preprocessing written out, streaming and the cache, every kind of bad row, the
reference's .npz, the random generator, and `asyncnet train --model dlrm --data FILE`."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from asyncnet.errors import TrainConfigError
from asyncnet.train import criteo

pytestmark = pytest.mark.timeout(300)
SRC = str(Path(__file__).resolve().parents[2] / "src")


def sample_lines(n: int, seed: int = 0) -> list[str]:
    """Kaggle-format lines: label, 13 counts (some empty, some negative), 26 hex categories (some empty)."""
    rng = np.random.default_rng(seed)
    lines = []
    for _ in range(n):
        counts = ["" if rng.random() < 0.2 else str(int(rng.integers(-2, 5000))) for _ in range(13)]
        cats = ["" if rng.random() < 0.1 else f"{int(rng.integers(0, 2**32)):08x}" for _ in range(26)]
        label = str(int(rng.random() < 0.3 + 0.4 * (counts[0] not in ("", "0"))))
        lines.append("\t".join([label, *counts, *cats]) + "\n")
    return lines


def write(path: Path, lines: list[str]) -> str:
    path.write_text("".join(lines))
    return str(path)


def expected(lines: list[str], max_ind_range: int):
    """The reference's getCriteoAdData + collate: '' -> 0, counts < 0 -> 0, log(x + 1), int(hex, 16) % range."""
    ys, dense, cats = [], [], []
    for line in lines:
        f = [x if x not in ("", "\n") else "0" for x in line.rstrip("\n").split("\t")]
        ys.append(int(f[0]))
        dense.append([math.log(max(int(x), 0) + 1) for x in f[1:14]])
        cats.append([int(x, 16) % max_ind_range for x in f[14:]])
    return np.array(ys, np.float32), np.array(dense, np.float32), np.array(cats)


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ASYNCNET_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_kaggle_text_is_the_references_preprocessing(tmp_path):
    lines = sample_lines(300)
    path = write(tmp_path / "train.txt", lines)
    log = criteo.load_kaggle(path, max_ind_range=1000, chunk_rows=7)
    y, dense, cats = expected(lines, 1000)
    np.testing.assert_array_equal(log.targets, y)
    np.testing.assert_allclose(log.dense, dense, rtol=1e-6)
    np.testing.assert_array_equal(np.stack(log.ids, 1), cats)
    assert log.table_sizes == [1000] * 26 and log.skipped == 0 and isinstance(log.dense, np.memmap)
    feeds = log.batch([3, 0])
    assert feeds["ids5"].tolist() == cats[[3, 0], 5].tolist() and feeds["lengths5"].tolist() == [1, 1]
    assert feeds["click"].shape == (2, 1) and feeds["dense"].dtype == np.float32


def test_the_conversion_is_cached_and_a_changed_file_converted_again(tmp_path, monkeypatch):
    path = write(tmp_path / "a.txt", sample_lines(20))
    criteo.load_kaggle(path, 50)

    def refuse(*a, **k):
        raise AssertionError("converted twice")

    with monkeypatch.context() as m:
        m.setattr(criteo, "_convert", refuse)
        assert len(criteo.load_kaggle(path, 50)) == 20
    write(tmp_path / "a.txt", sample_lines(25, seed=1))
    assert len(criteo.load_kaggle(path, 50)) == 25


def test_a_complete_last_line_without_newline_is_read(tmp_path):
    lines = sample_lines(5)
    lines[-1] = lines[-1].rstrip("\n")
    assert len(criteo.load_kaggle(write(tmp_path / "t.txt", lines), 10)) == 5


def _bad(lines: list[str], k: int, kind: str) -> list[str]:
    f = lines[k].rstrip("\n").split("\t")
    if kind == "short":
        f = f[:30]
    elif kind == "long":
        f = f + ["1"]
    elif kind == "label":
        f[0] = "2"
    elif kind == "count":
        f[3] = "1.5"
    elif kind == "huge":
        f[3] = "9" * 30
    elif kind == "hex":
        f[20] = "zz12"
    elif kind == "long_hex":
        f[20] = "f" * 17
    out = list(lines)
    out[k] = "\t".join(f) + "\n"
    return out


@pytest.mark.parametrize(
    "kind, says",
    [
        ("short", "found 30"),
        ("long", "found 41"),
        ("label", "label 0 or 1"),
        ("count", "integer count in field 4"),
        ("huge", "within int64"),
        ("hex", "hexadecimal digits in field 21"),
        ("long_hex", "hexadecimal"),
    ],
)
def test_a_bad_row_is_one_error_naming_the_file_and_line_or_a_counted_skip(tmp_path, kind, says):
    lines = _bad(sample_lines(12), 6, kind)
    path = write(tmp_path / f"{kind}.txt", lines)
    with pytest.raises(TrainConfigError, match=rf"{path}: line 7: .*{says}"):
        criteo.load_kaggle(path, 100)
    log = criteo.load_kaggle(path, 100, bad_rows="skip")
    assert len(log) == 11 and log.skipped == 1
    _, _, cats = expected(lines[:6] + lines[7:], 100)
    np.testing.assert_array_equal(np.stack(log.ids, 1), cats)


def test_a_truncated_last_line_is_named(tmp_path):
    lines = sample_lines(4)
    lines[-1] = lines[-1][:25]
    path = write(tmp_path / "cut.txt", lines)
    with pytest.raises(TrainConfigError, match=r"line 4: the last line is truncated"):
        criteo.load_kaggle(path, 100)
    assert criteo.load_kaggle(path, 100, bad_rows="skip").skipped == 1


def test_empty_and_missing_files(tmp_path):
    with pytest.raises(TrainConfigError, match="no such file"):
        criteo.load_kaggle(str(tmp_path / "nope.txt"))
    with pytest.raises(TrainConfigError, match="no example"):
        criteo.load_kaggle(write(tmp_path / "empty.txt", []))
    write(tmp_path / "x.txt", sample_lines(2))
    with pytest.raises(TrainConfigError, match="unknown data option"):
        criteo.load_click_data(str(tmp_path / "x.txt"), {"max_rows": 3})


def test_the_references_processed_npz(tmp_path):
    rng = np.random.default_rng(0)
    counts = rng.integers(3, 40, 26)
    x_cat = np.stack([rng.integers(0, c, 50) for c in counts], 1).astype(np.int32)
    x_int = rng.integers(-1, 100, (50, 13)).astype(np.int32)
    y = rng.integers(0, 2, 50).astype(np.int32)
    path = tmp_path / "kaggle_processed.npz"
    np.savez_compressed(path, X_int=x_int, X_cat=x_cat, y=y, counts=counts)
    log = criteo.load_processed_npz(str(path), max_ind_range=10)
    np.testing.assert_allclose(log.dense, np.log(np.maximum(x_int, 0) + 1.0), rtol=1e-6)
    np.testing.assert_array_equal(np.stack(log.ids, 1), x_cat % 10)
    assert log.table_sizes == [min(int(c), 10) for c in counts]
    np.savez(tmp_path / "bad.npz", X_int=x_int, y=y)
    with pytest.raises(TrainConfigError, match="missing"):
        criteo.load_processed_npz(str(tmp_path / "bad.npz"))


def test_the_random_generator_draws_like_the_reference():
    """Bags of 1..indices distinct sorted ids in range, targets in [0, 1), fixed by the seed."""
    log = criteo.random_log("tables=5-300,dense=3,batches=3,batch=16,indices=4,seed=7")
    again = criteo.random_log("tables=5-300,dense=3,batches=3,batch=16,indices=4,seed=7")
    assert len(log) == 48 and log.model_args == {"num_dense": 3, "table_sizes": [5, 300]}
    np.testing.assert_array_equal(log.ids[1], again.ids[1])
    for k, size in enumerate((5, 300)):
        lengths = np.diff(log.offsets[k])
        assert lengths.min() >= 1 and lengths.max() <= 4 and log.ids[k].max() < size
        for b in range(48):
            bag = log.ids[k][log.offsets[k][b] : log.offsets[k][b + 1]]
            assert (np.diff(bag) > 0).all()
    assert ((log.targets >= 0) & (log.targets < 1)).all()
    fixed = criteo.random_log("tables=1000,batches=1,batch=8,indices=5,fixed=1")
    assert (np.diff(fixed.offsets[0]) <= 5).all()
    with pytest.raises(TrainConfigError, match="KEY=VALUE"):
        criteo.random_log("tables=5,bogus=1")


def run_cli(*args, cwd, env_extra):
    env = {**os.environ, "PYTHONPATH": SRC, **env_extra}
    return subprocess.run(
        [sys.executable, "-m", "asyncnet", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def test_asyncnet_train_dlrm_on_a_criteo_file(tmp_path, cache):
    path = write(tmp_path / "train.txt", sample_lines(700))
    r = run_cli(
        "train",
        "--model",
        "dlrm",
        "--data",
        path,
        "--epochs",
        "2",
        "--batch-size",
        "64",
        "--mode",
        "local",
        "--workers",
        "1",
        "--model-arg",
        "max_ind_range=200",
        "--model-arg",
        "interaction=cat",
        "--optimizer",
        "rwsadagrad",
        "--out",
        str(tmp_path / "run"),
        "--quiet",
        cwd=tmp_path,
        env_extra={"ASYNCNET_CACHE": str(cache)},
    )
    assert r.returncode == 0, r.stderr
    cfg = json.loads((tmp_path / "run" / "metrics.json").read_text())["config"]
    assert cfg["model_args"]["table_sizes"] == [200] * 26 and cfg["model_args"]["interaction"] == "cat"
    epochs = json.loads((tmp_path / "run" / "metrics.json").read_text())["epochs"]
    assert len(epochs) == 2 and 0.0 <= epochs[-1]["test_auc"] <= 1.0


def test_asyncnet_train_dlrm_bad_file_is_one_line(tmp_path, cache):
    path = write(tmp_path / "bad.txt", _bad(sample_lines(10), 4, "hex"))
    r = run_cli(
        "train",
        "--model",
        "dlrm",
        "--data",
        path,
        "--epochs",
        "1",
        "--mode",
        "local",
        "--workers",
        "1",
        "--out",
        str(tmp_path / "run"),
        cwd=tmp_path,
        env_extra={"ASYNCNET_CACHE": str(cache)},
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and f"{path}: line 5" in r.stderr


def test_asyncnet_train_dlrm_sync_mode_with_an_mse_loss(tmp_path, cache):
    path = write(tmp_path / "train.txt", sample_lines(300))
    r = run_cli(
        "train",
        "--model",
        "dlrm",
        "--data",
        path,
        "--epochs",
        "1",
        "--batch-size",
        "50",
        "--workers",
        "2",
        "--model-arg",
        "max_ind_range=100",
        "--model-arg",
        "loss=mse",
        "--out",
        str(tmp_path / "run"),
        "--quiet",
        cwd=tmp_path,
        env_extra={"ASYNCNET_CACHE": str(cache)},
    )
    assert r.returncode == 0, r.stderr
    assert "test AUC" in r.stdout


@pytest.mark.parametrize(
    "args, says",
    [
        (["--model", "mlp", "--model-arg", "interaction=cat"], "model_args are dlrm's options"),
        (["--model", "dlrm", "--model-arg", "interaction"], "expected KEY=VALUE"),
        (
            [
                "--model",
                "dlrm",
                "--mode",
                "local",
                "--data",
                "random:tables=5,batches=2,batch=8",
                "--batch-size",
                "8",
                "--model-arg",
                "bogus=1",
            ],
            "got ['bogus']",
        ),
    ],
)
def test_model_arg_errors_are_one_line(tmp_path, cache, args, says):
    r = run_cli(
        "train",
        *args,
        "--epochs",
        "1",
        "--out",
        str(tmp_path / "run"),
        "--quiet",
        cwd=tmp_path,
        env_extra={"ASYNCNET_CACHE": str(cache)},
    )
    assert r.returncode != 0 and says in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_the_chunk_parser_and_the_line_parser_agree(tmp_path):
    """Lines the vectorized parser takes and lines it leaves to the line parser (a 19-digit
    count, upper-case hex, CRLF endings) give the reference's numbers, in file order."""
    lines = sample_lines(40, seed=9)
    f = lines[5].rstrip("\n").split("\t")
    f[2] = str(2**62 + 12345)
    lines[5] = "\t".join(f) + "\n"
    lines[8] = lines[8].upper().replace("\n", "\r\n")
    lines[9] = lines[9].replace("\n", "\r\n")
    path = write(tmp_path / "mixed.txt", lines)
    log = criteo.load_kaggle(path, max_ind_range=2**31 - 1, chunk_rows=16)
    y, dense, cats = expected([ln.replace("\r\n", "\n") for ln in lines], 2**31 - 1)
    np.testing.assert_array_equal(log.targets, y)
    np.testing.assert_allclose(log.dense, dense, rtol=1e-6)
    np.testing.assert_array_equal(np.stack(log.ids, 1), cats)


def test_terabyte_days_train_on_all_but_the_last_and_split_it_into_test_and_validation(tmp_path):
    folder = tmp_path / "terabyte"
    folder.mkdir()
    days = [sample_lines(n, seed=d) for d, n in enumerate((40, 25, 31))]
    for d, lines in enumerate(days):
        write(folder / f"day_{d}", lines)
    for data in (str(folder), str(folder / "day")):  # a folder, or the reference's prefix
        assert [p.name for p in criteo.terabyte_days(data)] == ["day_0", "day_1", "day_2"]
    ds = criteo.click_dataset(str(folder), {"max_ind_range": 1000})
    assert ds.x_train[:, 0].tolist() == list(range(65))  # days 0 and 1, in order
    assert ds.x_test[:, 0].tolist() == list(range(65, 65 + 16))  # ceil(31 / 2) of the last day
    _, _, val = criteo.day_split([40, 25, 31])
    assert val[:, 0].tolist() == list(range(81, 96))
    y, dense, cats = expected([line for lines in days for line in lines], 1000)
    rows = np.array([3, 39, 40, 64, 70, 95, 0])
    b = ds.log.batch(rows)
    np.testing.assert_allclose(b["dense"], dense[rows], rtol=1e-6)
    np.testing.assert_array_equal(b["click"][:, 0], y[rows])
    for k in (0, 13, 25):
        np.testing.assert_array_equal(b[f"ids{k}"], cats[rows, k])
    np.testing.assert_array_equal(ds.y_test, y[65:81])
    assert criteo.terabyte_days(str(tmp_path / "nothing")) is None
    with pytest.raises(TrainConfigError, match="at least 2 days"):
        criteo.day_split([10])


def test_terabyte_days_train_from_the_cli(tmp_path):
    folder = tmp_path / "tb"
    folder.mkdir()
    for d in range(3):
        write(folder / f"day_{d}", sample_lines(60, seed=10 + d))
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "asyncnet",
            "train",
            "--model",
            "dlrm",
            "--data",
            str(folder),
            "--mode",
            "local",
            "--workers",
            "1",
            "--epochs",
            "1",
            "--batch-size",
            "20",
            "--model-arg",
            "max_ind_range=500",
            "--out",
            str(tmp_path / "run"),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": SRC, "ASYNCNET_CACHE": str(tmp_path / "cache")},
    )
    assert r.returncode == 0, r.stderr[-2000:]
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert m["epochs"][0]["samples"] == 120 and m["config"]["model_args"]["table_sizes"] == [500] * 26
