"""Caffe2's own tests of plans, control flow, executors, atomics and the workspace, ported.

Each test names the Caffe2 test it ports. Sources (pytorch/pytorch):
caffe2/python/control_test.py (+ control.py), caffe2/python/operator_test/counter_ops_test.py,
caffe2/python/operator_test/atomic_ops_test.py, caffe2/core/plan_executor_test.cc (+
plan_executor.cc), caffe2/core/net_test.cc (+ net.cc's NetBase checks),
caffe2/python/workspace_test.py, caffe2/python/core_test.py (TestCreatePlan, the traceback tests,
core.execution_step), caffe2/python/net_builder_test.py (its loops and stop guards, as steps),
caffe2/python/operator_test/async_net_barrier_test.py, caffe2/python/test/executor_test.py
(compare_executors). The rest of those files (name scopes,
device copies, GPU, immediate mode, predictors, transforms, serialization) is not about plans,
executors or atomics; what is left out on purpose is in docs/compatibility.md.
"""

from __future__ import annotations

import dataclasses
import threading

import numpy as np
import pytest

import asyncnet as an
from asyncnet.core.registry import Arg, register_op, registered_ops
from asyncnet.exec import ExecutionStep, Plan, control, execution_step, to_execution_step

pytestmark = pytest.mark.timeout(60)
N = 10

# -- test-only operators (plan_executor_test.cc / net_test.cc) ------------------------------------
STUCK_RAN = threading.Event()
CANCELS: list[str] = []
RUNS: list[int] = []

if "AuditStuck" not in registered_ops():

    @register_op("AuditStuck", inputs=0, outputs=0, doc="test op: blocks until its run is cancelled (at most 30 s)")
    def _stuck(ctx):
        STUCK_RAN.set()
        if ctx.wait_cancelled(30):
            CANCELS.append(ctx.op.type)

    @register_op("AuditError", inputs=0, outputs=0, doc="test op: waits for AuditStuck to run, then raises")
    def _error(ctx):
        STUCK_RAN.wait(30)
        raise RuntimeError("test error")

    @register_op(
        "AuditCount",
        inputs=(0, None),
        outputs=(0, None),
        allow_inplace=lambda i, o: True,
        args=[Arg("fail", bool, False)],
        doc="test op (net_test's NetTestDummy): counts its runs; fail=1 raises",
    )
    def _count(ctx, *xs):
        if ctx.args["fail"]:
            raise RuntimeError("NetTestDummy failed")
        RUNS.append(ctx.index)
        outs = [np.zeros(1) for _ in ctx.op.outputs]
        return None if not outs else outs[0] if len(outs) == 1 else tuple(outs)


@pytest.fixture(autouse=True)
def _reset_test_ops():
    STUCK_RAN.clear()
    CANCELS.clear()
    RUNS.clear()
    yield


def _net(name: str, *ops: tuple, type: str = "simple", **kw) -> an.Net:
    net = an.Net(name, type=type, **kw)
    for op_type, ins, outs, *args in ops:
        getattr(net, op_type)(ins, outs, **(args[0] if args else {}))
    return net


# == control_test.py ==================================================================================


class _Control:
    """control_test.TestControl.setUp: a counter, its count nets and the condition nets."""

    def __init__(self):
        self.init = an.Net("init-net")
        cnt = self.init.CreateCounter([], init_count=0)
        const_n = self.init.ConstantFill([], shape=[], value=N, dtype="int64")
        const_0 = self.init.ConstantFill([], shape=[], value=0, dtype="int64")
        self.cnt = an.Net("cnt-net")
        self.cnt.CountUp([cnt])
        curr = self.cnt.RetrieveCount([cnt])
        self.init.ConstantFill([], [curr], shape=[], value=0, dtype="int64")
        self.cnt.add_external_outputs(curr)
        self.cnt_2 = an.Net("cnt-2-net")
        self.cnt_2.CountUp([cnt])
        self.cnt_2.CountUp([cnt])
        curr_2 = self.cnt_2.RetrieveCount([cnt])
        self.init.ConstantFill([], [curr_2], shape=[], value=0, dtype="int64")
        self.cnt_2.add_external_outputs(curr_2)
        self.cond = self._cond("cond-net", "LT", [curr, const_n])
        self.not_cond = self._cond("not-cond-net", "GE", [curr, const_n])
        self.true_cond = self._cond("true-cond-net", "LT", [const_0, const_n])
        self.false_cond = self._cond("false-cond-net", "GT", [const_0, const_n])
        self.idle = an.Net("idle-net")
        self.idle.ConstantFill([], shape=[], value=0, dtype="int64")
        self.ws = an.Workspace()

    @staticmethod
    def _cond(name, op, ins):
        net = an.Net(name)
        net.add_external_outputs(getattr(net, op)(ins))
        return net

    def run(self, step):  # BuildAndRunPlan
        plan = Plan("test")
        plan.AddStep(control.Do("init", self.init))
        plan.AddStep(step)
        self.ws.run_plan(plan, timeout=30)

    def output(self, net, i=-1):
        return self.ws.fetch(net.snapshot().external_outputs[i])


@pytest.fixture
def c():
    ctl = _Control()
    yield ctl
    ctl.ws.close()


