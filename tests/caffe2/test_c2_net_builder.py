"""caffe2.python.net_builder, task and session: blocks compiled to execution steps and run by
asyncnet's plan executor, checked against the same computation in plain Python."""

from __future__ import annotations

import numpy as np
import pytest

from caffe2.python import core, workspace
from caffe2.python.net_builder import NetBuilder, ops
from caffe2.python.session import LocalSession
from caffe2.python.task import Node, Task, TaskGroup, WorkspaceType, final_output

pytestmark = pytest.mark.timeout(120)


def _run(nb: NetBuilder) -> workspace.C.Workspace:
    plan = core.Plan("net_builder_test")
    plan.AddStep(core.to_execution_step(nb))
    ws = workspace.C.Workspace()
    ws.run(plan)
    return ws


def _value(ws, blob) -> object:
    return ws.blobs[str(blob)].fetch().item()


def test_loop_until_stop_counts_down():
    with NetBuilder() as nb:
        x = ops.Const(7)
        steps = ops.Const(0)
        with ops.loop():
            ops.stop_if(ops.EQ([x, ops.Const(0)]))
            ops.Add([x, ops.Const(-1)], [x])
            ops.Add([steps, ops.Const(1)], [steps])
    ws = _run(nb)
    assert (_value(ws, x), _value(ws, steps)) == (0, 7)


def test_counted_nested_loops_with_if_elif_else():
    expected = {"total": 0, "large": 0, "small": 0, "tiny": 0}
    for i in range(6):
        for j in range(i):
            val = i * 10 + j
            key = "large" if val >= 40 else "small" if val >= 20 else "tiny"
            expected[key] += val
            expected["total"] += val
    with NetBuilder() as nb:
        blobs = {k: ops.Const(0) for k in expected}
        with ops.loop(6) as outer:
            tens = ops.Mul([outer.iter(), ops.Const(10)])
            with ops.loop(outer.iter()) as inner:
                val = ops.Add([tens, inner.iter()])
                with ops.If(ops.GE([val, ops.Const(40)])) as branch:
                    ops.Add([blobs["large"], val], [blobs["large"]])
                with branch.Elif(ops.GE([val, ops.Const(20)])) as branch:
                    ops.Add([blobs["small"], val], [blobs["small"]])
                with branch.Else():
                    ops.Add([blobs["tiny"], val], [blobs["tiny"]])
                ops.Add([blobs["total"], val], [blobs["total"]])
    ws = _run(nb)
    assert {k: _value(ws, b) for k, b in blobs.items()} == expected


def test_stop_inside_if_skips_the_rest_of_the_branch():
    def branchy(x):
        y = ops.Const(1)
        with ops.If(ops.GT([x, ops.Const(50)])):
            ops.Const(2, blob_out=y)
        with ops.If(ops.LT([x, ops.Const(50)])):
            ops.Const(3, blob_out=y)
            ops.stop()
            ops.Const(4, blob_out=y)
        return y

    with NetBuilder() as nb:
        high, low, mid = branchy(ops.Const(80)), branchy(ops.Const(20)), branchy(ops.Const(50))
    ws = _run(nb)
    assert (_value(ws, high), _value(ws, low), _value(ws, mid)) == (2, 3, 1)


def test_stop_guard_reports_whether_it_stopped():
    with NetBuilder() as nb:
        big = ops.Const(10)
        small = ops.Const(2)
        with ops.stop_guard() as not_stopped:
            ops.stop_if(ops.LT([big, ops.Const(5)]))
        with ops.stop_guard() as stopped:
            ops.stop_if(ops.LT([small, ops.Const(5)]))
            after = ops.Const(99)
        with ops.stop_guard() as empty:
            pass
    ws = _run(nb)
    assert _value(ws, not_stopped.has_stopped()) is False
    assert _value(ws, stopped.has_stopped()) is True
    assert _value(ws, empty.has_stopped()) is False
    assert str(after) not in ws.blobs or ws.blobs[str(after)].fetch().size == 0


def test_loop_without_stop_is_refused():
    with pytest.raises(AssertionError, match="requires a stop condition"):
        with NetBuilder():
            with ops.loop():
                ops.Const(1)


def test_ops_outside_a_builder_is_an_error():
    with pytest.raises(AttributeError, match="No active NetBuilder"):
        ops.Const(1)


def test_while_net_without_condition_is_refused_clearly():
    with NetBuilder():
        with pytest.raises(AssertionError, match="Condition builder must be specified"), ops.WhileNet():
            ops.Const(1)


