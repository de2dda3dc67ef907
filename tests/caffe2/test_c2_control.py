"""caffe2.python.control on core nets: loops and conditions as execution steps, checked against
the same control flow in Python."""

from __future__ import annotations

import numpy as np
import pytest

from caffe2.python import control, core, workspace

pytestmark = pytest.mark.timeout(60)


def _counter_net(name: str, blob: str, step: int) -> core.Net:
    net = core.Net(name)
    net.Add([blob, net.Const(np.int64(step))], blob)
    return net


def _below(name: str, blob: str, limit: int) -> core.Net:
    net = core.Net(name)
    net.AddExternalOutput(net.LT([blob, net.Const(np.int64(limit))]))
    return net


def _fetch(blob: str) -> int:
    return int(workspace.FetchBlob(blob))


def test_while_and_do_while_differ_on_a_false_condition():
    for start in (0, 5, 9):
        workspace.FeedBlob("w", np.array(start, np.int64))
        workspace.RunPlan(control.While("w", _below("w_cond", "w", 5), _counter_net("w_inc", "w", 2)))
        expected = start
        while expected < 5:
            expected += 2
        assert _fetch("w") == expected
        workspace.FeedBlob("d", np.array(start, np.int64))
        workspace.RunPlan(control.DoWhile("d", _below("d_cond", "d", 5), _counter_net("d_inc", "d", 2)))
        expected = start + 2
        while expected < 5:
            expected += 2
        assert _fetch("d") == expected


def test_for_runs_a_step_of_several_nets():
    workspace.FeedBlob("a", np.array(0, np.int64))
    workspace.FeedBlob("b", np.array(0, np.int64))
    step = control.Do("both", _counter_net("f_a", "a", 1), _counter_net("f_b", "b", 3))
    workspace.RunPlan(control.For("f", step, 7))
    assert (_fetch("a"), _fetch("b")) == (7, 21)


def test_if_else_and_switch_on_blobs():
    for flag in (True, False):
        workspace.FeedBlob("flag", np.array(flag))
        workspace.FeedBlob("x", np.array(0, np.int64))
        workspace.RunPlan(control.If("i", "flag", _counter_net("i_t", "x", 10), _counter_net("i_f", "x", 100)))
        assert _fetch("x") == (10 if flag else 100)
    workspace.FeedBlob("c1", np.array(True))
    workspace.FeedBlob("c2", np.array(False))
    workspace.FeedBlob("c3", np.array(True))
    workspace.FeedBlob("s", np.array(0, np.int64))
    cases = [
        ("c1", _counter_net("s1", "s", 1)),
        ("c2", _counter_net("s2", "s", 10)),
        ("c3", _counter_net("s3", "s", 100)),
    ]
    workspace.RunPlan(control.Switch("sw", *cases))
    assert _fetch("s") == 101
    workspace.FeedBlob("s", np.array(0, np.int64))
    cases = [
        ("c1", _counter_net("n1", "s", 1)),
        ("c2", _counter_net("n2", "s", 10)),
        ("c3", _counter_net("n3", "s", 100)),
    ]
    workspace.RunPlan(control.SwitchNot("swn", *cases))
    assert _fetch("s") == 10


def test_merged_and_combined_conditions():
    workspace.FeedBlob("m", np.array(3, np.int64))
    merged = control.MergeConditionNets("both_hold", [_below("m_lt5", "m", 5), _below("m_lt2", "m", 2)], "And")
    workspace.RunNetOnce(merged)
    assert bool(workspace.FetchBlob(str(control.GetConditionBlobFromNet(merged)))) is False
    either = control.MergeConditionNets("one_holds", [_below("e_lt5", "m", 5), _below("e_lt2", "m", 2)], "Or")
    workspace.RunNetOnce(either)
    assert bool(workspace.FetchBlob(str(control.GetConditionBlobFromNet(either)))) is True
    with pytest.raises(ValueError, match="no external output"):
        control.GetConditionBlobFromNet(core.Net("no_condition"))
