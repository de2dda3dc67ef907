"""The async_scheduling executor: results, handles, errors, busy, cancel, pools and threads."""

import subprocess
import sys
import threading
import time

import exec_test_ops as tops
import numpy as np
import pytest

import asyncnet as an
from asyncnet.exec import pools
from asyncnet.exec.scheduling import AsyncSchedulingNet

pytestmark = [pytest.mark.timeout(60), pytest.mark.usefixtures("no_leaked_threads")]


def _diamond(net_type="async_scheduling", workers=2, **kw):
    net = an.Net("diamond", type=net_type, num_workers=workers, **kw)
    net.Scale("x", "a", scale=2.0)
    net.Scale("x", "b", scale=3.0)
    net.Add(["a", "b"], "y")
    net.Relu("y", "y")
    return net


@pytest.mark.parametrize("net_type", ["async_scheduling", "dag", "async_dag"])
def test_every_alias_runs_the_async_executor(net_type):
    with an.Workspace() as ws:
        ws.feed("x", np.arange(4.0))
        inst = ws.create_net(_diamond(net_type))
        assert isinstance(inst, AsyncSchedulingNet)
        ws.run_net("diamond", num_iter=3)
        np.testing.assert_array_equal(ws.fetch("y"), np.arange(4.0) * 5)


def test_run_async_handle_wait_done():
    with an.Workspace() as ws:
        ws.feed("x", np.ones(3))
        ws.create_net(_diamond())
        for _ in range(50):
            h = ws.run_net_async("diamond")
            h.wait(timeout=10)
            assert h.done() and h.exception() is None
        np.testing.assert_array_equal(ws.fetch("y"), np.full(3, 5.0))


def test_wait_timeout_raises_timeout_error():
    with an.Workspace() as ws:
        net = an.Net("slow", type="async_scheduling", num_workers=1)
        net.ExecTestWork([], ["o"], sleep=0.3)
        ws.create_net(net)
        h = ws.run_net_async("slow")
        with pytest.raises(TimeoutError):
            h.wait(timeout=0.01)
        assert not h.done()
        h.wait(timeout=10)


def test_second_concurrent_run_is_refused_then_allowed():
    with an.Workspace() as ws:
        net = an.Net("blocker", type="async_scheduling", num_workers=1)
        net.ExecTestWork([], ["o"], block=True)
        ws.create_net(net)
        h = ws.run_net_async("blocker")
        assert tops.STARTED.wait(10)
        with pytest.raises(an.NetBusyError, match="already running"):
            ws.run_net_async("blocker")
        with pytest.raises(an.NetBusyError):
            ws.run_net("blocker")
        tops.RELEASE.set()
        h.wait(timeout=10)
        ws.run_net("blocker", timeout=10)  # runs again


def test_failure_raises_operator_error_and_skips_unstarted():
    with an.Workspace() as ws:
        net = an.Net("f", type="async_scheduling", num_workers=2)
        net.ExecTestWork([], ["a"], name="first")
        net.ExecTestWork(["a"], ["b"], name="boom", fail=True)
        net.ExecTestWork(["b"], ["c"], name="after")  # must be skipped
        ws.create_net(net)
        with pytest.raises(an.OperatorError) as ei:
            ws.run_net("f")
        err = ei.value
        assert err.op_index == 1 and err.op_type == "ExecTestWork" and err.op_name == "boom"
        assert isinstance(err.__cause__, ValueError)
        assert "after" not in [n for n, *_ in tops.LOG]
        assert ws.has("a") and not ws.has("c")


def test_first_error_in_time_is_raised():
    with an.Workspace() as ws:
        net = an.Net("two_fail", type="async_scheduling", num_workers=2)
        net.ExecTestWork([], ["a"], name="late", fail=True, sleep=0.3)
        net.ExecTestWork([], ["b"], name="early", fail=True)
        ws.create_net(net)
        for _ in range(3):
            h = ws.run_net_async("two_fail")
            with pytest.raises(an.OperatorError) as ei:
                h.wait(timeout=10)
            assert ei.value.op_name == "early"
            assert h.join(10)


def test_never_finishing_op_beside_failing_op_does_not_hang():
    with an.Workspace() as ws:
        net = an.Net("stuck", type="async_scheduling", num_workers=2)
        net.ExecTestWork([], ["a"], name="never", block=True)
        net.ExecTestWork([], ["b"], name="boom", fail=True, sleep=0.05)
        net.ExecTestWork(["b"], ["c"], name="skipped")
        ws.create_net(net)
        h = ws.run_net_async("stuck")
        t0 = time.monotonic()
        with pytest.raises(an.OperatorError, match="boom"):
            h.wait(timeout=5)
        assert time.monotonic() - t0 < 4.5
        assert h.done() and not h.join(0)
        with pytest.raises(an.NetBusyError):  # its stuck op still runs
            ws.run_net_async("stuck")
        tops.RELEASE.set()  # the stuck op ends; the net is free again
        assert h.join(10)
        with pytest.raises(an.OperatorError, match="boom"):
            ws.run_net("stuck", timeout=10)