@pytest.mark.parametrize("body", ["net", "nets", "step", "step+net"])
@pytest.mark.parametrize("loop", ["For", "While", "Until", "DoWhile", "DoUntil"])
def test_control_loops(c, loop, body):
    """testForLoopWithNets/Step, testWhileLoopWithNet/Step, testUntil..., testDoWhile..., testDoUntil...:
    every loop counts to N, whatever its body (Caffe2 runs each twice in one workspace)."""
    for _ in range(2):
        count = control.Do("count", c.cnt)
        items = {
            "net": c.cnt,
            "nets": [c.cnt, c.idle],
            "step": count,
            "step+net": [c.idle, count] if loop.startswith("Do") and loop != "Do" else [count, c.idle],
        }[body]
        if loop == "For":
            step = control.For("myFor", items, N)
        else:
            cond = c.not_cond if "Until" in loop else c.cond
            step = getattr(control, loop)(f"my{loop}", cond, items)
        c.run(step)
        assert int(c.output(c.cnt)) == N


@pytest.mark.parametrize("on_blob", [False, True])
@pytest.mark.parametrize(
    "kind,cond,expect", [("If", "true", 1), ("If", "false", 0), ("IfNot", "true", 0), ("IfNot", "false", 1)]
)
def test_control_if(c, kind, cond, expect, on_blob):
    """testIfCondTrue/FalseOnNet/Blob, testIfNotCondTrue/FalseOnNet/Blob."""
    cond_net = getattr(c, f"{cond}_cond")
    fn = getattr(control, kind)
    if on_blob:
        step = control.Do(
            "if-all", control.Do("count", cond_net), fn(f"my{kind}", cond_net.snapshot().external_outputs[-1], c.cnt)
        )
    else:
        step = fn(f"my{kind}", cond_net, c.cnt)
    c.run(step)
    assert int(c.output(c.cnt)) == expect


@pytest.mark.parametrize("on_blob", [False, True])
@pytest.mark.parametrize("kind,cond", [("If", True), ("If", False), ("IfNot", True), ("IfNot", False)])
def test_control_if_else(c, kind, cond, on_blob):
    """testIfElseCond..., testIfNotElseCond...: the branch taken writes 1 (cnt) or 2 (cnt-2)."""
    cond_net = c.true_cond if cond else c.false_cond
    takes_first = cond if kind == "If" else not cond
    run_net, expect = (c.cnt, 1) if takes_first else (c.cnt_2, 2)
    fn = getattr(control, kind)
    if on_blob:
        step = control.Do(
            "if-else",
            control.Do("count", cond_net),
            fn(f"my{kind}Else", cond_net.snapshot().external_outputs[-1], c.cnt, c.cnt_2),
        )
    else:
        step = fn(f"my{kind}Else", cond_net, c.cnt, c.cnt_2)
    c.run(step)
    assert int(c.output(run_net)) == expect


def test_control_switch(c):
    """testSwitch, testSwitchNot."""
    c.run(control.Switch("mySwitch", (c.false_cond, c.cnt), (c.true_cond, c.cnt_2)))
    assert (int(c.output(c.cnt)), int(c.output(c.cnt_2))) == (0, 2)
    c.run(control.SwitchNot("mySwitchNot", (c.false_cond, c.cnt), (c.true_cond, c.cnt_2)))
    assert (int(c.output(c.cnt)), int(c.output(c.cnt_2))) == (1, 0)


def test_control_bool_net_combine_and_merge(c):
    """testBoolNet, testCombineConditions, testMergeConditionNets."""
    for args, expects in [
        ((("a", True),), [True]),
        ((("a", True), ("b", False)), [True, False]),
        (([("a", True), ("b", False)],), [True, False]),
    ]:
        bool_net = control.BoolNet(*args)
        c.run(control.Do("bool", bool_net))
        assert [bool(c.output(bool_net, i)) for i in range(len(expects))] == expects
    for relation, expect in [("Or", True), ("And", False)]:
        combine = control.CombineConditions("test", [c.true_cond, c.false_cond], relation)
        c.run(control.Do("combine", c.true_cond, c.false_cond, combine))
        assert bool(c.output(combine)) is expect
        merge = control.MergeConditionNets("test", [c.true_cond, c.false_cond], relation)
        c.run(control.Do("merge", merge))
        assert bool(c.output(merge)) is expect


def test_control_do_parallel_and_nested_loops():
    """DoParallel; net_builder_test.test_loops' nested loops with if / elif / else, as control steps."""
    ws = an.Workspace()
    for b in ("i", "j", "total", "large", "small", "tiny"):
        ws.feed(b, np.array(0, np.int64))
    for k in (1, 10, 50, 80):
        ws.feed(f"c{k}", np.array(k, np.int64))
    val = _net(
        "val", ("Mul", ["i", "c10"], "outer"), ("Add", ["outer", "j"], "val"), ("Add", ["total", "val"], "total")
    )
    ge80 = an.Net("ge80")
    ge80.add_external_outputs(ge80.GE(["val", "c80"], "is_large"))
    ge50 = an.Net("ge50")
    ge50.add_external_outputs(ge50.GE(["val", "c50"], "is_small"))
    add = {k: _net(f"add_{k}", ("Add", [k, "val"], k)) for k in ("large", "small", "tiny")}
    inner_cond = an.Net("j<i")
    inner_cond.add_external_outputs(inner_cond.LT(["j", "i"], "inner_go"))
    body = [
        val,
        control.If("cls", ge80, add["large"], control.If("elif", ge50, add["small"], add["tiny"])),
        _net("j++", ("Add", ["j", "c1"], "j")),
    ]
    outer = [
        _net("j=0", ("ConstantFill", [], "j", {"shape": [], "value": 0, "dtype": "int64"})),
        control.While("inner", inner_cond, body),
        _net("i++", ("Add", ["i", "c1"], "i")),
    ]
    ws.run_plan(control.For("outer", outer, 10), timeout=30)
    vals = [10 * i + j for i in range(10) for j in range(i)]
    got = [int(ws.fetch(b)) for b in ("total", "large", "small", "tiny")]
    assert got == [
        sum(vals),
        sum(v for v in vals if v >= 80),
        sum(v for v in vals if 50 <= v < 80),
        sum(v for v in vals if v < 50),
    ]
    par = control.DoParallel(
        "p",
        ExecutionStep("a", _net("pa", ("Add", ["i", "c1"], "i"))),
        ExecutionStep("b", _net("pb", ("Add", ["j", "c1"], "j"))),
    )
    assert par.concurrent_substeps and len(par.substeps) == 2
    ws.run_plan(par)
    assert (int(ws.fetch("i")), int(ws.fetch("j"))) == (11, 10)
    ws.close()


