"""dyndep, timeout_guard, experiment_util, visualize and net_drawer."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from caffe2.python import dyndep, experiment_util, net_drawer, timeout_guard, visualize

pytestmark = pytest.mark.timeout(60)
SRC = os.path.join(os.path.dirname(__file__), "..", "..", "src")


def test_dyndep_ignores_missing_and_refuses_existing(tmp_path, capsys):
    dyndep.InitOpsLibrary("@/caffe2/caffe2/distributed:redis_store_handler_ops")
    assert "Ignoring" in capsys.readouterr().out
    lib = tmp_path / "libops.so"
    lib.write_bytes(b"\x7fELF")
    with pytest.raises(dyndep.OpsLibraryError, match="register_op"):
        dyndep.InitOpsLibrary(str(lib))


def test_timeout_guard_joins_its_thread():
    before = threading.active_count()
    with timeout_guard.CompleteInTimeOrDie(30):
        assert threading.active_count() == before + 1
    assert threading.active_count() == before


def test_timeout_guard_ends_a_hung_process():
    code = "import time\nfrom caffe2.python import timeout_guard\nwith timeout_guard.CompleteInTimeOrDie(0.3):\n    time.sleep(30)\n"
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": os.path.abspath(SRC)},
        capture_output=True,
        text=True,
        timeout=50,
    )
    assert proc.returncode == 1 and time.monotonic() - start < 25
    assert "did not finish in time" in proc.stderr


def test_model_trainer_log(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    log = experiment_util.ModelTrainerLog("exp", {"batch": 2})
    log.log(input_count=10, batch_count=5, additional_values={"loss": 1.5, "accuracy": 0.5})
    log.log(input_count=20, batch_count=10, additional_values={"loss": 1.0, "accuracy": 0.75})
    lines = open(log.filename).read().splitlines()
    assert lines[0] == "# {'batch': 2}"
    assert lines[1].split(",") == [
        "time_spent",
        "cumulative_time_spent",
        "input_count",
        "cumulative_input_count",
        "cumulative_batch_count",
        "inputs_per_sec",
        "accuracy",
        "loss",
    ]
    assert lines[3].split(",")[2:5] == ["10", "20", "10"] and lines[3].endswith(",0.75,1.0")


def test_visualize_tiles_nchw():
    batch = np.arange(2 * 1 * 3 * 3, dtype=np.float64).reshape(2, 1, 3, 3)
    tiled = visualize.NCHW.get_tiled(batch.transpose(0, 2, 3, 1), ncols=2)
    assert tiled.shape == (3, 7, 1)
    np.testing.assert_array_equal(tiled[:, 4:, 0], batch[1, 0])


def test_visualize_shows_nchw_batches():
    import matplotlib

    matplotlib.use("Agg")
    image = visualize.NCHW.ShowMultiple(np.zeros((4, 1, 5, 5)))
    assert image.get_array().shape == (11, 11)


def test_net_drawer_without_pydot_says_what_to_do():
    try:
        import pydot  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="pydot"):
            net_drawer.GetPydotGraph([])
    else:
        assert net_drawer.GetPydotGraph([]) is not None
