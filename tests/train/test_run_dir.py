"""The run directory on every backend: a checkpoint after every epoch (or every N steps) from
one rank, metrics.json never ahead of it, resumes with the same bits, exploding losses fail the
run, damaged or half-written checkpoints are handled in one line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from asyncnet.cli.main import main
from asyncnet.model.checkpoint import META

pytestmark = pytest.mark.timeout(240)
SMALL = ["--hidden", "16", "--quiet"]


def _cli(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    return subprocess.run(
        [sys.executable, "-m", "asyncnet", "train", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def _arrays(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as f:
        return {k: f[k] for k in f.files if k != META}


def _epochs(metrics: Path) -> int:
    try:
        return len(json.loads(metrics.read_text())["epochs"])
    except (OSError, ValueError, KeyError):
        return 0


def test_a_sigtermed_process_run_resumes_from_its_last_epoch_with_the_bits_of_an_unbroken_run(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    cmd = [sys.executable, "-m", "asyncnet", "train", "--backend", "processes", *SMALL]
    p = subprocess.Popen(
        [*cmd, "--epochs", "300", "--out", "run"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and p.poll() is None and _epochs(tmp_path / "run" / "metrics.json") < 1:
            time.sleep(0.05)
        assert p.poll() is None, p.communicate()[1]
        p.send_signal(signal.SIGTERM)
        err = p.communicate(timeout=60)[1]
    finally:
        p.kill()
        p.wait()
    assert p.returncode == 143 and len(err.strip().splitlines()) == 1, err
    saved = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert saved["status"] == "interrupted" and len(saved["epochs"]) >= 1
    total = str(len(saved["epochs"]) + 1)
    assert _cli("--resume", "run", "--epochs", total, "--quiet", cwd=tmp_path).returncode == 0
    assert _cli("--backend", "processes", *SMALL, "--epochs", total, "--out", "ref", cwd=tmp_path).returncode == 0
    got, want = _arrays(tmp_path / "run" / "checkpoint.npz"), _arrays(tmp_path / "ref" / "checkpoint.npz")
    assert got.keys() == want.keys() and all(np.array_equal(got[k], want[k]) for k in want)
    done = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert done["status"] == "ok" and len(done["epochs"]) == int(total)


@pytest.mark.parametrize("backend", ["threads", "processes"])
def test_every_backend_saves_each_epoch_metrics_never_ahead_of_the_checkpoint(tmp_path: Path, backend: str) -> None:
    from asyncnet.model.checkpoint import metadata
    from asyncnet.train import TrainConfig, train

    seen = []

    class Spy:
        """A reporter reading the run directory as each epoch ends (rank 0 saved it just before)."""

        def epoch_start(self, epoch, batches):
            pass

        def batch(self, loss, acc, samples):
            pass

        def epoch_end(self, m, arrays=None):
            meta = metadata(tmp_path / "run" / "checkpoint.npz")
            seen.append((len(meta["run"]["epochs"]), _epochs(tmp_path / "run" / "metrics.json")))

    cfg = TrainConfig(workers=2, backend=backend, epochs=3, hidden=(8,), trace=False)
    train(cfg, reporter=Spy(), out=tmp_path / "run")
    # threads: live, after each epoch's save; processes: replayed at the end (the workers saved every epoch)
    assert seen == ([(1, 1), (2, 2), (3, 3)] if backend == "threads" else [(3, 3)] * 3)


def test_checkpoint_every_n_steps_resumes_inside_an_epoch_with_the_same_bits(tmp_path: Path) -> None:
    from asyncnet.model.checkpoint import metadata

    assert main(["train", *SMALL, "--epochs", "2", "--checkpoint-every", "10", "--out", str(tmp_path / "a")]) == 0
    ckpt = tmp_path / "a" / "checkpoint.npz"
    assert metadata(ckpt)["run"]["partial"] is None and len(metadata(ckpt)["run"]["epochs"]) == 2
    # a run stopped inside epoch 2: rebuild what its step-20-of-epoch-2 save held, then resume it
    assert main(["train", *SMALL, "--epochs", "1", "--out", str(tmp_path / "b")]) == 0
    from asyncnet.train.api import load_resume
    from asyncnet.train.config import TrainConfig
    from asyncnet.train.data import load_digits
    from asyncnet.train.loop import launch
    from asyncnet.train.report import RunWriter

    cfg = TrainConfig(hidden=(16,), epochs=2, checkpoint_every=50, trace=False)
    ds = load_digits()
    resume = load_resume(tmp_path / "b", cfg, ds)

    class Stop(Exception):
        pass

    class StopAfterSave(RunWriter):
        def mid_epoch(self, program, arrays, partial):
            super().mid_epoch(program, arrays, partial)
            raise Stop

    writer = StopAfterSave(tmp_path / "b", cfg.to_dict(), list(resume.epochs), "digits")
    with pytest.raises(Stop):
        launch(cfg, ds, resume=resume, writer=writer)
    part = metadata(tmp_path / "b" / "checkpoint.npz")["run"]["partial"]
    assert part["epoch"] == 2 and 0 < part["batches"] < 45 and _epochs(tmp_path / "b" / "metrics.json") == 1
    assert main(["train", "--resume", str(tmp_path / "b"), "--epochs", "2", "--quiet"]) == 0
    got, want = _arrays(tmp_path / "b" / "checkpoint.npz"), _arrays(ckpt)
    assert all(np.array_equal(got[k], want[k]) for k in want)
    a, b = (json.loads((tmp_path / d / "metrics.json").read_text())["epochs"] for d in ("a", "b"))
    assert [m["train_loss"] for m in a] == [m["train_loss"] for m in b]  # the partial epoch's figures kept


def test_saves_inside_epochs_on_processes_change_no_bit(tmp_path: Path) -> None:
    p = _cli("--backend", "processes", *SMALL, "--epochs", "2", "--checkpoint-every", "7", "--out", "p", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert main(["train", *SMALL, "--epochs", "2", "--out", str(tmp_path / "t")]) == 0
    got, want = _arrays(tmp_path / "p" / "checkpoint.npz"), _arrays(tmp_path / "t" / "checkpoint.npz")
    assert all(np.array_equal(got[k], want[k]) for k in want)


def test_a_run_killed_while_writing_its_first_checkpoint_starts_again_and_drops_the_stray(tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert main(["train", *SMALL, "--epochs", "1", "--out", str(run)]) == 0
    (run / "checkpoint.npz").rename(run / f".checkpoint.npz.{os.getpid()}.ab12.tmp")  # the half-written file
    metrics = json.loads((run / "metrics.json").read_text())
    (run / "metrics.json").write_text(json.dumps({"status": "running", "config": metrics["config"], "epochs": []}))
    p = _cli("--resume", "run", "--epochs", "1", "--quiet", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stderr.count("\n") == 1 and "no checkpoint" in p.stderr and "epoch 1" in p.stderr
    assert not [f.name for f in run.iterdir() if f.name.endswith(".tmp")]
    assert json.loads((run / "metrics.json").read_text())["status"] == "ok"


def test_a_checkpoint_without_its_metadata_is_refused_in_one_line(tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert main(["train", *SMALL, "--epochs", "1", "--out", str(run)]) == 0
    np.savez(run / "checkpoint.npz", **_arrays(run / "checkpoint.npz"))
    p = _cli("--resume", "run", "--epochs", "2", "--quiet", cwd=tmp_path)
    line = p.stderr.strip()
    assert (
        p.returncode == 1 and "\n" not in line and "no metadata" in line and "python -m asyncnet.train.convert" in line
    )


@pytest.mark.parametrize(
    "args", [["--model", "cnn"], ["--optimizer", "adam"], ["--backend", "processes", "--hidden", "16"]]
)
def test_an_exploding_loss_fails_the_run_with_exit_1_and_the_rule_can_be_turned_off(tmp_path: Path, args) -> None:
    p = _cli("--lr", "1e9", "--epochs", "3", *args, "--out", "run", "--quiet", cwd=tmp_path)
    line = p.stderr.strip()
    assert p.returncode == 1 and "\n" not in line, p.stderr
    assert "diverged" in line and "log(10 classes)" in line and "--lr" in line and "--divergence-factor 0" in line
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["status"] == "diverged"


def test_the_divergence_rule_is_documented_and_off_keeps_only_nan(tmp_path: Path) -> None:
    from asyncnet.errors import TrainingDivergedError
    from asyncnet.train.config import TrainConfig
    from asyncnet.train.loop import DivergenceGuard

    g = DivergenceGuard(TrainConfig(), classes=10)
    g.check(100 * np.log(10) - 1e-3, "a step")
    with pytest.raises(TrainingDivergedError, match="above 100 x log"):
        g.check(100 * np.log(10) + 1e-3, "a step")
    off = DivergenceGuard(TrainConfig(divergence_factor=0), classes=10)
    off.check(1e30, "a step")
    with pytest.raises(TrainingDivergedError, match="nan"):
        off.check(float("nan"), "a step")
    first = DivergenceGuard(TrainConfig(divergence_factor=10), classes=None)  # not a classifier: the first loss
    first.check(0.5, "step 1")
    first.check(4.9, "step 2")
    with pytest.raises(TrainingDivergedError, match="first step's loss"):
        first.check(5.1, "step 3")
    assert main(
        [
            "train",
            "--lr",
            "1e9",
            "--epochs",
            "1",
            "--hidden",
            "8",
            "--divergence-factor",
            "0",
            "--out",
            str(tmp_path / "off"),
            "--quiet",
        ]
    ) in (0, 1)  # only a NaN can stop it now


def test_a_checkpoint_of_the_previous_format_loads_or_says_how_to_convert_it(tmp_path: Path) -> None:
    import shutil

    import asyncnet as an
    from asyncnet.errors import CheckpointError
    from asyncnet.model import checkpoint
    from asyncnet.model.zoo import cnn
    from asyncnet.train.program import Program, mlp_program

    data = Path(__file__).parents[1] / "model" / "data"
    old_mlp = mlp_program(64, (8,), 10, optimizer="sgd", lr=0.2)
    ws = an.Workspace()
    ws.run_net_once(old_mlp.init_net)
    meta = old_mlp.load(ws, data / "mlp_v1_hidden8.npz")
    assert meta["dims"] == [64, 8, 10] and int(ws.fetch("iter")[0]) == 45
    program = Program(cnn(channels=(2, 2)), optimizer="adam", lr=0.005)
    shutil.copy(data / "cnn_v1_channels2.npz", tmp_path / "c.npz")
    with pytest.raises(CheckpointError, match="no metadata .*python -m asyncnet.train.convert"):
        program.load(ws, tmp_path / "c.npz")
    checkpoint.convert(program.model, tmp_path / "c.npz")
    program.load(ws, tmp_path / "c.npz")
    assert int(ws.fetch("iter")[0]) == 5
    # a run directory of the previous format resumes
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(data / "mlp_v1_hidden8.npz", run / "checkpoint.npz")
    shutil.copy(data / "mlp_v1_hidden8_metrics.json", run / "metrics.json")
    assert main(["train", "--resume", str(run), "--epochs", "2", "--quiet"]) == 0
    assert len(json.loads((run / "metrics.json").read_text())["epochs"]) == 2


def test_the_checkpoint_converter_command(tmp_path: Path) -> None:
    import shutil

    shutil.copy(Path(__file__).parents[1] / "model" / "data" / "cnn_v1_channels2.npz", tmp_path / "c.npz")
    p = subprocess.run(
        [sys.executable, "-m", "asyncnet.train.convert", str(tmp_path / "c.npz"), "--model", "cnn"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
    )
    # the zoo cnn has 16/32 channels: the fixture's 2/2 is refused in one line naming the shapes
    assert p.returncode == 1 and p.stderr.count("\n") == 1 and "shape" in p.stderr
    import asyncnet as an
    from asyncnet.model.zoo import cnn
    from asyncnet.train.program import Program

    program = Program(cnn(), optimizer="adam", lr=0.005)  # asyncnet train --model cnn's
    ws = an.Workspace()
    ws.run_net_once(program.init_net)
    np.savez(tmp_path / "zoo.npz", **{n: np.asarray(ws.fetch(n)) for n in program.checkpoint_blobs})
    p = subprocess.run(
        [sys.executable, "-m", "asyncnet.train.convert", str(tmp_path / "zoo.npz"), "--model", "cnn"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
    )
    assert p.returncode == 0 and p.stderr == "", p.stderr
    program.load(ws, tmp_path / "zoo.npz")


@pytest.mark.timeout(120)
def test_the_torch_launcher_saves_every_epoch_from_rank_0(tmp_path: Path, monkeypatch) -> None:
    """One rank in-process (gloo, world size 1): the torch launcher hands the writer to rank 0."""
    pytest.importorskip("torch.distributed")
    import socket

    from asyncnet.model.checkpoint import metadata
    from asyncnet.train.config import TrainConfig
    from asyncnet.train.data import load_digits
    from asyncnet.train.loop import launch_torch
    from asyncnet.train.report import RunWriter

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for k, v in {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}.items():
        monkeypatch.setenv(k, v)
    saves = []

    class Counting(RunWriter):
        def epoch_end(self, program, arrays, metrics):
            super().epoch_end(program, arrays, metrics)
            saves.append(len(metadata(self.out / "checkpoint.npz")["run"]["epochs"]))

    cfg = TrainConfig(backend="torch", hidden=(8,), epochs=2, trace=False)
    launch_torch(cfg, load_digits(), writer=Counting(tmp_path, cfg.to_dict()))
    assert saves == [1, 2] and _epochs(tmp_path / "metrics.json") == 2


def test_a_refused_resume_still_drops_the_stray_temp_files(tmp_path: Path) -> None:
    """Killed while writing metrics.json after the epoch's checkpoint: whatever resume then
    says, it leaves no temporary file of the killed writes."""
    run = tmp_path / "run"
    assert main(["train", *SMALL, "--epochs", "1", "--out", str(run)]) == 0
    strays = [run / f".metrics.json.{os.getpid()}.ab12.tmp", run / f".checkpoint.npz.{os.getpid()}.cd34.tmp"]
    for stray in strays:
        stray.write_bytes(b"half")
    p = _cli("--resume", "run", "--epochs", "1", "--quiet", cwd=tmp_path)
    assert p.returncode == 2 and "already" in p.stderr and p.stderr.count("\n") == 1, p.stderr
    assert not [f.name for f in run.iterdir() if f.name.endswith(".tmp")]
