"""``asyncnet train``: the main job. Trains a model (the zoo's mlp on the embedded 8x8 digits by
default, any zoo model, or your own ``--model my_module:build --data data.npz``) through
:func:`asyncnet.train.api.run` and leaves a run directory with metrics.json, checkpoint.npz
(both saved after every epoch, by every backend), loss_accuracy.png, trace.json (one training
step of every worker) and TensorBoard event files (when tensorboard is installed).

    asyncnet train                                   # 2 sync workers on threads
    asyncnet train --mode hogwild --backend processes --epochs 5
    asyncnet train --model my_models.py:classifier --data data.npz
    asyncnet train --resume runs/RUN --epochs 20     # continue that run to 20 epochs in total
    asyncnet train --config runs/RUN/metrics.json    # rerun a run's settings (flags override)
    torchrun --nproc-per-node 2 -m asyncnet train --backend torch

Everything that can be checked is checked before the first step. Bad options print one line and
exit with status 2; a run that fails (diverges, a worker dies) prints one line and exits 1.
Progress goes to stderr, results to stdout.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any

from asyncnet.errors import AsyncNetError, TrainConfigError, TrainingDivergedError

# flags that map one-to-one onto TrainConfig fields (dest == field name)
CONFIG_FLAGS = (
    "mode",
    "workers",
    "backend",
    "epochs",
    "batch_size",
    "lr",
    "optimizer",
    "momentum",
    "weight_decay",
    "lr_policy",
    "lr_step",
    "lr_gamma",
    "hidden",
    "seed",
    "target_accuracy",
    "threads",
    "tensor",
    "device",
    "model",
    "checkpoint_every",
    "divergence_factor",
)


class TrainingFailedError(AsyncNetError):
    """An unexpected error inside the trainers, shown as one line."""


class _UsageError(Exception):
    """A bad option or an unusable run directory: one line, exit status 2."""


def _number(expected: str, integer: bool) -> Any:
    """An argparse type that only parses: the ranges are TrainConfig's to check, one way for the
    command line, config files and the library alike."""

    def parse(text: str) -> Any:
        try:
            return int(text) if integer else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None

    return parse


_int = _number("an integer", True)
_float = _number("a number", False)


def _hidden(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated layer sizes like 64,32, got {text!r}") from None


def _model(text: str) -> str:
    from asyncnet.train.config import MODELS, is_model_spec

    if text in MODELS or is_model_spec(text):
        return text
    raise argparse.ArgumentTypeError(
        f"expected one of {', '.join(MODELS)} or my_module:function (path/to/file.py:function), got {text!r}"
    )


def add_parser(sub: argparse._SubParsersAction) -> None:
    from asyncnet.train.config import BACKENDS, DEFAULT_LR, LR_POLICIES, MODES, OPTIMIZERS, TrainConfig

    d = TrainConfig()
    lrs = ", ".join(f"{k} {v:g}" for k, v in DEFAULT_LR.items())
    p = sub.add_parser(
        "train",
        help="train a model (an MLP on the embedded 8x8 digits by default: the main job)",
        description="Train a model (by default an MLP on the embedded 8x8 handwritten digits, 1,797 images; "
        "or any zoo model, or your own with --model and --data) with local, "
        "data-parallel (sync) or Hogwild workers; writes a run directory. Settings come from "
        "the defaults, then --config or --resume, then the flags given.",
    )
    a = p.add_argument
    a(
        "--model",
        type=_model,
        metavar="MODEL",
        help="model of asyncnet.model.zoo: mlp, cnn (digits as 1x8x8), lstm (digits row by row) or dlrm (a generated click "
        f"log), or your own: my_module:build or path/to/file.py:build, a function returning a ModelHelper, trained "
        f"on --data (default {d.model})",
    )
    a(
        "--data",
        metavar="FILE.npz",
        help="train on arrays x [N, features...] and y [N] class ids (optionally x_test, "
        "y_test; else 20%% held out) instead of the digits; checked before the first step; "
        "give it again with --resume. With --model dlrm: a Criteo Kaggle text file, "
        "the reference's preprocessed .npz, or random:KEY=VALUE,... (docs/dlrm.md)",
    )
    a(
        "--hybrid",
        action="store_true",
        help="with --model dlrm --backend torch under torchrun: tables sharded across the ranks (all-to-all of pooled "
        "embeddings), MLPs data-parallel, sgd (docs/dlrm.md)",
    )
    a(
        "--model-arg",
        action="append",
        type=_model_arg,
        metavar="KEY=VALUE",
        dest="model_arg",
        help="an option of --model dlrm (repeatable), VALUE as JSON or a word: interaction=cat, loss=mse, "
        "loss_threshold=1e-7, weighted_pooling=learned, qr_collisions=4, md_dims=[16,4], bottom=[512,256], "
        "lr_num_warmup_steps=100, max_ind_range=100000, bad_rows=skip ... (docs/dlrm.md)",
    )
    a("--workers", type=_int, help=f"number of workers (default {d.workers})")
    a("--mode", choices=MODES, help=f"trainer (default {d.mode})")
    a(
        "--backend",
        choices=BACKENDS,
        help=f"where workers run (default {d.backend}); torch: under torchrun, --workers threads per rank "
        "(default 1), so workers = threads x ranks",
    )
    a("--epochs", type=_int, help=f"epochs in total, also when resuming (default {d.epochs})")
    a("--batch-size", type=_int, help=f"global batch size of one step (default {d.batch_size})")
    a(
        "--lr",
        type=_float,
        help=f"base learning rate (default per optimizer: {lrs}; cnn adam 0.005, lstm adam 0.01, dlrm sgd 0.05)",
    )
    a("--optimizer", choices=OPTIMIZERS, help=f"optimizer (default {d.optimizer}; adam for cnn and lstm)")
    a("--momentum", type=_float, help=f"momentum coefficient of --optimizer momentum (default {d.momentum})")
    a("--weight-decay", type=_float, help=f"L2 penalty added to every gradient (default {d.weight_decay})")
    a(
        "--lr-policy",
        choices=LR_POLICIES,
        help=f"learning-rate schedule: fixed, step (lr * gamma^floor(iter/step)) or exp (lr * gamma^iter) (default {d.lr_policy})",
    )
    a("--lr-step", type=_int, help=f"steps between decays of --lr-policy step (default {d.lr_step})")
    a("--lr-gamma", type=_float, help="decay factor (default 0.1 for step, 0.999 for exp)")
    a(
        "--hidden",
        type=_hidden,
        help=f"hidden layer sizes of --model mlp, comma-separated (default {','.join(map(str, d.hidden))})",
    )
    a("--seed", type=_int, help=f"random seed (default {d.seed})")
    a(
        "--target-accuracy",
        type=_float,
        metavar="ACC",
        help="stop after the first epoch whose test accuracy reaches ACC (e.g. 0.95)",
    )
    a(
        "--checkpoint-every",
        type=_int,
        metavar="N",
        help="also save the checkpoint every N steps inside an epoch (sync and local modes; default: at every epoch's end)",
    )
    a(
        "--divergence-factor",
        type=_float,
        metavar="F",
        help=f"fail the run when a step's loss exceeds F x log(classes) (a classifier's loss at chance; else F x the first "
        f"step's loss); 0 turns the check off, NaN and inf always fail (default {d.divergence_factor:g})",
    )
    a(
        "--config",
        metavar="FILE",
        help="take the settings from FILE: a run's metrics.json or a JSON object of the same "
        'shape as its "config" block; flags given override it',
    )
    a(
        "--resume",
        metavar="RUN_DIR",
        help="continue the run in RUN_DIR (its settings, parameters, optimizer state, "
        "step and data order) to --epochs in total, writing into RUN_DIR",
    )
    a(
        "--threads",
        type=_int,
        metavar="N",
        help="BLAS/torch threads per kernel (default: the cores shared out so that workers x threads <= cores)",
    )
    a("--tensor", choices=("numpy", "torch"), help=f"blob library: numpy arrays or torch tensors (default {d.tensor})")
    a("--device", help=f"cpu, cuda or cuda:N (cuda needs --tensor torch; default {d.device})")
    a("--out", default=None, help="run directory (default runs/<timestamp>); must not hold a run unless --overwrite")
    a("--overwrite", action="store_true", help="replace the run already in --out")
    a("--quiet", action="store_true", help="no progress, no table: only the result line")
    a(
        "--export-onnx",
        metavar="FILE",
        help="after training, write the model's inference net with the trained "
        "parameters as an ONNX model (needs the onnx extra; docs/onnx.md)",
    )
    p.set_defaults(handler=run, _parser=p)


def run(args: argparse.Namespace) -> int:
    from asyncnet.train.api import prepare_run_dir
    from asyncnet.train.loop import under_torchrun
    from asyncnet.train.report import RunWriter

    try:
        base, resume_dir = _base_settings(args)
        cfg = _config(args, base)
        if cfg.model.startswith("user:"):
            raise _UsageError(
                f"--model {cfg.model}: the run's model was a ModelHelper object given to train(); "
                "resume it there (train(model, data, resume=RUN_DIR)) or pass --model my_module:function"
            )
        if cfg.backend == "torch" and not under_torchrun():
            raise _UsageError(
                "--backend torch runs under torchrun, e.g. "
                "torchrun --nproc-per-node 2 -m asyncnet train --backend torch"
            )
        rank0 = not (cfg.backend == "torch" and os.environ.get("RANK", "0") != "0")
        out = resume_dir or (Path(args.out) if args.out else Path("runs") / time.strftime("%Y%m%d-%H%M%S"))
        data = _data_path(args, resume_dir)
        cfg, ds = _dlrm_data(cfg, data) if cfg.model == "dlrm" and data else (cfg, _dataset(cfg, data))
        resume = _load_resume(cfg, out, ds) if resume_dir is not None else None
        source = _source(ds, data)
        if rank0:
            prepare_run_dir(out, cfg, overwrite=args.overwrite, resuming=resume_dir is not None, data=source)
    except (_UsageError, TrainConfigError) as e:
        return _usage_error(args, str(e))
    if getattr(args, "hybrid", False):
        return _hybrid(args, cfg, ds, out, resume)
    writer = RunWriter(out, cfg.to_dict(), list(resume.epochs) if resume is not None else [], source)
    with _cli_logging(), _quiet_float_warnings():
        try:
            result = _train(cfg, out, args.quiet, rank0, resume, writer if rank0 else None, ds)
        except TrainingDivergedError as e:
            if rank0:
                _write_failure(out, writer, "diverged", str(e))
            raise
        except KeyboardInterrupt as e:  # SIGINT, or SIGTERM (cli.main's Terminated)
            if rank0:
                _write_failure(out, writer, "interrupted", f"stopped by {_signal_name(e)}")
            raise  # one line from main()
        except AsyncNetError as e:
            if rank0:
                _write_failure(out, writer, "failed", str(e))
            raise  # one line from main()
        except Exception as e:
            logging.getLogger("asyncnet.train").debug("training failed", exc_info=True)
            where = f" (worker {e.worker_id})" if hasattr(e, "worker_id") else ""
            failed = TrainingFailedError(f"training failed{where}: {type(e).__name__}: {e}")
            if rank0:
                _write_failure(out, writer, "failed", str(failed))
            raise failed from e
    if not result.is_main:
        return 0
    _write_run_dir(result, out)
    if getattr(args, "export_onnx", None):
        from asyncnet.interop.onnx import export_trained

        export_trained(result, ds, args.export_onnx)
    _print_summary(result, out, args.quiet)
    return 0


def _hybrid(args: argparse.Namespace, cfg: Any, ds: Any, out: Path, resume: Any) -> int:
    """The hybrid-parallel dlrm (asyncnet.train.dlrm_hybrid) in the run directory ``out``."""
    from asyncnet.train.dlrm_hybrid import train_run

    if cfg.model != "dlrm" or cfg.backend != "torch":
        return _usage_error(
            args, f"--hybrid trains --model dlrm --backend torch, got --model {cfg.model} --backend {cfg.backend}"
        )
    try:
        epochs = train_run(cfg, ds, out, resume, quiet=args.quiet)
    except TrainConfigError as e:
        return _usage_error(args, str(e))
    if os.environ.get("RANK", "0") == "0" and epochs:
        print(f"train loss {epochs[-1].train_loss:.6f} after {len(epochs)} epoch(s); run directory: {out}", flush=True)
    return 0


def _usage_error(args: argparse.Namespace, message: str) -> int:
    prog = args._parser.prog if hasattr(args, "_parser") else "asyncnet train"
    print(f"{prog}: error: {message}", file=sys.stderr)
    return 2


# -- settings -------------------------------------------------------------------------------
def _base_settings(args: argparse.Namespace) -> tuple[dict[str, Any], Path | None]:
    """The settings the flags override: --config's, --resume's run, or none."""
    from asyncnet.cli.common import path_problem, show_path

    for flag in ("out", "resume", "config", "data"):
        value = getattr(args, flag, None)
        problem = value and path_problem(value)
        if problem:
            raise _UsageError(f"--{flag} {show_path(value)}: unusable path: {problem}")
    if args.config and args.resume:
        raise _UsageError("--config and --resume both give the settings: use one (flags override either)")
    if args.resume and args.out:
        raise _UsageError("--resume writes into the run it continues: drop --out")
    if args.config:
        return _read_settings(Path(args.config), "--config"), None
    if args.resume:
        run_dir = Path(args.resume)
        if not (run_dir / "metrics.json").is_file():
            raise _UsageError(f"--resume {run_dir}: not a run directory (no metrics.json)")
        return _read_settings(run_dir / "metrics.json", "--resume"), run_dir
    return {}, None


def _read_settings(path: Path, flag: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_bytes())
    except OSError as e:
        raise _UsageError(f"{flag} {path}: cannot read it: {e.strerror or e}") from None
    except (ValueError, RecursionError) as e:
        raise _UsageError(f"{flag} {path}: not valid JSON ({type(e).__name__})") from None
    if isinstance(data, dict) and "config" in data:  # a run's metrics.json
        data = data["config"]
    if not isinstance(data, dict):
        raise _UsageError(f"{flag} {path}: expected a JSON object of settings (or a run's metrics.json)")
    return data


def _config(args: argparse.Namespace, base: dict[str, Any]) -> Any:
    from asyncnet.train.trainers import TrainConfig

    merged = dict(base)
    given = {k: getattr(args, k) for k in CONFIG_FLAGS if getattr(args, k) is not None}
    if "optimizer" in given and given["optimizer"] != base.get("optimizer") and "lr" not in given:
        merged.pop("lr", None)  # another optimizer: its own default rate, not the file's
    merged.update(given)
    if getattr(args, "model_arg", None):
        merged["model_args"] = {**merged.get("model_args", {}), **dict(args.model_arg)}
    if "hidden" in given and merged.get("model", "mlp") != "mlp":
        raise _UsageError(
            f"--hidden sets the hidden layers of --model mlp; the {merged['model']} of the zoo has fixed "
            "sizes (asyncnet.model.zoo): drop --hidden"
        )
    if merged.get("backend") == "torch" and "workers" in given:
        merged["threads_per_rank"] = given["workers"]  # W threads per rank x R ranks (torchrun's)
    where = f"--config {args.config}" if args.config else (f"--resume {args.resume}" if args.resume else "train")
    if base:
        return TrainConfig.from_dict(merged, where=where)
    try:
        return TrainConfig(**merged)
    except TrainConfigError as e:  # name the flag, not the field: "--batch-size must be ..."
        field, _, rest = str(e).partition(" ")
        flag = f"--{field.replace('_', '-')}" if field in CONFIG_FLAGS else field
        raise TrainConfigError(f"{flag} {rest}") from None


def _data_path(args: argparse.Namespace, resume_dir: Path | None) -> str | None:
    """``--data``; resuming a run trained on a file without it, the one-line error naming that file."""
    if args.data or resume_dir is None:
        return args.data
    try:
        recorded = json.loads((resume_dir / "metrics.json").read_bytes()).get("data")
    except (OSError, ValueError, AttributeError):
        return None
    if isinstance(recorded, str) and (
        recorded.endswith(".npz") or os.path.isabs(recorded) or recorded.startswith("random:")
    ):
        raise _UsageError(f"--resume {resume_dir}: the run trained on --data {recorded}: pass --data {recorded} again")
    if recorded == "arrays":
        raise _UsageError(
            f"--resume {resume_dir}: the run trained on arrays given to train(): save them as --data "
            "FILE.npz (arrays x and y), or resume it with train(model, data, resume=RUN_DIR)"
        )
    return None


def _dataset(cfg: Any, path: str | None) -> Any:
    """The run's data (``--data FILE.npz``, checked against the model, or the model's own), checked against ``cfg``."""
    from asyncnet.train.config import MODELS
    from asyncnet.train.data import dataset_for, load_npz

    if path is None and cfg.model not in MODELS:
        raise _UsageError(f"--model {cfg.model} is your model: give its data with --data FILE.npz (arrays x and y)")
    ds = load_npz(path, cfg.model, seed=cfg.seed) if path else dataset_for(cfg.model)
    cfg.check_data(len(ds.x_train))
    from asyncnet.train.program import build_program

    build_program(cfg, ds.input_dim, ds.num_classes)  # a model that cannot be built: one line before the run
    return ds


def _source(ds: Any, path: str | None) -> str:
    from asyncnet.train.api import data_source

    return data_source(ds, path)


def _status_of(run_dir: Path) -> Any:
    try:
        return json.loads((run_dir / "metrics.json").read_bytes()).get("status")
    except (OSError, ValueError, AttributeError):
        return None


def _model_arg(text: str) -> tuple[str, Any]:
    """KEY=VALUE of --model-arg: the value as JSON (numbers, lists, true/false/null), else the word."""
    key, sep, value = text.partition("=")
    if not sep or not key.isidentifier():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE like interaction=cat, got {text!r}")
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value


def _dlrm_data(cfg: Any, data: str) -> tuple[Any, Any]:
    """dlrm's --data (Criteo text, the reference's .npz, random:...): the data set, and ``cfg``
    with the dense width and table sizes the data fixes added to its model_args."""
    import dataclasses

    from asyncnet.model.zoo.dlrm import DATA_KEYS
    from asyncnet.train.criteo import click_dataset

    ds = click_dataset(data, {k: v for k, v in cfg.model_args.items() if k in DATA_KEYS})
    cfg = dataclasses.replace(cfg, model_args={**cfg.model_args, **ds.log.model_args})
    cfg.check_data(len(ds.x_train))
    return cfg, ds


def _load_resume(cfg: Any, run_dir: Path, ds: Any) -> Any:
    """The checkpoint and finished epochs of the run in ``run_dir`` (finished, or stopped midway:
    its last checkpoint); None, said in one line, when it saved none."""
    from asyncnet.train.api import load_resume

    resume = load_resume(run_dir, cfg, ds)
    status = _status_of(run_dir)
    if resume is None and status in ("diverged", "failed"):
        raise _UsageError(
            f"--resume {run_dir}: the run ({status}) saved no epoch: nothing to continue from; start a new run"
        )
    if resume is None:
        print(
            f"asyncnet train: note: {run_dir} has no checkpoint (stopped before its first epoch ended): "
            "starting it again from epoch 1",
            file=sys.stderr,
        )
    return resume


# -- the run directory ----------------------------------------------------------------------
def _write_failure(out: Path, writer: Any, status: str, error: str) -> None:
    """metrics.json of a run that did not finish (``status`` "diverged", "failed" or
    "interrupted"): the epochs its checkpoint holds (``--resume`` continues from there, with a
    lower ``--lr`` after a divergence) and the error."""
    from asyncnet.train.api import write_failure

    write_failure(out, writer, status, error)


def _signal_name(stop: KeyboardInterrupt) -> str:
    from asyncnet.cli.main import Terminated  # cli.main imports this module: not at the top

    return "SIGTERM" if isinstance(stop, Terminated) else "SIGINT"


def _write_run_dir(result: Any, out: Path) -> None:
    from asyncnet.train.api import finish_run_dir

    finish_run_dir(result, out)


# -- training and output --------------------------------------------------------------------
class _LineHandler(logging.Handler):
    """Library log records as one ``asyncnet train: warning: ...`` line each on stderr."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(f"asyncnet train: {record.levelname.lower()}: {record.getMessage()}\n")
        except (OSError, ValueError):
            pass


