"""Execution plans: iteration, nets by builder/def/name, concurrent substeps, Caffe2's stop blob rules,
only_once, failures joined and raised, timeouts, JSON."""

import threading

import exec_test_ops as tops
import numpy as np
import pytest

import asyncnet as an
from asyncnet.exec.plan import ExecutionStep, Plan, execution_step

pytestmark = [pytest.mark.timeout(60), pytest.mark.usefixtures("no_leaked_threads")]


def _inc(name="inc", blob="x", net_type="simple"):
    net = an.Net(name, type=net_type)
    net.Add([blob, "one"], blob)
    return net


def test_nets_given_as_builder_def_and_name():
    with an.Workspace() as ws:
        ws.feed("x", np.zeros(1))
        ws.feed("one", np.ones(1))
        ws.create_net(_inc("named"))
        plan = Plan("p", [ExecutionStep("s", nets=[_inc("b"), _inc("d").to_def(), "named"], num_iter=4)])
        ws.run_plan(plan)
        assert ws.fetch("x")[0] == 12
        plan.run(ws, timeout=10)
        assert ws.fetch("x")[0] == 24


@pytest.mark.parametrize("net_type", ["simple", "async_scheduling"])
def test_sequential_substeps_and_nesting(net_type):
    with an.Workspace() as ws:
        ws.feed("x", np.zeros(1))
        ws.feed("y", np.zeros(1))
        ws.feed("one", np.ones(1))
        inner = ExecutionStep(
            "inner",
            substeps=[
                ExecutionStep("a", _inc("a", "x", net_type), num_iter=2),
                ExecutionStep("b", _inc("b", "y", net_type)),
            ],
            num_iter=3,
        )
        ws.run_plan(Plan("p", [inner]))
        assert (ws.fetch("x")[0], ws.fetch("y")[0]) == (6, 3)


def test_stop_blob_checked_after_every_net():
    with an.Workspace() as ws:
        ws.feed("x", np.zeros(1))
        ws.feed("y", np.zeros(1))
        ws.feed("one", np.ones(1))

        class Watch:  # an object with load(), like an AtomicBool
            def load(self):
                return ws.fetch("x")[0] >= 7

        ws.feed("flag", Watch())
        ws.run_plan(Plan("p", [ExecutionStep("loop", nets=[_inc()], should_stop_blob="flag")]))
        assert ws.fetch("x")[0] == 7  # no num_iter: loops until the blob says stop
        # checked after each net: the second net of the iteration that set the flag does not run
        ws.feed("x", np.zeros(1))
        ws.run_plan(Plan("p", [ExecutionStep("loop", nets=[_inc("a"), _inc("b", "y")], should_stop_blob="flag")]))
        assert (ws.fetch("x")[0], ws.fetch("y")[0]) == (7, 6)
        # not checked before the first net: a flag already set still lets the first net run once
        ws.feed("x", np.zeros(1))
        ws.feed("y", np.zeros(1))
        ws.feed("set", np.array([True]))
        ws.run_plan(Plan("p", [ExecutionStep("loop", nets=[_inc("a"), _inc("b", "y")], should_stop_blob="set")]))
        assert (ws.fetch("x")[0], ws.fetch("y")[0]) == (1, 0)
        with pytest.raises(an.NetDefinitionError, match="num_iter"):
            ExecutionStep("loop", nets=[_inc()], num_iter=5, should_stop_blob="flag")


def test_stop_blob_errors():
    with an.Workspace() as ws:
        ws.feed("x", np.zeros(1))
        ws.feed("one", np.ones(1))
        ws.feed("bad", np.zeros(3, bool))
        ws.feed("int", np.ones(1, np.int32))
        with pytest.raises(an.ExecutionError, match="does not exist"):
            ws.run_plan(Plan("p", [ExecutionStep("s", _inc(), should_stop_blob="missing")]))
        with pytest.raises(an.ExecutionError, match="one bool"):
            ws.run_plan(Plan("p", [ExecutionStep("s", _inc(), should_stop_blob="bad")]))
        with pytest.raises(an.ExecutionError, match="dtype int32"):
            ws.run_plan(Plan("p", [ExecutionStep("s", _inc(), should_stop_blob="int")]))