def test_task_setup_runs_before_and_exit_after_the_body():
    with Task() as task:
        with ops.task_init():
            one = ops.Const(1)
        two = ops.Add([one, one])
        with ops.task_init():
            three = ops.Const(3)
        accum = ops.Add([two, three])
        with ops.task_exit():
            after_exit = ops.Add([accum, one])
        before_inc = ops.Add([accum, one])
        ops.Add([accum, one], [accum])
        outs = [final_output(b) for b in (before_inc, after_exit, accum)]
    with LocalSession() as session:
        session.run(task)
    assert [int(o.fetch()) for o in outs] == [6, 7, 6]


def test_a_net_added_twice_runs_twice():
    with Task() as task:
        total = ops.Const(0)
        net = core.Net("twice")
        net.Add([total, net.Const(1)], [total])
        ops.net(net)
        ops.net(net)
        result = final_output(total)
    with LocalSession() as session:
        session.run(task)
    assert int(result.fetch()) == 2


def test_private_task_group_keeps_writes_and_drops_its_own_blobs():
    workspace.FeedBlob("shared_counter", np.array(5, np.int64))
    with TaskGroup() as tg:
        with Task():
            local = ops.Add([core.BlobReference("shared_counter"), ops.Const(np.int64(10))])
            ops.Copy(local, "shared_counter")
            out = final_output(local)
    assert tg.workspace_type() is None
    with LocalSession() as session:
        session.run(tg)
    assert tg.workspace_type() == WorkspaceType.PRIVATE
    assert int(workspace.FetchBlob("shared_counter")) == 15
    assert int(out.fetch()) == 15  # task outputs are created in the session's workspace
    made_inside = {b for b in workspace.Blobs() if "GivenTensor" in b}
    assert made_inside == set()


def test_session_runs_steps_and_plans():
    net = core.Net("session_plan_net")
    net.ConstantFill([], "from_plan", shape=[2], value=4.0)
    with LocalSession() as session:
        session.run(core.Plan(core.execution_step("plan_step", net)))
    np.testing.assert_array_equal(workspace.FetchBlob("from_plan"), [4.0, 4.0])


def test_instances_build_a_plan_that_round_trips_through_its_proto():
    with Node("trainer"), Task(name="my_task", num_instances=2) as task:
        with ops.task_init():
            shared = ops.Const(0)
        with ops.task_instance_init():
            local = ops.Const(0)
        with ops.loop(3):
            ops.Copy(shared, local)
        with ops.task_exit():
            ops.Mul([shared, shared], [shared])
    plan = core.Plan(task.get_step())
    again = core.Plan.create_from_proto(plan.Proto())
    assert task.name == "trainer/my_task"
    assert [s.Name() for s in again.Steps()] == [s.Name() for s in plan.Steps()]
    assert [n.Name()[: len(m.Name())] for n, m in zip(again.Nets(), plan.Nets())] == [m.Name() for m in plan.Nets()]
    parallel = [s for s in plan.Proto().execution_step[0].substep if s.num_concurrent_instances]
    assert [s.num_concurrent_instances for s in parallel] == [2]
    assert parallel[0].substep[0].create_workspace


def test_task_instances_share_global_blobs_and_keep_local_ones():
    instances, iters = 4, 6
    with TaskGroup() as tg:
        with Task(num_instances=instances):
            with ops.task_init():
                shared = ops.CreateCounter([], ["shared_counter"])
            with ops.task_instance_init():
                mine = ops.CreateCounter([], ["instance_counter"])
            with ops.loop(iters):
                ops.CountUp(shared)
                ops.CountUp(mine)
            with ops.task_instance_exit():
                per_instance = ops.RetrieveCount(mine)
                with ops.loop(ops.Mul([per_instance, per_instance])):
                    ops.CountUp(shared)
            with ops.task_exit():
                total = final_output(ops.RetrieveCount(shared))
    with LocalSession() as session:
        session.run(tg)
    assert int(total.fetch()) == instances * iters + instances * iters**2
    assert not workspace.HasBlob("instance_counter")  # it lived in the instances' workspaces


def test_plan_step_with_its_own_workspace():
    workspace.FeedBlob("outer", np.array(1.0, np.float32))
    net = core.Net("child_ws_net")
    net.Scale("outer", "outer", scale=3.0)
    net.ConstantFill([], "inner_only", shape=[1], value=7.0)
    step = core.execution_step("child_ws_step", net)
    step.SetCreateWorkspace(True)
    workspace.RunPlan(core.Plan(core.execution_step("root", [step])))
    assert float(workspace.FetchBlob("outer")) == 3.0
    assert not workspace.HasBlob("inner_only")


def test_looping_over_instances_is_refused():
    net = core.Net("looped_instances")
    net.ConstantFill([], "x_looped", shape=[1], value=1.0)
    inner = core.execution_step("inner", net)
    inner.SetCreateWorkspace(True)
    outer = core.execution_step("outer", [inner], num_iter=2)
    with pytest.raises(RuntimeError, match="not supported"):
        workspace.RunPlan(core.Plan(outer))
