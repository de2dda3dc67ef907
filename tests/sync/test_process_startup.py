"""run_parallel_workers(backend="processes") when children fail outside ``fn``: at start-up,
while loading ``fn``, when shipping results back, or when they do not exit after returning."""

import os
import subprocess
import sys
import textwrap
import warnings
from functools import partial

import _sync_workers as W
import numpy as np
import pytest

from asyncnet.errors import SyncError
from asyncnet.sync import launch as launch_module
from asyncnet.sync import run_parallel_workers

pytestmark = [pytest.mark.timeout(60), pytest.mark.usefixtures("no_leaked_segments")]


def test_script_without_main_guard_and_a_big_fn_fails_fast(tmp_path):
    """A child that dies importing the main module used to leave the parent blocked forever in
    Process.start() once the pickled fn outgrew the pipe buffer (64 KiB)."""
    script = tmp_path / "no_guard.py"
    script.write_text(
        textwrap.dedent("""
        from functools import partial
        import numpy as np
        from asyncnet.sync import run_parallel_workers

        def work(data, sync):
            return float(data.sum())

        print(run_parallel_workers(2, partial(work, np.ones(100_000)), backend="processes", timeout=5))
    """)
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=40, env=env, cwd=tmp_path
    )
    assert proc.returncode == 1
    assert "WorkerDiedError" in proc.stderr and "failed at start-up" in proc.stderr
    assert "__main__" in proc.stderr


def test_big_fn_reaches_the_workers():
    data = np.arange(200_000, dtype=np.float64)  # 1.6 MB in the partial
    assert run_parallel_workers(2, partial(W.sum_of, data), backend="processes", timeout=20) == [float(data.sum())] * 2


def test_fn_that_cannot_be_loaded_in_the_child_reports_why():
    with pytest.raises(TypeError, match="takes no arguments") as info:
        run_parallel_workers(2, W.UnloadableFn(), backend="processes", timeout=20)
    assert any("traceback in worker process" in n for n in info.value.__notes__)


def test_error_that_cannot_be_rebuilt_in_the_parent_is_a_sync_error():
    with pytest.raises(SyncError, match="could not be unpickled in the parent.*NeedsTwoArgs|missing 1 required"):
        run_parallel_workers(2, W.raises_unrebuildable, backend="processes", timeout=20)


def test_worker_that_does_not_exit_after_returning_is_terminated(monkeypatch):
    monkeypatch.setattr(launch_module, "_EXIT_GRACE", 0.5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert run_parallel_workers(2, W.leaves_a_thread_running, backend="processes", timeout=20) == [0, 1]
    assert any("still running" in str(w.message) for w in caught)


def test_handle_used_after_close_group_is_a_sync_error():
    from asyncnet.sync import ProcessGradientSync

    syncs = ProcessGradientSync.new_workers(1, timeout=5)
    ProcessGradientSync.close_group(syncs)
    with pytest.raises(SyncError, match="was closed"):
        syncs[0].sync_gradients(np.ones(3))


def test_local_sync_refuses_integer_gradients_like_the_other_backends():
    from asyncnet.sync import LocalGradientSync, ThreadedGradientSync

    for sync in (LocalGradientSync(), ThreadedGradientSync.new_workers(1)[0]):
        with pytest.raises(TypeError, match="floating-point"):
            sync.sync_gradients([np.ones(2), np.ones(2, np.int64)])