def test_never_finishing_op_with_run_timeout():
    with an.Workspace() as ws:
        net = an.Net("stuck2", type="async_scheduling", num_workers=2)
        net.ExecTestWork([], ["a"], name="never", block=True)
        net.ExecTestWork([], ["b"], name="boom", fail=True)
        ws.create_net(net)
        with pytest.raises(an.OperatorError):
            ws.run_net("stuck2", timeout=3)
        tops.RELEASE.set()


def test_net_runs_normally_after_failure():
    with an.Workspace() as ws:
        ws.feed("x", np.ones(2))
        net = an.Net("recover", type="async_scheduling", num_workers=2)
        net.Scale("x", "a", scale=2.0)
        net.Div(["a", "d"], "y")
        ws.create_net(net)
        ws.feed("d", np.zeros(2, np.int64))  # dtype mismatch: fails
        with pytest.raises(an.OperatorError):
            ws.run_net("recover")
        ws.feed("d", np.full(2, 4.0))
        ws.run_net("recover")
        np.testing.assert_array_equal(ws.fetch("y"), [0.5, 0.5])


def test_cancel_skips_unstarted_chains():
    with an.Workspace() as ws:
        net = an.Net("c", type="async_scheduling", num_workers=1)
        net.ExecTestWork([], ["a"], name="head", block=True)
        net.ExecTestWork(["a"], ["b"], name="tail")
        ws.create_net(net)
        h = ws.run_net_async("c")
        assert tops.STARTED.wait(10)
        assert h.cancel() is True
        assert h.cancel() is False
        tops.RELEASE.set()
        with pytest.raises(an.ExecutionError, match="cancelled"):
            h.wait(timeout=10)
        assert h.join(10)
        assert [n for n, *_ in tops.LOG] == ["head"]
        tops.RELEASE.clear()
        ws.feed("a", np.zeros(2))
        net2 = an.Net("c2", type="async_scheduling", num_workers=1)
        net2.ExecTestWork(["a"], ["b"], name="tail2")
        ws.create_net(net2)
        h = ws.run_net_async("c2")
        h.wait(10)
        assert h.cancel() is False


def test_empty_net_runs():
    with an.Workspace() as ws:
        ws.create_net(an.Net("empty", type="async_scheduling"))
        ws.run_net("empty", num_iter=3)
        ws.run_net_async("empty").wait(1)


def test_caller_thread_runs_a_linear_net_without_starting_workers():
    with an.Workspace() as ws:
        ws.feed("x", np.ones(2))
        net = an.Net("lin", type="async_scheduling", num_workers=2, own_pool=True)
        for _ in range(20):
            net.Scale("x", "x", scale=1.0)
        inst = ws.create_net(net)
        ws.run_net("lin", num_iter=5)
        assert inst.pools[0].num_threads == 0


def test_independent_branches_run_on_several_threads():
    with an.Workspace() as ws:
        net = an.Net("par", type="async_scheduling", num_workers=2)
        for i in range(4):
            net.ExecTestWork([], [f"o{i}"], name=f"w{i}", sleep=0.05)
        ws.create_net(net)
        ws.run_net("par", timeout=10)
        assert len({tid for *_, tid in tops.LOG}) >= 2


def test_pools_shared_between_nets_unless_own():
    with an.Workspace() as ws:
        a = ws.create_net(_diamond(workers=3))
        b = ws.create_net(an.NetDef.from_dict({**_diamond(workers=3).to_def().to_dict(), "name": "d2"}))
        c = ws.create_net(an.NetDef.from_dict({**_diamond(workers=3, own_pool=True).to_def().to_dict(), "name": "d3"}))
        assert a.pools[0] is b.pools[0]
        assert c.pools[0] is not a.pools[0]
        assert a.pools[0].size == 3


def test_pool_is_bounded_and_threads_joined_on_close():
    before = threading.active_count()
    ws = an.Workspace()
    net = an.Net("wide", type="async_scheduling", num_workers=2)
    for i in range(16):
        net.ExecTestWork([], [f"o{i}"], sleep=0.01)
    inst = ws.create_net(net)
    for _ in range(3):
        ws.run_net("wide", timeout=10)
    assert inst.pools[0].num_threads <= 2
    assert threading.active_count() <= before + 2
    ws.close()
    assert threading.active_count() == before
    assert inst.pools[0] not in pools.live_pools()
    with pytest.raises(an.ExecutionError, match="closed"):
        inst.run_async()


