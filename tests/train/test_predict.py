"""`asyncnet predict RUN_DIR --data FILE`: a trained dlrm run scores a Criteo file; the
probabilities equal the torch twin's with the checkpoint's weights; bad runs are one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_criteo import sample_lines, write

from asyncnet.train import criteo
from benchmarks.peers.torch_twins import torch_twin

pytestmark = pytest.mark.timeout(300)
SRC = str(Path(__file__).resolve().parents[2] / "src")


def cli(*args, cwd, cache):
    env = {**os.environ, "PYTHONPATH": SRC, "ASYNCNET_CACHE": str(cache)}
    return subprocess.run(
        [sys.executable, "-m", "asyncnet", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def test_predict_scores_a_file_as_the_torch_twin(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("ASYNCNET_CACHE", str(cache))
    train = write(tmp_path / "train.txt", sample_lines(400))
    lines = sample_lines(90, seed=5)
    unlabeled = write(tmp_path / "test.txt", [ln.split("\t", 1)[1] for ln in lines])
    r = cli(
        "train",
        "--model",
        "dlrm",
        "--data",
        train,
        "--epochs",
        "1",
        "--batch-size",
        "50",
        "--mode",
        "local",
        "--workers",
        "1",
        "--model-arg",
        "max_ind_range=64",
        "--out",
        str(tmp_path / "run"),
        "--quiet",
        cwd=tmp_path,
        cache=cache,
    )
    assert r.returncode == 0, r.stderr
    r = cli(
        "predict",
        str(tmp_path / "run"),
        "--data",
        unlabeled,
        "--out",
        str(tmp_path / "p.txt"),
        "--batch-size",
        "32",
        cwd=tmp_path,
        cache=cache,
    )
    assert r.returncode == 0, r.stderr
    assert "scored 90 example(s)" in r.stdout
    got = np.loadtxt(tmp_path / "p.txt")
    with np.load(tmp_path / "run" / "checkpoint.npz") as f:
        params = {k: f[k] for k in f.files}
    log = criteo.load_kaggle(unlabeled, 64)
    assert not log.labeled
    want = torch_twin("dlrm", params).predict(log.batch(range(90))).numpy().reshape(-1)
    np.testing.assert_allclose(got, want, atol=2e-6)
    labeled = write(tmp_path / "labeled.txt", lines)
    r = cli("predict", str(tmp_path / "run"), "--data", labeled, cwd=tmp_path, cache=cache)
    assert r.returncode == 0 and "AUC" in r.stderr and len(r.stdout.splitlines()) == 90


def test_predict_errors_are_one_line(tmp_path):
    r = cli("predict", str(tmp_path / "nothing"), "--data", "random:tables=4", cwd=tmp_path, cache=tmp_path)
    assert r.returncode == 1 and "not a run directory" in r.stderr and len(r.stderr.splitlines()) == 1
    run = tmp_path / "mlp_run"
    run.mkdir()
    (run / "metrics.json").write_text('{"config": {"model": "mlp"}}')
    r = cli("predict", str(run), "--data", "random:tables=4", cwd=tmp_path, cache=tmp_path)
    assert r.returncode == 1 and "dlrm run" in r.stderr
