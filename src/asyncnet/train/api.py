"""``train()``: any model (a zoo name, a user's :class:`~asyncnet.model.ModelHelper` or a function
building one) on any data (the zoo's, numpy arrays, an npz file), local, sync or Hogwild, on
threads, processes or torchrun; with ``out``, the run directory the command line writes
(metrics.json, checkpoint.npz after every epoch, TensorBoard events, trace.json, the plot), which
``resume`` continues.

    >>> import numpy as np
    >>> from asyncnet.model import ModelHelper
    >>> def tiny():
    ...     m = ModelHelper("tiny", seed=0)
    ...     m.softmax_with_loss(m.fc(m.relu(m.fc("x", "fc1", 4, 16), "h"), "fc2", 16, 2), "y")
    ...     return m
    >>> rng = np.random.default_rng(0); x = rng.normal(size=(200, 4)); y = (x[:, 0] > 0).astype(int)
    >>> result = train(tiny, (x, y), epochs=5, workers=2, lr=0.5)
    >>> result.history.final.test_accuracy > 0.9
    True
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from asyncnet.errors import CheckpointError, TrainConfigError
from asyncnet.train.config import MODELS, TrainConfig
from asyncnet.train.data import Dataset, dataset_for, from_arrays, load_npz
from asyncnet.train.loop import Resume, launch, launch_torch, under_torchrun
from asyncnet.train.program import Program, build_program
from asyncnet.train.report import CHECKPOINT, METRICS, EpochMetrics, History, RunWriter, write_metrics, write_trace
from asyncnet.train.worker import WorkerResult

__all__ = [
    "train",
    "TrainResult",
    "under_torchrun",
    "load_resume",
    "prepare_run_dir",
    "finish_run_dir",
    "write_failure",
    "data_source",
    "TB_DIR",
    "RUN_FILES",
]

log = logging.getLogger("asyncnet.train")

TB_DIR = "tensorboard"
RUN_FILES = (METRICS, "loss_accuracy.png", "trace.json", CHECKPOINT)


@dataclass
class TrainResult:
    """The outcome of :func:`train`. On torch ranks other than 0, ``is_main`` is False and only
    ``history`` is filled. ``traces`` holds one traced step per worker (Chrome-trace events);
    ``program`` is the trained model's program (its nets), ``params`` the final arrays."""

    config: TrainConfig
    history: History
    params: dict[str, np.ndarray] = field(default_factory=dict)
    traces: list[list[dict[str, Any]]] = field(default_factory=list)
    model: Any = None
    steps: int = 0
    is_main: bool = True
    rank: int = 0
    random_states: np.ndarray | None = None  # every worker's Dropout generators at the end (checkpointed)

    @property
    def program(self) -> Program:
        return self.model

    def workspace(self) -> Any:
        """A new :class:`~asyncnet.Workspace` holding the trained arrays: run ``program.inference_net()`` in it."""
        import asyncnet as an

        ws = an.Workspace()
        for k, v in self.params.items():
            ws.feed(k, v.copy())
        return ws

    def predict(self, x: np.ndarray) -> np.ndarray:
        """The trained model's predictions (``softmax`` or ``prob``) for the inputs ``x``, through
        its inference net (no label needed)."""
        ws = self.workspace()
        try:
            inputs = self.program.inputs
            if len(inputs) != 1:
                raise TrainConfigError(f"predict feeds one input; model {self.program.name!r} reads {inputs}")
            ws.feed(inputs[0], np.asarray(x, self.program.dtype, order="C"))
            ws.run_net_once(self.program.inference_net())
            return np.array(ws.fetch(self.program.scores, host=True))
        finally:
            ws.close()

    def save_checkpoint(self, path: str | Path, data: str | None = None) -> Path:
        """Write the final parameters, optimizer state and ``iter`` as an npz checkpoint
        (``program.load`` reads it back; ``train(..., resume=...)`` continues from it), with the
        run's settings, epochs and data source (``data``) in its metadata."""
        from asyncnet.model.checkpoint import RANDOM, save_arrays

        arrays = self.params if self.random_states is None else {**self.params, RANDOM: self.random_states}
        save_arrays(
            self.program.model,
            arrays,
            str(path),
            {
                "run": {
                    "config": self.config.to_dict(),
                    "epochs": [m.to_dict() for m in self.history],
                    "partial": None,
                    "data": data,
                }
            },
        )
        return Path(path)

    def write_trace(self, path: str | Path) -> Path:
        """Write the Chrome trace of the recorded training step: every worker's threads."""
        return write_trace(self.traces, path)


