"""Caffe2's If and While operators (nets as arguments, run in the op's workspace), checked
against the same control flow written in Python, through asyncnet and through caffe2.python."""

from __future__ import annotations

import numpy as np
import pytest

import asyncnet as an
from asyncnet.errors import NetDefinitionError, OperatorError
from caffe2.proto import caffe2_pb2
from caffe2.python import core, workspace

pytestmark = pytest.mark.timeout(60)


def _json(net: an.Net) -> str:
    return net.to_def().to_json()


def _branch(name: str, value: float) -> an.Net:
    net = an.Net(name)
    net.Scale(["x"], "y", scale=value)
    return net


@pytest.mark.parametrize("cond, expected", [(True, 6.0), (False, -3.0)])
def test_if_runs_the_branch_of_the_condition(cond: bool, expected: float) -> None:
    ws = an.Workspace()
    ws.feed("c", np.array([cond]))
    ws.feed("x", np.array([3.0], np.float32))
    net = an.Net("n")
    net.If(["c", "x"], ["y"], then_net=_json(_branch("t", 2.0)), else_net=_json(_branch("e", -1.0)))
    ws.run_net_once(net)
    np.testing.assert_allclose(ws.fetch("y"), [expected])


def test_if_without_else_leaves_the_blobs_alone_on_false() -> None:
    ws = an.Workspace()
    ws.feed("c", np.array(False))
    ws.feed("x", np.array([3.0], np.float32))
    ws.feed("y", np.array([7.0], np.float32))
    net = an.Net("n")
    net.If(["c", "x"], ["y"], then_net=_json(_branch("t", 2.0)))
    ws.run_net_once(net)
    np.testing.assert_allclose(ws.fetch("y"), [7.0])


def test_if_output_never_written_is_an_error() -> None:
    ws = an.Workspace()
    ws.feed("c", np.array(False))
    ws.feed("x", np.array([3.0], np.float32))
    net = an.Net("n")
    net.If(["c", "x"], ["y"], then_net=_json(_branch("t", 2.0)))
    with pytest.raises(OperatorError, match="'y' was not written"):
        ws.run_net_once(net)


@pytest.mark.parametrize("value", [np.array([1, 0]), np.array(1.0)])
def test_if_condition_must_be_one_bool(value: np.ndarray) -> None:
    ws = an.Workspace()
    ws.feed("c", value)
    ws.feed("x", np.array([3.0], np.float32))
    net = an.Net("n")
    net.If(["c", "x"], [], then_net=_json(_branch("t", 2.0)))
    with pytest.raises(OperatorError, match="condition"):
        ws.run_net_once(net)


def test_bad_net_json_fails_at_creation() -> None:
    net = an.Net("n")
    with pytest.raises(NetDefinitionError, match="then_net as asyncnet NetDef JSON"):
        net.If(["c"], [], then_net="{not json")
        an.Workspace().create_net(net)


def _sum_below(limit: int, cond_net: bool) -> tuple[int, int]:
    """i = 0; s = 0; while i < limit: s += i; i += 1 -- as a While op."""
    ws = an.Workspace()
    for name, v in (("i", 0), ("s", 0), ("one", 1), ("n", limit)):
        ws.feed(name, np.array(v, np.int64))
    body = an.Net("body")
    body.Add(["s", "i"], "s")
    body.Add(["i", "one"], "i")
    test = an.Net("test")
    test.LT(["i", "n"], "go")
    args = {"loop_net": _json(body)}
    if cond_net:
        args["cond_net"] = _json(test)
        ws.feed("go", np.array(False))  # cond_net runs first, so this initial value is never used
    else:
        body.LT(["i", "n"], "go")
        args["loop_net"] = _json(body)
        ws.feed("go", np.array(limit > 0))
    net = an.Net("n")
    net.While(["go", "i", "s", "one", "n"], ["i", "s", "go"], **args)
    instance = ws.create_net(net)
    instance.run()
    return int(ws.fetch("i")), int(ws.fetch("s"))


@pytest.mark.parametrize("cond_net", [True, False])
@pytest.mark.parametrize("limit", [0, 1, 5])
def test_while_sums_like_python(limit: int, cond_net: bool) -> None:
    i = s = 0
    while i < limit:
        s += i
        i += 1
    assert _sum_below(limit, cond_net) == (i, s)


def test_while_nets_are_created_once_and_rerun() -> None:
    ws = an.Workspace()
    for name, v in (("i", 0), ("one", 1), ("n", 3)):
        ws.feed(name, np.array(v, np.int64))
    body = an.Net("body")
    body.Add(["i", "one"], "i")
    test = an.Net("test")
    test.LT(["i", "n"], "go")
    ws.feed("go", np.array(True))
    net = an.Net("n")
    net.While(["go", "i", "one", "n"], ["i", "go"], loop_net=_json(body), cond_net=_json(test))
    instance = ws.create_net(net)
    instance.run()
    assert int(ws.fetch("i")) == 3
    ws.feed("n", np.array(7, np.int64))
    instance.run()
    assert int(ws.fetch("i")) == 7


