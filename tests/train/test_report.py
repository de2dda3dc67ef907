"""The Reporter: on a terminal the bar moves during the epoch with running figures (never a NaN
placeholder); elsewhere one plain line per epoch."""

from __future__ import annotations

import io
import types
from pathlib import Path

import pytest

from asyncnet.train import report
from asyncnet.train.report import EpochMetrics, Reporter

pytestmark = pytest.mark.timeout(30)


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def perf_counter(self) -> float:
        return self.t


def test_the_bar_moves_during_the_epoch_with_running_figures(monkeypatch) -> None:
    from rich.console import Console

    clock = FakeClock()
    monkeypatch.setattr(report, "time", types.SimpleNamespace(perf_counter=clock.perf_counter))
    screen = io.StringIO()
    r = Reporter(console=Console(file=screen, force_terminal=True, width=120), live=True, epochs=2)
    r.epoch_start(1, 4)
    task = r._progress.tasks[0]
    assert "nan" not in task.fields["figures"].lower() and task.completed == 0
    for i, (loss, acc) in enumerate([(2.0, 0.25), (1.0, 0.75)]):
        clock.t += 0.5
        r.batch(loss, acc, 32)
        assert task.completed == i + 1  # each step past the redraw interval shows
    assert "loss  1.5000" in task.fields["figures"] and "50.00%" in task.fields["figures"]
    assert "64/s" in task.fields["figures"]  # 64 samples in 1 s
    r.epoch_end(EpochMetrics(1, 1.5, 0.5, 1.2, 0.6, 128, 1.0))
    r.close()
    assert "nan" not in screen.getvalue().lower() and "60.00%" in screen.getvalue()


def test_not_a_terminal_one_line_per_epoch_with_eta() -> None:
    out = io.StringIO()
    r = Reporter(stream=out, epochs=3)
    assert not r.live
    for e in (1, 2, 3):
        r.epoch_start(e, 10)
        for _ in range(10):
            r.batch(0.5, 0.9, 32)
        r.epoch_end(EpochMetrics(e, 0.5, 0.9, 0.4, 0.95, 320, 0.5))
    r.close()
    lines = out.getvalue().splitlines()
    assert [ln.split()[1] for ln in lines] == ["1/3", "2/3", "3/3"]
    assert "ETA" in lines[0] and "ETA" not in lines[2] and "\x1b" not in out.getvalue()


@pytest.mark.timeout(120)
def test_event_files_do_not_import_an_installed_tensorflow(tmp_path: Path) -> None:
    """tensorboard's writer would import any installed TensorFlow (seconds, 500 MB, stderr noise)."""
    import importlib.util
    import subprocess
    import sys

    spec = importlib.util.find_spec("tensorflow")
    if spec is None or spec.origin is None:
        pytest.skip("TensorFlow is not installed: nothing could import it")
    code = (
        "import sys\nfrom asyncnet.train.report import EventLog, EpochMetrics\n"
        f"e = EventLog.open({str(tmp_path)!r})\n"
        "e.add(EpochMetrics(1, 0.5, 0.9, 0.4, 0.95, 1400, 0.5, lr=0.2)); e.step(1, 0.3, 0.5); e.close()\n"
        "print('tensorflow' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=100)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr
    assert out.stderr == ""