def train(
    model: Any = None,
    data: Any = None,
    *,
    reporter: Any = None,
    resume: Any = None,
    out: str | Path | None = None,
    overwrite: bool = False,
    config: TrainConfig | None = None,
    dataset: Any = None,
    **settings: Any,
) -> TrainResult:
    """Train ``model`` on ``data``; joins every worker before returning.

    ``model``: a :class:`TrainConfig` (the older form, ``train(cfg, dataset)``), a zoo name
    ("mlp", "cnn", "lstm", "dlrm"), ``"module:function"``, a user's ModelHelper (with a loss,
    no optimizer yet) or a function returning one. ``data``: a Dataset, ``(x, y)`` or
    ``(x, y, x_test, y_test)`` numpy arrays (20% held out without a test set), an npz path, or
    None for the zoo model's own data. ``settings`` are :class:`TrainConfig` fields (``epochs``,
    ``workers``, ``mode``, ``backend``, ``lr``...). ``out``: a run directory written as the
    command line writes it; ``resume``: a run directory (or a :class:`Resume`) to continue up to
    ``epochs`` in total.

    Raises :class:`~asyncnet.errors.TrainConfigError` before the first step for settings that
    do not fit the data, :class:`~asyncnet.errors.TrainingDivergedError` when the loss diverges.
    """
    if dataset is not None:  # the older keyword
        data = dataset
    if isinstance(model, TrainConfig):
        if settings:
            raise TrainConfigError(f"train(cfg, ...) takes its settings from cfg: drop {sorted(settings)}")
        cfg, user = model, None
    else:
        if config is None and isinstance(resume, (str, os.PathLike)):
            config = _run_config(Path(resume))
        cfg, user = _config_for(model, config, settings)
    ds = _dataset(cfg, data, user)
    cfg.check_data(len(ds.x_train))
    build_program(cfg, ds.input_dim, ds.num_classes, user)  # every model problem before the first step
    run_dir = Path(resume) if isinstance(resume, (str, os.PathLike)) else None
    if run_dir is not None:
        resume = load_resume(run_dir, cfg, ds, user)
        out = run_dir
    if resume is not None:
        _check_resume(cfg, resume)
    writer = None
    if out is not None:
        out = Path(out)
        prepare_run_dir(out, cfg, overwrite=overwrite, resuming=run_dir is not None, data=data_source(ds, data))
        writer = RunWriter(out, cfg.to_dict(), list(resume.epochs) if resume else [], data_source(ds, data))
    log.info(
        "training %s: %s mode, %d worker(s) on %s, %s lr %g, batch %d, epochs %d..%d",
        ds.name,
        cfg.mode,
        cfg.num_workers,
        cfg.backend,
        cfg.optimizer,
        cfg.lr,
        cfg.batch_size,
        (resume.start_epoch if resume else 0) + 1,
        cfg.epochs,
    )
    events, own_reporter = None, None
    if out is not None and reporter is None:
        from asyncnet.train.report import EventLog, Reporter

        events = EventLog.open(out / TB_DIR)
        reporter = own_reporter = Reporter(quiet=True, events=events)
    try:
        result = run(cfg, ds, user, reporter, resume, writer)
    except BaseException as e:
        if writer is not None:
            write_failure(out, writer, _status(e), str(e))
        raise
    finally:
        if own_reporter is not None:
            own_reporter.close()
    if out is not None and result.is_main:
        finish_run_dir(result, out)
    return result


def run(
    cfg: TrainConfig,
    ds: Dataset,
    model: Any = None,
    reporter: Any = None,
    resume: Resume | None = None,
    writer: RunWriter | None = None,
) -> TrainResult:
    """Launch the workers of ``cfg`` on ``ds`` and gather their result (no run directory but ``writer``'s)."""
    if cfg.backend == "torch":
        cfg, result, rank = launch_torch(cfg, ds, model, reporter, resume, writer)
        return _result(cfg, ds, model, [result], rank, resume)
    return _result(cfg, ds, model, launch(cfg, ds, model, reporter, resume, writer), resume=resume)


def _run_config(run_dir: Path) -> TrainConfig:
    """The settings of the run in ``run_dir`` (its metrics.json)."""
    try:
        data = json.loads((run_dir / METRICS).read_bytes())
    except (OSError, ValueError) as e:
        raise TrainConfigError(f"resume {run_dir}: not a run directory ({METRICS}: {e})") from None
    return TrainConfig.from_dict(data.get("config") if isinstance(data, dict) else data, where=f"resume {run_dir}")


def _config_for(model: Any, config: TrainConfig | None, settings: dict[str, Any]) -> tuple[TrainConfig, Any]:
    base = config.to_dict() if config is not None else {}
    base.pop("num_workers", None)
    if isinstance(model, str) or model is None:
        if model is not None:
            base["model"] = model
        return TrainConfig(**{**base, **settings}), None
    base["model"] = model_label(model)
    return TrainConfig(**{**base, **settings}), model