# == counter_ops_test.py ==============================================================================


def test_counter_ops():
    """test_counter_ops (without its Save/Load part: asyncnet checkpoints hold arrays)."""
    ws = an.Workspace()

    def run(op, ins, outs, **args):
        ws.run_operator_once(an.OperatorDef(op, ins, outs, args))

    run("CreateCounter", [], ["c"], init_count=1)
    run("CountDown", ["c"], ["t1"])
    assert not ws.fetch("t1")  # 1 -> 0
    run("CountDown", ["c"], ["t2"])
    assert ws.fetch("t2")  # 0 -> -1
    run("CountUp", ["c"], ["t21"])
    assert ws.fetch("t21") == -1  # -1 -> 0
    run("RetrieveCount", ["c"], ["t22"])
    assert ws.fetch("t22") == 0
    run("ResetCounter", ["c"], [], init_count=1)  # -> 1
    run("CountDown", ["c"], ["t3"])
    assert not ws.fetch("t3")  # 1 -> 0
    run("ConstantFill", [], ["t4"], value=False, shape=[], dtype="bool")
    assert ws.fetch("t4") == ws.fetch("t1")
    run("ConstantFill", [], ["t5"], value=True, shape=[], dtype="bool")
    assert ws.fetch("t5") == ws.fetch("t2")
    run("And", ["t1", "t2"], ["t6"])
    assert not ws.fetch("t6")
    run("And", ["t2", "t5"], ["t7"])
    assert ws.fetch("t7")
    run("CreateCounter", [], ["serialized_c"], init_count=22)
    for _ in range(10):
        run("CountDown", ["serialized_c"], ["t8"])
    run("RetrieveCount", ["serialized_c"], ["t8"])
    assert ws.fetch("t8") == 12
    run("ResetCounter", ["serialized_c"], ["prev"], init_count=3)
    run("CheckCounterDone", ["serialized_c"], ["done"])
    assert (int(ws.fetch("prev")), bool(ws.fetch("done")), ws.fetch("t8").dtype, ws.fetch("t1").shape) == (
        12,
        False,
        np.int64,
        (),
    )
    with pytest.raises(an.OperatorError, match="counter"):
        ws.feed("not_a_counter", np.zeros(1))
        run("CountUp", ["not_a_counter"], ["x"])


# == atomic_ops_test.py, written with Caffe2's helpers =================================================


def test_atomic_ops_with_caffe2_plan_helpers():
    """test_atomic_ops, built as Caffe2 builds it: execution_step('worker:i', net, num_iter=200),
    execution_step('parent', steps, concurrent_substeps=True), Plan.AddStep (also run in
    tests/atomic/test_atomic_caffe2_scenario.py, 16 times)."""
    init = an.Net("init")
    mutex_countdown = init.CreateMutex([])
    mutex_checksum = init.CreateMutex([])
    countdown = init.ConstantFill([], shape=[], value=20000, dtype="int32")
    checksum = init.ConstantFill([], shape=[], value=0, dtype="int32")
    minus_one = init.ConstantFill([], shape=[], value=-1, dtype="int32")
    steps = []
    for i in range(100):
        net = an.Net(f"net:{i}")
        _, fetched = net.AtomicFetchAdd([mutex_countdown, countdown, minus_one], [countdown, f"fetched_count:{i}"])
        net.AtomicFetchAdd([mutex_checksum, checksum, fetched], [checksum, "not_used"])
        steps.append(execution_step(f"worker:{i}", net, num_iter=200))
    plan = Plan("plan")
    plan.AddStep(execution_step("init", init))
    plan.AddStep(execution_step("parent", steps, concurrent_substeps=True))
    with an.Workspace() as ws:
        ws.run_plan(plan, timeout=50)
        assert int(ws.fetch(checksum)) == 200010000 and int(ws.fetch(countdown)) == 0


