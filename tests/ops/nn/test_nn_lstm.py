"""LSTM against torch.nn.LSTM (forward, and gradients by autograd) and finite differences."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _gradcheck_helpers import check_all
from _nn_helpers import rand, run
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncnet as an
from asyncnet.autodiff import add_gradient_ops

pytestmark = pytest.mark.timeout(60)
NAMES = ["x", "h0", "c0", "w_ih", "w_hh", "b_ih", "b_hh"]


def feeds_for(t, n, i, h, seed):
    shapes = dict(x=(t, n, i), h0=(n, h), c0=(n, h), w_ih=(4 * h, i), w_hh=(4 * h, h), b_ih=(4 * h,), b_hh=(4 * h,))
    return {k: rand(seed + j, s) for j, (k, s) in enumerate(shapes.items())}


def torch_lstm(x, h0, c0, w_ih, w_hh, b_ih, b_hh):
    """torch.nn.LSTM's own module with these weights (functional_call keeps autograd to them)."""
    mod = torch.nn.LSTM(x.shape[2], h0.shape[1]).double()
    params = {"weight_ih_l0": w_ih, "weight_hh_l0": w_hh, "bias_ih_l0": b_ih, "bias_hh_l0": b_hh}
    y, (hn, cn) = torch.func.functional_call(mod, params, (x, (h0[None], c0[None])))
    return y, hn[0], cn[0]