def test_while_with_a_dag_body() -> None:
    ws = an.Workspace()
    for name, v in (("i", 0), ("one", 1), ("n", 4)):
        ws.feed(name, np.array(v, np.int64))
    ws.feed("acc", np.zeros(2, np.float32))
    ws.feed("w", np.array([1.0, 2.0], np.float32))
    body = an.Net("body", type="dag")
    body.Add(["acc", "w"], "acc")
    body.Add(["i", "one"], "i")
    test = an.Net("test")
    test.LT(["i", "n"], "go")
    ws.feed("go", np.array(True))
    net = an.Net("n")
    net.While(["go", "i", "acc", "w"], ["i", "acc", "go"], loop_net=_json(body), cond_net=_json(test))
    ws.run_net_once(net)
    np.testing.assert_allclose(ws.fetch("acc"), [4.0, 8.0])


# -- through caffe2.python: NetDef arguments converted -------------------------------------------


@pytest.fixture(autouse=True)
def _fresh_workspace():
    workspace.ResetWorkspace()
    yield
    workspace.ResetWorkspace()


def test_caffe2_if_with_netdef_arguments() -> None:
    then_net = core.Net("then")
    then_net.Add(["x", "x"], "y")
    else_net = core.Net("else")
    else_net.Sub(["x", "x"], "y")
    net = core.Net("main")
    net.If(["c", "x"], ["y"], then_net=then_net.Proto(), else_net=else_net.Proto())
    workspace.FeedBlob("x", np.array([2.5], np.float32))
    for cond, expected in ((True, 5.0), (False, 0.0)):
        workspace.FeedBlob("c", np.array(cond))
        workspace.RunNetOnce(net)
        np.testing.assert_allclose(workspace.FetchBlob("y"), [expected])
    assert net.Proto().op[0].arg[0].n.name == "then"


def test_caffe2_while_with_cond_net() -> None:
    loop = core.Net("loop")
    loop.Mul(["p", "two"], "p")
    cond = core.Net("cond")
    cond.LT(["p", "limit"], "go")
    net = core.Net("main")
    op = core.CreateOperator(
        "While", ["go", "p", "two", "limit"], ["p", "go"], loop_net=loop.Proto(), cond_net=cond.Proto()
    )
    net.Proto().op.extend([op])
    workspace.FeedBlob("go", np.array(True))
    workspace.FeedBlob("p", np.array([1], np.int64))
    workspace.FeedBlob("two", np.array([2], np.int64))
    workspace.FeedBlob("limit", np.array([100], np.int64))
    workspace.CreateNet(net)
    workspace.RunNet(net.Name())
    assert int(workspace.FetchBlob("p")[0]) == 128
    assert not bool(workspace.FetchBlob("go"))


def test_caffe2_if_net_as_protobuf_text_is_refused() -> None:
    then_net = core.Net("then")
    then_net.Add(["x", "x"], "y")
    op = caffe2_pb2.OperatorDef(type="If", input=["c", "x"], output=["y"])
    op.arg.add(name="then_net", s=str(then_net.Proto()).encode())
    net = core.Net("main")
    net.Proto().op.extend([op])
    workspace.FeedBlob("c", np.array(True))
    workspace.FeedBlob("x", np.array([1.5], np.float32))
    with pytest.raises(NetDefinitionError, match="then_net as asyncnet NetDef JSON"):
        workspace.RunNetOnce(net)


# -- Do, CreateScope and net_builder's IfNet / WhileNet ----------------------------------------


def test_do_runs_its_net_in_a_child_workspace() -> None:
    body = core.Net("body")
    body.Add(["a", "a"], "local")
    body.Add(["local", "a"], "b")
    net = core.Net("main")
    net.CreateScope([], ["ws"])
    net.Do(["x", "ws"], ["y", "ws"], net=body.Proto(), inner_blobs=["a", "b"], outer_blobs_idx=[0, 1])
    workspace.FeedBlob("x", np.array([2.0], np.float32))
    workspace.RunNetOnce(net)
    np.testing.assert_allclose(workspace.FetchBlob("y"), [6.0])
    assert not workspace.HasBlob("local") and not workspace.HasBlob("a") and not workspace.HasBlob("b")


def test_do_outer_blobs_idx_out_of_range_fails_at_creation() -> None:
    net = an.Net("main")
    with pytest.raises(NetDefinitionError, match="outer_blobs_idx"):
        net.Do(["x", "ws"], ["y", "ws"], net=_json(an.Net("b")), inner_blobs=["a"], outer_blobs_idx=[5])
        an.Workspace().create_net(net)


def _run_builder(nb: object) -> None:
    plan = core.Plan("p")
    plan.AddStep(core.to_execution_step(nb))
    workspace.RunPlan(plan)


def _value(blob: object) -> int:
    return int(workspace.FetchBlob(str(blob)))


