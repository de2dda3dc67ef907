"""ProcessGradientSync through run_parallel_workers(backend="processes"), with fault tests."""

import functools
import os
import time

import _sync_workers as W
import numpy as np
import pytest

from asyncnet.errors import SyncAbortedError
from asyncnet.sync import ProcessGradientSync, WorkerDiedError, run_parallel_workers

pytestmark = [pytest.mark.timeout(60), pytest.mark.usefixtures("no_leaked_segments")]


def test_leak_check_ignores_other_runs_but_catches_ours(recorder):
    """A segment of another test run (same prefix family) is not ours; an unclosed group is."""
    from asyncnet._shm import open_segment, unlink_segment

    foreign = open_segment("asyncnet_sync_0000000000_ctl", create=True, size=64)
    try:
        syncs = ProcessGradientSync.new_workers(1, timeout=5)
        syncs[0].sync_gradients(np.ones(2))
        assert f"{syncs[0]._prefix}_ctl" in recorder.leaked()
        assert "asyncnet_sync_0000000000_ctl" not in recorder.leaked()
        ProcessGradientSync.close_group(syncs)
        assert recorder.leaked() == []
    finally:
        foreign.close()
        unlink_segment("asyncnet_sync_0000000000_ctl")


def expected_rounds(n, rounds=3, size=1000):
    out = []
    for r in range(rounds):
        gs = [np.random.default_rng(1000 * r + i).standard_normal(size).astype(np.float32) for i in range(n)]
        acc = gs[0].copy()
        for g in gs[1:]:
            acc = acc + g
        out.append(acc / n)
    return out


def test_mean_lists_and_dtypes():
    results = run_parallel_workers(3, W.mean_of_ids, backend="processes", timeout=20)
    for g, h in results:
        assert np.array_equal(g, np.full(5, 1.0, np.float32)) and g.dtype == np.float32
        assert np.array_equal(h[0], np.full((2, 3), 2.0))
        assert np.array_equal(h[1], np.arange(4.0))


@pytest.mark.parametrize("worker", [W.seeded_rounds, W.arena_rounds])
def test_bitwise_equal_to_worker_order_sum_and_to_threads(worker):
    expected = expected_rounds(3)
    procs = run_parallel_workers(3, worker, backend="processes", timeout=20)
    threads = run_parallel_workers(3, W.seeded_rounds, backend="threads", timeout=20)
    for p, t in zip(procs, threads):
        for got, thr, exp in zip(p, t, expected):
            assert got.tobytes() == exp.tobytes() == thr.tobytes()


def test_mismatch_everyone_errors_nothing_changed_then_recovers():
    results = run_parallel_workers(3, W.mismatch_then_recover, backend="processes", timeout=20)
    for msg, g, h in results:
        assert "worker 0: float32[4]" in msg and "worker 1: float32[7]" in msg and "worker 2: float32[4]" in msg
        assert not g.any()
        assert np.array_equal(h, np.full(3, 1.0))


def test_raising_worker_aborts_peers():
    start = time.monotonic()
    with pytest.raises(ValueError, match="worker one failed") as info:
        run_parallel_workers(3, W.one_raises, backend="processes")  # no timeout: the abort frees them
    assert time.monotonic() - start < 20
    errs = info.value.worker_errors
    assert isinstance(errs[0], SyncAbortedError) and isinstance(errs[2], SyncAbortedError)
    assert any("traceback in worker process 1" in n for n in info.value.__notes__)


def test_killed_worker_is_noticed():
    start = time.monotonic()
    with pytest.raises(WorkerDiedError, match="exit code -9") as info:
        run_parallel_workers(3, W.one_killed, backend="processes")
    assert time.monotonic() - start < 20
    assert all(isinstance(info.value.worker_errors[i], SyncAbortedError) for i in (0, 2))


def test_worker_exits_mid_training():
    with pytest.raises(WorkerDiedError, match="exit code 3"):
        run_parallel_workers(2, W.dies_mid_training, backend="processes", timeout=10)


def test_worker_that_never_comes_times_out(tmp_path):
    """Workers 0 and 1 wait 0.4 s (counted from the moment all three have started) for worker
    2, which comes only after they gave up: however loaded the machine, they time out naming
    it, with their gradients unchanged. The first of them to time out fails the round for both,
    so only the longer wait is bound to be at least the timeout (the other one may have arrived
    a little later)."""
    results = run_parallel_workers(
        3, functools.partial(W.one_never_comes, str(tmp_path)), backend="processes", timeout=0.4
    )
    for i in (0, 1):
        kind, missing, g, _ = results[i]
        assert kind == "timeout" and missing == [2]
        assert np.array_equal(g, np.full(4, float(i)))
    assert max(results[0][3], results[1][3]) >= 0.4
    assert results[2][0] == "timeout"  # the late arrival errors too


def test_handles_outside_the_runner_and_close_group(recorder):
    syncs = ProcessGradientSync.new_workers(1, timeout=5)
    g = np.array([1.0, 2.0])
    syncs[0].sync_gradients(g)
    assert g.tolist() == [1.0, 2.0]
    assert recorder.leaked()
    ProcessGradientSync.close_group(syncs)
    with pytest.raises(ValueError):
        ProcessGradientSync.new_workers(0)


def test_killed_peer_noticed_without_the_runner():
    """A sibling killed outside run_parallel_workers: the waiter notices it through /proc."""
    import multiprocessing as mp
    import signal

    ctx = mp.get_context("spawn")
    syncs = ProcessGradientSync.new_workers(2, timeout=30)
    try:
        p = ctx.Process(target=time.sleep, args=(30,))
        p.start()
        syncs[0]._bind()
        syncs[0]._control.ints[syncs[0]._control.w(1, 3)] = p.pid  # W_PID of worker 1
        os.kill(p.pid, signal.SIGKILL)
        start = time.monotonic()
        with pytest.raises(SyncAbortedError, match="died"):
            syncs[0].sync_gradients(np.ones(4))
        assert time.monotonic() - start < 20
        p.join()
    finally:
        ProcessGradientSync.close_group(syncs)


# stuck: sleeping in user code; stopped: SIGSTOP, which holds the SIGTERM (without the SIGKILL that
# follows it, the runner hung)
@pytest.mark.parametrize("worker", [W.one_stuck_forever, W.one_stopped], ids=["stuck", "stopped"])
def test_a_worker_stuck_in_user_code_is_terminated_after_peers_fail(worker):
    start = time.monotonic()
    with pytest.raises(Exception) as info:
        run_parallel_workers(2, worker, backend="processes", timeout=0.5)
    assert time.monotonic() - start < 20
    errs = info.value.worker_errors
    assert type(errs[0]).__name__ == "SyncTimeoutError" and errs[0].missing == [1]
    assert isinstance(errs[1], SyncAbortedError) and "terminated" in str(errs[1])