@settings(max_examples=6, deadline=None)
@given(
    t=st.integers(1, 4),
    n=st.integers(1, 3),
    i=st.integers(1, 3),
    h=st.integers(1, 3),
    seed=st.integers(0, 2**16),
    cached=st.booleans(),
)
def test_lstm_matches_torch(t, n, i, h, seed, cached):
    feeds = feeds_for(t, n, i, h, seed)
    y, hT, cT = run("LSTM", [feeds[k] for k in NAMES], 3)
    ty, th, tc = (v.detach().numpy() for v in torch_lstm(*(torch.tensor(feeds[k]) for k in NAMES)))
    np.testing.assert_allclose(y, ty, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(hT, th, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(cT, tc, rtol=1e-10, atol=1e-12)
    feeds |= {"ry": rand(seed + 10, (t, n, h)), "rh": rand(seed + 11, (n, h)), "rc": rand(seed + 12, (n, h))}

    def build(net):
        net.LSTM(NAMES, ["y", "hT", "cT", "cache"] if cached else ["y", "hT", "cT"])
        for o, r in (("y", "ry"), ("hT", "rh"), ("cT", "rc")):
            net.Mul([o, r], f"{o}r")
            net.AveragedLoss(f"{o}r", f"{o}l")
        return net.Sum(["yl", "hTl", "cTl"], "loss")

    def tfn(ry, rh, rc, **w):
        y, hn, cn = torch_lstm(*(w[k] for k in NAMES))
        return (y * ry).mean() + (hn * rh).mean() + (cn * rc).mean()

    check_all(build, tfn, feeds, NAMES)


@pytest.mark.parametrize("cached", [False, True])
@pytest.mark.parametrize("outputs_used", [("y",), ("hT",), ("cT",)])
def test_lstm_gradient_from_one_output(outputs_used, cached):
    feeds = feeds_for(3, 2, 2, 2, 5)
    net = an.Net("g")
    net.LSTM(NAMES, ["y", "hT", "cT", "cache"] if cached else ["y", "hT", "cT"])
    net.AveragedLoss(outputs_used[0], "loss")
    grads = add_gradient_ops(net, "loss", wrt=["w_hh", "h0"], dtype="float64")
    gop = [op for op in net.ops if op.type == "LSTMGradient"][0]
    assert len(gop.inputs) == 8 + cached and len(gop.outputs) == 5  # no dc0, dX computed
    ws = an.Workspace()
    for k, v in feeds.items():
        ws.feed(k, v)
    ws.run_net_once(net)
    t = {k: torch.tensor(v, requires_grad=True) for k, v in feeds.items()}
    out = dict(zip(["y", "hT", "cT"], torch_lstm(*(t[k] for k in NAMES))))
    out[outputs_used[0]].mean().backward()
    for k in ("w_hh", "h0"):
        np.testing.assert_allclose(ws.fetch(grads[k]), t[k].grad.numpy(), rtol=1e-9, atol=1e-12)


def test_lstm_shape_errors_and_float32():
    feeds = {k: v.astype(np.float32) for k, v in feeds_for(2, 1, 3, 2, 0).items()}
    y, _, _ = run("LSTM", [feeds[k] for k in NAMES], 3)
    assert y.dtype == np.float32
    bad = dict(feeds, w_hh=np.zeros((8, 3), np.float32))
    with pytest.raises(an.OperatorError, match=r"W_hh \[4H, H\]\) of shape \(8, 2\)"):
        run("LSTM", [bad[k] for k in NAMES], 3)


@pytest.mark.parametrize("cached", [False, True])
def test_lstm_float32_gradients_at_a_training_size_match_torch_autograd(cached):
    rng = np.random.default_rng(7)
    t, n, i, h = 8, 16, 8, 16
    shapes = dict(x=(t, n, i), h0=(n, h), c0=(n, h), w_ih=(4 * h, i), w_hh=(4 * h, h), b_ih=(4 * h,), b_hh=(4 * h,))
    feeds = {k: (rng.standard_normal(s) * 0.5).astype(np.float32) for k, s in shapes.items()}
    feeds["r"] = rng.standard_normal((t, n, h)).astype(np.float32)
    net = an.Net("g32")
    outs = net.LSTM(NAMES, ["y", "hT", "cT", "cache"] if cached else ["y", "hT", "cT"])
    net.Mul([outs[0], "r"], "yr")
    net.AveragedLoss("yr", "loss")
    grads = add_gradient_ops(net, "loss", wrt=NAMES)
    ws = an.Workspace()
    for k, v in feeds.items():
        ws.feed(k, v)
    ws.run_net_once(net)
    tt = {k: torch.tensor(v, requires_grad=k != "r") for k, v in feeds.items()}
    mod = torch.nn.LSTM(i, h)
    params = {
        "weight_ih_l0": tt["w_ih"],
        "weight_hh_l0": tt["w_hh"],
        "bias_ih_l0": tt["b_ih"],
        "bias_hh_l0": tt["b_hh"],
    }
    y = torch.func.functional_call(mod, params, (tt["x"], (tt["h0"][None], tt["c0"][None])))[0]
    (y * tt["r"]).mean().backward()
    np.testing.assert_allclose(ws.fetch("y"), y.detach().numpy(), rtol=1e-5, atol=1e-6)
    for k in NAMES:
        np.testing.assert_allclose(ws.fetch(grads[k]), tt[k].grad.numpy(), rtol=1e-4, atol=1e-6, err_msg=k)


@pytest.mark.parametrize("cached", [False, True])
def test_lstm_gradients_on_torchs_own_kernels_equal_numpys(cached, monkeypatch):
    from asyncnet.tensor import route

    feeds = feeds_for(5, 3, 4, 6, 11)
    got = {}
    for lib in ("numpy", "torch"):
        monkeypatch.setattr(route, "ENABLED", lib == "numpy")  # torch tensors on torch's kernels
        net = an.Net("g")
        net.AveragedLoss(net.LSTM(NAMES, ["y", "hT", "cT", "cache"] if cached else ["y", "hT", "cT"])[0], "loss")
        grads = add_gradient_ops(net, "loss", wrt=NAMES, dtype="float64")
        ws = an.Workspace()
        for k, v in feeds.items():
            ws.feed(k, v if lib == "numpy" else torch.from_numpy(v.copy()))
        ws.run_net_once(net)
        got[lib] = {k: np.asarray(ws.fetch(grads[k], host=True)) for k in NAMES}
    for k in NAMES:
        np.testing.assert_allclose(got["torch"][k], got["numpy"][k], rtol=1e-10, atol=1e-12, err_msg=k)