@pytest.mark.parametrize("net_type", ["simple", "async_scheduling"])
def test_atomic_iter_shared_by_concurrent_steps(net_type):
    """The AtomicIter of Caffe2's BuildUniqueMutexIter (iter_op.h: IncrementIter under the mutex),
    shared by concurrent execution steps: no increment is lost, the counter stays int64 [1]."""
    init = _net(
        "init",
        ("CreateMutex", [], "iteration_mutex"),
        ("ConstantFill", [], "iter", {"shape": [1], "value": 0, "dtype": "int64"}),
    )
    workers = [
        execution_step(
            f"w{i}", _net(f"it{i}", ("AtomicIter", ["iteration_mutex", "iter"], "iter"), type=net_type), num_iter=250
        )
        for i in range(8)
    ]
    with an.Workspace() as ws:
        ws.run_plan(
            Plan("p", [execution_step("init", init), execution_step("all", workers, concurrent_substeps=True)]),
            timeout=50,
        )
        it = ws.fetch("iter")
        assert it.dtype == np.int64 and it.shape == (1,) and int(it[0]) == 8 * 250
        ws.feed("iter", np.array([-1], np.int64))
        with pytest.raises(an.OperatorError, match="negative"):
            ws.run_net_once(_net("bad", ("AtomicIter", ["iteration_mutex", "iter"], "iter")))


# == plan_executor_test.cc ============================================================================


def test_empty_plan_and_empty_steps():
    """EmptyPlan: a plan without steps runs (Caffe2 logs a warning and returns true). A step
    without nets or substeps does nothing whatever its loop (core.py's AddStep and AddSubstep
    drop it), so a stop-blob loop over nothing ends at once instead of spinning."""
    ws = an.Workspace()
    ws.run_plan(Plan(""))
    ws.feed("stop", np.array([False]))
    ws.run_plan(
        execution_step(
            "outer", [execution_step("empty", None, should_stop_blob="stop"), ExecutionStep("counted", num_iter=10**9)]
        ),
        timeout=10,
    )
    ws.run_plan(ExecutionStep("bare", should_stop_blob="stop"), timeout=10)


@pytest.mark.parametrize("stuck_type", ["async_scheduling", "simple", "dag"])
def test_error_plan_cancels_the_stuck_sibling(stuck_type):
    """ErrorAsyncPlan (stuck async net) and ErrorPlanWithCancellableStuckNet (stuck blocking op):
    the failing substep's error is raised and the stuck op of the other substep is cancelled
    exactly once. Steps and nets are nameless or named as in the C++ test."""
    stuck = _net("stuck_net", ("AuditStuck", [], []), type=stuck_type)
    error = _net("error_net", ("AuditError", [], []), type="async_scheduling" if stuck_type != "simple" else "simple")
    plan = Plan(
        "",
        [ExecutionStep(concurrent_substeps=True, substeps=[ExecutionStep(nets=[stuck]), ExecutionStep(nets=[error])])],
    )
    with an.Workspace() as ws:
        with pytest.raises(an.OperatorError, match="test error"):
            ws.run_plan(plan, timeout=30)
    assert CANCELS == ["AuditStuck"]


def test_should_stop_with_cancel():
    """ShouldStopWithCancel: a substep looping on a stop blob that stays false ends when a
    concurrent substep fails; the error is raised."""
    noop = _net("should_stop_net", ("AuditCount", [], []), type="async_scheduling")
    error = _net("error_net", ("AuditError", [], []))
    STUCK_RAN.set()
    plan = Plan(
        "",
        [
            ExecutionStep(
                concurrent_substeps=True,
                substeps=[
                    ExecutionStep(
                        "concurrent_should_stop",
                        should_stop_blob="should_stop_blob",
                        substeps=[ExecutionStep("should_stop_net", noop, num_iter=10)],
                    ),
                    ExecutionStep("error_step", error),
                ],
            )
        ],
    )
    with an.Workspace() as ws:
        ws.feed("should_stop_blob", np.array([False]))
        with pytest.raises(an.OperatorError, match="test error"):
            ws.run_plan(plan, timeout=30)


def test_net_cancel_reaches_the_ops_of_a_simple_net():
    """NetBase::Cancel cancels the ops of the run in flight (any net type); a net not running
    has nothing to cancel."""
    with an.Workspace() as ws:
        net = ws.create_net(_net("s", ("AuditStuck", [], [])))
        assert net.cancel() is False
        t = threading.Thread(target=net.run)
        t.start()
        assert STUCK_RAN.wait(10)
        assert net.cancel() is True
        t.join(10)
        assert not t.is_alive() and CANCELS == ["AuditStuck"]
        STUCK_RAN.clear()
        t = threading.Thread(target=net.run)  # the next run starts uncancelled
        t.start()
        assert STUCK_RAN.wait(10) and CANCELS == ["AuditStuck"]
        net.cancel()
        t.join(10)
        assert CANCELS == ["AuditStuck"] * 2


# == net_test.cc =====================================================================================


def _two_op_def(external_inputs=(), external_outputs=()):
    """CreateNetTestHelper: NetTestDummy in -> hidden -> out."""
    return an.NetDef(
        "n",
        ops=[an.OperatorDef("AuditCount", ["in"], ["hidden"]), an.OperatorDef("AuditCount", ["hidden"], ["out"])],
        external_inputs=list(external_inputs),
        external_outputs=list(external_outputs),
    )


@pytest.mark.parametrize(
    "ins,outs,ok",
    [
        ((), (), True),
        (("in",), (), True),
        ((), ("out",), True),
        (("unuseful_in",), (), False),
        ((), ("unproduced_out",), False),
    ],
)
def test_net_construction_declared_blobs(ins, outs, ok):
    """ConstructionNoDeclaredInputOutput, ConstructionDeclaredInput, ConstructionDeclaredOutput,
    DeclaredInputInsufficient, DeclaredOutputNotMet: checked when the net is created."""
    ws = an.Workspace()
    ws.feed("in", np.zeros(1))
    if ok:
        ws.create_net(_two_op_def(ins, outs)).run()
    else:
        with pytest.raises(an.NetDefinitionError, match="unuseful_in|'in'|unproduced_out"):
            ws.create_net(_two_op_def(ins, outs))
        assert ws.nets() == []


