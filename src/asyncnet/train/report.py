"""What a training run reports: per-epoch metrics, metrics.json, the loss/accuracy plot, and the
progress bar and summary table on the terminal.

    >>> h = History(config={"mode": "sync"})
    >>> h.add(EpochMetrics(epoch=1, train_loss=0.5, train_accuracy=0.9, test_loss=0.4,
    ...                    test_accuracy=0.95, samples=1400, seconds=0.5))
    >>> h.best_test_accuracy, h.epochs_to(0.95)
    (0.95, 1)

matplotlib (Agg backend, no screen) and rich are imported only when a plot or a terminal view
is made, so the trainers run without them.
"""

from __future__ import annotations

import json
import logging
import math
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from asyncnet._atomicio import atomic_write_text

__all__ = [
    "EpochMetrics",
    "History",
    "write_metrics",
    "plot_history",
    "summary_table",
    "Reporter",
    "EventLog",
    "RunWriter",
    "write_trace",
    "CHECKPOINT",
    "METRICS",
]

CHECKPOINT = "checkpoint.npz"
METRICS = "metrics.json"

log = logging.getLogger("asyncnet.train")


@dataclass(frozen=True)
class EpochMetrics:
    """The figures of one epoch. Train loss and accuracy are means over the epoch's batches."""

    epoch: int
    train_loss: float
    train_accuracy: float
    test_loss: float
    test_accuracy: float
    samples: int
    seconds: float
    lr: float | None = None  # the learning rate of the epoch's last step
    step: int | None = None  # the step counter (``iter``) at the end of the epoch
    # a click model (dlrm): test AUC, test log loss, and the AUC of the log's ground truth
    test_auc: float | None = None
    test_log_loss: float | None = None
    optimal_auc: float | None = None

    @property
    def samples_per_sec(self) -> float:
        return self.samples / self.seconds if self.seconds > 0 else math.inf

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for k in _CLICK_FIELDS:  # a classifier's record keeps its fields as before
            if d[k] is None:
                del d[k]
        d["samples_per_sec"] = _finite_or_none(self.samples_per_sec)
        return d

    @classmethod
    def from_dict(cls, d: Any) -> EpochMetrics:
        """The inverse of :meth:`to_dict` (``samples_per_sec`` is derived); ValueError when ``d``
        is not such a record."""
        names = [f.name for f in fields(cls)]
        if not isinstance(d, dict) or any(n not in d for n in names[:7]):
            raise ValueError(f"expected an epoch record with {names[:7]}, got {str(d)[:200]}")
        values = {n: d[n] for n in names if n in d}
        for n, v in values.items():
            if not (isinstance(v, (int, float)) and not isinstance(v, bool)) and not (
                n in ("lr", "step", *_CLICK_FIELDS) and v is None
            ):
                raise ValueError(f"epoch record field {n!r} must be a number, got {v!r}")
        return cls(**values)


_CLICK_FIELDS = ("test_auc", "test_log_loss", "optimal_auc")


@dataclass
class History:
    """The epochs of one run, plus the run's configuration and final figures."""

    config: dict[str, Any] = field(default_factory=dict)
    epochs: list[EpochMetrics] = field(default_factory=list)

    def add(self, m: EpochMetrics) -> None:
        self.epochs.append(m)

    def __iter__(self) -> Iterator[EpochMetrics]:
        return iter(self.epochs)

    def __len__(self) -> int:
        return len(self.epochs)

    @property
    def final(self) -> EpochMetrics | None:
        return self.epochs[-1] if self.epochs else None

    @property
    def best_test_accuracy(self) -> float:
        return max((m.test_accuracy for m in self.epochs), default=0.0)

    @property
    def total_seconds(self) -> float:
        return sum(m.seconds for m in self.epochs)

    @property
    def total_samples(self) -> int:
        return sum(m.samples for m in self.epochs)

    @property
    def samples_per_sec(self) -> float:
        t = self.total_seconds
        return self.total_samples / t if t > 0 else math.inf

    def epochs_to(self, accuracy: float) -> int | None:
        """The first epoch whose test accuracy reached ``accuracy`` (None if none did)."""
        return next((m.epoch for m in self.epochs if m.test_accuracy >= accuracy), None)

    def seconds_to(self, accuracy: float) -> float | None:
        """Training seconds until the end of the first epoch reaching ``accuracy``."""
        t = 0.0
        for m in self.epochs:
            t += m.seconds
            if m.test_accuracy >= accuracy:
                return t
        return None

    def to_dict(self) -> dict[str, Any]:
        final = self.final
        return {
            "config": self.config,
            "epochs": [m.to_dict() for m in self.epochs],
            "final": final.to_dict() if final else None,
            "best_test_accuracy": self.best_test_accuracy,
            "total_seconds": self.total_seconds,
            "samples_per_sec": _finite_or_none(self.samples_per_sec) if self.epochs else 0.0,
        }