def test_only_once_is_one_iteration_of_a_stop_blob_step():
    with an.Workspace() as ws:
        ws.feed("x", np.zeros(1))
        ws.feed("y", np.zeros(1))
        ws.feed("one", np.ones(1))
        ws.feed("no", np.array([False]))
        step = ExecutionStep(
            "outer",
            substeps=[
                ExecutionStep("init", _inc("i", "y"), should_stop_blob="no", only_once=True),
                ExecutionStep("work", _inc("w", "x")),
            ],
            num_iter=5,
        )
        ws.run_plan(step)  # a bare step, as Caffe2's RunPlan takes
        assert (ws.fetch("y")[0], ws.fetch("x")[0]) == (5, 5)  # one iteration each time the parent iterates
        with pytest.raises(an.NetDefinitionError, match="only_once"):
            ExecutionStep("s", _inc(), only_once=True)


def test_plan_nets_are_created_in_the_workspace_under_their_names():
    with an.Workspace() as ws:
        ws.feed("x", np.zeros(1))
        ws.feed("one", np.ones(1))
        old = ws.create_net(_inc("a"))
        ws.run_plan(Plan("p", [ExecutionStep("s", [_inc("a"), _inc("b").to_def()], num_iter=2)]))
        assert ws.nets() == ["a", "b"] and ws.net("a") is not old  # replaced once per plan run
        instance = ws.net("a")
        ws.run_net("a")
        assert ws.fetch("x")[0] == 5
        ws.run_plan(Plan("p", [ExecutionStep("s", ["a", _inc("b")])]))
        assert ws.net("a") is instance  # named: the workspace's net is used as it is
        other = an.Net("a")
        other.Sub(["x", "one"], "x")
        with pytest.raises(an.NetDefinitionError, match="two different nets named 'a'"):
            ws.run_plan(Plan("p", [ExecutionStep("s", [_inc("a")]), ExecutionStep("t", [other])]))


def test_concurrent_substeps_run_on_their_own_threads():
    with an.Workspace() as ws:
        subs = []
        for i in range(4):
            net = an.Net(f"n{i}")
            net.ExecTestWork([], [f"o{i}"], name=f"w{i}", sleep=0.02)
            subs.append(ExecutionStep(f"s{i}", net, num_iter=2))
        ws.run_plan(Plan("p", [ExecutionStep("par", substeps=subs, concurrent_substeps=True)]))
        assert len(tops.LOG) == 8
        # each substep's iterations stay on one thread of its own, never the caller's (thread ids
        # may be reused by the OS once a thread ended, so distinctness is checked while alive:
        # the four substeps overlap in time)
        by_step = {name: {tid for n, *_, tid in tops.LOG if n == name} for name in (f"w{i}" for i in range(4))}
        assert all(len(t) == 1 for t in by_step.values())
        assert threading.get_ident() not in set().union(*by_step.values())
        spans = {
            n: (min(s for m, s, *_ in tops.LOG if m == n), max(e for m, _, e, _ in tops.LOG if m == n)) for n in by_step
        }
        overlapping = [
            (a, b) for a in spans for b in spans if a < b and spans[a][0] < spans[b][1] and spans[b][0] < spans[a][1]
        ]
        assert overlapping  # concurrent: the substeps ran at the same time
        for a, b in overlapping:
            assert by_step[a] != by_step[b]