def test_net_garbage_collected_releases_pool():
    import gc

    ws = an.Workspace()
    net = an.Net("tmp", type="async_scheduling", num_workers=2)
    for i in range(4):
        net.ExecTestWork([], [f"o{i}"], sleep=0.01)
    ws.run_net_once(net)  # instantiates, runs, closes
    inst = ws.instantiate(net)
    inst.run(timeout=10)
    pool = inst.pools[0]
    del inst
    gc.collect()
    assert pool not in pools.live_pools()


def test_cuda_net_without_cuda_fails_clearly():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("CUDA present")
    net = an.Net("gpu", type="async_scheduling", device_option=an.DeviceOption("cuda", 0))
    net.AsyncNetBarrier(["x"], ["x"])
    with pytest.raises(an.NetDefinitionError, match="CUDA is not available"):
        an.Workspace().create_net(net)


def test_no_thread_outlives_the_interpreter():
    code = (
        "import numpy as np, asyncnet as an, threading\n"
        "ws = an.Workspace(); ws.feed('x', np.ones(2))\n"
        "net = an.Net('n', type='async_scheduling', num_workers=2)\n"
        "[net.Scale('x', f'y{i}', scale=2.0) for i in range(8)]\n"
        "ws.create_net(net); ws.run_net('n', timeout=10)\n"
        "assert threading.active_count() > 1\n"
        "print('ok')\n"  # no close(): the exit hook must shut the pools down
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_close_during_a_run_cancels_and_joins():
    before = threading.active_count()
    ws = an.Workspace()
    net = an.Net("closing", type="async_scheduling", num_workers=2, own_pool=True)
    net.ExecTestWork([], ["a"], name="head", block=True)
    for i in range(6):
        net.ExecTestWork(["a"], [f"b{i}"], name=f"tail{i}")
    ws.create_net(net)
    h = ws.run_net_async("closing")
    assert tops.STARTED.wait(10)
    threading.Timer(0.1, tops.RELEASE.set).start()
    ws.close()  # cancels, waits for the running op, joins the pool
    assert h.join(0)
    with pytest.raises(an.ExecutionError, match="cancelled"):
        h.wait(1)
    assert [n for n, *_ in tops.LOG] == ["head"]
    time.sleep(0.05)
    assert threading.active_count() == before


def test_run_timeout_cancels_the_rest_of_the_run():
    # run(timeout) leaves the caller no handle: on expiry the run must not go on writing blobs
    with an.Workspace() as ws:
        net = an.Net("late", type="async_scheduling", num_workers=2)
        net.ExecTestWork([], ["a"], name="head", block=True)
        net.ExecTestWork(["a"], ["b"], name="tail")
        inst = ws.create_net(net)
        with pytest.raises(TimeoutError, match="cancelled"):
            ws.run_net("late", timeout=0.2)
        tops.RELEASE.set()
        deadline = time.monotonic() + 10
        while inst._current is not None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert [n for n, *_ in tops.LOG] == ["head"] and not ws.has("b")
        ws.run_net("late", timeout=10)  # free and runs normally again
        assert ws.has("b")


def test_net_cancel_without_a_run_is_a_no_op():
    with an.Workspace() as ws:
        inst = ws.create_net(_diamond())
        assert inst.cancel() is False


def test_a_shut_down_pool_fails_the_run_without_leaving_the_net_busy():
    with an.Workspace() as ws:
        ws.feed("x", np.ones(2))
        net = an.Net("orphan", type="async_scheduling", num_workers=2, own_pool=True)
        for i in range(4):
            net.Scale("x", f"y{i}", scale=2.0)
        inst = ws.create_net(net)
        inst.pools[0].shutdown()  # what the interpreter-exit hook does
        for _ in range(2):  # the second run used to get NetBusyError: the first never ended
            with pytest.raises(an.ExecutionError, match="shut down") as ei:
                ws.run_net("orphan", timeout=5)
            assert not isinstance(ei.value, an.NetBusyError)


def test_a_pool_that_cannot_start_a_thread_fails_the_run_cleanly(monkeypatch):
    with an.Workspace() as ws:
        ws.feed("x", np.ones(2))
        net = an.Net("nothreads", type="async_scheduling", num_workers=2, own_pool=True)
        for i in range(4):
            net.Scale("x", f"y{i}", scale=2.0)
        ws.create_net(net)

        def refuse(self):
            raise RuntimeError("can't start new thread")

        monkeypatch.setattr(threading.Thread, "start", refuse)
        with pytest.raises(an.ExecutionError, match="cannot start a worker thread"):
            ws.run_net("nothreads", timeout=5)
        monkeypatch.undo()
        ws.run_net("nothreads", timeout=5)  # not left busy; threads start again
        np.testing.assert_array_equal(ws.fetch("y3"), [2.0, 2.0])
