"""Caffe2's optimizer formulas under Caffe2's names, WeightedSum's gradient, SoftmaxWithLoss only_loss.

Sources: caffe2/sgd/momentum_sgd_op.cc (schemas: MomentumSGD (grad, moment, lr) -> (grad, moment),
MomentumSGDUpdate (grad, moment, lr, param) -> (grad, moment, param), in place allowed, momentum
default 0), caffe2/python/operator_test/momentum_sgd_test.py (its reference function is copied in
spirit below), caffe2/sgd/adam_op.h and operator_test/adam_test.py's ref_adam (t = iter + 1,
correction = sqrt(1 - b2^t) / (1 - b1^t), param + lr * ..., optional 4th output, epsilon 1e-5),
utility_ops.cc's WeightedSumGradient (grad_on_w), softmax_with_loss_op.h (only_loss).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncnet as an
from asyncnet.autodiff import add_gradient_ops

pytestmark = pytest.mark.timeout(60)
FEW = settings(max_examples=15, deadline=None)


def ref_momentum_sgd(grad, m, lr, momentum, nesterov, param=None):  # momentum_sgd_test.py
    if not nesterov:
        adjusted = lr * grad + momentum * m
        return [adjusted, adjusted] + ([] if param is None else [param - adjusted])
    m_new = momentum * m + lr * grad
    grad_new = (1 + momentum) * m_new - momentum * m
    return [grad_new, m_new] + ([] if param is None else [param - grad_new])


def ref_adam(param, m1, m2, grad, lr, it, beta1, beta2, eps):  # adam_test.py's ref_adam
    t = it + 1
    rate = np.sqrt(1 - np.power(beta2, t)) / (1 - np.power(beta1, t))
    m1_out = beta1 * m1 + (1 - beta1) * grad
    m2_out = beta2 * m2 + (1 - beta2) * np.square(grad)
    grad_out = rate * m1_out / (np.sqrt(m2_out) + eps)
    return param + lr * grad_out, m1_out, m2_out, grad_out


def _feed(ws, **arrays):
    for k, v in arrays.items():
        ws.feed(k, v)


@FEW
@given(seed=st.integers(0, 2**16), momentum=st.floats(0.0, 0.99), nesterov=st.booleans(), in_place=st.booleans())
def test_momentum_sgd_update_as_caffe2(seed, momentum, nesterov, in_place):
    rng = np.random.default_rng(seed)
    g, m, w = (rng.normal(size=(3, 4)).astype(np.float32) for _ in range(3))
    lr = np.array([rng.uniform(0.01, 1.0)], np.float32)
    want = ref_momentum_sgd(g, m, lr[0], momentum, nesterov, w)
    ws = an.Workspace()
    arrays = {"g": g.copy(), "m": m.copy(), "lr": lr, "w": w.copy()}
    _feed(ws, **arrays)
    outs = ["g", "m", "w"] if in_place else ["g2", "m2", "w2"]
    net = an.Net("u")
    net.MomentumSGDUpdate(["g", "m", "lr", "w"], outs, momentum=momentum, nesterov=nesterov)
    ws.run_net_once(net)
    for name, ref in zip(outs, want):
        np.testing.assert_allclose(ws.fetch(name), ref, rtol=1e-5, atol=1e-6, err_msg=name)
    if in_place:  # written into the arrays the caller holds (Hogwild relies on it)
        assert ws.fetch("w") is arrays["w"] and ws.fetch("m") is arrays["m"] and ws.fetch("g") is arrays["g"]
    else:
        np.testing.assert_array_equal(ws.fetch("w"), w)
    net = an.Net("v")
    net.MomentumSGD(["g", "m", "lr"], ["g3", "m3"], momentum=momentum, nesterov=nesterov)
    _feed(ws, g=g.copy(), m=m.copy())
    ws.run_net_once(net)
    for name, ref in zip(["g3", "m3"], ref_momentum_sgd(g, m, lr[0], momentum, nesterov)):
        np.testing.assert_allclose(ws.fetch(name), ref, rtol=1e-5, atol=1e-6, err_msg=name)


def test_momentum_schema_is_caffe2s():
    with pytest.raises(an.NetDefinitionError, match="expected 3 outputs"):
        an.Net("n").MomentumSGDUpdate(["g", "m", "lr", "w"], ["m", "w"])
    with pytest.raises(an.NetDefinitionError, match="may not overwrite"):
        an.Net("n").MomentumSGDUpdate(["g", "m", "lr", "w"], ["w", "m", "g"])
    ws = an.Workspace()
    _feed(ws, g=np.ones(2), m=np.ones(2), lr=np.array([0.5]), w=np.zeros(2))
    net = an.Net("d")
    net.MomentumSGDUpdate(["g", "m", "lr", "w"], ["g", "m", "w"])  # momentum defaults to 0
    ws.run_net_once(net)
    np.testing.assert_allclose(ws.fetch("w"), [-0.5, -0.5])


@FEW
@given(
    seed=st.integers(0, 2**16),
    it=st.integers(0, 20),
    beta1=st.sampled_from([0.9, 0.5]),
    beta2=st.sampled_from([0.999, 0.9]),
    output_grad=st.booleans(),
)
def test_adam_as_caffe2(seed, it, beta1, beta2, output_grad):
    rng = np.random.default_rng(seed)
    w, m1, g = (rng.normal(size=(5,)).astype(np.float32) for _ in range(3))
    m2 = np.abs(rng.normal(size=(5,))).astype(np.float32)
    lr = np.array([-rng.uniform(0.01, 0.5)], np.float32)  # Caffe2 feeds a negative rate
    ws = an.Workspace()
    _feed(ws, w=w.copy(), m1=m1.copy(), m2=m2.copy(), g=g, lr=lr, iter=np.array([it], np.int64))
    outs = ["w", "m1", "m2"] + (["ng"] if output_grad else [])
    net = an.Net("adam")
    net.Adam(["w", "m1", "m2", "g", "lr", "iter"], outs, beta1=beta1, beta2=beta2)
    ws.run_net_once(net)
    want = ref_adam(w, m1, m2, g, lr[0], it, beta1, beta2, 1e-5)  # Caffe2's default epsilon
    for name, ref in zip(outs, want):
        np.testing.assert_allclose(ws.fetch(name), ref, rtol=2e-5, atol=1e-6, err_msg=name)


def test_adam_iteration_rules():
    ws = an.Workspace()
    _feed(
        ws,
        w=np.ones(2),
        m1=np.zeros(2),
        m2=np.zeros(2),
        g=np.ones(2),
        lr=np.array([-0.1]),
        iter=np.array([-1], np.int64),
    )
    net = an.Net("a")
    net.Adam(["w", "m1", "m2", "g", "lr", "iter"], ["w", "m1", "m2"])
    with pytest.raises(an.OperatorError, match=">= 0"):
        ws.run_net_once(net)
    ws.feed("iter", np.array([0], np.int64))  # torch's formula counts from 1: 0 is refused there
    net = an.Net("t")
    net.Adam(["w", "m1", "m2", "g", "lr", "iter"], ["w", "m1", "m2"], formula="torch")
    with pytest.raises(an.OperatorError, match=">= 1"):
        ws.run_net_once(net)


@pytest.mark.parametrize("grad_on_w", [False, True])
def test_weighted_sum_gradient(grad_on_w):
    rng = np.random.default_rng(0)
    feeds = {
        "x0": rng.normal(size=(3, 2)),
        "w0": np.array([0.7]),
        "x1": rng.normal(size=(3, 2)),
        "w1": np.array([-1.3]),
        "r": rng.normal(size=(3, 2)),
    }
    net = an.Net("g")
    net.WeightedSum(["x0", "w0", "x1", "w1"], "y", grad_on_w=grad_on_w)
    net.Mul(["y", "r"], "yr")
    net.AveragedLoss("yr", "loss")
    wrt = ["x0", "x1"] + (["w0", "w1"] if grad_on_w else [])
    names = add_gradient_ops(net, "loss", wrt=wrt, dtype="float64")
    ws = an.Workspace()
    _feed(ws, **feeds)
    ws.run_net_once(net)
    t = {k: torch.tensor(v, requires_grad=k in wrt) for k, v in feeds.items()}
    ((t["x0"] * t["w0"] + t["x1"] * t["w1"]) * t["r"]).mean().backward()
    for k in wrt:
        np.testing.assert_allclose(ws.fetch(names[k]), t[k].grad.numpy(), rtol=1e-12, err_msg=k)
    if not grad_on_w:  # as in Caffe2, the weights get no gradient unless grad_on_w is set
        with pytest.raises(an.AsyncNetError):
            add_gradient_ops(net, "loss", wrt=["w0"])


def test_softmax_with_loss_only_loss_reuses_the_softmax_array():
    rng = np.random.default_rng(1)
    results = []
    for only_loss in (False, True):
        ws = an.Workspace()
        _feed(ws, x=rng.normal(size=(4, 3)) if not results else results[0][2], label=np.array([0, 2, 1, 2], np.int32))
        net = an.Net("s")
        net.SoftmaxWithLoss(["x", "label"], ["p", "loss"], only_loss=only_loss)
        names = add_gradient_ops(net, "loss", wrt=["x"], dtype="float64")
        ws.create_net(net)
        ws.run_net("s")
        results.append((ws.fetch(names["x"]), ws.fetch("p"), ws.fetch("x")))
    np.testing.assert_array_equal(results[0][0], results[1][0])  # same dX
    assert results[1][1] is results[1][0]  # with only_loss dX is written into P's array
    assert results[0][1] is not results[0][0]