def _dummy_net(spec, net_type="dag", **kw):
    return an.NetDef(
        "example",
        type=net_type,
        num_workers=4,
        ops=[
            an.OperatorDef("AuditCount", list(i), list(o), kw if k == len(spec) - 1 else {})
            for k, (i, o) in enumerate(spec)
        ],
    )


def _run_100_times(net, num_ops):  # testExecution
    for _ in range(100):
        RUNS.clear()
        net.run()
        assert len(RUNS) == num_ops


@pytest.mark.parametrize(
    "spec,chains",
    [
        ([(["in"], ["hidden"]), (["hidden"], ["out"])], [[0, 1]]),  # ChainingForLinearModel
        ([(["in"], ["hidden"]), (["hidden"], ["out1"]), (["hidden"], ["out2"])], [[0], [1], [2]]),  # ChainingForFork
        (
            [(["in"], ["hidden1"]), (["in"], ["hidden2"]), (["hidden1", "hidden2"], ["out"]), (["out"], ["out2"])],
            [[0], [1], [2, 3]],
        ),  # ChainingForForkJoin
        (
            [
                (["in"], ["hidden1"]),
                (["hidden1"], ["mid1"]),
                (["mid1"], ["out1"]),
                (["in"], ["hidden2"]),
                (["hidden2"], ["mid2"]),
                (["mid2"], ["out2"]),
            ],
            2,
        ),  # ChainingForHogwildModel
    ],
)
def test_chaining(spec, chains):
    """ChainingForLinearModel, ChainingForFork, ChainingForForkJoin, ChainingForHogwildModel:
    the chains of a "dag" net with 4 workers, then 100 runs each running every op once."""
    with an.Workspace() as ws:
        ws.feed("in", np.zeros(1))
        net = ws.create_net(_dummy_net(spec))
        got = [[op.index for op in ch] for ch in net.chain_ops]
        assert (len(got) if isinstance(chains, int) else got) == chains
        _run_100_times(net, len(spec))


def test_chaining_forward_backward():
    """ChainingForwardBackward: the 25 ops of a 5-layer forward and backward pass form one chain."""
    fb = [(["in", "fc_0_w", "fc_0_b"], ["fc_0"]), (["fc_0"], ["fc_0"])]
    for k in range(1, 5):
        fb += [([f"fc_{k - 1}", f"fc_{k}_w", f"fc_{k}_b"], [f"fc_{k}"]), ([f"fc_{k}"], [f"fc_{k}"])]
    fb += [
        (["fc_4", "in2"], ["LabelCrossEntropy"]),
        (["LabelCrossEntropy"], ["AveragedLoss"]),
        (["AveragedLoss"], ["AveragedLoss_autogen_grad"]),
        (["LabelCrossEntropy", "AveragedLoss_autogen_grad"], ["LabelCrossEntropy_grad"]),
        (["fc_4", "label", "LabelCrossEntropy_grad"], ["fc_4_grad"]),
        (["fc_4", "fc_4_grad"], ["fc_4_grad"]),
    ]
    for k in range(4, 0, -1):
        fb += [
            ([f"fc_{k - 1}", f"fc_{k}_w", f"fc_{k}_grad"], [f"fc_{k}_w_grad", f"fc_{k}_b_grad", f"fc_{k - 1}_grad"]),
            ([f"fc_{k - 1}", f"fc_{k - 1}_grad"], [f"fc_{k - 1}_grad"]),
        ]
    fb += [(["in", "fc_0_w", "fc_0_grad"], ["fc_0_w_grad", "fc_0_b_grad", "data_grad"])]
    assert len(fb) == 25
    with an.Workspace() as ws:
        for b in ["in", "in2", "label"] + [f"fc_{k}_{p}" for k in range(5) for p in "wb"]:
            ws.feed(b, np.zeros(1))
        net = ws.create_net(_dummy_net(fb))
        assert net.num_chains == 1
        _run_100_times(net, 25)


@pytest.mark.parametrize("net_type", ["dag", "async_scheduling", "simple"])
def test_failing_operator(net_type):
    """FailingOperator (and ChainErrorTest): the second op of a chain fails; every run fails,
    the first op ran once, and the net runs again."""
    with an.Workspace() as ws:
        ws.feed("in", np.zeros(1))
        net = ws.create_net(_dummy_net([(["in"], ["hidden"]), (["hidden"], ["out"])], net_type, fail=True))
        for _ in range(10):
            RUNS.clear()
            with pytest.raises(an.OperatorError, match="NetTestDummy failed"):
                net.run()
            assert RUNS == [0]
        # ChainErrorTest: two independent ops, the first fails
        net = ws.create_net(
            an.NetDef(
                "chain",
                type="async_scheduling",
                ops=[an.OperatorDef("AuditCount", [], [], {"fail": True}), an.OperatorDef("AuditCount", [], [])],
            )
        )
        with pytest.raises(an.OperatorError, match="NetTestDummy failed"):
            net.run()


def test_pool_size_no_type_and_empty_async_net():
    """OperatorWithExecutorHelper (the pool holds num_workers threads), NoTypeNet (a net without
    a type is a simple net), AsyncEmptyNet (an empty async net runs)."""
    with an.Workspace() as ws:
        net = ws.create_net(_dummy_net([([], ["x"])], "async_scheduling"))
        assert [p.size for p in net.pools] == [4]
        assert type(ws.create_net(an.NetDef("no_type_net"))).__name__ == "SimpleNet"
        ws.create_net(an.NetDef("empty", type="async_scheduling")).run()