def _finite_or_none(x: float) -> float | None:
    """JSON has no inf or NaN: a rate over zero seconds is written as null."""
    return x if math.isfinite(x) else None


def write_metrics(history: History, path: str | Path, extra: dict[str, Any] | None = None) -> Path:
    """Write ``history`` (and ``extra`` top-level fields) as JSON to ``path``."""
    data = history.to_dict()
    data.update(extra or {})
    path = Path(path)
    atomic_write_text(path, json.dumps(data, indent=2, allow_nan=False, default=_json_default) + "\n")
    return path


def _json_default(o: Any) -> Any:
    if hasattr(o, "item"):
        return o.item()
    if hasattr(o, "tolist"):
        return o.tolist()
    return str(o)


def plot_history(history: History, path: str | Path, title: str = "") -> Path:
    """A PNG with loss (left) and accuracy (right) per epoch, train and test."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    ep = [m.epoch for m in history]
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 4))
    try:
        ax_loss.plot(ep, [m.train_loss for m in history], "o-", label="train")
        ax_loss.plot(ep, [m.test_loss for m in history], "s-", label="test")
        ax_loss.set(xlabel="epoch", ylabel="loss", title="loss")
        ax_acc.plot(ep, [m.train_accuracy for m in history], "o-", label="train")
        ax_acc.plot(ep, [m.test_accuracy for m in history], "s-", label="test")
        ax_acc.set(xlabel="epoch", ylabel="accuracy", title="accuracy", ylim=(0, 1.02))
        from matplotlib.ticker import MaxNLocator

        for ax in (ax_loss, ax_acc):
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.grid(alpha=0.3)
            ax.legend()
        if title:
            fig.suptitle(title)
        fig.tight_layout()
        path = Path(path)
        fig.savefig(path, dpi=100)
    finally:
        plt.close(fig)
    return path


def summary_table(history: History, title: str = "training summary") -> Any:
    """A rich Table: one row per epoch, then the totals."""
    from rich.table import Table

    table = Table(title=title)
    for col in ("epoch", "train loss", "train acc", "test loss", "test acc", "samples/s", "seconds"):
        table.add_column(col, justify="right")
    for m in history:
        table.add_row(
            str(m.epoch),
            f"{m.train_loss:.4f}",
            f"{m.train_accuracy:.2%}",
            f"{m.test_loss:.4f}",
            f"{m.test_accuracy:.2%}",
            f"{m.samples_per_sec:,.0f}",
            f"{m.seconds:.2f}",
        )
    if history.epochs:
        table.add_section()
        f = history.final
        table.add_row(
            "total",
            "",
            "",
            "",
            f"{f.test_accuracy:.2%}",
            f"{history.samples_per_sec:,.0f}",
            f"{history.total_seconds:.2f}",
            style="bold",
        )
    return table


class EventLog:
    """TensorBoard event files in ``folder`` (tensorboard's own writer, no torch needed): per
    epoch ``loss/train``, ``loss/test``, ``accuracy/train``, ``accuracy/test``, ``lr`` and
    ``samples_per_sec``, with the epoch as the step; per training step ``step/loss`` and
    ``step/accuracy`` (worker 0's batch), kept in memory and written by :meth:`close`, since one
    write costs ~100 us, more than a small model's step. :meth:`open` returns None (and logs why)
    when the tensorboard package is not installed.

        >>> import os, tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     events = EventLog.open(d)
        ...     events.add(EpochMetrics(1, 0.5, 0.9, 0.4, 0.95, 1400, 0.5, lr=0.2)); events.close()
        ...     os.listdir(d)[0].startswith("events.out.tfevents")
        True
    """

    def __init__(self, writer: Any):
        self._writer = writer
        self._steps: list[tuple[int, float, float]] = []

    @classmethod
    def open(cls, folder: str | Path) -> EventLog | None:
        try:
            from tensorboard.summary import Writer

            _tensorboard_without_tensorflow()
        except ImportError:
            log.info("tensorboard is not installed: no event files (pip install tensorboard)")
            return None
        return cls(Writer(str(folder)))

    def add(self, m: EpochMetrics) -> None:
        w, step = self._writer, m.epoch
        for tag, value in (
            ("loss/train", m.train_loss),
            ("loss/test", m.test_loss),
            ("accuracy/train", m.train_accuracy),
            ("accuracy/test", m.test_accuracy),
            ("samples_per_sec", m.samples_per_sec),
            ("lr", m.lr),
        ):
            if value is not None and math.isfinite(value):
                w.add_scalar(tag, value, step)
        w.flush()

    def step(self, step: int, loss: float, accuracy: float) -> None:
        """One training step's figures (written at :meth:`close`)."""
        self._steps.append((step, loss, accuracy))

    def close(self) -> None:
        w = self._writer
        for step, loss, accuracy in self._steps:
            w.add_scalar("step/loss", loss, step)
            w.add_scalar("step/accuracy", accuracy, step)
        self._steps.clear()
        w.close()


def _tensorboard_without_tensorflow() -> None:
    """Make tensorboard use its own TF stub unless TensorFlow is already imported: its writer
    otherwise imports a TensorFlow it finds installed (seconds, 500 MB, log lines on stderr)
    just to write event files. tensorboard resolves its ``compat.tf`` once per process and takes
    the stub when ``tensorboard.compat.notf`` imports; we provide that module only while it
    resolves."""
    import sys
    import types

    if "tensorflow" in sys.modules:
        return
    import tensorboard.compat as compat

    key = "tensorboard.compat.notf"
    had = key in sys.modules
    if not had:
        sys.modules[key] = types.ModuleType(key)
    try:
        dir(compat.tf)  # resolves (and caches) the lazy module now
    finally:
        if not had:
            sys.modules.pop(key, None)


class Reporter:
    """The terminal view of a run, on stderr. On a terminal: a progress bar per epoch that moves
    during the epoch with the running train loss and accuracy, samples/s, elapsed time and ETA.
    Elsewhere (a pipe, a file, CI logs): one plain line per epoch, never wrapped. ``quiet`` turns
    everything off; ``events`` (an :class:`EventLog`) also gets every epoch.

    The trainers call ``epoch_start(epoch, total_batches)``, ``batch(loss, accuracy, samples)``
    (from one worker only) and ``epoch_end(metrics)``, after the epoch was saved (:class:`RunWriter`).

        >>> import io
        >>> r = Reporter(stream=io.StringIO(), epochs=3)
        >>> r.epoch_start(1, 10)
        >>> r.epoch_end(EpochMetrics(1, 0.5, 0.9, 0.4, 0.95, 1400, 0.5))
        >>> r.stream.getvalue().split()[:4]
        ['epoch', '1/3', 'train', 'loss']
    """

    def __init__(
        self,
        quiet: bool = False,
        console: Any = None,
        stream: Any = None,
        live: bool | None = None,
        epochs: int | None = None,
        events: EventLog | None = None,
    ):
        self.quiet = quiet
        self.stream = stream if stream is not None else sys.stderr
        self.live = _isatty(self.stream) if live is None else live
        self.epochs = epochs
        self.events = events
        self._console = console
        self._progress: Any = None
        self._task: Any = None
        self._samples = self._batches = self._pending = 0
        self._loss = self._acc = 0.0
        self._t0 = self._shown = 0.0
        self._run_seconds = 0.0  # wall time of the epochs shown so far (for the ETA of the run)
        self._first_step = 0  # global step number of the epoch's first batch, minus one
        self._epochs_seen = 0

    @property
    def console(self) -> Any:
        if self._console is None:
            from rich.console import Console

            self._console = Console(file=self.stream, soft_wrap=not self.live)
        return self._console

    def print(self, text: str) -> None:
        """One line of text (not wrapped when the stream is not a terminal)."""
        if self.quiet:
            return
        try:
            if self.live:
                self.console.print(text, highlight=False)
            else:
                self.stream.write(text + "\n")
                self.stream.flush()
        except (OSError, ValueError):  # stderr closed (`2>&1 | head -1`): training goes on, unseen
            self.quiet = True

    def epoch_start(self, epoch: int, total_batches: int | None) -> None:
        self._samples, self._batches, self._loss, self._acc, self._pending = 0, 0, 0.0, 0.0, 0
        self._first_step = (epoch - 1) * (total_batches or 0)
        self._t0 = self._shown = time.perf_counter()
        if self.quiet or not self.live:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        of = f"/{self.epochs}" if self.epochs else ""
        self._progress = Progress(
            TextColumn(f"epoch {{task.fields[epoch]:>3}}{of}"),
            BarColumn(bar_width=12),
            MofNCompleteColumn(),
            TextColumn("{task.fields[figures]}"),
            _time_column(),
            console=self.console,
            transient=False,
        )
        self._progress.start()
        self._task = self._progress.add_task(
            "train", total=total_batches, epoch=epoch, figures="loss      -  acc      -           "
        )

    def batch(self, loss: float, accuracy: float, samples: int) -> None:
        """One step of worker 0: running means of the epoch so far; redrawn at most 10 times a second."""
        self._samples += samples
        self._batches += 1
        self._loss += loss
        self._acc += accuracy
        if self.events is not None:
            self.events.step(self._first_step + self._batches, loss, accuracy)
        if self._progress is None:
            return
        self._pending += 1
        now = time.perf_counter()
        if now - self._shown < 0.1:
            return
        self._shown = now
        dt = now - self._t0
        figures = (
            f"loss {self._loss / self._batches:7.4f}  acc {self._acc / self._batches:6.2%}  "
            f"{self._samples / dt if dt > 0 else 0.0:>7,.0f}/s"
        )
        self._progress.update(self._task, advance=self._pending, figures=figures)
        self._pending = 0

    def epoch_end(self, m: EpochMetrics) -> None:
        """Show the epoch's figures: train loss and accuracy, test loss and accuracy, samples/s."""
        self._epochs_seen += 1
        self._run_seconds += time.perf_counter() - self._t0 if self._t0 else m.seconds
        self._t0 = 0.0
        if self.events is not None:
            self.events.add(m)
        test = f"auc {m.test_auc:.4f}" if m.test_auc is not None else f"acc {m.test_accuracy:6.2%}"
        figures = (
            f"train loss {m.train_loss:.4f} acc {m.train_accuracy:6.2%}  test loss {m.test_loss:.4f} "
            f"{test}  {m.samples_per_sec:>8,.0f} samples/s"
        )
        if self._progress is not None:
            total = self._progress.tasks[0].total
            figures = f"test loss {m.test_loss:.4f} {test}  {m.samples_per_sec:>7,.0f}/s"
            self._progress.update(self._task, figures=figures, completed=total if total is not None else self._batches)
            self._progress.stop()
            self._progress = None
        elif not self.quiet:
            of = f"/{self.epochs}" if self.epochs else ""
            line = f"epoch {m.epoch:>3}{of}  {figures}  {m.seconds:.2f}s"
            if self.epochs and m.epoch < self.epochs and self._epochs_seen:
                eta = self._run_seconds / self._epochs_seen * (self.epochs - m.epoch)
                line += f"  ETA {_fmt_seconds(eta)}"
            self.print(line)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
        if self.events is not None:
            self.events.close()
            self.events = None


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def _fmt_seconds(t: float) -> str:
    """12.3s, 4m05s, 1h02m."""
    if t < 60:
        return f"{t:.1f}s"
    if t < 3600:
        return f"{int(t // 60)}m{int(t % 60):02d}s"
    return f"{int(t // 3600)}h{int(t % 3600 // 60):02d}m"


def _time_column() -> Any:
    from rich.progress import ProgressColumn
    from rich.text import Text

    class TimeColumn(ProgressColumn):
        """Elapsed seconds (to a tenth: epochs last under a second) and the epoch's ETA."""

        max_refresh = 0.1

        def render(self, task: Any) -> Text:
            elapsed = task.elapsed or 0.0
            text = _fmt_seconds(elapsed)
            if task.total and 0 < task.completed < task.total:
                text += f"  ETA {_fmt_seconds(elapsed / task.completed * (task.total - task.completed))}"
            return Text(text, style="progress.elapsed")

    return TimeColumn()


def write_trace(traces: list[list[dict[str, Any]]], path: str | Path) -> Path:
    """Write the workers' traced steps (one list of events per worker, from
    :meth:`~asyncnet.train.worker.WorkerNets.traced_step`) as one Chrome-trace JSON."""
    from asyncnet.exec.trace import merge_chrome_traces

    atomic_write_text(path, json.dumps(merge_chrome_traces(traces)) + "\n")
    return Path(path)


@dataclass
class RunWriter:
    """Saves a run into its directory ``out``, from one worker (rank 0), on every backend: at
    each epoch's end (and every ``--checkpoint-every`` steps) the checkpoint first, atomically,
    its metadata holding the finished epochs, the settings and the data source; then
    metrics.json (``"status": "running"``). metrics.json is never ahead of the checkpoint, and
    a run stopped at any point resumes from the checkpoint alone. Plain data: it pickles into
    worker processes.

        >>> import tempfile, numpy as np, asyncnet as an
        >>> from asyncnet.train.program import mlp_program
        >>> p = mlp_program(4, (3,), 2); ws = an.Workspace(); ws.run_net_once(p.init_net)
        >>> arrays = {n: ws.fetch(n) for n in p.checkpoint_blobs}
        >>> with tempfile.TemporaryDirectory() as d:
        ...     w = RunWriter(Path(d), {"model": "mlp"}, data="digits")
        ...     w.epoch_end(p, arrays, EpochMetrics(1, 0.5, 0.9, 0.4, 0.95, 100, 0.1, step=4))
        ...     sorted(f.name for f in Path(d).iterdir()), len(json.loads(Path(d, METRICS).read_text())["epochs"])
        (['checkpoint.npz', 'metrics.json'], 1)
    """

    out: Path
    config: dict[str, Any]
    epochs: list[EpochMetrics] = field(default_factory=list)
    data: str | None = None

    def epoch_end(self, program: Any, arrays: dict[str, Any], metrics: EpochMetrics) -> None:
        """Save the run after the epoch ``metrics`` (``arrays``: the checkpoint blobs at its end)."""
        self.epochs.append(metrics)
        self._save(program, arrays, None)

    def mid_epoch(self, program: Any, arrays: dict[str, Any], partial: dict[str, Any]) -> None:
        """Save the run inside an epoch: ``partial`` says which epoch, how many of its batches
        are done and their statistics; metrics.json lists only the finished epochs."""
        self._save(program, arrays, partial)

    def history(self) -> History:
        return History(config=self.config, epochs=list(self.epochs))

    def _save(self, program: Any, arrays: dict[str, Any], partial: dict[str, Any] | None) -> None:
        from asyncnet.model.checkpoint import save_arrays

        extra = {
            "run": {
                "config": self.config,
                "data": self.data,
                "epochs": [m.to_dict() for m in self.epochs],
                "partial": partial,
            }
        }
        save_arrays(program.model, arrays, self.out / CHECKPOINT, extra)
        write_metrics(self.history(), self.out / METRICS, extra={"status": "running", "data": self.data})
