"""Execution plans against Caffe2's plan executor and its control-flow helpers.

Sources: caffe2/core/plan_executor.cc (getContinuationTest, CHECK_SHOULD_STOP after each net and
each substep, after the join of concurrent substeps; only_once = iteration 0 only), and
caffe2/python/control.py + control_test.py, whose While / DoWhile / If / For build their loops
from exactly these rules (the condition net runs first, then a Not net writes the stop blob).
"""

from __future__ import annotations

import numpy as np
import pytest

import asyncnet as an
from asyncnet.exec.plan import ExecutionStep, Plan

pytestmark = pytest.mark.timeout(60)
N = 10


def _ws() -> an.Workspace:
    ws = an.Workspace()
    ws.feed("cnt", np.array(0, np.int64))
    ws.feed("one", np.array(1, np.int64))
    ws.feed("n", np.array(N, np.int64))
    return ws


def _count(name="cnt-net") -> an.Net:
    net = an.Net(name)
    net.Add(["cnt", "one"], "cnt")
    return net


def _cond(name="cond-net", op="LT") -> an.Net:  # control_test's cond_net: LT(cnt, N)
    net = an.Net(name)
    getattr(net, op)(["cnt", "n"], "cond")
    return net


def _not(name="not-net") -> an.Net:  # control.NotNet
    net = an.Net(name)
    net.Not("cond", "stop")
    return net


def _boot(value: bool) -> an.Net:  # control.BoolNet: sets the stop blob before a loop
    net = an.Net(f"boot-{value}")
    net.ConstantFill([], "stop", shape=[], value=float(value), dtype="bool")
    return net


@pytest.mark.parametrize("body", ["net", "net+idle", "step"])
def test_while_loop(body):
    """control.While: [cond, not(cond), body...] with should_stop_blob; cnt ends at N."""
    with _ws() as ws:
        idle = an.Net("idle")
        idle.ConstantFill([], "idle_out", shape=[], value=0.0)
        work = {"net": [_count()], "net+idle": [_count(), idle], "step": [ExecutionStep("count", _count())]}[body]
        nets = [_cond(), _not()]
        loop = (
            ExecutionStep(
                "myWhile",
                substeps=[ExecutionStep("c", nets[0]), ExecutionStep("nc", nets[1])] + work,
                should_stop_blob="stop",
            )
            if body == "step"
            else ExecutionStep("myWhile", nets + work, should_stop_blob="stop")
        )
        # a stop blob left set by an earlier loop: the loop exits after the condition net (control.py's comment)
        ws.run_plan(Plan("test", [ExecutionStep("boot", _boot(True)), loop]))
        assert int(ws.fetch("cnt")) == 0
        # control.While therefore runs a BoolNet setting it to False first
        ws.run_plan(
            Plan(
                "test",
                [
                    ExecutionStep("boot", _boot(True)),
                    ExecutionStep("myWhile/While", substeps=[ExecutionStep("b", _boot(False)), loop]),
                ],
            )
        )
        assert int(ws.fetch("cnt")) == N


def test_do_while_loop():
    """control.DoWhile: body first, then the condition; BoolNet resets the stop blob first."""
    with _ws() as ws:
        body = ExecutionStep("myDoWhile", [_count(), _cond(), _not()], should_stop_blob="stop")
        ws.run_plan(Plan("test", [ExecutionStep("boot", _boot(True)), body]))
        assert int(ws.fetch("cnt")) == 1  # pre-set: exits after the first net
        ws.feed("cnt", np.array(0, np.int64))
        ws.run_plan(
            Plan(
                "test",
                [
                    ExecutionStep("boot", _boot(True)),
                    ExecutionStep("DoWhile", substeps=[ExecutionStep("b", _boot(False)), body]),
                ],
            )
        )
        assert int(ws.fetch("cnt")) == N


@pytest.mark.parametrize("cond_op,expect", [("LT", 1), ("GT", 0)])
def test_if(cond_op, expect):
    """control.If (_RunOnceIf): [cond, not(cond), body] with should_stop_blob and only_once."""
    with _ws() as ws:
        ws.run_plan(
            ExecutionStep("myIf", [_cond(op=cond_op), _not(), _count()], should_stop_blob="stop", only_once=True)
        )
        assert int(ws.fetch("cnt")) == expect


def test_for_loop_and_counting_net_stops_exactly_at_its_limit():
    with _ws() as ws:
        ws.run_plan(ExecutionStep("myFor", _count(), num_iter=N))
        assert int(ws.fetch("cnt")) == N
        # a counting net that writes its own stop flag: the loop ends exactly at the limit
        ws.feed("cnt", np.array(0, np.int64))
        counting = _count("counting")
        counting.GE(["cnt", "n"], "stop")
        ws.run_plan(ExecutionStep("until", counting, should_stop_blob="stop"))
        assert int(ws.fetch("cnt")) == N
        # a flag that is already set: Caffe2 runs the first net once, then stops (no check before it)
        ws.run_plan(ExecutionStep("again", [_count("first"), _count("second")], should_stop_blob="stop"))
        assert int(ws.fetch("cnt")) == N + 1


def test_stop_blob_of_concurrent_substeps_is_checked_after_the_join():
    with an.Workspace() as ws:
        for b in ("x", "y"):
            ws.feed(b, np.array(0, np.int64))
        ws.feed("one", np.array(1, np.int64))
        ws.feed("three", np.array(3, np.int64))
        a = an.Net("a")
        a.Add(["x", "one"], "x")
        a.GE(["x", "three"], "stop")
        b = an.Net("b")
        b.Add(["y", "one"], "y")
        ws.run_plan(
            ExecutionStep(
                "par",
                substeps=[ExecutionStep("sa", a), ExecutionStep("sb", b)],
                concurrent_substeps=True,
                should_stop_blob="stop",
            )
        )
        assert (int(ws.fetch("x")), int(ws.fetch("y"))) == (3, 3)
        # sequential substeps: checked after each substep, so "sb" does not run in the last round
        ws.feed("x", np.array(0, np.int64))
        ws.feed("y", np.array(0, np.int64))
        ws.run_plan(
            ExecutionStep("seq", substeps=[ExecutionStep("sa", a), ExecutionStep("sb", b)], should_stop_blob="stop")
        )
        assert (int(ws.fetch("x")), int(ws.fetch("y"))) == (3, 2)
        assert ws.nets() == ["a", "b"]  # the plan's nets stay in the workspace under their names