def test_pending_ops_and_net_failure():
    """PendingOpsAndNetFailure: an op that never finishes by itself beside a failing op: the run
    is not stuck, it fails, and the pending op sees the cancellation."""
    STUCK_RAN.set()
    with an.Workspace() as ws:
        net = ws.create_net(
            an.NetDef(
                "example",
                type="async_scheduling",
                num_workers=2,
                ops=[an.OperatorDef("AuditStuck", [], []), an.OperatorDef("AuditError", [], [])],
            )
        )
        with pytest.raises(an.OperatorError, match="test error"):
            net.run(timeout=30)
    assert CANCELS == ["AuditStuck"]


def test_executors_give_the_simple_nets_blobs():
    """executor_test.py (ExecutorCPUConvNetTest.compare_executors): a conv model with its
    gradients, LearningRate and WeightedSum updates, seeded, run twice under "simple" and under
    "async_polling", "dag", "async_dag" (num_workers 8): every array blob is bit-identical."""
    seed = an.DeviceOption(random_seed=0xCAFFE2)
    init = an.Net("init", device_option=seed)
    init.GaussianFill([], "data", shape=[8, 3, 12, 12], mean=0.0, std=1.0)
    init.UniformIntFill([], "label", shape=[8], min=0, max=9)
    init.XavierFill([], "conv_w", shape=[4, 3, 3, 3])
    init.ConstantFill([], "conv_b", shape=[4], value=0.1)
    init.XavierFill([], "fc_w", shape=[10, 100])
    init.ConstantFill([], "fc_b", shape=[10], value=0.0)
    init.ConstantFill([], "ONE", shape=[1], value=1.0)
    net = an.Net("train", device_option=seed)
    net.Conv(["data", "conv_w", "conv_b"], "conv", kernel=3)
    net.Relu("conv", "conv")
    net.MaxPool("conv", "pool", kernel=2, stride=2)
    net.FC(["pool", "fc_w", "fc_b"], "fc")
    net.SoftmaxWithLoss(["fc", "label"], ["softmax", "loss"])
    grads = an.add_gradient_ops(net, "loss")
    net.Iter([], "iter")
    net.LearningRate("iter", "LR", base_lr=-0.1, policy="step", stepsize=10000, gamma=0.999)
    for p in ("conv_w", "conv_b", "fc_w", "fc_b"):
        net.WeightedSum([p, "ONE", str(grads[p]), "LR"], p)

    def run(net_type):
        with an.Workspace() as ws:
            ws.run_net_once(init)
            ws.create_net(dataclasses.replace(net.to_def(), type=net_type, num_workers=8))
            ws.run_net("train", 2)
            return {k: ws.fetch(k, copy=True) for k in ws.blobs() if isinstance(ws.fetch(k), np.ndarray)}

    ref = run("simple")
    assert len(ref) > 20 and np.isfinite(ref["loss"])
    for executor in ("async_polling", "dag", "async_dag"):
        got = run(executor)
        for name, value in ref.items():
            np.testing.assert_array_equal(got[name], value, f"blob {name} differs in a {executor} run")


# == workspace_test.py ================================================================================


def _test_net():
    net = an.Net("test-net")
    net.ConstantFill([], "testblob", shape=[1, 2, 3, 4], value=1.0)
    return net


def test_workspace_blobs_and_runs():
    """testWorkspaceHasBlobWithNonexistingName, testRunOperatorOnce, testRunNetOnce, testRunPlan,
    testConstructPlanFromSteps, testResetWorkspace, testFetchFeedViaBlobDict (in, iter, len)."""
    ws = an.Workspace()
    assert not ws.has("non-existing") and len(ws) == 0 and bool(ws)
    ws.run_operator_once(_test_net().ops[0])
    assert ws.has("testblob") and ws.blobs() == ["testblob"] and list(ws) == ["testblob"] and len(ws) == 1
    assert "testblob" in ws and "non_existant" not in ws
    ws.reset()
    ws.run_net_once(_test_net())
    assert ws.has("testblob")
    ws.reset()
    ws.run_plan(Plan("test-plan", [ExecutionStep("test-step", _test_net())]))
    assert ws.has("testblob")
    ws.reset()
    ws.run_plan(ExecutionStep("test-step-as-plan", _test_net()))
    assert ws.has("testblob")
    ws.reset()
    assert not ws.has("testblob") and ws.nets() == []


def test_run_plan_in_background():
    """testRunPlanInBackground: the plan runs on its own thread; is_done / is_succeeded; a
    background plan can also be cancelled, and a failure is kept for wait()."""
    ws = an.Workspace()
    handle = ws.run_plan_async(Plan("test-plan", [ExecutionStep("test-step", _test_net())]))
    handle.wait(30)
    assert handle.is_done() and handle.is_succeeded() and ws.has("testblob")
    ws.feed("x", np.zeros(1))
    ws.feed("one", np.ones(1))
    ws.feed("stop", np.array([False]))
    looping = ws.run_plan_async(ExecutionStep("loop", _net("inc", ("Add", ["x", "one"], "x")), should_stop_blob="stop"))
    assert looping.cancel() is True
    with pytest.raises(an.ExecutionError, match="cancelled"):
        looping.wait(30)
    assert looping.is_done() and not looping.is_succeeded() and looping.cancel() is False
    failing = ws.run_plan_async(ExecutionStep("fail", _net("f", ("AuditCount", [], [], {"fail": True}))))
    assert isinstance(failing.exception(30), an.OperatorError) and not failing.is_succeeded()
    with pytest.raises(TypeError):
        ws.run_plan_async("not a plan")