@pytest.mark.parametrize("a, b", [(3, 5), (5, 3), (4, 4)])
def test_if_net_else_and_nested_like_python(a: int, b: int) -> None:
    from caffe2.python.net_builder import NetBuilder, ops

    with NetBuilder() as nb:
        x, y = ops.Const(a), ops.Const(b)
        out = ops.Const(0)
        with ops.IfNet(ops.LT([x, y])):
            tmp = ops.Add([x, ops.Const(10)])
            ops.Add([tmp, y], [out])
        with ops.Else():
            with ops.IfNet(ops.EQ([x, y])):
                ops.Const(-1, blob_out=out)
            with ops.Else():
                ops.Sub([x, y], [out])
    _run_builder(nb)
    expected = (a + 10 + b) if a < b else (-1 if a == b else a - b)
    assert _value(out) == expected
    assert not workspace.HasBlob(str(tmp))


def test_if_net_without_else_on_false_keeps_the_value() -> None:
    from caffe2.python.net_builder import NetBuilder, ops

    with NetBuilder() as nb:
        out = ops.Const(7)
        with ops.IfNet(ops.Const(False)):
            ops.Const(1, blob_out=out)
    _run_builder(nb)
    assert _value(out) == 7


@pytest.mark.parametrize("n", [0, 1, 6])
def test_while_net_with_condition_like_python(n: int) -> None:
    from caffe2.python.net_builder import NetBuilder, ops

    with NetBuilder() as nb:
        i, total, limit = ops.Const(0), ops.Const(0), ops.Const(n)
        with ops.WhileNet():
            with ops.Condition():
                ops.LT([i, limit])
            sq = ops.Mul([i, i])
            ops.Add([total, sq], [total])
            ops.Add([i, ops.Const(1)], [i])
    _run_builder(nb)
    assert (_value(i), _value(total)) == (n, sum(k * k for k in range(n)))
    assert not workspace.HasBlob(str(sq))


def test_condition_outside_while_net_is_refused() -> None:
    from caffe2.python.net_builder import NetBuilder, ops

    with NetBuilder(), pytest.raises(AssertionError, match="outside of WhileNet"):
        ops.Condition()


def test_stop_is_refused_inside_if_net() -> None:
    from caffe2.python.net_builder import NetBuilder, ops

    with NetBuilder(), pytest.raises(AssertionError, match="control operators"), ops.IfNet(ops.Const(True)):
        ops.stop()


@pytest.mark.parametrize("name", ["asyncnet.ops.caffe2_control", "caffe2.python.control_ops_util"])
def test_docstring_examples(name: str) -> None:
    import doctest
    import importlib

    workspace.ResetWorkspace()
    result = doctest.testmod(importlib.import_module(name))
    assert result.attempted > 0 and result.failed == 0


def _inner_nets(instance: object) -> list[object]:
    from asyncnet.ops import caffe2_control

    return [n for op in instance.operators for n in caffe2_control._INSTANCES.get(op.ctx, {}).values()]


@pytest.mark.parametrize("net_type", ["simple", "async_scheduling"])
@pytest.mark.parametrize("how", ["net.close", "workspace.close", "workspace.reset", "overwrite"])
def test_closing_the_outer_net_closes_the_inner_nets(net_type: str, how: str, monkeypatch) -> None:
    ws = an.Workspace()
    ws.feed("c", np.array(True))
    ws.feed("x", np.array([3.0], np.float32))
    body = _branch("t", 2.0).to_def()
    body.type = "async_scheduling"  # an executor with pools to give back
    net = an.Net("outer")
    net.If(["c", "x"], ["y"], then_net=body.to_json())
    nd = net.to_def()
    nd.type = net_type
    instance = ws.create_net(nd)
    instance.run()
    (sub,) = _inner_nets(instance)
    assert not sub.closed
    closed: list[str] = []
    original = type(sub).close
    monkeypatch.setattr(type(sub), "close", lambda self, *a, **k: (closed.append(self.name), original(self, *a, **k)))
    {
        "net.close": instance.close,
        "workspace.close": ws.close,
        "workspace.reset": ws.reset,
        "overwrite": lambda: ws.create_net(nd, overwrite=True),
    }[how]()
    assert sub.closed and closed.count("t") == 1
    assert _inner_nets(instance) == []


def test_a_while_op_run_once_leaves_no_open_inner_net() -> None:
    ws = an.Workspace()
    for name, v in (("i", 0), ("one", 1), ("n", 3)):
        ws.feed(name, np.array(v, np.int32))
    ws.feed("go", np.array(True))
    body = an.Net("body")
    body.Add(["i", "one"], "i")
    body.LT(["i", "n"], "go")
    bd = body.to_def()
    bd.type = "async_scheduling"
    net = an.Net("n")
    net.While(["go", "i", "one", "n"], ["i", "go"], loop_net=bd.to_json())
    seen: list[object] = []
    original = an.Workspace.instantiate

    def keep(self, n):
        instance = original(self, n)
        seen.append(instance)
        return instance

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(an.Workspace, "instantiate", keep)
        ws.run_net_once(net)
    assert int(ws.fetch("i")) == 3
    assert _inner_nets(seen[0]) == []