# numpy's warnings on the way to a NaN; the trainer stops at the first non-finite loss and says so
FLOAT_WARNINGS = ("overflow encountered", "invalid value encountered", "divide by zero encountered")


class _quiet_float_warnings:
    """Hide numpy's floating-point RuntimeWarnings while training, in this process and in the
    worker processes it spawns (spawn passes ``sys.warnoptions`` on as ``-W`` flags)."""

    def __enter__(self) -> None:
        self.catch = warnings.catch_warnings()
        self.catch.__enter__()
        self.saved = list(sys.warnoptions)
        for text in FLOAT_WARNINGS:
            warnings.filterwarnings("ignore", message=text, category=RuntimeWarning)
            sys.warnoptions.append(f"ignore:{text}:RuntimeWarning")

    def __exit__(self, *exc: Any) -> None:
        sys.warnoptions[:] = self.saved
        self.catch.__exit__(*exc)


class _cli_logging:
    """Show the ``asyncnet.train`` logger's warnings while the command runs."""

    def __enter__(self) -> None:
        self.logger = logging.getLogger("asyncnet.train")
        self.handler = _LineHandler(logging.WARNING)
        self.saved = self.logger.propagate
        self.logger.addHandler(self.handler)
        self.logger.propagate = False

    def __exit__(self, *exc: Any) -> None:
        self.logger.removeHandler(self.handler)
        self.logger.propagate = self.saved