def model_label(model: Any) -> str:
    """How a run records a user's model: ``module:function`` (``path/file.py:function`` for a
    script's), from which ``asyncnet train --resume`` rebuilds it; ``user:NAME`` for a
    ModelHelper object (train() can resume it given the same object)."""
    import sys

    name, module = getattr(model, "__qualname__", ""), getattr(model, "__module__", None)
    if callable(model) and name.isidentifier() and module:
        if module == "__main__":
            path = getattr(sys.modules.get("__main__"), "__file__", None)
            return f"{os.path.abspath(path)}:{name}" if path else f"user:{name}"
        return f"{module}:{name}"
    return f"user:{getattr(model, 'name', None) or 'model'}"


def _dataset(cfg: TrainConfig, data: Any, user: Any) -> Dataset:
    if isinstance(data, Dataset):
        return data
    if data is None:
        if user is not None or cfg.model not in MODELS:
            raise TrainConfigError("a user's model needs its data: train(model, (x, y)) or --data FILE.npz")
        return dataset_for(cfg.model)
    if isinstance(data, (str, os.PathLike)):
        return load_npz(os.fspath(data), cfg.model if user is None else "user:model", seed=cfg.seed)
    return from_arrays(data, cfg.model if user is None else "user:model", seed=cfg.seed)


def data_source(ds: Dataset, data: Any = None) -> str:
    """What a run trained on, as metrics.json and the checkpoint record it: the path of an npz
    file, "arrays" for numpy arrays given to :func:`train`, else the zoo data's name."""
    if isinstance(data, str) and data.startswith("random:"):  # dlrm's generator spec, not a file
        return data
    if isinstance(data, (str, os.PathLike)):
        return os.path.abspath(os.fspath(data))
    return "arrays" if data is not None and not isinstance(data, Dataset) else ds.name


def _status(e: BaseException) -> str:
    from asyncnet.errors import TrainingDivergedError

    if isinstance(e, TrainingDivergedError):
        return "diverged"
    return "interrupted" if isinstance(e, KeyboardInterrupt) else "failed"


def _check_resume(cfg: TrainConfig, resume: Resume) -> None:
    if resume.start_epoch >= cfg.epochs:
        raise TrainConfigError(
            f"the run to resume has {resume.start_epoch} epoch(s) already; ask for more in total "
            f"(e.g. --epochs {resume.start_epoch + 1}), got epochs {cfg.epochs}"
        )


def _result(
    cfg: TrainConfig, ds: Dataset, model: Any, results: list[WorkerResult], rank: int = 0, resume: Resume | None = None
) -> TrainResult:
    main = results[0]
    before = list(resume.epochs) if resume is not None else []
    history = History(config=cfg.to_dict(), epochs=before + list(main.epochs))
    return TrainResult(
        config=cfg,
        history=history,
        params=main.params or {},
        traces=[r.trace_events for r in results if r.trace_events],
        model=build_program(cfg, ds.input_dim, ds.num_classes, model),
        steps=sum(r.steps for r in results),
        is_main=rank == 0,
        rank=rank,
        random_states=main.random_states,
    )


# -- the run directory -----------------------------------------------------------------------
def prepare_run_dir(out: Path, cfg: TrainConfig, overwrite: bool, resuming: bool, data: str | None = None) -> None:
    """Create ``out`` (or refuse it: TrainConfigError) and mark the run as started, before the
    first step. A resumed run's files stay as they are until its next save."""
    if out.exists() and not out.is_dir():
        raise TrainConfigError(f"--out {out} exists and is not a directory")
    if not (overwrite or resuming) and out.is_dir() and any(out.iterdir()):
        held = [n for n in RUN_FILES if (out / n).exists()]
        what = "holds a run" if held else "is not empty"
        raise TrainConfigError(
            f"--out {out} {what}: pass --overwrite to replace it, --resume {out} to continue it, or another --out"
        )
    try:
        out.mkdir(parents=True, exist_ok=True)
        if resuming:
            if not os.access(out, os.W_OK):
                raise PermissionError(13, "Permission denied")
        else:
            if overwrite:
                (out / CHECKPOINT).unlink(missing_ok=True)
            write_metrics(History(config=cfg.to_dict()), out / METRICS, extra={"status": "running", "data": data})
    except OSError as e:
        raise TrainConfigError(f"--out {out}: cannot create the run directory: {e.strerror or e}") from None


def finish_run_dir(result: TrainResult, out: Path) -> None:
    """The files of a finished run: the plot, the trace, the final checkpoint, then metrics.json
    with ``"status": "ok"``."""
    from asyncnet.train.report import plot_history

    data = _recorded_data(out)
    plot_history(
        result.history,
        out / "loss_accuracy.png",
        title=f"{result.config.mode}, {result.config.num_workers} worker(s), {result.config.backend}",
    )
    result.write_trace(out / "trace.json")
    result.save_checkpoint(out / CHECKPOINT, data)
    write_metrics(result.history, out / METRICS, extra={"status": "ok", "steps": result.steps, "data": data})


