"""Optimizer ops against torch.optim over several steps; LearningRate against its formulas; in-place updates."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncnet as an

pytestmark = pytest.mark.timeout(60)


def torch_steps(opt_cls, w0: np.ndarray, grads: list[np.ndarray], **kw) -> np.ndarray:
    p = torch.nn.Parameter(torch.tensor(w0.copy()))
    opt = opt_cls([p], **kw)
    for g in grads:
        p.grad = torch.tensor(g)
        opt.step()
    return p.detach().numpy()


def our_steps(update_op, w0: np.ndarray, grads: list[np.ndarray], state: list[str], lr_args: dict, **kw):
    ws = an.Workspace()
    w = w0.copy()
    ws.feed("w", w)
    for s in state:
        ws.feed(s, np.zeros_like(w))
    ws.feed("iter", np.zeros(1, np.int64))
    net = an.Net("update")
    net.Iter("iter", "iter")
    net.LearningRate("iter", "lr", dtype=w0.dtype.name, **lr_args)
    update_op(net, **kw)
    ws.create_net(net)
    for g in grads:
        ws.feed("g", g.copy())  # MomentumSGDUpdate writes its step into the gradient (Caffe2's output 0)
        ws.run_net("update")
    assert ws.fetch("w") is w, "the update must write into the parameter's array"
    return w, ws


def problem(seed: int, dtype=np.float64, steps: int = 6):
    rng = np.random.default_rng(seed)
    shape = tuple(rng.integers(1, 5, size=rng.integers(1, 3)))
    return rng.normal(size=shape).astype(dtype), [rng.normal(size=shape).astype(dtype) for _ in range(steps)]


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**16), lr=st.floats(1e-3, 1.0), wd=st.sampled_from([0.0, 0.01]))
def test_sgd_vs_torch(seed, lr, wd):
    w0, grads = problem(seed)
    ours, _ = our_steps(
        lambda net, **kw: net.SGD(["w", "g", "lr"], "w", **kw), w0, grads, [], {"base_lr": lr}, weight_decay=wd
    )
    np.testing.assert_allclose(
        ours, torch_steps(torch.optim.SGD, w0, grads, lr=lr, weight_decay=wd), rtol=1e-10, atol=1e-12
    )


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**16), mu=st.floats(0.0, 0.99), nesterov=st.booleans(), wd=st.sampled_from([0.0, 0.01]))
def test_momentum_vs_torch(seed, mu, nesterov, wd):
    w0, grads = problem(seed)
    ours, ws = our_steps(
        lambda net, **kw: net.MomentumSGDUpdate(["g", "m", "lr", "w"], ["g", "m", "w"], formula="torch", **kw),
        w0,
        grads,
        ["m"],
        {"base_lr": 0.1},
        momentum=mu,
        nesterov=nesterov,
        weight_decay=wd,
    )
    theirs = torch_steps(torch.optim.SGD, w0, grads, lr=0.1, momentum=mu, nesterov=nesterov and mu > 0, weight_decay=wd)
    if nesterov and mu == 0:
        theirs = torch_steps(torch.optim.SGD, w0, grads, lr=0.1, weight_decay=wd)
    np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12)


def test_momentum_matches_torch_with_a_step_schedule():
    w0, grads = problem(3, steps=8)
    ours, _ = our_steps(
        lambda net, **kw: net.MomentumSGDUpdate(["g", "m", "lr", "w"], ["g", "m", "w"], formula="torch", **kw),
        w0,
        grads,
        ["m"],
        {"base_lr": 0.5, "policy": "step", "stepsize": 3, "gamma": 0.5},
        momentum=0.9,
    )
    p = torch.nn.Parameter(torch.tensor(w0.copy()))
    opt = torch.optim.SGD([p], lr=0.5, momentum=0.9)
    for t, g in enumerate(grads, 1):
        for group in opt.param_groups:
            group["lr"] = 0.5 * 0.5 ** (t // 3)
        p.grad = torch.tensor(g)
        opt.step()
    np.testing.assert_allclose(ours, p.detach().numpy(), rtol=1e-10)


@settings(max_examples=10, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    lr=st.floats(1e-3, 0.5),
    betas=st.sampled_from([(0.9, 0.999), (0.5, 0.9)]),
    wd=st.sampled_from([0.0, 0.01]),
    dtype=st.sampled_from([np.float32, np.float64]),
)
def test_adam_vs_torch(seed, lr, betas, wd, dtype):
    w0, grads = problem(seed, dtype)
    ours, ws = our_steps(
        lambda net, **kw: net.Adam(["w", "m1", "m2", "g", "lr", "iter"], ["w", "m1", "m2"], formula="torch", **kw),
        w0,
        grads,
        ["m1", "m2"],
        {"base_lr": lr},
        beta1=betas[0],
        beta2=betas[1],
        epsilon=1e-8,
        weight_decay=wd,
    )
    theirs = torch_steps(torch.optim.Adam, w0, grads, lr=lr, betas=betas, eps=1e-8, weight_decay=wd)
    tol = 1e-5 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(ours, theirs, rtol=tol, atol=tol)
    assert ws.fetch("w").dtype == dtype and int(ws.fetch("iter")[0]) == len(grads)


@settings(max_examples=30, deadline=None)
@given(
    it=st.integers(0, 10**6),
    base=st.floats(1e-4, 1.0),
    gamma=st.floats(0.1, 1.0),
    step=st.integers(1, 1000),
    policy=st.sampled_from(["fixed", "step", "exp"]),
)
def test_learning_rate_policies(it, base, gamma, step, policy):
    ws = an.Workspace()
    ws.feed("iter", np.array(it, np.int64))
    net = an.Net("lr")
    net.LearningRate("iter", "lr", base_lr=base, policy=policy, stepsize=step, gamma=gamma, dtype="float64")
    ws.run_net_once(net)
    want = {"fixed": base, "step": base * gamma ** (it // step), "exp": base * gamma**it}[policy]
    assert ws.fetch("lr").shape == ()
    np.testing.assert_allclose(ws.fetch("lr"), want, rtol=1e-12, atol=1e-300)


def test_learning_rate_rejects_negative_or_float_counters():
    for value, match in [(np.array([-1], np.int64), "non-negative"), (np.array([1.0]), "integer counter")]:
        ws = an.Workspace()
        ws.feed("iter", value)
        net = an.Net("lr")
        net.LearningRate("iter", "lr", base_lr=0.1)
        with pytest.raises(an.OperatorError, match=match):
            ws.run_net_once(net)


def test_weighted_sum_in_place_and_out_of_place():
    ws = an.Workspace()
    x, y = np.array([1.0, 2.0], np.float32), np.array([10.0, 20.0], np.float32)
    ws.feed("x", x)
    ws.feed("y", y)
    ws.feed("a", np.array([2.0], np.float32))
    ws.feed("b", np.array(0.5, np.float32))
    net = an.Net("ws")
    net.WeightedSum(["x", "a", "y", "b"], "z")
    net.WeightedSum(["x", "a", "y", "b"], "x")
    ws.run_net_once(net)
    np.testing.assert_allclose(ws.fetch("z"), [7.0, 14.0])
    assert ws.fetch("x") is x and ws.fetch("y") is y
    np.testing.assert_allclose(x, [7.0, 14.0])
    np.testing.assert_allclose(y, [10.0, 20.0])
    with pytest.raises(an.NetDefinitionError, match="may not overwrite input 2"):
        net.WeightedSum(["y", "b", "y", "b"], "y")  # only X0 may be the output


def test_update_ops_enforce_in_place_and_writable_arrays():
    net = an.Net("bad")
    with pytest.raises(an.NetDefinitionError, match="in-place enforced"):
        net.SGD(["w", "g", "lr"], "w2")
    ws = an.Workspace()
    w = np.ones(3)
    w.flags.writeable = False
    ws.feed("w", w)
    ws.feed("g", np.ones(3))
    ws.feed("lr", np.array(0.1))
    ok = an.Net("ro")
    ok.SGD(["w", "g", "lr"], "w")
    with pytest.raises(an.OperatorError, match="read-only"):
        ws.run_net_once(ok)
    ws.feed("w", np.ones(4))
    with pytest.raises(an.OperatorError, match="shape"):
        ws.run_net_once(ok)


def test_shared_parameter_array_sees_updates_from_two_workspaces():
    """Hogwild's premise: two workspaces (workers) holding one array both see every update."""
    w = np.zeros(4, np.float32)
    wss = []
    for _ in range(2):
        ws = an.Workspace()
        ws.feed("w", w)
        ws.feed("g", np.ones(4, np.float32))
        ws.feed("lr", np.array(0.5, np.float32))
        net = an.Net("step")
        net.SGD(["w", "g", "lr"], "w")
        ws.create_net(net)
        wss.append(ws)
    for ws in wss * 3:
        ws.run_net("step")
    np.testing.assert_allclose(w, np.full(4, -3.0))
    assert all(ws.fetch("w") is w for ws in wss)
