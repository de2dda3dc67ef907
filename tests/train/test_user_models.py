"""A user's own model gets what a zoo model gets: train() with numpy arrays, the command line
with --model module:function or file.py:function, the same run directory and --resume, an
inference net, an eval net that leaves the train net's blobs alone; and docs/custom-models.md runs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import asyncnet as an
from asyncnet.model import ModelHelper

pytestmark = pytest.mark.timeout(240)
DOC = Path(__file__).parents[2] / "docs" / "custom-models.md"
MODULE = textwrap.dedent("""
    from asyncnet.model import ModelHelper

    def two_layer(dropout=0.1):
        m = ModelHelper("two_layer", seed=1)
        h = m.dropout(m.relu(m.fc("features", "fc1", 6, 16), "h"), "drop", ratio=dropout, seed=7)
        m.softmax_with_loss(m.fc(h, "fc2", 16, 3), "target")
        return m
""")


def _data(n: int = 600) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    x = rng.normal(size=(n, 6)).astype(np.float32)
    return x, x[:, :3].argmax(axis=1).astype(np.int32)


def _two_layer(dropout: float = 0.1) -> ModelHelper:
    ns: dict = {}
    exec(MODULE, ns)
    return ns["two_layer"](dropout)


def _deterministic() -> ModelHelper:
    """The model with its dropout: each worker's Dropout is seeded from (seed, rank) and its
    generator checkpointed, so it resumes with the bits of an unbroken run."""
    return _two_layer(0.1)


def _run_files(run: Path) -> set[str]:
    return {p.name for p in run.iterdir()}


def test_a_user_model_trains_through_train_with_the_run_directory_of_a_zoo_model(tmp_path: Path) -> None:
    x, y = _data()
    result = train_user(tmp_path / "run", x, y, epochs=3)
    assert result.history.final.test_accuracy > 0.8
    assert {"metrics.json", "checkpoint.npz", "tensorboard", "trace.json", "loss_accuracy.png"} <= _run_files(
        tmp_path / "run"
    )
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["status"] == "ok" and len(metrics["epochs"]) == 3 and metrics["data"] == "arrays"
    assert os.listdir(tmp_path / "run" / "tensorboard")
    resumed = train_user(tmp_path / "run", x, y, epochs=5, resume=True)
    unbroken = train_user(tmp_path / "ref", x, y, epochs=5)
    assert len(resumed.history) == 5
    for k, v in unbroken.params.items():
        np.testing.assert_array_equal(resumed.params[k], v)
    # the ModelHelper itself (copied per worker) trains as its builder does
    same = an_train(_deterministic(), x, y, epochs=5)
    for k, v in unbroken.params.items():
        np.testing.assert_array_equal(same.params[k], v)


def test_the_cli_says_in_one_line_what_it_cannot_resume(tmp_path: Path, capsys) -> None:
    from asyncnet.cli.main import main
    from asyncnet.train import train

    x, y = _data(200)
    train(_deterministic, (x, y), epochs=1, out=tmp_path / "fn")
    train(_deterministic(), (x, y), epochs=1, out=tmp_path / "obj")
    assert main(["train", "--resume", str(tmp_path / "fn"), "--epochs", "2", "--quiet"]) == 2
    assert "arrays given to train()" in capsys.readouterr().err
    assert main(["train", "--resume", str(tmp_path / "obj"), "--epochs", "2", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "ModelHelper object" in err and err.count("\n") == 1


def train_user(out: Path, x, y, epochs: int, resume: bool = False):
    from asyncnet.train import train

    if resume:
        return train(_deterministic, (x, y), epochs=epochs, resume=out)
    return train(
        _deterministic,
        (x, y),
        epochs=epochs,
        workers=2,
        optimizer="momentum",
        lr=0.05,
        trace=True,
        out=out,
        overwrite=True,
    )


def an_train(model, x, y, epochs: int):
    from asyncnet.train import train

    return train(model, (x, y), epochs=epochs, workers=2, optimizer="momentum", lr=0.05)


@pytest.mark.parametrize("form", ["module", "file"])
def test_a_user_model_trains_through_the_cli_and_resumes(tmp_path: Path, form: str) -> None:
    (tmp_path / "my_models.py").write_text(MODULE)
    x, y = _data()
    np.savez(tmp_path / "data.npz", x=x, y=y)
    spec = "my_models:two_layer" if form == "module" else str(tmp_path / "my_models.py") + ":two_layer"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *(p for p in sys.path if p)])}

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "asyncnet", "train", *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )

    p = cli("--model", spec, "--data", "data.npz", "--epochs", "2", "--backend", "processes", "--out", "run", "--quiet")
    assert p.returncode == 0, p.stderr
    assert {"metrics.json", "checkpoint.npz", "tensorboard", "trace.json"} <= _run_files(tmp_path / "run")
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["config"]["model"] == spec and metrics["data"] == str(tmp_path / "data.npz")
    p = cli("--resume", "run", "--epochs", "3", "--quiet")  # without --data: says which file
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and f"--data {tmp_path / 'data.npz'}" in p.stderr
    p = cli("--resume", "run", "--data", "data.npz", "--epochs", "3", "--quiet")
    assert p.returncode == 0, p.stderr
    assert len(json.loads((tmp_path / "run" / "metrics.json").read_text())["epochs"]) == 3
    p = cli("--model", "my_models:missing", "--data", "data.npz", "--out", "bad", "--quiet")
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "no function 'missing'" in p.stderr
    p = cli("--model", spec, "--out", "nodata", "--quiet")
    assert p.returncode == 2 and "--data" in p.stderr and p.stderr.count("\n") == 1


def test_every_model_has_an_inference_net_and_its_eval_net_leaves_the_train_blobs(tmp_path: Path) -> None:
    from asyncnet.model.zoo import cnn, dlrm, lstm, mlp
    from asyncnet.train import Program

    for model in (
        mlp(64, (8,), 10),
        cnn(channels=(2, 2)),
        lstm(hidden=4),
        dlrm(num_dense=4, table_sizes=(5, 5), dim=2),
        _two_layer(),
    ):
        program = Program(model)
        inference = program.inference_net()
        read = {i for op in inference.ops for i in op.inputs}
        assert not read & set(program.labels) and program.model.loss not in {
            o for op in inference.ops for o in op.outputs
        }
    program = Program(_two_layer(), optimizer="adam", lr=0.01)
    ws = an.Workspace()
    ws.run_net_once(program.init_net)
    x, y = _data(8)
    ws.feed("features", x)
    ws.feed("target", y)
    ws.run_net_once(program.train_net())
    loss, acc = float(ws.fetch("loss")), float(ws.fetch("accuracy"))
    ws.run_net_once(program.eval_net())
    assert (float(ws.fetch("loss")), float(ws.fetch("accuracy"))) == (loss, acc)
    ref = np.array(ws.fetch("eval/softmax"))
    fresh = an.Workspace()
    for name in program.checkpoint_blobs:
        fresh.feed(name, np.array(ws.fetch(name)))
    fresh.feed("features", x)  # no label anywhere in this workspace
    fresh.run_net_once(program.inference_net())
    np.testing.assert_allclose(fresh.fetch("softmax"), ref, rtol=1e-6)  # Softmax, not SoftmaxWithLoss: ulps apart


def test_the_custom_models_page_runs(tmp_path: Path, monkeypatch) -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert len(blocks) >= 2
    monkeypatch.chdir(tmp_path)
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), {"__name__": "custom_models_page"})
