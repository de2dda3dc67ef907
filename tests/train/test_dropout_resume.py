"""A model with dropout resumes with the bits of an unbroken run: the Dropout ops of each worker
are seeded from (seed, rank, op), so replicas draw different masks and a run repeats its own,
and every worker's generator state is in the checkpoint. Tried as a user would: ``asyncnet
train --model file.py:build`` in sync mode on threads, SIGTERMed after its first epoch, then
``--resume``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from asyncnet.model.checkpoint import RANDOM

pytestmark = pytest.mark.timeout(600)

MODEL = textwrap.dedent("""
    from asyncnet.model import ModelHelper

    def build():
        m = ModelHelper("dropnet", seed=1)
        h = m.dropout(m.relu(m.fc("data", "fc1", 8, 32), "h"), "drop", ratio=0.3)
        m.softmax_with_loss(m.fc(h, "fc2", 32, 3), "label")
        return m
""")
EPOCHS = 5
ARGS = ("--mode", "sync", "--workers", "2", "--backend", "threads", "--batch-size", "16", "--lr", "0.05", "--quiet")


def _data(n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(5)
    x = rng.normal(size=(n, 8)).astype(np.float32)
    return x, x[:, :3].argmax(axis=1).astype(np.int32)


def _setup(tmp_path: Path, n: int = 4000) -> tuple[list[str], dict[str, str]]:
    (tmp_path / "dropnet.py").write_text(MODEL)
    x, y = _data(n)
    np.savez(tmp_path / "data.npz", x=x, y=y)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    base = [sys.executable, "-m", "asyncnet", "train", "--data", str(tmp_path / "data.npz"), *ARGS]
    return base, env


def _weights(run: Path) -> dict[str, np.ndarray]:
    with np.load(run / "checkpoint.npz") as f:
        return {k: f[k] for k in f.files if not k.startswith("__")}


def _epochs(run: Path) -> int:
    try:
        return len(json.loads((run / "metrics.json").read_text())["epochs"])
    except (OSError, ValueError, KeyError):
        return 0


def test_a_model_with_dropout_sigtermed_after_epoch_1_resumes_with_the_bits_of_an_unbroken_run(tmp_path: Path):
    base, env = _setup(tmp_path)
    model = ["--model", str(tmp_path / "dropnet.py") + ":build"]
    done = subprocess.run(
        [*base, *model, "--epochs", str(EPOCHS), "--out", str(tmp_path / "full")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr

    stopped = tmp_path / "stopped"
    proc = subprocess.Popen(
        [*base, *model, "--epochs", str(EPOCHS), "--out", str(stopped)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 240
        while _epochs(stopped) < 1:
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "no epoch finished"
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 128 + signal.SIGTERM, err
    kept = _epochs(stopped)
    assert 1 <= kept < EPOCHS, f"the run was stopped after {kept} epochs"
    with np.load(stopped / "checkpoint.npz") as f:
        states = f[RANDOM]
    assert states.shape == (2, 1, 6) and states.dtype == np.uint64
    assert (states[0] != states[1]).any()  # each worker its own masks

    resumed = subprocess.run(
        [*base, "--resume", str(stopped), "--epochs", str(EPOCHS)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert _epochs(stopped) == EPOCHS
    full, again = _weights(tmp_path / "full"), _weights(stopped)
    assert sorted(full) == sorted(again) == ["fc1_b", "fc1_w", "fc2_b", "fc2_w", "iter"]
    for k in full:
        np.testing.assert_array_equal(again[k], full[k], err_msg=k)


@pytest.fixture
def build(tmp_path: Path):
    from asyncnet.train.program import load_function

    (tmp_path / "dropnet_fixture.py").write_text(MODEL)
    return load_function(f"{tmp_path / 'dropnet_fixture.py'}:build")


def test_replicas_draw_different_masks_and_a_run_repeats_its_own(tmp_path: Path, build):
    from asyncnet.train import train

    x, y = _data(400)
    kw = {"epochs": 2, "mode": "sync", "backend": "threads", "batch_size": 16, "lr": 0.05}
    one, two = train(build, (x, y), workers=2, **kw), train(build, (x, y), workers=2, **kw)
    for k in one.params:
        np.testing.assert_array_equal(one.params[k], two.params[k])
    np.testing.assert_array_equal(one.random_states, two.random_states)
    assert (one.random_states[0] != one.random_states[1]).any()
    other_seed = train(build, (x, y), workers=2, seed=1, **kw)
    assert not np.array_equal(other_seed.random_states, one.random_states)


def test_a_checkpoint_inside_an_epoch_keeps_the_generators_too(tmp_path: Path, build):
    from asyncnet.train import train

    x, y = _data(400)
    kw = {"mode": "sync", "workers": 2, "backend": "threads", "batch_size": 16, "lr": 0.05}
    full = train(build, (x, y), epochs=3, **kw)
    train(build, (x, y), epochs=1, out=tmp_path / "run", checkpoint_every=7, **kw)
    resumed = train(build, (x, y), epochs=3, resume=tmp_path / "run", **kw)
    for k in full.params:
        np.testing.assert_array_equal(resumed.params[k], full.params[k])
    np.testing.assert_array_equal(resumed.random_states, full.random_states)


def test_a_model_without_random_ops_checkpoints_no_generators(tmp_path: Path):
    from asyncnet.train import train

    res = train("mlp", epochs=1, workers=2, mode="sync", backend="threads", out=tmp_path / "run")
    assert res.random_states is None
    with np.load(tmp_path / "run" / "checkpoint.npz") as f:
        assert RANDOM not in f.files


def test_worker_processes_gather_their_generators_into_the_checkpoint(tmp_path: Path):
    from asyncnet.train import train

    (tmp_path / "dropnet.py").write_text(MODEL)
    spec = f"{tmp_path / 'dropnet.py'}:build"
    x, y = _data(300)
    kw = {"mode": "sync", "workers": 2, "batch_size": 16, "lr": 0.05}
    threads = train(spec, (x, y), epochs=2, backend="threads", **kw)
    train(spec, (x, y), epochs=1, backend="processes", out=tmp_path / "run", **kw)
    resumed = train(spec, (x, y), epochs=2, backend="processes", resume=tmp_path / "run", **kw)
    for k in threads.params:  # the same bits on threads and processes, resumed or not
        np.testing.assert_array_equal(resumed.params[k], threads.params[k])
    np.testing.assert_array_equal(resumed.random_states, threads.random_states)
