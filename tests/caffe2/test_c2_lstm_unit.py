"""Caffe2's LSTMUnit (caffe2/operators/lstm_unit_op.h) and its gradient against PyTorch: the
gates fed to ``torch.nn.LSTMCell`` through a permutation (Caffe2's gate order i, f, o, g; torch's
i, f, g, o) with no recurrent weight, autograd for the gradients, and a net unrolled over time
(FC on H_prev + LSTMUnit per step, sequence lengths masking) against the same loop in PyTorch."""

from __future__ import annotations

import numpy as np
import pytest

import asyncnet as an
from asyncnet.autodiff import add_gradient_ops
from caffe2.python import core, workspace

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.timeout(120)


def _torch_unit(h, c, gates, valid, forget_bias=0.0, drop=False):
    """LSTMUnit written with torch.nn.LSTMCell on the gates (its own i, f, g, o order)."""
    d = c.shape[-1]
    cell = torch.nn.LSTMCell(4 * d, d, bias=True)
    perm = torch.cat(
        [torch.arange(0, d), torch.arange(d, 2 * d), torch.arange(3 * d, 4 * d), torch.arange(2 * d, 3 * d)]
    )
    with torch.no_grad():
        cell.weight_ih.copy_(torch.eye(4 * d)[perm])
        cell.weight_hh.zero_()
        cell.bias_ih.zero_()
        cell.bias_hh.zero_()
        cell.bias_ih[d : 2 * d] = forget_bias
    h1, c1 = cell(gates[0], (h[0], c[0]))
    keep_h, keep_c = (torch.zeros_like(h[0]), torch.zeros_like(c[0])) if drop else (h[0], c[0])
    return torch.where(valid, h1, keep_h)[None], torch.where(valid, c1, keep_c)[None]


@pytest.mark.parametrize(
    "forget_bias,drop,seq", [(0.0, False, True), (1.0, False, True), (0.5, True, True), (0.0, False, False)]
)
def test_lstm_unit_and_gradient_match_torch(forget_bias, drop, seq):
    rng = np.random.default_rng(0)
    n, d, t = 5, 3, 2
    h, c = (rng.standard_normal((1, n, d)).astype(np.float32) for _ in range(2))
    x = rng.standard_normal((1, n, 4 * d)).astype(np.float32)
    lengths = np.array([0, 1, 2, 3, 4], np.int32)
    rh, rc = (rng.standard_normal((1, n, d)).astype(np.float32) for _ in range(2))
    feeds = {
        "h": h,
        "c": c,
        "x": x,
        **({"len": lengths} if seq else {}),
        "t": np.array([t], np.int32),
        "rh": rh,
        "rc": rc,
    }
    ws = an.Workspace()
    for k, v in feeds.items():
        ws.feed(k, v)
    net = an.Net("unit")
    ins = ["h", "c", "x", *(["len"] if seq else []), "t"]
    net.LSTMUnit(ins, ["h1", "c1"], forget_bias=forget_bias, drop_states=int(drop), sequence_lengths=int(seq))
    net.Mul(["h1", "rh"], "ph")
    net.Mul(["c1", "rc"], "pc")
    net.Sum(["ph", "pc"], "p")
    net.AveragedLoss("p", "loss")
    grads = add_gradient_ops(net, "loss", wrt=["h", "c", "x"])
    ws.run_net_once(net)

    th, tc, tx = (torch.tensor(a, requires_grad=True) for a in (h, c, x))
    valid = torch.tensor(t < lengths if seq else np.ones(n, bool))[:, None]
    h1, c1 = _torch_unit(th, tc, tx, valid, forget_bias, drop)
    (h1 * torch.tensor(rh) + c1 * torch.tensor(rc)).mean().backward()
    np.testing.assert_allclose(ws.fetch("h1"), h1.detach().numpy(), atol=1e-6)
    np.testing.assert_allclose(ws.fetch("c1"), c1.detach().numpy(), atol=1e-6)
    np.testing.assert_allclose(ws.fetch(grads["x"]), tx.grad.numpy(), atol=1e-6)
    np.testing.assert_allclose(ws.fetch(grads["c"]), tc.grad.numpy(), atol=1e-6)
    # Caffe2: dH_prev is dH carried over past a sequence's end, 0 inside it (torch's cell has no W_hh here: the same)
    np.testing.assert_allclose(ws.fetch(grads["h"]), th.grad.numpy(), atol=1e-6)


