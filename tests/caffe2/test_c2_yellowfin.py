"""Caffe2's YellowFin op and ``build_yellowfin``: the state blobs after each step against a numpy
reference written from the paper's tuning rule (the cubic solved with ``np.roots``), the
momentum step with the previous learning rate and momentum, and a model that trains."""

from __future__ import annotations

import numpy as np
import pytest

from caffe2.python import brew, core, model_helper, optimizer, workspace

pytestmark = pytest.mark.timeout(120)

_STATE = ["moment", "lr_avg", "mu_avg", "curv_win", "g_avg", "g2_avg", "scalars_memory"]


def _tune(distance, variance, h_min, h_max):
    """sqrt(mu) = 1 + y with y the real root in (-1, 0) of y^3 + p y + p = 0, p = D^2 h_min^2 / (2 C);
    mu at least ((sqrt(kappa) - 1) / (sqrt(kappa) + 1))^2; lr = (1 - sqrt(mu))^2 / h_min."""
    p = (distance * h_min) ** 2 / (2 * variance)
    roots = np.roots([1.0, 0.0, p, p])
    y = [r.real for r in roots if abs(r.imag) < 1e-9 and -1 < r.real < 0]
    assert len(y) == 1
    kappa = np.sqrt(h_max / h_min)
    mu = max((1 + y[0]) ** 2, ((kappa - 1) / (kappa + 1)) ** 2)
    return (1 - np.sqrt(mu)) ** 2 / h_min, mu


def _reference(grads, alpha, mu0, beta, width, zero_debias, eps=1e-6):
    """Per step: (param, lr_avg, mu_avg, h_min, h_max) of YellowFin on a zero parameter."""
    n = grads[0].size
    param, moment = np.zeros(n), np.zeros(n)
    lr, mu = alpha, mu0
    g_avg, norm, norm2, lo, hi, dist = np.zeros(n), 0.0, 0.0, 0.0, 0.0, 0.0
    logs, out = [], []
    for i, g in enumerate(grads, start=1):
        moment = mu * moment + lr * g
        param = param - moment
        d = 1 / (1 - beta**i) if zero_debias else 1.0
        g_avg = beta * g_avg + (1 - beta) * g
        sq = max(eps, float(g @ g))
        norm2 = beta * norm2 + (1 - beta) * sq
        norm = beta * norm + (1 - beta) * np.sqrt(sq)
        logs.append(np.log(sq))
        recent = logs[-width:]
        lo = beta * lo + (1 - beta) * min(recent)
        hi = beta * hi + (1 - beta) * max(recent)
        dist = beta * dist + (1 - beta) * norm / norm2
        h_min, h_max = max(eps, np.exp(lo * d)), max(eps, np.exp(hi * d))
        variance = max(eps, norm2 * d - float((g_avg * d) @ (g_avg * d)))
        if i > 1:
            lr_t, mu_t = _tune(dist * d, variance, h_min, h_max)
            lr, mu = beta * lr + (1 - beta) * lr_t, beta * mu + (1 - beta) * mu_t
        out.append((param.copy(), lr, mu, h_min, h_max))
    return out


def _op_net(width, zero_debias, alpha, mu0, n):
    init, net = core.Net("yf_init"), core.Net("yf")
    state = [init.ConstantFill([], "w", shape=[n], value=0.0)]
    for key in _STATE:
        shape = {"lr_avg": [1], "mu_avg": [1], "curv_win": [width], "scalars_memory": [5]}.get(key, [n])
        value = {"lr_avg": alpha, "mu_avg": mu0}.get(key, 0.0)
        state.append(init.ConstantFill([], f"w_{key}", shape=shape, value=value))
    net.YellowFin(state + ["g", "it"], state, beta=0.9, curv_win_width=width, zero_debias=zero_debias)
    return init, net


