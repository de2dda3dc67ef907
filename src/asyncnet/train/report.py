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
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator

__all__ = ["EpochMetrics", "History", "write_metrics", "plot_history", "summary_table", "Reporter"]


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

    @property
    def samples_per_sec(self) -> float:
        return self.samples / self.seconds if self.seconds > 0 else math.inf

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["samples_per_sec"] = self.samples_per_sec
        return d


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
            "samples_per_sec": self.samples_per_sec if self.epochs else 0.0,
        }


def write_metrics(history: History, path: str | Path, extra: dict[str, Any] | None = None) -> Path:
    """Write ``history`` (and ``extra`` top-level fields) as JSON to ``path``."""
    data = history.to_dict()
    data.update(extra or {})
    path = Path(path)
    path.write_text(json.dumps(data, indent=2, default=_json_default) + "\n")
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
        table.add_row(str(m.epoch), f"{m.train_loss:.4f}", f"{m.train_accuracy:.2%}", f"{m.test_loss:.4f}",
                      f"{m.test_accuracy:.2%}", f"{m.samples_per_sec:,.0f}", f"{m.seconds:.2f}")
    if history.epochs:
        table.add_section()
        f = history.final
        table.add_row("total", "", "", "", f"{f.test_accuracy:.2%}", f"{history.samples_per_sec:,.0f}",
                      f"{history.total_seconds:.2f}", style="bold")
    return table


class Reporter:
    """The terminal view of a run: a progress bar per epoch (loss, accuracy, samples/s) and the
    summary table at the end. ``quiet`` turns everything off.

    The trainers call ``epoch_start(epoch, total_batches)``, ``batch(loss, accuracy, samples)``
    (from one worker only) and ``epoch_end(metrics)``.
    """

    def __init__(self, quiet: bool = False, console: Any = None):
        self.quiet = quiet
        self._console = console
        self._progress: Any = None
        self._task: Any = None
        self._samples = self._batches = self._pending = 0
        self._loss = self._acc = 0.0
        self._t0 = self._shown = 0.0

    @property
    def console(self) -> Any:
        if self._console is None:
            from rich.console import Console

            self._console = Console(stderr=True)
        return self._console

    def print(self, *objects: Any) -> None:
        if not self.quiet:
            self.console.print(*objects)

    def epoch_start(self, epoch: int, total_batches: int | None) -> None:
        if self.quiet:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._progress = Progress(
            TextColumn("epoch {task.fields[epoch]:>3}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[what]} loss {task.fields[loss]:.4f} acc {task.fields[acc]:6.2%}  "
                       "{task.fields[sps]:>9,.0f} samples/s"),
            TimeElapsedColumn(), console=self.console, transient=False,
        )
        self._progress.start()
        self._task = self._progress.add_task("train", total=total_batches, epoch=epoch, what="train",
                                             loss=math.nan, acc=0.0, sps=0.0)
        self._samples, self._batches, self._loss, self._acc, self._pending = 0, 0, 0.0, 0.0, 0
        self._t0 = self._shown = time.perf_counter()

    def batch(self, loss: float, accuracy: float, samples: int) -> None:
        """One step of worker 0: running means of the epoch so far; redrawn at most 10 times a second."""
        if self._progress is None:
            return
        self._samples += samples
        self._batches += 1
        self._loss += loss
        self._acc += accuracy
        self._pending += 1
        now = time.perf_counter()
        if now - self._shown < 0.1:
            return
        self._shown = now
        dt = now - self._t0
        self._progress.update(self._task, advance=self._pending, loss=self._loss / self._batches,
                              acc=self._acc / self._batches, sps=self._samples / dt if dt > 0 else 0.0)
        self._pending = 0

    def epoch_end(self, m: EpochMetrics) -> None:
        """Show the epoch's figures: train loss, test accuracy, samples/s."""
        if self._progress is not None:
            total = self._progress.tasks[0].total
            self._progress.update(self._task, what="test", loss=m.test_loss, acc=m.test_accuracy,
                                  sps=m.samples_per_sec, completed=total if total is not None else self._batches)
            self._progress.stop()
            self._progress = None
        elif not self.quiet:
            self.console.print(f"epoch {m.epoch:>3}  train loss {m.train_loss:.4f}  test loss {m.test_loss:.4f}  "
                               f"test acc {m.test_accuracy:6.2%}  {m.samples_per_sec:,.0f} samples/s")

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
