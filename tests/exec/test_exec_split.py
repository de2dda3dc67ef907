"""The async executor lends its idle workers to big products (asyncnet.tensor.parallel): a run
that fails or is cancelled beside split ops ends as before, gives back every core it reserved,
and leaves no thread behind."""

import time

import exec_test_ops as tops
import numpy as np
import pytest

import asyncnet as an
from asyncnet.tensor import parallel

pytestmark = [pytest.mark.timeout(60), pytest.mark.usefixtures("no_leaked_threads")]


@pytest.fixture(autouse=True)
def low_threshold(monkeypatch):
    """Splits from 1 M multiply-adds: the tests' products stay small whatever the tuned threshold."""
    monkeypatch.setattr(parallel, "ENABLED", True)  # off by default (see the module)
    monkeypatch.setattr(parallel, "SPLIT_MIN_MACS", 1_000_000)
    monkeypatch.setattr(parallel, "runnable_threads", lambda: 1)  # a free core, whatever the machine's load
    monkeypatch.setattr(parallel, "ROOM_TTL", 0.0)


def _settled() -> bool:
    """Every core reserved is given back once the threads leave the run (they may still be
    returning from their last chain just after wait() returned)."""
    deadline = time.monotonic() + 5
    while parallel.cores_in_use() and time.monotonic() < deadline:
        time.sleep(0.005)
    return parallel.cores_in_use() == 0


def _big_fcs(net: an.Net, n: int) -> None:
    for i in range(n):
        net.FC(["x", "w", "b"], f"y{i}")


def _feed(ws: an.Workspace) -> None:
    rng = np.random.default_rng(0)
    ws.feed("x", rng.standard_normal((256, 128)))
    ws.feed("w", rng.standard_normal((192, 128)))
    ws.feed("b", rng.standard_normal(192))


def test_a_failing_sibling_fails_the_run_and_split_ops_give_their_cores_back():
    net = an.Net("fails", type="async_scheduling", num_workers=2, own_pool=True)
    _big_fcs(net, 3)
    net.ExecTestWork([], ["z"], name="bad", sleep=2e-3, fail=True)
    with an.Workspace() as ws:
        _feed(ws)
        ws.create_net(net)
        for _ in range(4):
            with pytest.raises(an.OperatorError, match="planned failure"):
                ws.run_net("fails")
            assert _settled()
        expected = ws.fetch("x") @ ws.fetch("w").T + ws.fetch("b")
        for i in range(3):
            if f"y{i}" in ws:  # an FC that ran before the failure stopped the run
                np.testing.assert_array_equal(ws.fetch(f"y{i}"), expected)


def test_cancel_beside_split_ops_ends_the_run_and_close_joins_every_thread():
    net = an.Net("cancels", type="async_scheduling", num_workers=2, own_pool=True)
    _big_fcs(net, 4)
    net.ExecTestWork([], ["z"], name="blocked", block=True)
    with an.Workspace() as ws:
        _feed(ws)
        inst = ws.create_net(net)
        handle = inst.run_async()
        assert tops.STARTED.wait(10)
        assert handle.cancel() or handle.done()
        tops.RELEASE.set()
        assert handle.join(10)
        with pytest.raises(an.AsyncNetError):
            handle.wait(10)
        assert _settled()
    assert _settled()


def test_many_runs_of_split_ops_keep_the_simple_executors_bits():
    outs = {}
    for kind in ("simple", "async_scheduling"):
        net = an.Net("many", type=kind, num_workers=2)
        _big_fcs(net, 4)
        net.Sum([f"y{i}" for i in range(4)], "s")
        with an.Workspace() as ws:
            _feed(ws)
            ws.create_net(net)
            for _ in range(20):
                ws.run_net("many")
            outs[kind] = ws.fetch("s")
    np.testing.assert_array_equal(outs["async_scheduling"], outs["simple"])
    assert _settled()