def test_workspace_feed_fetch():
    """testFetchFeedBlob, testFetchFeedBlobTypes, testFetchFeedBlobBool, testFetchFeedBlobZeroDim,
    testFetchFeedLong/ShortStringTensor, testFetchFeedPlainString, testFetchBlobs."""
    ws = an.Workspace()
    ws.run_net_once(_test_net())
    fetched = ws.fetch("testblob", copy=True)  # Caffe2's FetchBlob returns a copy
    assert fetched.shape == (1, 2, 3, 4) and (fetched == 1.0).all()
    fetched[:] = 2.0
    assert (ws.fetch("testblob") == 1.0).all()
    ws.feed("testblob", fetched)
    assert (ws.fetch("testblob") == 2.0).all()
    rng = np.random.default_rng(0)
    for dtype in [
        np.float16,
        np.float32,
        np.float64,
        np.bool_,
        np.int8,
        np.int16,
        np.int32,
        np.int64,
        np.uint8,
        np.uint16,
    ]:
        span = np.iinfo(dtype).max * 2 if np.issubdtype(dtype, np.integer) else 1000
        data = ((rng.random((2, 3, 4)) - 0.5) * span).astype(dtype)
        ws.feed("testblob_types", data)
        back = ws.fetch("testblob_types")
        assert back.shape == (2, 3, 4) and back.dtype == dtype
        np.testing.assert_array_equal(back, data)
    data = np.zeros((2, 3, 4), bool)
    data.flat[::2] = True
    ws.feed("b", data)
    np.testing.assert_array_equal(ws.fetch("b"), data)
    ws.feed("testblob_empty", np.empty((2, 0, 3), np.float32))
    assert ws.fetch("testblob_empty").shape == (2, 0, 3) and ws.fetch("testblob_empty").dtype == np.float32
    for strs in (
        np.array([b" ".join(10 * [b"long string"]), b" ".join(128 * [b"very long string"]), b"small \0\1\2 string"]),
        np.array([b"elem1", b"elem 2", b"element 3"]),
        np.array([b"a", b"bc"], dtype=object),
    ):
        ws.feed("my_str_tensor", strs)
        back = ws.fetch("my_str_tensor")
        assert back.shape == strs.shape and all(back[i] == strs[i] for i in range(len(strs)))
    s = b"Hello, world! I have special \0 symbols \1!"
    ws.feed("my_plain_string", s)
    assert ws.fetch("my_plain_string") == s
    ws.feed("s1", b"test1")
    ws.feed("s2", b"test2")
    assert [ws.fetch(n) for n in ("s1", "s2")] == [b"test1", b"test2"]


def test_c_workspace_nets():
    """TestCWorkspace: test_net_execution (create_net twice needs overwrite), test_net_run (a net
    run once is not kept), test_plan_run (a plan's nets are kept, any plan name), test_net_create,
    test_exception (create_net of a string is a TypeError)."""
    ws = an.Workspace()
    assert ws.nets() == [] and ws.blobs() == []
    net = _test_net()
    ws.create_net(net)
    with pytest.raises(an.NetDefinitionError, match="already exists"):
        ws.create_net(net)
    ws.create_net(net, True)
    ws.create_net(net, overwrite=True)
    assert ws.nets() == ["test-net"]
    ws.net("test-net").run()
    np.testing.assert_array_equal(ws.fetch("testblob"), np.ones((1, 2, 3, 4), np.float32))
    for name in ("", "a b/ñ"):
        w = an.Workspace()
        one = an.Net(name)
        one.ConstantFill([], [name + "blob"], shape=[1], value=0.5)
        w.run_net_once(one)
        assert w.nets() == [] and w.fetch(name + "blob")[0] == 0.5
        w.run_plan(Plan(name, [ExecutionStep("step", nets=[one], num_iter=1)]))
        assert w.nets() == [name]
        w2 = an.Workspace()
        w2.create_net(one).run()
        assert w2.nets() == [name] and w2.has(name + "blob")
    with pytest.raises(TypeError):
        ws.create_net("...")


# == core_test.py ====================================================================================


def test_operator_runtime_error_and_plan_round_trip():
    """test_operator_runtime_traceback: a failing op fails run_net_once and run_net, the net is
    still created; TestCreatePlan: a plan survives its serialized form (steps, names, nets)."""
    ws = an.Workspace()
    ws.feed("a", np.array([1, 2, 3], np.float32))
    net = an.Net("test")
    net.Split("a", ["b", "c"], axis=0)  # 3 rows do not split in two
    with pytest.raises(an.OperatorError) as info:
        ws.run_net_once(net)
    assert info.value.op_index == 0 and info.value.op_type == "Split"
    ws.create_net(net)
    with pytest.raises(an.OperatorError):
        ws.run_net("test")
    init = _net("init", ("ConstantFill", [], "g", {"shape": [], "value": 0, "dtype": "int64"}))
    plan = Plan(control.For("my_task", init, 100))
    again = Plan.from_json(plan.to_json())
    assert len(again.steps) == 1 and again.steps[0].name == plan.steps[0].name == plan.name
    assert again.to_dict() == plan.to_dict()


