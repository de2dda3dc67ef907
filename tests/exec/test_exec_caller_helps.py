"""``net.run()`` without a timeout: the caller's thread runs chains beside the ``num_workers``
pool threads, from the roots until the outcome is known (not only until the first empty queue).

Each test makes ops *meet* (a ``threading.Barrier`` of two): they can only end if two threads
run them at the same time, so a schedule that leaves one of them waiting in a queue fails with
BrokenBarrierError after the barrier's timeout instead of passing slowly.
"""

import threading

import exec_test_ops as tops
import numpy as np
import pytest

import asyncnet as an

pytestmark = [pytest.mark.timeout(60), pytest.mark.usefixtures("no_leaked_threads")]

ROUNDS = 12
SLEEP = 1e-3  # every op costs more than HANDOFF_MIN once measured, so no chain is kept in line as cheap


@pytest.fixture
def meetings():
    tops.MEETINGS.clear()
    yield tops.MEETINGS
    for b in tops.MEETINGS.values():
        b.abort()  # a party still waiting (a failed test) is released at once
    tops.MEETINGS.clear()


def _threads(names: set[str]) -> set[int]:
    return {tid for name, *_, tid in tops.LOG if name in names}


def test_two_roots_run_at_once_on_one_pool_worker_and_the_caller(meetings):
    meetings["roots"] = threading.Barrier(2, timeout=10)
    net = an.Net("roots", type="async_scheduling", num_workers=1, own_pool=True)
    net.ExecTestWork([], ["a"], name="r0", sleep=SLEEP, meet="roots")
    net.ExecTestWork([], ["b"], name="r1", sleep=SLEEP, meet="roots")
    net.ExecTestWork(["a", "b"], ["z"], name="tail")
    with an.Workspace() as ws:
        ws.create_net(net)
        for _ in range(ROUNDS):
            tops.LOG.clear()
            ws.run_net("roots")  # no timeout: the caller helps
            assert len(_threads({"r0", "r1"})) == 2
            assert threading.get_ident() in _threads({"r0", "r1"})
        np.testing.assert_array_equal(ws.fetch("z"), np.full(2, 3.0))


def test_the_caller_takes_a_chain_queued_while_the_pool_thread_is_busy(meetings):
    # r0 and r1 meet, so they run on the two threads; the one that ran r0 keeps c0 and queues
    # c1, and c0 waits for c1: when r0 ran on the pool thread only the caller, idle since r1
    # ended, can run c1.
    meetings["roots"] = threading.Barrier(2, timeout=10)
    meetings["children"] = threading.Barrier(2, timeout=10)
    net = an.Net("later", type="async_scheduling", num_workers=1, own_pool=True)
    net.ExecTestWork([], ["b"], name="r1", sleep=SLEEP, meet="roots")  # first: the caller usually takes it
    net.ExecTestWork([], ["a"], name="r0", sleep=SLEEP, meet="roots")
    net.ExecTestWork(
        ["a"], ["a"], name="r0_late", sleep=0.02
    )  # same chain: the caller has found the queues empty by now
    net.ExecTestWork(["a"], ["c0"], name="c0", sleep=SLEEP, meet="children")
    net.ExecTestWork(["a"], ["c1"], name="c1", sleep=SLEEP, meet="children")
    pool_ran_r0 = rounds = 0
    with an.Workspace() as ws:
        ws.create_net(net)
        while pool_ran_r0 < 4 and rounds < 200:  # which thread runs r0 is a race: until the case happened 4 times
            tops.LOG.clear()
            ws.run_net("later")
            assert len(_threads({"c0", "c1"})) == 2
            pool_ran_r0 += threading.get_ident() not in _threads({"r0"})
            rounds += 1
        np.testing.assert_array_equal(ws.fetch("c1"), np.full(2, 3.0))
    assert pool_ran_r0 == 4, f"the pool thread ran r0 in {pool_ran_r0} of {rounds} rounds"


def test_an_error_ends_the_helping_caller_and_the_run(meetings):
    net = an.Net("err", type="async_scheduling", num_workers=1, own_pool=True)
    net.ExecTestWork([], ["a"], name="r0", sleep=SLEEP)
    net.ExecTestWork([], ["b"], name="bad", sleep=SLEEP, fail=True)
    net.ExecTestWork(["a", "b"], ["z"], name="tail")
    with an.Workspace() as ws:
        ws.create_net(net)
        for _ in range(3):
            with pytest.raises(an.OperatorError, match="planned failure"):
                ws.run_net("err")
            assert "tail" not in {name for name, *_ in tops.LOG}
