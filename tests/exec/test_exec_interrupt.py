"""Ctrl-C (or any signal whose handler raises) while the caller's thread helps an
async_scheduling run: the run ends cleanly and the handler's exception is raised after it.

Python runs a signal handler in the main thread between any two bytecodes; when the main
thread helps a run, that can be in the middle of the scheduler's bookkeeping. The signal is
raised here at chosen points of that bookkeeping (``signal.raise_signal``), so each case is
deterministic.
"""

import signal
import threading
import time
import warnings

import numpy as np
import pytest

import asyncnet as an
from asyncnet.exec import scheduling

pytestmark = pytest.mark.timeout(60)


def _branchy_net(failing: bool = False) -> an.Net:
    net = an.Net("n", type="async_scheduling", num_workers=2)
    a = net.Scale("x", "a", scale=2.0)
    b = net.Scale("x", "b", scale=3.0)
    c = net.Scale(a, "c", scale=1.0)
    net.Add([c, b], "y")
    if failing:
        net.ExecTestWork([], ["f1"], fail=True)
        net.ExecTestWork([], ["f2"], fail=True)
    return net


@pytest.fixture
def int_handler():
    """Python's own Ctrl-C handler (raises KeyboardInterrupt), whatever the runner installed."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def _interrupt_main_thread_at(monkeypatch, name: str) -> list:
    """Raise SIGINT once, on the main thread, on entry to scheduling.<name>."""
    original = getattr(scheduling, name)
    fired: list = []

    def wrapped(*args, **kwargs):
        if threading.current_thread() is threading.main_thread() and not fired:
            fired.append(name)
            signal.raise_signal(signal.SIGINT)
        return original(*args, **kwargs)

    monkeypatch.setattr(scheduling, name, wrapped)
    return fired


@pytest.mark.parametrize("point", ["complete", "hand_out", "fail", "execute"])
def test_interrupt_in_bookkeeping_leaves_no_run_behind(monkeypatch, int_handler, no_leaked_threads, point):
    ws = an.Workspace()
    ws.feed("x", np.ones(4))
    ws.create_net(_branchy_net(failing=point == "fail"))  # failing ops: fail() runs on the caller's thread
    fired = _interrupt_main_thread_at(monkeypatch, point)
    with pytest.raises(KeyboardInterrupt):
        for _ in range(200):  # until the main thread reaches the point
            try:
                ws.run_net("n")
            except an.AsyncNetError:
                assert point == "fail"
            if fired:
                ws.run_net("n")  # the deferred interrupt was raised by the run it hit, or is now
    assert fired
    net = ws.net("n")
    assert net._current is None and not net._busy.locked()  # the run ended: nothing left running
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        start = time.perf_counter()
        ws.close()
        assert time.perf_counter() - start < 2.0


def test_non_raising_handler_does_not_stop_the_run(monkeypatch):
    seen = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: seen.append(signum))
    try:
        ws = an.Workspace()
        ws.feed("x", np.ones(4))
        ws.create_net(_branchy_net())
        fired = _interrupt_main_thread_at(monkeypatch, "complete")
        for _ in range(200):
            ws.run_net("n")
            if fired:
                break
        assert fired and seen == [signal.SIGINT]
        np.testing.assert_array_equal(ws.fetch("y"), np.full(4, 5.0))
        ws.close()
    finally:
        signal.signal(signal.SIGINT, previous)


def test_handlers_are_restored_after_a_run(int_handler):
    ws = an.Workspace()
    ws.feed("x", np.ones(4))
    ws.create_net(_branchy_net())
    ws.run_net("n", num_iter=3)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    ws.close()


def test_a_run_from_another_thread_is_unaffected(no_leaked_threads):
    ws = an.Workspace()
    ws.feed("x", np.ones(4))
    ws.create_net(_branchy_net())
    errors = []

    def body():
        try:
            ws.run_net("n", num_iter=3)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    t = threading.Thread(target=body)
    t.start()
    t.join(10)
    assert not t.is_alive() and errors == []
    np.testing.assert_array_equal(ws.fetch("y"), np.full(4, 5.0))
    ws.close()
