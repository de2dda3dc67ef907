"""RecurrentNetwork's step nets on the straight executor's specialized path: rnn_cell.LSTM's
forward and backward step nets run their fast kernels, give the bits the general kernels give,
and a link whose rows leave its array fails before any step runs."""

from __future__ import annotations

import logging

import numpy as np
import pytest

import asyncnet as an
from asyncnet.exec.specialize import Variant
from asyncnet.ops.caffe2_recurrent import StepWorkspaces
from caffe2.python import model_helper, rnn_cell, workspace

pytestmark = pytest.mark.timeout(120)


def _lstm_pass(seed: int, seq_lengths: list[int]) -> tuple[dict[str, np.ndarray], StepWorkspaces]:
    """One forward + backward pass of rnn_cell.LSTM (T=5, batch 3, 4 inputs, 6 units)."""
    rng = np.random.default_rng(seed)
    workspace.ResetWorkspace()
    m = model_helper.ModelHelper(name="lstm_fast")
    h_all, *_ = rnn_cell.LSTM(m, "x", "lengths", ("h0", "c0"), 4, 6, scope="lstm", forget_bias=1.0)
    m.AddGradientOperators([m.net.AveragedLoss(m.net.Mul([h_all, "r"], "hr"), "loss")])
    workspace.RunNetOnce(m.param_init_net)
    feeds = {
        "x": rng.standard_normal((5, 3, 4)).astype(np.float32),
        "h0": rng.standard_normal((1, 3, 6)).astype(np.float32),
        "c0": rng.standard_normal((1, 3, 6)).astype(np.float32),
        "r": rng.uniform(0.5, 1.5, (5, 3, 6)).astype(np.float32),
        "lengths": np.array(seq_lengths, np.int32),
        "lstm/i2h_w": (rng.standard_normal((24, 4)) * 0.3).astype(np.float32),
        "lstm/gates_t_w": (rng.standard_normal((24, 6)) * 0.3).astype(np.float32),
    }
    for k, v in feeds.items():
        workspace.FeedBlob(k, v)
    workspace.CreateNet(m.net, overwrite=True)
    for _ in range(3):  # the first run of a step net specializes it; later runs take its variant
        workspace.RunNet(m.net)
    names = ["lstm/hidden_t_all", "x_grad", "h0_grad", "c0_grad", "lstm/gates_t_w_grad", "lstm/i2h_w_grad"]
    out = {n: workspace.FetchBlob(n).copy() for n in names if workspace.HasBlob(n)}
    return out, workspace.FetchBlob("lstm/step_workspaces")


@pytest.fixture(autouse=True)
def _quiet():
    logging.getLogger("caffe2").setLevel(logging.ERROR)
    yield
    logging.getLogger("caffe2").setLevel(logging.NOTSET)


@pytest.mark.parametrize("lengths", [[5, 5, 5], [5, 2, 0]])
def test_lstm_step_nets_take_their_specialized_variants(lengths):
    _, scratch = _lstm_pass(0, lengths)
    for step in (scratch.forward, scratch.backward):
        specializer = step.instance._specializer
        assert specializer is not None, [op.schema.type for op in step.instance.operators]
        assert isinstance(specializer._current, Variant)


@pytest.mark.parametrize("lengths", [[5, 5, 5], [5, 2, 0]])
def test_the_fast_path_gives_the_general_kernels_bits(lengths, monkeypatch):
    fast, _ = _lstm_pass(1, lengths)
    monkeypatch.setattr("asyncnet.exec.straight.specializable", lambda ops: False)
    general, scratch = _lstm_pass(1, lengths)
    assert scratch.forward.instance._specializer is None
    assert fast.keys() == general.keys() and len(fast) >= 5
    for name in fast:
        assert fast[name].tobytes() == general[name].tobytes(), name


def test_a_link_past_its_array_fails_before_any_step_runs():
    step = an.Net("count_step")
    step.Add(["y_prev", "x_t"], "y")
    step.Copy("y", "seen")
    step.EnqueueBlobs(["q", "seen"], ["seen"])  # a step that ran leaves a record in q
    net = an.Net("bad_link")
    net.RecurrentNetwork(
        ["xs", "y0", "q"],
        ["y_all", "ws"],
        step_net=step.to_def().to_json(),
        recurrent_states=["y_states"],
        initial_recurrent_state_ids=[1],
        link_internal=["y_prev", "y", "x_t"],
        link_external=["y_states", "y_states", "xs"],
        link_offset=[0, 1, 1],  # x_t reads row t + 1 of xs: past its end at the last step
        alias_src=["y_states"],
        alias_dst=["y_all"],
        alias_offset=[1],
    )
    ws = an.Workspace()
    init = an.Net("init")
    init.CreateBlobsQueue([], "q", capacity=4)
    ws.run_net_once(init)
    ws.feed("xs", np.ones((3, 1, 1), np.float32))
    ws.feed("y0", np.zeros((1, 1, 1), np.float32))
    with pytest.raises(an.OperatorError, match=r"reads rows 3\.\.4 of 'xs' \(shape \(3, 1, 1\)\) at step 2"):
        ws.run_net_once(net)
    assert len(ws.fetch("q")) == 0
    ok = an.NetDef("good_link", [net.to_def().ops[0]])
    ok.ops[0].args["link_offset"] = [0, 1, 0]
    ws.run_net_once(ok)
    assert len(ws.fetch("q")) == 3  # the same net with x_t in range: one record per step