def test_execution_step_helpers():
    """core.execution_step / to_execution_step / Plan(step): None is an empty step, a step is the
    one substep, a list of nets is a step of nets, a mixed list wraps each net in a step."""
    a, b = (
        _net("a", ("ConstantFill", [], "x", {"shape": [], "value": 1.0})),
        _net("b", ("Scale", "x", "x", {"scale": 2.0})),
    )
    assert execution_step("e", None).nets == [] and execution_step("e", None).substeps == []
    assert execution_step("e", None, num_iter=3).iterations == 3
    inner = ExecutionStep("inner", a)
    assert execution_step("e", inner).substeps == [inner]
    assert execution_step("e", [a, b]).nets == [a, b]
    mixed = execution_step("e", [inner, b], num_iter=2)
    assert [s.name for s in mixed.substeps] == ["inner", "b"] and mixed.substeps[1].nets == [b]
    assert to_execution_step(inner) is inner and to_execution_step(b).name == "b"
    with an.Workspace() as ws:
        ws.run_plan(Plan(mixed))
        assert float(ws.fetch("x")) == 2.0  # each of the 2 iterations: the fill, then the doubling


# == net_builder_test.py (its plans, as steps) =======================================================


def test_net_builder_loop_stop_guard_and_if():
    """_test_loop (stop_if at the top of a loop: y counts to 5), _test_outer (stop guards: a
    run-once step whose stop blob says whether it stopped), _test_if (stop() inside an If: the
    ops after it do not run)."""
    ws = an.Workspace()
    for name, v in {
        "x": 5,
        "y": 0,
        "zero": 0,
        "one": 1,
        "minus_one": -1,
        "five": 5,
        "ten": 10,
        "three": 3,
        "fifty": 50,
    }.items():
        ws.feed(name, np.array(v, np.int64))
    top = _net("top", ("EQ", ["x", "zero"], "loop_stop"))
    body = _net("body", ("Add", ["x", "minus_one"], "x"), ("Add", ["y", "one"], "y"))
    ws.run_plan(ExecutionStep("loop", [top, body], should_stop_blob="loop_stop"))
    assert int(ws.fetch("y")) == 5

    def guard(k, *body_ops):  # stop_guard: stopped = True; body (may stop); stopped = False
        enter = _net(
            f"enter{k}",
            ("ConstantFill", [], f"stopped{k}", {"shape": [], "value": True, "dtype": "bool"}),
            ("ConstantFill", [], f"stop{k}", {"shape": [], "value": False, "dtype": "bool"}),
            *body_ops,
        )
        leave = _net(f"leave{k}", ("ConstantFill", [], f"stopped{k}", {"shape": [], "value": False, "dtype": "bool"}))
        return ExecutionStep(f"guard{k}", [enter, leave], should_stop_blob=f"stop{k}", only_once=True)

    ws.run_plan(
        execution_step(
            "outer",
            [
                guard(1, ("LT", ["ten", "five"], "stop1")),
                guard(2, ("LT", ["three", "five"], "stop2")),
                guard(3),
                guard(4, ("ConstantFill", [], "ignored", {"shape": [1], "value": 0.0})),
            ],
        )
    )
    assert [bool(ws.fetch(f"stopped{k}")) for k in (1, 2, 3, 4)] == [False, True, False, False]

    def if_test(x):
        ws.feed("xv", np.array(x, np.int64))
        ws.feed("yv", np.array(1, np.int64))
        gt = _net("gt", ("GT", ["xv", "fifty"], "gt_c"))
        gt.add_external_outputs("gt_c")
        lt = _net("lt", ("LT", ["xv", "fifty"], "lt_c"))
        lt.add_external_outputs("lt_c")
        two = _net("two", ("ConstantFill", [], "yv", {"shape": [], "value": 2, "dtype": "int64"}))
        three_stop = _net(
            "three",
            ("ConstantFill", [], "yv", {"shape": [], "value": 3, "dtype": "int64"}),
            ("ConstantFill", [], "if_stop", {"shape": [], "value": True, "dtype": "bool"}),
        )
        four = _net("four", ("ConstantFill", [], "yv", {"shape": [], "value": 4, "dtype": "int64"}))
        second = ExecutionStep("if2", [three_stop, four], should_stop_blob="if_stop", only_once=True)
        ws.run_plan(execution_step("ifs", [control.If("if1", gt, two), control.If("if2", lt, second)]))
        return int(ws.fetch("yv"))

    assert (if_test(75), if_test(25)) == (2, 3)
    ws.close()


# == async_net_barrier_test.py =======================================================================


@pytest.mark.parametrize("n,shape", [(1, [0]), (2, [3]), (3, [2, 0, 4]), (5, [5, 1, 2])])
def test_async_net_barrier_op(n, shape):
    """test_async_net_barrier_op: in place on n blobs (empty ones too), the values pass unchanged."""
    rng = np.random.default_rng(n)
    values = [(100 * rng.random(shape)).astype(np.float32) for _ in range(n)]
    names = [f"x_{i}" for i in range(n)]
    for net_type in ("simple", "async_scheduling"):
        with an.Workspace() as ws:
            for name, v in zip(names, values):
                ws.feed(name, v.copy())
            net = an.Net("barrier", type=net_type)
            net.AsyncNetBarrier(names, names)
            ws.run_net_once(net)
            for name, v in zip(names, values):
                np.testing.assert_array_equal(ws.fetch(name), v)
