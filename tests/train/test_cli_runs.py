"""``asyncnet train`` as a user meets it: failures in one line with a non-zero status, the run
directory checked before the first step, --resume (2 + 2 epochs == 4, bit for bit), --config,
the optimizer flags, progress on stderr and results on stdout, TensorBoard events, and a trace
with every worker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from asyncnet.cli.main import main
from asyncnet.model.checkpoint import META

pytestmark = pytest.mark.timeout(90)
QUIET = ["--quiet", "--hidden", "32"]


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """The command in a child process, stdout and stderr piped (not a terminal)."""
    return subprocess.run(
        [sys.executable, "-m", "asyncnet", "train", *args], cwd=cwd, capture_output=True, text=True, timeout=80
    )


def _one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "error" in lines[0] and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("backend", ["threads", "processes"])
def test_a_diverging_run_fails_in_one_line_and_metrics_say_so(tmp_path: Path, backend: str) -> None:
    p = _cli("--lr", "1e9", "--epochs", "2", "--out", "run", "--quiet", "--backend", backend, cwd=tmp_path)
    assert p.returncode == 1 and p.stdout == ""
    line = _one_error_line(p.stderr)
    assert "diverged" in line and "step" in line and "--lr" in line
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["status"] == "diverged" and metrics["epochs"] == [] and "NaN" not in json.dumps(metrics)
    again = _cli("--resume", "run", "--epochs", "3", "--quiet", cwd=tmp_path)
    assert again.returncode == 2 and "nothing to continue from" in _one_error_line(again.stderr)


@pytest.mark.parametrize(
    "args,words",
    [
        (["--out", "/proc/x"], "cannot create the run directory"),
        (["--batch-size", "100000"], "larger than the training set"),
        (["--mode", "hogwild", "--workers", "1000"], "at least the number of hogwild workers"),
        (["--config", "missing.json"], "cannot read"),
        (["--config", "deep.json"], "not valid JSON"),
        (["--config", "unknown.json"], "unknown setting(s) ['learning_rate']"),
        (["--resume", "nowhere"], "not a run directory"),
        (["--resume", "nowhere", "--config", "x.json"], "use one"),
        (["--momentum", "1.5"], "--momentum must be in [0, 1), got 1.5"),
        (["--workers", "0"], "--workers must be an int >= 1, got 0"),
        (["--seed", "-1"], "--seed must be an int >= 0, got -1"),
        (["--lr-policy", "cosine"], "invalid choice"),
    ],
)
def test_what_can_be_checked_is_refused_before_training(
    tmp_path: Path, args: list, words: str, capsys, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "deep.json").write_text("[" * 100_000)
    (tmp_path / "unknown.json").write_text(json.dumps({"learning_rate": 0.1}))
    with pytest.raises(SystemExit) as exc:
        sys.exit(main(["train", *args, "--quiet"]))
    assert exc.value.code == 2
    assert words in _one_error_line(capsys.readouterr().err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["deep.json", "unknown.json"]  # no run directory


def test_an_existing_run_is_refused_unless_overwrite(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    assert main(["train", "--epochs", "1", "--out", str(out), *QUIET]) == 0
    first = (out / "metrics.json").read_bytes()
    assert main(["train", "--epochs", "1", "--out", str(out), "--seed", "1", *QUIET]) == 2
    assert "--overwrite" in _one_error_line(capsys.readouterr().err)
    assert (out / "metrics.json").read_bytes() == first
    assert main(["train", "--epochs", "1", "--out", str(out), "--seed", "1", "--overwrite", *QUIET]) == 0
    assert json.loads((out / "metrics.json").read_text())["config"]["seed"] == 1


def test_resume_two_plus_two_epochs_equals_four_bit_for_bit(tmp_path: Path) -> None:
    common = ["--optimizer", "momentum", "--lr-policy", "step", "--lr-step", "50", "--weight-decay", "1e-4", *QUIET]
    assert main(["train", "--epochs", "4", "--out", str(tmp_path / "four"), *common]) == 0
    assert main(["train", "--epochs", "2", "--out", str(tmp_path / "two"), *common]) == 0
    assert main(["train", "--resume", str(tmp_path / "two"), "--epochs", "4", "--quiet"]) == 0
    with np.load(tmp_path / "four" / "checkpoint.npz") as a, np.load(tmp_path / "two" / "checkpoint.npz") as b:
        assert set(a.files) == set(b.files) and "fc1_w_momentum" in a.files
        for name in a.files:
            if name != META:  # the metadata records each run's timings
                assert np.array_equal(a[name], b[name]), name
        assert int(a["iter"][0]) == 4 * 45
    four, resumed = (json.loads((tmp_path / d / "metrics.json").read_text()) for d in ("four", "two"))
    strip = lambda ms: [{k: v for k, v in m.items() if k not in ("seconds", "samples_per_sec")} for m in ms]
    assert strip(resumed["epochs"]) == strip(four["epochs"]) and len(four["epochs"]) == 4
    assert resumed["config"] == four["config"] and resumed["status"] == "ok"


def test_config_reruns_a_run_and_flags_override_it(tmp_path: Path) -> None:
    first = tmp_path / "first"
    assert (
        main(
            [
                "train",
                "--epochs",
                "1",
                "--optimizer",
                "adam",
                "--lr-policy",
                "exp",
                "--seed",
                "4",
                "--out",
                str(first),
                *QUIET,
            ]
        )
        == 0
    )
    assert main(["train", "--config", str(first / "metrics.json"), "--out", str(tmp_path / "again"), "--quiet"]) == 0
    assert (
        main(
            [
                "train",
                "--config",
                str(first / "metrics.json"),
                "--seed",
                "5",
                "--out",
                str(tmp_path / "other"),
                "--quiet",
            ]
        )
        == 0
    )
    cfg = {d: json.loads((tmp_path / d / "metrics.json").read_text())["config"] for d in ("first", "again", "other")}
    assert cfg["again"] == cfg["first"] and (cfg["first"]["optimizer"], cfg["first"]["lr_policy"]) == ("adam", "exp")
    assert cfg["other"] == {**cfg["first"], "seed": 5}
    with np.load(first / "checkpoint.npz") as a, np.load(tmp_path / "again" / "checkpoint.npz") as b:
        assert all(np.array_equal(a[n], b[n]) for n in a.files if n != META)


def test_piped_output_progress_on_stderr_one_line_per_epoch_results_on_stdout(tmp_path: Path) -> None:
    p = _cli("--epochs", "3", "--hidden", "32", "--out", "run", "--optimizer", "momentum", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("\n") == 1 and p.stdout.startswith("test accuracy")  # no table, no wrapping
    lines = p.stderr.strip().splitlines()
    assert "momentum lr 0.05" in lines[0]  # the optimizer's own default rate
    epochs = [ln for ln in lines if ln.startswith("epoch")]
    assert len(lines) == 4 and [ln.split()[1] for ln in epochs] == ["1/3", "2/3", "3/3"], p.stderr
    assert all("nan" not in ln.lower() and "samples/s" in ln for ln in epochs)
    assert "ETA" in epochs[0] and "ETA" not in epochs[-1]
    assert max(map(len, lines)) > 80  # long lines stay whole when not on a terminal


def test_run_directory_has_tensorboard_events_and_every_worker_in_the_trace(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util import tensor_util

    out = tmp_path / "run"
    assert main(["train", "--epochs", "2", "--workers", "3", "--batch-size", "48", "--out", str(out), *QUIET]) == 0
    acc = EventAccumulator(str(out / "tensorboard"), size_guidance={"tensors": 0})  # 0: keep every point
    acc.Reload()
    assert {"loss/train", "loss/test", "accuracy/train", "accuracy/test", "lr", "samples_per_sec"} <= set(
        acc.Tags()["tensors"]
    )
    metrics = json.loads((out / "metrics.json").read_text())
    for tag, key in (("accuracy/test", "test_accuracy"), ("loss/train", "train_loss"), ("lr", "lr")):
        events = acc.Tensors(tag)
        assert [e.step for e in events] == [1, 2]
        assert [float(tensor_util.make_ndarray(e.tensor_proto)) for e in events] == pytest.approx(
            [m[key] for m in metrics["epochs"]], rel=1e-6
        )
    steps = acc.Tensors("step/loss")
    assert [e.step for e in steps] == list(range(1, 2 * 30 + 1))  # 1,438 samples / 48 per step: 30 steps an epoch
    assert all(np.isfinite(float(tensor_util.make_ndarray(e.tensor_proto))) for e in steps)
    trace = json.loads((out / "trace.json").read_text())["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in trace if e.get("name") == "process_name"}
    assert names == {1: "worker 0", 2: "worker 1", 3: "worker 2"}
    slices = [e for e in trace if e.get("ph") == "X"]
    # the workers meet in the gradient buckets' AllreduceStart (one Allreduce with bucket_mb=None)
    assert {e["pid"] for e in slices if e["name"] in ("Allreduce", "AllreduceStart")} == {1, 2, 3}
    assert min(e["ts"] for e in slices) == 0


def test_closed_pipes_neither_crash_the_run_nor_print_a_traceback(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "asyncnet", "train", "--epochs", "2", "--hidden", "32"]
    # the reader of stdout leaves at once (`| true`): the result line hits a closed pipe
    p = subprocess.Popen([*cmd, "--out", "a"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    p.stdout.close()
    err = p.stderr.read()
    assert p.wait(timeout=80) == 0 and "Traceback" not in err, err
    # the reader of stderr leaves after the first line (`2>&1 | head -1`): training goes on
    p = subprocess.Popen(
        [*cmd, "--out", "b"], cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    assert p.stderr.readline().startswith("training sync mode")
    p.stderr.close()
    assert p.wait(timeout=80) == 0
    for run in ("a", "b"):
        assert json.loads((tmp_path / run / "metrics.json").read_text())["status"] == "ok"


def test_an_unexpected_failure_inside_training_is_one_line(tmp_path: Path, capsys, monkeypatch) -> None:
    import asyncnet.train.api as trainers

    def broken(*args, **kwargs):
        err = ValueError("expected non-negative integer")
        err.worker_id = 1  # what run_parallel_workers attaches
        raise err

    monkeypatch.setattr(trainers, "run", broken)
    assert main(["train", "--out", str(tmp_path / "run"), "--quiet"]) == 1
    line = _one_error_line(capsys.readouterr().err)
    assert line == "asyncnet: error: training failed (worker 1): ValueError: expected non-negative integer"
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["status"] == "failed" and metrics["error"] == line.removeprefix("asyncnet: error: ")


def _wait_for_epochs(p: subprocess.Popen, metrics: Path, epochs: int) -> None:
    import time

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and p.poll() is None:
        try:
            if len(json.loads(metrics.read_text())["epochs"]) >= epochs:
                return
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.05)
    raise AssertionError(f"no {epochs} epochs saved in {metrics} (exit status {p.poll()})")


@pytest.mark.parametrize("sig,status,name", [("SIGTERM", 143, "SIGTERM"), ("SIGINT", 130, "SIGINT")])
def test_a_stopped_run_says_so_in_metrics_and_resumes(tmp_path: Path, sig: str, status: int, name: str) -> None:
    import signal

    cmd = [sys.executable, "-m", "asyncnet", "train", *QUIET]
    p = subprocess.Popen(
        [*cmd, "--epochs", "200", "--out", "run"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for_epochs(p, tmp_path / "run" / "metrics.json", 2)
        p.send_signal(getattr(signal, sig))
        err = p.communicate(timeout=60)[1]
    finally:
        p.kill()
    assert p.returncode == status and len(err.strip().splitlines()) == 1, err
    saved = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert saved["status"] == "interrupted" and saved["error"] == f"stopped by {name}" and len(saved["epochs"]) >= 2
    total = str(len(saved["epochs"]) + 1)
    assert subprocess.run([*cmd, "--resume", "run", "--epochs", total], cwd=tmp_path, timeout=80).returncode == 0
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["status"] == "ok"


def test_a_dead_process_worker_fails_the_run_in_one_line_and_metrics_say_so(tmp_path: Path) -> None:
    import signal
    import time

    cmd = [
        sys.executable,
        "-m",
        "asyncnet",
        "train",
        *QUIET,
        "--backend",
        "processes",
        "--epochs",
        "500",
        "--out",
        "run",
    ]
    p = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline, workers = time.monotonic() + 60, []
        while time.monotonic() < deadline and not workers and p.poll() is None:
            workers = [
                int(c)
                for c in subprocess.run(
                    ["pgrep", "-f", "-P", str(p.pid), "multiprocessing-fork"], capture_output=True, text=True
                ).stdout.split()
            ]
            time.sleep(0.2)
        assert workers, "no worker process started"
        time.sleep(0.5)  # mid-training
        os.kill(workers[0], signal.SIGKILL)
        err = p.communicate(timeout=60)[1]
    finally:
        p.kill()
    line = _one_error_line(err)
    assert p.returncode == 1 and "died" in line, err
    saved = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert saved["status"] == "failed" and "died" in saved["error"]


def test_a_killed_run_resumes_from_its_last_saved_epoch_bit_for_bit(tmp_path: Path) -> None:
    import signal
    import time

    cmd = [sys.executable, "-m", "asyncnet", "train", "--hidden", "32", "--quiet"]
    p = subprocess.Popen(
        [*cmd, "--epochs", "60", "--out", "run"], cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and p.poll() is None:
            try:
                if len(json.loads((tmp_path / "run" / "metrics.json").read_text())["epochs"]) >= 2:
                    break
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.05)
        p.send_signal(signal.SIGKILL)  # wherever it is: mid-epoch, or between two writes
    finally:
        p.wait(timeout=30)
    saved = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert saved["status"] == "running" and len(saved["epochs"]) >= 2
    total = str(len(saved["epochs"]) + 2)
    assert subprocess.run([*cmd, "--resume", "run", "--epochs", total], cwd=tmp_path, timeout=80).returncode == 0
    assert subprocess.run([*cmd, "--epochs", total, "--out", "ref"], cwd=tmp_path, timeout=80).returncode == 0
    with np.load(tmp_path / "run" / "checkpoint.npz") as a, np.load(tmp_path / "ref" / "checkpoint.npz") as b:
        assert all(np.array_equal(a[n], b[n]) for n in b.files if n != META)
    done = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert done["status"] == "ok" and len(done["epochs"]) == int(total)
    assert not [f.name for f in (tmp_path / "run").iterdir() if f.name.startswith(".")]  # no strays of the kill


def test_resume_drops_an_epoch_the_checkpoint_does_not_have(tmp_path: Path) -> None:
    from asyncnet.errors import CheckpointError
    from asyncnet.train.api import _epochs_of_checkpoint
    from asyncnet.train.report import EpochMetrics

    epochs = tuple(EpochMetrics(e, 0.5, 0.9, 0.4, 0.9, 1438, 0.1, lr=0.2, step=45 * e) for e in (1, 2, 3))
    assert _epochs_of_checkpoint(epochs, 135, tmp_path) == epochs
    assert _epochs_of_checkpoint(epochs, 90, tmp_path) == epochs[:2]  # killed between metrics and checkpoint
    assert _epochs_of_checkpoint(epochs, 0, tmp_path) == ()
    with pytest.raises(CheckpointError, match="at step 100"):
        _epochs_of_checkpoint(epochs, 100, tmp_path)


@pytest.mark.timeout(60)
def test_workers_under_the_torch_backend_are_threads_per_rank() -> None:
    import argparse

    from asyncnet.cli import train_cmd

    args = argparse.Namespace(**{k: None for k in train_cmd.CONFIG_FLAGS}, config=None, resume=None)
    args.backend, args.workers = "torch", 2
    assert train_cmd._config(args, {}).threads_per_rank == 2
    args.workers = None
    assert train_cmd._config(args, {}).threads_per_rank == 1
    args.backend, args.workers = "threads", 3
    cfg = train_cmd._config(args, {})
    assert (cfg.threads_per_rank, cfg.workers) == (1, 3)
