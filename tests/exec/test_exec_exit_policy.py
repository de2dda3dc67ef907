"""The bounded exit policy of the worker pools: stuck ops are reported by name, never waited on forever."""

import subprocess
import sys
import threading
import time
import warnings

import exec_test_ops as tops
import numpy as np
import pytest

import asyncnet as an
from asyncnet.exec import pools

pytestmark = [pytest.mark.timeout(60), pytest.mark.usefixtures("no_leaked_threads")]

_PRELUDE = (
    "import atexit, threading, numpy as np, asyncnet as an\n"
    "from asyncnet.core.registry import register_op\n"
    "NEVER = threading.Event()\n"
    "@register_op('ExitTestBlock', inputs=0, outputs=1, doc='waits on an event nobody sets')\n"
    "def _block(ctx):\n"
    "    NEVER.wait()\n"
    "    return np.zeros(1)\n"
    "def _report():  # runs after the pool exit hook (atexit callbacks run after it)\n"
    "    alive = [t.name for t in threading.enumerate() if t.name.startswith('asyncnet-')]\n"
    "    print('alive at exit:', alive, flush=True)\n"
    "atexit.register(_report)\n"
    "ws = an.Workspace(); ws.feed('x', np.ones(2))\n"
)


def _run_script(body: str, timeout: float = 30) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    out = subprocess.run([sys.executable, "-c", _PRELUDE + body], capture_output=True, text=True, timeout=timeout)
    return out, time.monotonic() - start


def test_an_op_blocked_forever_does_not_hang_interpreter_exit():
    out, took = _run_script(
        "net = an.Net('stuck_net', type='async_scheduling', num_workers=2, own_pool=True)\n"
        "net.Scale('x', 'y', scale=2.0)\n"
        "net.ExitTestBlock([], ['z'], name='forever')\n"
        "ws.create_net(net); h = ws.run_net_async('stuck_net')\n"
        "import time; time.sleep(0.2)\n"
        "print('leaving', flush=True)\n"
    )
    assert out.returncode == 0, out.stderr
    assert "leaving" in out.stdout
    assert took < 20  # EXIT_TIMEOUT is 5 s; generous for a loaded machine
    assert "RuntimeWarning" in out.stderr and "interpreter exit" in out.stderr
    assert "op 1 (ExitTestBlock 'forever') of net 'stuck_net'" in out.stderr, out.stderr
    assert out.stderr.count("RuntimeWarning: asyncnet") == 1


def test_a_normal_script_exits_promptly_without_warning_or_thread():
    out, _ = _run_script(
        "net = an.Net('n', type='async_scheduling', num_workers=2)\n"
        "[net.Scale('x', f'y{i}', scale=2.0) for i in range(8)]\n"
        "ws.create_net(net); ws.run_net('n', num_iter=3)\n"
        "own = an.Net('m', type='async_scheduling', num_workers=2, own_pool=True)\n"
        "[own.Scale('x', f'z{i}', scale=2.0) for i in range(8)]\n"
        "ws.create_net(own); ws.run_net('m', num_iter=3)\n"
        "assert any(t.name.startswith('asyncnet-') for t in threading.enumerate())\n"
        "print('ok', flush=True)\n"
    )  # no close(): the exit hook stops and joins the pools
    assert out.returncode == 0, out.stderr
    assert "ok" in out.stdout and "alive at exit: []" in out.stdout, out.stdout
    assert "Warning" not in out.stderr, out.stderr


def test_close_warns_naming_the_stuck_op_and_returns():
    ws = an.Workspace()
    net = an.Net("stuck", type="async_scheduling", num_workers=2, own_pool=True)
    net.ExecTestWork([], ["a"], name="head", block=True)
    net.ExecTestWork(["a"], ["b"], name="tail")
    inst = ws.create_net(net)
    ws.run_net_async("stuck")
    assert tops.STARTED.wait(10)
    with pytest.warns(
        RuntimeWarning,
        match=r"net 'stuck' closed with op\(s\) still running .*"
        r"op 0 \(ExecTestWork 'head'\) of net 'stuck'",
    ):
        inst.close(timeout=0.2)
    assert inst.pools[0] not in pools.live_pools()
    tops.RELEASE.set()  # the left-behind thread ends; the fixture checks it is gone


def test_pool_shutdown_warns_naming_the_stuck_op():
    lease = pools.acquire_pool(an.DeviceOption(), size=1, own=True)
    act_seen = threading.Event()

    class FakeOp:
        index, type, name, net_name = 7, "Hang", "h", "fake"

    def hang(_):
        pools.activity().op = FakeOp()
        act_seen.set()
        tops.RELEASE.wait(30)
        pools.activity().op = None

    lease.pool.submit(hang, None)
    assert act_seen.wait(10)
    with pytest.warns(RuntimeWarning, match=r"thread 'asyncnet-cpu-?\d*-own-0' runs op 7 \(Hang 'h'\) of net 'fake'"):
        stuck = lease.pool.shutdown(timeout=0.2)
    assert len(stuck) == 1 and stuck[0].daemon
    tops.RELEASE.set()
    stuck[0].join(10)
    assert not stuck[0].is_alive()


def test_close_that_joins_in_time_does_not_warn():
    ws = an.Workspace()
    net = an.Net("quick", type="async_scheduling", num_workers=2, own_pool=True)
    net.ExecTestWork([], ["a"], name="head", block=True)
    for i in range(4):
        net.ExecTestWork(["a"], [f"b{i}"], name=f"t{i}")
    ws.create_net(net)
    ws.run_net_async("quick")
    assert tops.STARTED.wait(10)
    threading.Timer(0.1, tops.RELEASE.set).start()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ws.close()


def test_worker_activity_is_cleared_after_each_chain():
    with an.Workspace() as ws:
        ws.feed("x", np.ones(2))
        net = an.Net("act", type="async_scheduling", num_workers=2, own_pool=True)
        for i in range(6):
            net.Scale("x", f"y{i}", scale=2.0)
        inst = ws.create_net(net)
        for _ in range(3):
            ws.run_net("act", timeout=10)
        assert all(a.op is None for a in inst.pools[0].running())
