"""RunCountObserver counts the operators a RunNet runs, the step-net operators of recurrent ops
once per timestep; the hooks are off again after the run."""

from __future__ import annotations

import numpy as np
import pytest

from caffe2.python import core, model_helper, rnn_cell, workspace

pytestmark = pytest.mark.timeout(120)


def _digits(text):
    return int("".join(c for c in text if c.isdigit()))


def test_a_plain_net_counts_each_op_per_iteration():
    net = core.Net("plain")
    net.ConstantFill([], "a", shape=[2], value=1.0)
    net.Relu("a", "b")
    net.Add(["a", "b"], "c")
    workspace.CreateNet(net)
    ob = net.AddObserver("RunCountObserver")
    workspace.RunNet(net, num_iter=4)
    assert _digits(ob.debug_info()) == 12
    net.RemoveObserver(ob)
    workspace.RunNet(net)
    assert _digits(ob.debug_info()) == 12 and net.NumObservers() == 0
    assert workspace.asyncnet_workspace().net(net.Name()).recorder is None


def _lstm_count(steps, backward):
    workspace.ResetWorkspace()
    model = model_helper.ModelHelper(name=f"lstm{steps}{backward}")
    out, *_ = rnn_cell.LSTM(model, "x", "lengths", ("h0", "c0"), 3, 4, scope="l", forward_only=not backward)
    loss = model.AveragedLoss(model.SquaredL2Distance([out, "target"], "dist"), "loss")
    if backward:
        model.AddGradientOperators([loss])
    rng = np.random.default_rng(steps)
    feeds = {
        "x": rng.standard_normal((steps, 2, 3)),
        "h0": np.zeros((1, 2, 4)),
        "c0": np.zeros((1, 2, 4)),
        "target": rng.standard_normal((steps, 2, 4)),
    }
    for k, v in feeds.items():
        workspace.FeedBlob(k, v.astype(np.float32))
    workspace.FeedBlob("lengths", np.full(2, steps, np.int32))
    workspace.RunNetOnce(model.param_init_net)
    workspace.CreateNet(model.net)
    ob = model.net.AddObserver("RunCountObserver")
    workspace.RunNet(model.net)
    step_ops = sum(
        len(a.n.op)
        for op in model.net.Proto().op
        if op.type.startswith("RecurrentNetwork")
        for a in op.arg
        if a.name in ("step_net", "backward_step_net") and op.type.endswith("Gradient") == (a.name != "step_net")
    )
    return _digits(ob.debug_info()), len(model.net.Proto().op), step_ops


@pytest.mark.parametrize("backward", [False, True])
def test_recurrent_step_ops_count_once_per_timestep(backward):
    counts = {t: _lstm_count(t, backward) for t in (2, 3)}
    for t, (count, top_ops, step_ops) in counts.items():
        assert step_ops > 0 and count == top_ops + t * step_ops
