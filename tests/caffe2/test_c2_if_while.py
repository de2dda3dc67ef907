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


def test_caffe2_if_net_given_as_protobuf_text() -> None:
    then_net = core.Net("then")
    then_net.Add(["x", "x"], "y")
    op = caffe2_pb2.OperatorDef(type="If", input=["c", "x"], output=["y"])
    op.arg.add(name="then_net", s=str(then_net.Proto()).encode())
    net = core.Net("main")
    net.Proto().op.extend([op])
    workspace.FeedBlob("c", np.array(True))
    workspace.FeedBlob("x", np.array([1.5], np.float32))
    workspace.RunNetOnce(net)
    np.testing.assert_allclose(workspace.FetchBlob("y"), [3.0])
