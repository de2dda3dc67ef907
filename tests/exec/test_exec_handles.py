"""Run handles in the concurrent.futures vocabulary: result(timeout) and add_done_callback(fn).

Semantics checked against concurrent.futures.Future: a callback runs exactly once, with the
handle as its argument, at once (on the caller's thread) if the run is already done, after
the outcome is known otherwise; an exception in a callback is logged, never raised.
"""

import logging
import threading

import exec_test_ops as ops
import numpy as np
import pytest

import asyncnet as an
from asyncnet.errors import ExecutionError, OperatorError

pytestmark = pytest.mark.timeout(60)

NET_TYPES = ["simple", "async_scheduling"]


def make(ws, net_type, *, fail=False, block=False, name="h"):
    ws.feed("x", np.ones(2))
    net = an.Net(name, type=net_type, num_workers=2)
    net.ExecTestWork("x", "a", name="a")
    net.ExecTestWork("x", "b", name="b", fail=fail, block=block)
    net.ExecTestWork(["a", "b"], "y", name="y")
    ws.create_net(net)
    return name


class Recorder:
    """A callback that records (handle, handle.done(), thread) per call."""

    def __init__(self):
        self.calls = []
        self.cond = threading.Condition()

    def __call__(self, handle):
        with self.cond:
            self.calls.append((handle, handle.done(), threading.get_ident()))
            self.cond.notify_all()

    def wait_calls(self, n=1):
        """Callbacks may still be running when result() returns (as with futures): wait for them."""
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.calls) >= n, timeout=30)
        return self.calls


@pytest.mark.parametrize("net_type", NET_TYPES)
def test_result_and_callback_on_success(no_leaked_threads, net_type):
    with an.Workspace() as ws:
        name = make(ws, net_type)
        h = ws.run_net_async(name)
        rec = Recorder()
        h.add_done_callback(rec)
        assert h.result(timeout=30) is None
        h.wait(30)
        rec.wait_calls()
        if hasattr(h, "join"):
            assert h.join(30)
        assert len(rec.calls) == 1 and rec.calls[0][0] is h and rec.calls[0][1] is True
        np.testing.assert_array_equal(ws.fetch("y"), [5.0, 5.0])
        late = Recorder()
        h.add_done_callback(late)  # already done: called at once, on this thread
        assert [(c[0], c[2]) for c in late.calls] == [(h, threading.get_ident())]
        assert len(rec.calls) == 1


@pytest.mark.parametrize("net_type", NET_TYPES)
def test_result_raises_the_run_error_and_callbacks_see_it(no_leaked_threads, net_type):
    with an.Workspace() as ws:
        name = make(ws, net_type, fail=True)
        h = ws.run_net_async(name)
        rec = Recorder()
        h.add_done_callback(rec)
        with pytest.raises(OperatorError, match="planned failure"):
            h.result(timeout=30)
        ((handle, done, _),) = rec.wait_calls()
        assert handle is h and done and isinstance(h.exception(), OperatorError)


@pytest.mark.parametrize("net_type", NET_TYPES)
def test_exception_in_callback_is_logged_not_raised(no_leaked_threads, net_type, caplog):
    with an.Workspace() as ws:
        name = make(ws, net_type)
        h = ws.run_net_async(name)
        h.result(30)
        after = Recorder()
        with caplog.at_level(logging.ERROR, logger="asyncnet"):
            h.add_done_callback(lambda hd: 1 / 0)
            h.add_done_callback(after)
        assert len(after.calls) == 1
        records = [r for r in caplog.records if r.name.startswith("asyncnet.") and "done-callback" in r.getMessage()]
        assert len(records) == 1 and records[0].exc_info[0] is ZeroDivisionError


def test_async_timeout_cancel_and_callbacks_in_flight(no_leaked_threads, caplog):
    """A blocked op: result(timeout) raises TimeoutError; cancel() decides the run, which calls
    the callbacks registered so far once (and a raising one is logged on the cancelling thread)."""
    with an.Workspace() as ws:
        name = make(ws, "async_scheduling", block=True)
        h = ws.run_net_async(name)
        assert ops.STARTED.wait(30)
        with pytest.raises(TimeoutError):
            h.result(timeout=0.05)
        rec = Recorder()
        h.add_done_callback(rec)
        with caplog.at_level(logging.ERROR, logger="asyncnet"):
            h.add_done_callback(lambda hd: 1 / 0)
            assert not rec.calls and not h.done()
            assert h.cancel()
        assert len(rec.calls) == 1 and rec.calls[0][2] == threading.get_ident()
        assert any("done-callback" in r.getMessage() for r in caplog.records)
        with pytest.raises(ExecutionError, match="cancelled"):
            h.result(timeout=0.01)  # decided: no wait for the blocked op
        ops.RELEASE.set()
        assert h.join(30)
        assert len(rec.calls) == 1


def test_callback_may_call_result_on_the_deciding_thread(no_leaked_threads):
    """result() inside a callback that a failing pool thread runs must not wait on that thread."""
    with an.Workspace() as ws:
        name = make(ws, "async_scheduling", fail=True)
        for _ in range(20):
            got = []
            done = threading.Event()

            def cb(hd):
                try:
                    hd.result(timeout=30)
                except OperatorError as e:
                    got.append(e)
                done.set()

            h = ws.run_net_async(name)
            h.add_done_callback(cb)
            assert done.wait(30) and len(got) == 1
            assert h.join(30)


def test_callbacks_added_while_runs_finish_run_exactly_once(no_leaked_threads):
    """Race adding callbacks against the run ending, many rounds: each callback runs once."""
    with an.Workspace() as ws:
        ws.feed("x", np.ones(2))
        net = an.Net("race", type="async_scheduling", num_workers=2)
        for i in range(4):
            net.Scale("x", f"s{i}", scale=float(i))
        ws.create_net(net)
        for _ in range(200):
            h = ws.run_net_async("race")
            counts = [0] * 8
            lock = threading.Condition()

            def bump(i):
                def cb(hd):
                    with lock:
                        counts[i] += 1
                        lock.notify_all()

                return cb

            adder = threading.Thread(target=lambda: [h.add_done_callback(bump(i)) for i in range(4, 8)])
            adder.start()
            for i in range(4):
                h.add_done_callback(bump(i))
            adder.join(30)
            assert not adder.is_alive()
            h.result(30)  # as with futures, callbacks may still be running when result() returns
            with lock:
                assert lock.wait_for(lambda: sum(counts) >= 8, timeout=30)
            assert h.join(30)
            assert counts == [1] * 8
