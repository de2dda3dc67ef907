"""``asyncnet train``: the run directory, one-line errors, and the torchrun path."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from _torchrun import run_torchrun, torchrun_cmd

from asyncnet.cli.main import main

RUN_FILES = {"metrics.json", "loss_accuracy.png", "trace.json", "checkpoint.npz"}


def _check_run_dir(out: Path, epochs: int) -> dict:
    assert RUN_FILES <= {p.name for p in out.iterdir()}
    metrics = json.loads((out / "metrics.json").read_text())
    assert len(metrics["epochs"]) == epochs
    assert metrics["final"]["test_accuracy"] == metrics["epochs"][-1]["test_accuracy"]
    assert (out / "loss_accuracy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    trace = json.loads((out / "trace.json").read_text())
    slices = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    assert {"FC", "SoftmaxWithLoss", "SGD"} <= {e["name"] for e in slices}
    with np.load(out / "checkpoint.npz") as ckpt:
        assert {"fc1_w", "fc1_b", "fc2_w", "fc2_b", "iter"} <= set(ckpt.files)
    return metrics


@pytest.mark.timeout(60)
def test_train_writes_the_run_directory(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    assert main(["train", "--epochs", "2", "--out", str(out), "--quiet"]) == 0
    metrics = _check_run_dir(out, 2)
    assert metrics["config"]["mode"] == "sync" and metrics["config"]["num_workers"] == 2
    assert "test accuracy" in capsys.readouterr().out


@pytest.mark.timeout(60)
def test_train_options_reach_the_trainer(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = [
        "train",
        "--mode",
        "hogwild",
        "--workers",
        "3",
        "--epochs",
        "1",
        "--batch-size",
        "16",
        "--lr",
        "0.01",
        "--optimizer",
        "momentum",
        "--hidden",
        "32,16",
        "--seed",
        "5",
        "--out",
        str(out),
        "--quiet",
    ]
    assert main(args) == 0
    cfg = json.loads((out / "metrics.json").read_text())["config"]
    assert (
        cfg["mode"],
        cfg["workers"],
        cfg["batch_size"],
        cfg["lr"],
        cfg["optimizer"],
        cfg["hidden"],
        cfg["seed"],
    ) == ("hogwild", 3, 16, 0.01, "momentum", [32, 16], 5)
    with np.load(out / "checkpoint.npz") as ckpt:
        assert ckpt["fc2_w"].shape == (16, 32) and "fc1_w_momentum" in ckpt.files


@pytest.mark.parametrize(
    "args",
    [
        ["--workers", "0"],
        ["--workers", "two"],
        ["--mode", "async"],
        ["--backend", "mpi"],
        ["--epochs", "-1"],
        ["--batch-size", "0"],
        ["--lr", "0"],
        ["--lr", "nan"],
        ["--optimizer", "lbfgs"],
        ["--hidden", "64,x"],
        ["--hidden", "0"],
        ["--seed", "x"],
        ["--bogus"],
        ["--mode", "hogwild", "--backend", "torch"],
        ["--mode", "local", "--backend", "torch"],
        ["--batch-size", "2", "--workers", "4"],
        ["--target-accuracy", "95"],
        ["--target-accuracy", "x"],
    ],
)
def test_bad_options_give_one_line_and_exit_2(args: list[str], capsys, monkeypatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        sys.exit(main(["train", *args, "--quiet"]))
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "error" in err, err
    assert not (tmp_path / "runs").exists()


def test_torch_backend_outside_torchrun_is_a_usage_error(capsys, monkeypatch) -> None:
    for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(k, raising=False)
    assert main(["train", "--backend", "torch", "--quiet"]) == 2
    assert "torchrun" in capsys.readouterr().err


@pytest.mark.timeout(90)
def test_torchrun_with_two_processes(tmp_path: Path) -> None:
    pytest.importorskip("torch.distributed")
    out = tmp_path / "run"
    cmd = torchrun_cmd(
        "-m",
        "asyncnet",
        "train",
        "--backend",
        "torch",
        "--epochs",
        "1",
        "--out",
        str(out),
        "--quiet",
    )
    run_torchrun(cmd, "", ranks=0, cwd=tmp_path)
    metrics = _check_run_dir(out, 1)
    assert metrics["config"]["backend"] == "torch" and metrics["config"]["workers"] == 2
    # gloo's all-reduce and the threaded one agree: same model after the epoch
    from asyncnet.train.trainers import TrainConfig, train

    ref = train(TrainConfig(mode="sync", workers=2, epochs=1))
    with np.load(out / "checkpoint.npz") as ckpt:
        for name, value in ref.params.items():
            np.testing.assert_allclose(ckpt[name], value, rtol=1e-5, atol=1e-6)
    assert metrics["final"]["test_accuracy"] == pytest.approx(ref.history.final.test_accuracy, abs=0.01)


@pytest.mark.timeout(90)
def test_torchrun_checkpoints_inside_an_epoch(tmp_path: Path) -> None:
    """Only rank 0 holds the run's writer, yet every rank must take part in a mid-epoch save's
    rounds: a save decided by the writer alone left the ranks in different collectives."""
    pytest.importorskip("torch.distributed")
    out = tmp_path / "run"
    args = ("--backend", "torch", "--epochs", "1", "--checkpoint-every", "20", "--out", str(out), "--quiet")
    run_torchrun(torchrun_cmd("-m", "asyncnet", "train", *args), "", ranks=0, cwd=tmp_path)
    metrics = json.loads((out / "metrics.json").read_text())
    assert len(metrics["epochs"]) == 1 and metrics["config"]["checkpoint_every"] == 20
    from asyncnet.train.trainers import TrainConfig, train

    ref = train(TrainConfig(mode="sync", workers=2, epochs=1))  # the same run with no saves in it
    with np.load(out / "checkpoint.npz") as ckpt:
        for name, value in ref.params.items():
            np.testing.assert_allclose(ckpt[name], value, rtol=1e-5, atol=1e-6)
