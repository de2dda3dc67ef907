"""Cheap ready chains stay on the thread that readied them; costly ones are handed to the pool."""

import exec_test_ops as tops
import numpy as np
import pytest

import asyncnet as an
from asyncnet.exec import scheduling

pytestmark = [pytest.mark.timeout(60), pytest.mark.usefixtures("no_leaked_threads")]


def _fan(sleep: float, workers: int = 2) -> an.Net:
    net = an.Net(f"fan{sleep}", type="async_scheduling", num_workers=workers, own_pool=True)
    net.ExecTestWork([], ["a"], name="head")
    for i in range(4):
        net.ExecTestWork(["a"], [f"b{i}"], name=f"leaf{i}", sleep=sleep)
    net.ExecTestWork([f"b{i}" for i in range(4)], ["z"], name="tail")
    return net


def _threads_of_leaves() -> set[int]:
    return {tid for name, *_, tid in tops.LOG if name.startswith("leaf")}


def test_cheap_branches_run_on_one_thread_once_measured(monkeypatch):
    monkeypatch.setattr(scheduling, "HANDOFF_MIN", 10.0)  # every chain counts as cheap once measured
    with an.Workspace() as ws:
        inst = ws.create_net(_fan(0.0))
        ws.run_net("fan0.0", timeout=10)  # first run: costs unknown, handed out as before
        assert all(c < 10.0 for c in inst.chain_cost)
        for timeout in (10, None, 10, None):  # a pool worker, or the caller's thread, runs them all
            tops.LOG.clear()
            ws.run_net("fan0.0", timeout=timeout)
            assert len(_threads_of_leaves()) == 1


def test_costly_branches_are_still_run_in_parallel(monkeypatch):
    monkeypatch.setattr(scheduling, "HANDOFF_MIN", 1e-3)
    with an.Workspace() as ws:
        inst = ws.create_net(_fan(0.02))
        for _ in range(3):
            tops.LOG.clear()
            ws.run_net("fan0.02", timeout=10)
            assert len(_threads_of_leaves()) == 2
        assert all(
            inst.chain_cost[c] >= 1e-3
            for c in range(inst.num_chains)
            if len(inst.chain_ops[c]) == 1 and inst.chain_ops[c][0].name.startswith("leaf")
        )


def test_results_do_not_depend_on_the_hand_off_rule(monkeypatch):
    ref = None
    for cutoff in (0.0, 10.0):
        monkeypatch.setattr(scheduling, "HANDOFF_MIN", cutoff)
        with an.Workspace() as ws:
            ws.create_net(_fan(0.0))
            ws.run_net("fan0.0", num_iter=4)
            z = ws.fetch("z")
        ref = z if ref is None else ref
        np.testing.assert_array_equal(z, ref)


def test_a_cancelled_run_does_not_record_costs(monkeypatch):
    with an.Workspace() as ws:
        net = an.Net("late", type="async_scheduling", num_workers=2, own_pool=True)
        net.ExecTestWork([], ["a"], name="head", block=True)
        net.ExecTestWork(["a"], ["b"], name="tail")
        inst = ws.create_net(net)
        h = ws.run_net_async("late")
        assert tops.STARTED.wait(10)
        h.cancel()
        tops.RELEASE.set()
        assert h.join(10)
        assert inst.chain_cost == [float("inf")] * inst.num_chains
