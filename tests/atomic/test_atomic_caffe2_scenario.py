"""Caffe2's own concurrency test for the atomic ops (disabled upstream as flaky; ours must not flake).

An init net creates two mutexes and int32 scalars countdown=20000, checksum=0, minus_one=-1.
100 nets each do ``AtomicFetchAdd(countdown += -1) -> fetched`` then
``AtomicFetchAdd(checksum += fetched)``, 200 iterations each, all 100 at once. Every value
20000, 19999, ..., 1 is fetched exactly once, so checksum == 20000 * 20001 / 2 == 200010000
and countdown == 0.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import asyncnet as an

N_NETS, N_ITER, START = 100, 200, 20000
CHECKSUM = START * (START + 1) // 2  # 200010000
REPEATS = 8


def init_net() -> an.Net:
    init = an.Net("init")
    init.CreateMutex([], "mutex_countdown")
    init.CreateMutex([], "mutex_checksum")
    init.ConstantFill([], "countdown", shape=[], value=START, dtype="int32")
    init.ConstantFill([], "checksum", shape=[], value=0, dtype="int32")
    init.ConstantFill([], "minus_one", shape=[], value=-1, dtype="int32")
    return init


def worker_net(i: int, net_type: str = "simple") -> an.Net:
    net = an.Net(f"net:{i}", type=net_type)
    _, fetched = net.AtomicFetchAdd(["mutex_countdown", "countdown", "minus_one"], ["countdown", f"fetched_count:{i}"])
    net.AtomicFetchAdd(["mutex_checksum", "checksum", fetched], ["checksum", "not_used"])
    return net


def check(ws: an.Workspace) -> None:
    assert int(ws.fetch("countdown")) == 0
    assert int(ws.fetch("checksum")) == CHECKSUM == 200010000
    assert ws.fetch("checksum").dtype == np.int32
    assert not ws.fetch("mutex_countdown").locked() and not ws.fetch("mutex_checksum").locked()


@pytest.mark.timeout(90)
@pytest.mark.parametrize("repeat", range(REPEATS))
@pytest.mark.parametrize("net_type", ["simple", "async_scheduling"])
def test_caffe2_scenario_with_execution_plan(net_type, repeat, no_thread_leak):
    try:
        ExecutionStep, Plan = an.ExecutionStep, an.Plan
    except AttributeError:
        try:
            from asyncnet.exec.plan import ExecutionStep, Plan
        except ImportError as e:
            pytest.skip(f"execution plans are not importable yet: {e}")
    steps = [ExecutionStep(f"worker:{i}", nets=[worker_net(i, net_type)], num_iter=N_ITER) for i in range(N_NETS)]
    plan = Plan(
        "plan",
        steps=[
            ExecutionStep("init", nets=[init_net()]),
            ExecutionStep("parent", substeps=steps, concurrent_substeps=True),
        ],
    )
    ws = an.Workspace()
    try:
        ws.run_plan(plan)
        check(ws)
    finally:
        ws.close()


@pytest.mark.timeout(90)
@pytest.mark.parametrize("repeat", range(REPEATS))
@pytest.mark.parametrize("switching", ["default", "fast"])
def test_caffe2_scenario_with_100_threads(switching, repeat, no_thread_leak, request):
    if switching == "fast":
        request.getfixturevalue("fast_switching")  # switch threads every microsecond: races show sooner
    ws = an.Workspace()
    try:
        ws.run_net_once(init_net())
        names = [ws.create_net(worker_net(i)).name for i in range(N_NETS)]
        errors: list[BaseException] = []
        start = threading.Barrier(N_NETS, timeout=60)

        def body(name: str) -> None:
            try:
                start.wait()
                ws.run_net(name, num_iter=N_ITER)
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=body, args=(n,)) for n in names]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not any(t.is_alive() for t in threads)
        assert not errors, errors[:3]
        check(ws)
    finally:
        ws.close()


@pytest.mark.timeout(60)
def test_stop_flag_plan_stops_every_worker(no_thread_leak):
    """A stop flag: ConditionalSetAtomicBool in one substep stops the looping others."""
    try:
        ExecutionStep, Plan = an.ExecutionStep, an.Plan
    except AttributeError:
        try:
            from asyncnet.exec.plan import ExecutionStep, Plan
        except ImportError as e:
            pytest.skip(f"execution plans are not importable yet: {e}")
    ws = an.Workspace()
    init = an.Net("init")
    init.CreateAtomicBool([], "stop")
    init.CreateMutex([], "iter_mutex")
    init.ConstantFill([], "iter", shape=[1], value=0, dtype="int64")
    ws.run_net_once(init)
    ws.feed("true", np.array([True]))
    readers = []
    for i in range(3):
        net = an.Net(f"reader{i}")
        net.AtomicIter(["iter_mutex", "iter"], "iter")
        readers.append(ExecutionStep(f"reader{i}", nets=[net], should_stop_blob="stop"))
    stopper = an.Net("stopper")
    stopper.AtomicIter(["iter_mutex", "iter"], "iter")
    stopper.ConditionalSetAtomicBool(["stop", "true"], [])
    readers.append(ExecutionStep("stopper", nets=[stopper], num_iter=1))
    try:
        ws.run_plan(Plan("p", [ExecutionStep("all", substeps=readers, concurrent_substeps=True)]), timeout=30)
        assert ws.fetch("stop").load() is True
        assert int(ws.fetch("iter")[0]) >= 1
    finally:
        ws.close()