def _train(cfg: Any, out: Path, quiet: bool, rank0: bool, resume: Any, writer: Any, ds: Any) -> Any:
    """Train with progress on stderr and TensorBoard events (rank 0 only under torchrun); the
    run is saved after every epoch by ``writer``, from the worker of rank 0."""
    from asyncnet.train.api import TB_DIR
    from asyncnet.train.api import run as train
    from asyncnet.train.report import EventLog, Reporter

    events = EventLog.open(out / TB_DIR) if rank0 else None
    reporter = Reporter(quiet=quiet or not rank0, epochs=cfg.epochs, events=events)
    ranks = os.environ.get("WORLD_SIZE", "")
    workers = (
        (int(ranks) * cfg.threads_per_rank if ranks.isdigit() else "?") if cfg.backend == "torch" else cfg.num_workers
    )
    start = f", from epoch {resume.start_epoch + 1}" if resume is not None else ""
    reporter.print(
        f"training {cfg.mode} mode, {workers} worker(s) on {cfg.backend}, "
        f"{'mlp hidden ' + ','.join(map(str, cfg.hidden)) if cfg.model == 'mlp' else cfg.model}, "
        f"{cfg.optimizer} lr {cfg.lr:g}, batch {cfg.batch_size}, {cfg.epochs} epochs{start} -> {out}"
    )
    try:
        return train(cfg, ds, reporter=reporter, resume=resume, writer=writer)
    finally:
        reporter.close()


def _print_summary(result: Any, out: Path, quiet: bool) -> None:
    from asyncnet.train.report import summary_table

    final = result.history.final
    if not quiet and sys.stdout.isatty():
        from rich.console import Console

        Console().print(summary_table(result.history))
    acc = final.test_accuracy if final else 0.0
    optimum = f" (optimum {final.optimal_auc:.4f})" if final is not None and final.optimal_auc is not None else ""
    figure = (
        f"test AUC {final.test_auc:.4f}{optimum}"
        if final is not None and final.test_auc is not None
        else f"test accuracy {acc:.2%}"
    )
    try:
        print(
            f"{figure} after {len(result.history)} epoch(s), "
            f"{result.history.samples_per_sec or 0:,.0f} samples/s; run directory: {out}",
            flush=True,
        )
    except BrokenPipeError:  # the reader left (`| head -0`); the run directory holds the results
        _silence(sys.stdout)


def _silence(stream: Any) -> None:
    """Point a closed pipe's descriptor at /dev/null so the interpreter's final flush is quiet."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