def _atomic_scenario(ws, n_nets, iters, net_type="simple"):
    """Caffe2's atomic_ops_test scenario, with a lock-guarded counter."""
    ws.feed("countdown", tops.Counter(n_nets * iters))
    ws.feed("checksum", tops.Counter(0))
    ws.feed("minus_one", np.array(-1))
    subs = []
    for i in range(n_nets):
        net = an.Net(f"net_{i}", type=net_type)
        fetched = net.ExecTestFetchAdd(["countdown", "minus_one"], f"fetched_{i}")
        net.ExecTestFetchAdd(["checksum", fetched], f"not_used_{i}")
        subs.append(ExecutionStep(f"step_{i}", net, num_iter=iters))
    ws.run_plan(Plan("plan", [execution_step("worker", subs, concurrent_substeps=True)]))
    total = n_nets * iters
    assert ws.fetch("countdown").value == 0
    assert ws.fetch("checksum").value == total * (total + 1) // 2


@pytest.mark.parametrize("rounds", [3])
def test_caffe2_atomic_scenario_100_concurrent_substeps(rounds):
    for _ in range(rounds):
        with an.Workspace() as ws:
            _atomic_scenario(ws, 100, 200)


def test_atomic_scenario_with_async_nets():
    with an.Workspace() as ws:
        _atomic_scenario(ws, 20, 50, "async_scheduling")


def test_failure_stops_siblings_and_is_raised_after_join():
    with an.Workspace() as ws:
        ws.feed("x", np.zeros(1))
        ws.feed("one", np.ones(1))
        bad = an.Net("bad")
        bad.ExecTestWork([], ["o"], name="boom", fail=True, sleep=0.02)
        bad2 = an.Net("bad2")
        bad2.ExecTestWork([], ["o2"], name="boom2", fail=True, sleep=0.2)
        looping = ExecutionStep("loop", _inc(), should_stop_blob=None, num_iter=10**9)
        before = threading.active_count()
        step = ExecutionStep(
            "par", substeps=[looping, ExecutionStep("b", bad), ExecutionStep("b2", bad2)], concurrent_substeps=True
        )
        with pytest.raises(an.OperatorError, match="boom") as ei:
            ws.run_plan(Plan("p", [step]))
        assert ei.value.op_name == "boom"
        # boom2 fails too if its thread started its op before the stop (timing dependent)
        assert [e.op_name for e in ei.value.other_errors] in ([], ["boom2"])
        assert threading.active_count() == before  # every substep thread joined
        assert 0 < ws.fetch("x")[0] < 10**9


def test_failure_in_sequential_step_stops_the_plan():
    with an.Workspace() as ws:
        ws.feed("x", np.zeros(1))
        ws.feed("one", np.ones(1))
        bad = an.Net("bad")
        bad.ExecTestWork([], ["o"], fail=True)
        with pytest.raises(an.OperatorError):
            ws.run_plan(Plan("p", [ExecutionStep("a", bad), ExecutionStep("b", _inc())]))
        assert ws.fetch("x")[0] == 0


def test_plan_timeout():
    with an.Workspace() as ws:
        ws.feed("x", np.zeros(1))
        ws.feed("one", np.ones(1))
        slow = an.Net("slow")
        slow.ExecTestWork([], ["o"], sleep=0.01)
        step = ExecutionStep(
            "par",
            substeps=[ExecutionStep("a", slow, num_iter=10**6), ExecutionStep("b", _inc(), num_iter=10**9)],
            concurrent_substeps=True,
        )
        with pytest.raises(TimeoutError):
            ws.run_plan(Plan("p", [step]), timeout=0.3)


def test_definition_errors():
    with pytest.raises(an.NetDefinitionError, match="not both"):
        ExecutionStep("s", nets=[_inc()], substeps=[ExecutionStep("t")])
    with pytest.raises(an.NetDefinitionError):
        ExecutionStep("s", nets=[42])
    with pytest.raises(an.NetDefinitionError):
        ExecutionStep("s", num_iter=-1)
    with pytest.raises(TypeError):
        an.Workspace().run_plan("not a plan")