@pytest.mark.parametrize("zero_debias", [0, 1])
def test_yellowfin_op_matches_the_paper_rule(zero_debias):
    rng = np.random.default_rng(7)
    n, width, alpha, mu0 = 6, 4, 0.05, 0.1
    grads = [rng.standard_normal(n) * (1 + 0.3 * i) for i in range(11)]
    init, net = _op_net(width, zero_debias, alpha, mu0, n)
    workspace.RunNetOnce(init)
    workspace.FeedBlob("g", grads[0].astype(np.float32))
    workspace.FeedBlob("it", np.array([1], dtype=np.int64))
    workspace.CreateNet(net)
    expected = _reference(grads, alpha, mu0, 0.9, width, zero_debias)
    for i, (g, (param, lr, mu, h_min, h_max)) in enumerate(zip(grads, expected), start=1):
        workspace.FeedBlob("g", g.astype(np.float32))
        workspace.FeedBlob("it", np.array([i], dtype=np.int64))
        workspace.RunNet(net.Proto().name)
        np.testing.assert_allclose(workspace.FetchBlob("w"), param, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(workspace.FetchBlob("w_lr_avg")[0], lr, rtol=1e-4)
        np.testing.assert_allclose(workspace.FetchBlob("w_mu_avg")[0], mu, rtol=1e-4, atol=1e-7)
        mem = workspace.FetchBlob("w_scalars_memory").astype(np.float64)
        d = 1 / (1 - 0.9**i) if zero_debias else 1.0
        np.testing.assert_allclose(np.exp(mem[2:4] * d), [h_min, h_max], rtol=1e-4)
    assert workspace.FetchBlob("w_mu_avg")[0] != pytest.approx(mu0)


def test_yellowfin_op_checks_the_window_size():
    init, net = _op_net(4, 1, 0.1, 0.0, 3)
    workspace.RunNetOnce(init)
    workspace.FeedBlob("w_curv_win", np.zeros(5, dtype=np.float32))
    workspace.FeedBlob("g", np.ones(3, dtype=np.float32))
    workspace.FeedBlob("it", np.array([1], dtype=np.int64))
    with pytest.raises(Exception, match="curv_win of 4"):
        workspace.RunNetOnce(net)


def test_build_yellowfin_trains_a_linear_model():
    np.random.seed(5)
    perfect = np.array([2, 6, 5, 0, 1], dtype=np.float32)
    data = np.random.randint(2, size=(20, 5)).astype(np.float32)
    label = (data @ perfect)[:, None]
    m = model_helper.ModelHelper(name="yf_train")
    fc = brew.fc(m, "data", "fc", 5, 1, ("ConstantFill", {}), ("ConstantFill", {}), axis=0)
    loss = m.AveragedLoss(m.SquaredL2Distance([fc, "label"]), "loss")
    m.AddGradientOperators([loss])
    opt = optimizer.build_yellowfin(m, base_learning_rate=0.1)
    workspace.FeedBlob("data", data[0])
    workspace.FeedBlob("label", label[0])
    workspace.RunNetOnce(m.param_init_net)
    workspace.CreateNet(m.net)
    for _ in range(2000):
        i = np.random.randint(20)
        workspace.FeedBlob("data", data[i])
        workspace.FeedBlob("label", label[i])
        workspace.RunNet(m.net.Proto().name)
    np.testing.assert_allclose(workspace.FetchBlob("fc_w")[0], perfect, atol=1e-2)
    assert workspace.FetchBlob("optimizer_iteration")[0] == 2000
    assert len(opt.get_auxiliary_parameters().local) == 14


def test_build_yellowfin_rejects_sparse_gradients():
    m = model_helper.ModelHelper(name="yf_sparse")
    w = m.param_init_net.ConstantFill([], "w", shape=[4], value=0.0)
    m.params.append(w)
    m.AddGradientOperators([m.AveragedLoss(m.net.Gather([w, "idx"], "g"), "loss")])
    with pytest.raises(ValueError, match="sparse"):
        optimizer.build_yellowfin(m)