def test_unrolled_over_time_with_sequence_lengths_matches_torch():
    rng = np.random.default_rng(1)
    steps, n, din, d = 4, 3, 2, 5
    xs = rng.standard_normal((steps, n, din)).astype(np.float32)
    w_x = (rng.standard_normal((4 * d, din)) * 0.5).astype(np.float32)
    w_h = (rng.standard_normal((4 * d, d)) * 0.5).astype(np.float32)
    b = (rng.standard_normal(4 * d) * 0.1).astype(np.float32)
    zero_b = np.zeros(4 * d, np.float32)
    lengths = np.array([4, 2, 3], np.int32)
    ws = an.Workspace()
    feeds = {
        "w_x": w_x,
        "w_h": w_h,
        "b": b,
        "zb": zero_b,
        "len": lengths,
        "h0": np.zeros((1, n, d), np.float32),
        "c0": np.zeros((1, n, d), np.float32),
    }
    net = an.Net("unrolled")
    h, c = "h0", "c0"
    for s in range(steps):
        feeds[f"x{s}"], feeds[f"t{s}"] = xs[s], np.array([s], np.int32)
        net.FC([f"x{s}", "w_x", "b"], f"gx{s}")
        net.FC([h, "w_h", "zb"], f"gh{s}", axis=2)
        net.ExpandDims(f"gx{s}", f"gx3_{s}", dims=[0])
        net.Add([f"gx3_{s}", f"gh{s}"], f"g{s}")
        net.LSTMUnit([h, c, f"g{s}", "len", f"t{s}"], [f"h{s + 1}", f"c{s + 1}"], forget_bias=1.0)
        h, c = f"h{s + 1}", f"c{s + 1}"
    net.AveragedLoss(h, "loss")
    grads = add_gradient_ops(net, "loss", wrt=["w_x", "w_h", "b"])
    for k, v in feeds.items():
        ws.feed(k, v)
    ws.run_net_once(net)

    tw_x, tw_h, tb = (torch.tensor(a, requires_grad=True) for a in (w_x, w_h, b))
    th, tc = torch.zeros(n, d), torch.zeros(n, d)
    for s in range(steps):
        gates = torch.tensor(xs[s]) @ tw_x.T + tb + th @ tw_h.T
        i, f, o, g = (
            gates[:, :d].sigmoid(),
            (gates[:, d : 2 * d] + 1.0).sigmoid(),
            gates[:, 2 * d : 3 * d].sigmoid(),
            gates[:, 3 * d :].tanh(),
        )
        c_new = f * tc + i * g
        h_new = o * c_new.tanh()
        valid = torch.tensor(s < lengths)[:, None]
        th, tc = torch.where(valid, h_new, th), torch.where(valid, c_new, tc)
    th.mean().backward()
    np.testing.assert_allclose(ws.fetch(h)[0], th.detach().numpy(), atol=1e-5)
    for name, ref in (("w_x", tw_x), ("w_h", tw_h), ("b", tb)):
        np.testing.assert_allclose(ws.fetch(grads[name]), ref.grad.numpy(), atol=1e-5)


def test_caffe2_package_runs_lstm_unit_and_checks_inputs():
    workspace.FeedBlob("h", np.zeros((1, 2, 3), np.float32))
    workspace.FeedBlob("c", np.zeros((1, 2, 3), np.float32))
    workspace.FeedBlob("g", np.zeros((1, 2, 12), np.float32))
    workspace.FeedBlob("t", np.array([0], np.int32))
    workspace.RunOperatorOnce(core.CreateOperator("LSTMUnit", ["h", "c", "g", "t"], ["h1", "c1"], sequence_lengths=0))
    np.testing.assert_allclose(workspace.FetchBlob("c1"), np.zeros((1, 2, 3)))  # i * g = 0.5 * tanh(0)
    workspace.FeedBlob("g", np.zeros((1, 2, 11), np.float32))
    with pytest.raises(an.OperatorError, match=r"gates of shape \[1, N, 4D\]"):
        workspace.RunOperatorOnce(
            core.CreateOperator("LSTMUnit", ["h", "c", "g", "t"], ["h1", "c1"], sequence_lengths=0)
        )
    with pytest.raises(an.OperatorError, match="expected 5 inputs"):
        workspace.RunOperatorOnce(core.CreateOperator("LSTMUnit", ["h", "c", "g", "t"], ["h1", "c1"]))