def test_json_round_trip_and_rejects_bad_documents():
    plan = Plan(
        "p",
        [
            ExecutionStep("init", _inc("i")),
            ExecutionStep(
                "work",
                substeps=[
                    ExecutionStep("a", "named", should_stop_blob="s", only_once=True),
                    ExecutionStep("b", _inc("b").to_def(), should_stop_blob="stop"),
                ],
                concurrent_substeps=True,
                num_iter=2,
            ),
        ],
    )
    text = plan.to_json()
    again = Plan.from_json(text)
    assert again.to_dict() == plan.to_dict()
    for bad, where in [
        ('{"name": "p", "steps": [{"name": "s", "num_iter": "3"}]}', "steps[0].num_iter"),
        ('{"name": "p", "steps": [{"name": "s", "nets": [{"name": "n", "ops": 5}]}]}', "steps[0].nets[0]"),
        ('{"name": "p", "steps": [{"nme": "s"}]}', "steps[0]"),
        (
            '{"name": "p", "steps": [{"name": "s", "substeps": [{"name": "t", "nets": [1]}]}]}',
            "steps[0].substeps[0].nets[0]",
        ),
        ("[1, 2", None),
        ('{"name": "p", "steps": NaN}', None),
    ]:
        with pytest.raises(an.NetDefinitionError) as ei:
            Plan.from_json(bad)
        if where:
            assert ei.value.path.startswith(where), (ei.value.path, where)


def test_same_step_object_listed_several_times_among_concurrent_substeps():
    # one instance per (step, lane): the copies must not collide with NetBusyError
    with an.Workspace() as ws:
        net = an.Net("w", type="async_scheduling", num_workers=2)
        net.ExecTestWork([], ["o"], sleep=0.01)
        worker = ExecutionStep("worker", net, num_iter=3)
        ws.run_plan(Plan("p", [ExecutionStep("par", substeps=[worker] * 4, concurrent_substeps=True, num_iter=2)]))
        assert len(tops.LOG) == 4 * 3 * 2


def test_failure_cancels_the_async_runs_of_siblings():
    with an.Workspace() as ws:
        long = an.Net("long", type="async_scheduling", num_workers=1)
        long.ExecTestWork([], ["a0"], name="c0", sleep=0.02)
        for i in range(1, 100):  # one chain of 100 ops: ~2 s if nothing stops it
            long.ExecTestWork([f"a{i - 1}"], [f"a{i}"], name=f"c{i}", sleep=0.02)
        bad = an.Net("bad")
        bad.ExecTestWork([], ["o"], name="boom", fail=True, sleep=0.1)
        step = ExecutionStep(
            "par", substeps=[ExecutionStep("long", long), ExecutionStep("bad", bad)], concurrent_substeps=True
        )
        with pytest.raises(an.OperatorError, match="boom") as ei:
            ws.run_plan(Plan("p", [step]))
        assert ei.value.other_errors == []  # the sibling's cancellation is not another failure
        ran = [n for n, *_ in tops.LOG if n.startswith("c")]
        assert 0 < len(ran) < 100 and not ws.has("a99")


@pytest.mark.timeout(20)
def test_plan_timeout_bounds_steps_that_run_no_net():
    # loops that run no net (their one substep has num_iter=0), where the deadline used to be
    # checked, so both spun forever; a step with no net at all does nothing (Caffe2's Python
    # API drops it when it is added), so it ends at once
    with an.Workspace() as ws:
        ws.feed("never", np.array([False]))
        ws.feed("x", np.zeros(1))
        ws.feed("one", np.ones(1))
        zero = ExecutionStep("zero", _inc("z"), num_iter=0)
        with pytest.raises(TimeoutError):
            ws.run_plan(Plan("p", [ExecutionStep("idle", substeps=[zero], should_stop_blob="never")]), timeout=0.3)
        with pytest.raises(TimeoutError):
            ws.run_plan(Plan("p", [ExecutionStep("loop", substeps=[zero], num_iter=10**12)]), timeout=0.3)
        ws.run_plan(
            Plan(
                "p",
                [
                    ExecutionStep("idle", should_stop_blob="never"),
                    ExecutionStep("loop", substeps=[ExecutionStep("empty")], num_iter=10**12),
                ],
            ),
            timeout=5,
        )
        assert ws.fetch("x")[0] == 0