def _recorded_data(out: Path) -> str | None:
    try:
        return json.loads((out / METRICS).read_bytes()).get("data")
    except (OSError, ValueError, AttributeError):
        return None


def write_failure(out: Path, writer: RunWriter | None, status: str, error: str) -> None:
    """metrics.json of a run that did not finish (``status`` "diverged", "failed" or
    "interrupted"): the epochs of its checkpoint (``--resume`` continues from there) and the error."""
    epochs, config, data = _saved_epochs(out, writer)
    try:
        write_metrics(
            History(config=config, epochs=epochs), out / METRICS, extra={"status": status, "error": error, "data": data}
        )
    except (OSError, ValueError):
        pass  # the one-line error still tells the user


def _saved_epochs(out: Path, writer: RunWriter | None) -> tuple[list[EpochMetrics], dict[str, Any], str | None]:
    """The epochs the checkpoint in ``out`` holds (a worker process may have written it), else
    the writer's."""
    from asyncnet.model.checkpoint import metadata

    config = writer.config if writer is not None else {}
    data = writer.data if writer is not None else None
    fallback = list(writer.epochs) if writer is not None else []
    try:
        meta = metadata(out / CHECKPOINT) if (out / CHECKPOINT).exists() else None
        run_meta = (meta or {}).get("run") or {}
        return [EpochMetrics.from_dict(m) for m in run_meta.get("epochs", [])], config, data
    except (CheckpointError, ValueError, TypeError, AttributeError):
        return fallback, config, data


def load_resume(run_dir: Path, cfg: TrainConfig, ds: Dataset, model: Any = None) -> Resume | None:
    """The checkpoint, finished epochs and (inside an epoch) position of the run in ``run_dir``;
    None when the run saved no checkpoint (stopped in its first epoch): it starts again from
    epoch 1. Temporary files of interrupted writes (checkpoint or metrics) are removed: nothing
    else writes a run directory while it is being resumed."""
    ckpt = run_dir / CHECKPOINT
    for name in (CHECKPOINT, METRICS):
        for stray in run_dir.glob(f".{name}.*.tmp"):
            stray.unlink(missing_ok=True)
    if not ckpt.exists():
        return None
    from asyncnet.model import checkpoint

    program = build_program(cfg, ds.input_dim, ds.num_classes, model)
    arrays, meta = checkpoint.read(program.model, ckpt)
    run_meta = meta.get("run")
    if isinstance(run_meta, dict):
        try:
            epochs = tuple(EpochMetrics.from_dict(m) for m in run_meta.get("epochs", []))
        except (ValueError, TypeError) as e:
            raise CheckpointError(f"checkpoint {str(ckpt)!r}: its run record: {e}") from None
        part = run_meta.get("partial")
        resume = Resume(arrays, epochs, part if isinstance(part, dict) else None)
    else:  # a checkpoint of the previous format: the epochs are metrics.json's
        resume = Resume(arrays, _epochs_of_checkpoint(_metrics_epochs(run_dir), int(arrays["iter"][0]), ckpt))
    if resume.start_epoch >= cfg.epochs:
        raise TrainConfigError(
            f"--resume {run_dir}: the run has {resume.start_epoch} epoch(s) already; --epochs is "
            f"the total, e.g. --epochs {resume.start_epoch + 1}"
        )
    return resume


def _metrics_epochs(run_dir: Path) -> tuple[EpochMetrics, ...]:
    try:
        data = json.loads((run_dir / METRICS).read_bytes())
        return tuple(EpochMetrics.from_dict(m) for m in data.get("epochs", []))
    except (OSError, ValueError, TypeError, AttributeError) as e:
        raise TrainConfigError(f"--resume {run_dir}: metrics.json: {e}") from None


def _epochs_of_checkpoint(epochs: tuple[EpochMetrics, ...], step: int, ckpt: Path) -> tuple[EpochMetrics, ...]:
    """The epochs a previous-format checkpoint (at ``step``) has trained: metrics.json may be
    one epoch ahead of it (stopped between the two writes of an epoch's end)."""
    if any(m.step is None for m in epochs):  # a run from before steps were recorded
        if step == 0 and epochs:
            raise CheckpointError(f"{ckpt}: step 0 after {len(epochs)} epoch(s): not this run's checkpoint")
        return epochs
    kept = tuple(m for m in epochs if m.step <= step)
    if (kept[-1].step if kept else 0) != step:
        raise CheckpointError(
            f"{ckpt} is at step {step}, but metrics.json has epochs ending at "
            f"steps {[m.step for m in epochs]}: not this run's checkpoint"
        )
    return kept
