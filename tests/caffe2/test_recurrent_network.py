"""RecurrentNetwork and RecurrentNetworkGradient on asyncnet's API: a tanh RNN step net against a
numpy recurrence, the gradient against finite differences, Caffe2's initial-state forms, and
the errors of a bad definition."""

from __future__ import annotations

import numpy as np
import pytest

import asyncnet as an
from asyncnet.autodiff import add_gradient_ops, backward_ops
from asyncnet.ops.caffe2_recurrent import StepWorkspaces

pytestmark = pytest.mark.timeout(120)


def _tanh_rnn_nets() -> tuple[str, str, list[str]]:
    """h_t = tanh(FC(h_{t-1}, w, b) + x_t): the step net, its backward (our autodiff, as
    recurrent_net builds it) and the param gradient names."""
    step = an.Net("tanh_step")
    step.FC(["h_prev", "w", "b"], "z", axis=2)
    step.Add(["z", "x_t"], "s")
    step.Tanh("s", "h")
    ops, grads = backward_ops(step.to_def().ops, {"h": "h_grad"})
    bwd = an.NetDef("tanh_step_bwd", ops)
    return step.to_def().to_json(), bwd.to_json(), [grads["w"], grads["b"], grads["h_prev"], grads["x_t"]]


def _rnn_op(net: an.Net, forward_only: bool = False, owg=(0, 1)) -> None:
    step, bwd, (gw, gb, gh, gx) = _tanh_rnn_nets()
    extra = {}
    if not forward_only:
        extra = dict(
            backward_step_net=bwd,
            param=[2, 3],
            param_grads=[gw, gb],
            backward_link_internal=["h_grad", gh, gx],
            backward_link_external=["rnn/h_states_grad", "rnn/h_states_grad", "xs_grad"],
            backward_link_offset=[1, 0, 0],
            outputs_with_grads=list(owg),
        )
    net.RecurrentNetwork(
        ["xs", "h0", "w", "b"],
        ["h_all", "h_last", "rnn/step_workspaces"],
        step_net=step,
        recurrent_states=["rnn/h_states"],
        initial_recurrent_state_ids=[1],
        link_internal=["h_prev", "h", "x_t"],
        link_external=["rnn/h_states", "rnn/h_states", "xs"],
        link_offset=[0, 1, 0],
        alias_src=["rnn/h_states", "rnn/h_states"],
        alias_dst=["h_all", "h_last"],
        alias_offset=[1, -1],
        timestep="timestep",
        **extra,
    )


def _numpy_rnn(xs, h0, w, b):
    h = np.broadcast_to(h0.reshape(-1, h0.shape[-1]), xs.shape[1:]) if h0.ndim < 3 else h0[-1]
    hs = []
    for t in range(xs.shape[0]):
        h = np.tanh(h @ w.T + b + xs[t])
        hs.append(h)
    return np.stack(hs)


def _feeds(rng, T=4, N=3, H=5, h0_shape=None, dt=np.float64):
    return {
        "xs": rng.uniform(-1, 1, (T, N, H)).astype(dt),
        "h0": rng.uniform(-1, 1, h0_shape or (1, N, H)).astype(dt),
        "w": rng.uniform(-0.5, 0.5, (H, H)).astype(dt),
        "b": rng.uniform(-0.5, 0.5, (H,)).astype(dt),
        "r_all": rng.uniform(0.5, 1.5, (T, N, H)).astype(dt),
        "r_last": rng.uniform(0.5, 1.5, (1, N, H)).astype(dt),
    }


def _loss(f, h_all, h_last):
    return float((h_all * f["r_all"]).mean() + (h_last * f["r_last"]).mean())


def _train_net() -> tuple[an.Net, dict]:
    net = an.Net("rnn_train")
    _rnn_op(net)
    net.Mul(["h_all", "r_all"], "p_all")
    net.Mul(["h_last", "r_last"], "p_last")
    l1, l2 = net.AveragedLoss("p_all", "l_all"), net.AveragedLoss("p_last", "l_last")
    net.Sum([l1, l2], "loss")
    grads = add_gradient_ops(net, "loss", wrt=["xs", "h0", "w", "b"], dtype="float64")
    return net, grads


@pytest.mark.parametrize("h0_shape", [(1, 3, 5), (3, 5), (5,)])
def test_forward_matches_numpy_for_each_initial_state_form(h0_shape):
    f = _feeds(np.random.default_rng(0), h0_shape=h0_shape)
    ws = an.Workspace()
    for k, v in f.items():
        ws.feed(k, v)
    net = an.Net("rnn_fwd")
    _rnn_op(net, forward_only=True)
    ws.run_net_once(net)
    want = _numpy_rnn(f["xs"], f["h0"], f["w"], f["b"])
    np.testing.assert_allclose(ws.fetch("h_all"), want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ws.fetch("h_last"), want[-1:], rtol=1e-12, atol=1e-12)
    assert ws.fetch("h_all").dtype == np.float64


@pytest.mark.parametrize("h0_shape", [(1, 3, 5), (3, 5), (5,)])
def test_gradient_matches_finite_differences(h0_shape):
    f = _feeds(np.random.default_rng(1), h0_shape=h0_shape)
    net, grads = _train_net()
    ws = an.Workspace()
    for k, v in f.items():
        ws.feed(k, v)
    ws.run_net_once(net)
    fwd = an.Net("rnn_probe")
    _rnn_op(fwd, forward_only=True)
    fwd_ws = an.Workspace()

    def loss_at(name, value):
        for k, v in f.items():
            fwd_ws.feed(k, value if k == name else v)
        fwd_ws.run_net_once(fwd)
        return _loss(f, fwd_ws.fetch("h_all"), fwd_ws.fetch("h_last"))

    eps = 1e-6
    for name in ("xs", "h0", "w", "b"):
        g = ws.fetch(grads[name])
        assert g.shape == f[name].shape and g.dtype == f[name].dtype
        num = np.zeros_like(f[name])
        for idx in np.ndindex(f[name].shape):
            plus, minus = f[name].copy(), f[name].copy()
            plus[idx] += eps
            minus[idx] -= eps
            num[idx] = (loss_at(name, plus) - loss_at(name, minus)) / (2 * eps)
        np.testing.assert_allclose(g, num, rtol=1e-5, atol=1e-8, err_msg=name)


def test_the_step_net_is_created_once_and_reused():
    f = _feeds(np.random.default_rng(2))
    net, _ = _train_net()
    ws = an.Workspace()
    for k, v in f.items():
        ws.feed(k, v)
    ws.create_net(net)
    ws.run_net("rnn_train")
    scratch = ws.fetch("rnn/step_workspaces")
    assert isinstance(scratch, StepWorkspaces)
    fwd, bwd = scratch.forward, scratch.backward
    instances = (fwd.instance, bwd.instance)
    ws.feed("xs", f["xs"][:2])  # a shorter sequence: same nets
    ws.feed("r_all", f["r_all"][:2])
    ws.run_net("rnn_train")
    assert ws.fetch("rnn/step_workspaces") is scratch
    assert (scratch.forward.instance, scratch.backward.instance) == instances
    assert len(scratch.saved) == 2 and ws.fetch("h_all").shape == (2, 3, 5)


def test_only_outputs_with_grads_take_a_gradient():
    """outputs_with_grads=[0]: the gradient of h_last is not taken, as in Caffe2."""
    f = _feeds(np.random.default_rng(3))
    net = an.Net("rnn_owg")
    _rnn_op(net, owg=(0,))
    net.Mul(["h_all", "r_all"], "p_all")
    net.AveragedLoss("p_all", "loss")
    grads = add_gradient_ops(net, "loss", wrt=["w"], dtype="float64")
    ws = an.Workspace()
    for k, v in f.items():
        ws.feed(k, v)
    ws.run_net_once(net)
    eps, w = 1e-6, f["w"]
    fwd = an.Net("rnn_owg_probe")
    _rnn_op(fwd, forward_only=True)

    def loss(wv):
        ws.feed("w", wv)
        ws.run_net_once(fwd)
        return float((ws.fetch("h_all") * f["r_all"]).mean())

    idx = (1, 2)
    plus, minus = w.copy(), w.copy()
    plus[idx] += eps
    minus[idx] -= eps
    num = (loss(plus) - loss(minus)) / (2 * eps)
    np.testing.assert_allclose(ws.fetch(grads["w"])[idx], num, rtol=1e-5)


def test_forward_only_has_no_gradient():
    net = an.Net("rnn_fwd_only")
    _rnn_op(net, forward_only=True)
    net.AveragedLoss("h_all", "loss")
    add_gradient_ops(net, "loss", wrt=["xs"], dtype="float64")
    ws = an.Workspace()
    for k, v in _feeds(np.random.default_rng(4)).items():
        ws.feed(k, v)
    with pytest.raises(an.OperatorError, match="forward-only"):
        ws.run_net_once(net)


def test_link_window_reads_several_rows():
    """A window of 2 over a state with 2 initial rows: the step sees rows t and t + 1."""
    step = an.Net("win_step")
    step.Split("pair", ["older", "newer"], axis=0)
    step.Add(["older", "newer"], "pair_sum")
    step.Add(["pair_sum", "x_t"], "y")
    net = an.Net("win")
    net.RecurrentNetwork(
        ["xs", "y0"],
        ["y_all", "y_last", "win/ws"],
        step_net=step.to_def().to_json(),
        recurrent_states=["win/y_states"],
        initial_recurrent_state_ids=[1],
        link_internal=["pair", "y", "x_t"],
        link_external=["win/y_states", "win/y_states", "xs"],
        link_offset=[0, 2, 0],
        link_window=[2, 1, 1],
        alias_src=["win/y_states", "win/y_states"],
        alias_dst=["y_all", "y_last"],
        alias_offset=[2, -1],
    )
    ws = an.Workspace()
    ws.feed("xs", np.ones((4, 1, 1), np.float32))
    ws.feed("y0", np.array([[[0.0]], [[1.0]]], np.float32))  # [L=2, N, D]
    ws.run_net_once(net)
    np.testing.assert_array_equal(ws.fetch("y_all").ravel(), [2, 4, 7, 12])  # Fibonacci-like: y_t = y_t-2 + y_t-1 + 1


@pytest.mark.parametrize(
    "change, message",
    [
        ({"link_offset": [0, 1]}, "link_internal, link_external, link_offset"),
        ({"initial_recurrent_state_ids": [7]}, "index no input"),
        ({"alias_src": ["nope", "rnn/h_states"]}, "not recurrent_states"),
        ({"step_net": "{not json"}, "asyncnet NetDef JSON"),
    ],
)
def test_a_bad_definition_fails_at_creation(change, message):
    net = an.Net("rnn_bad")
    _rnn_op(net, forward_only=True)
    op = net.to_def().ops[0]
    op.args.update(change)
    with pytest.raises(an.NetDefinitionError, match=message):
        an.Workspace().create_net(an.NetDef("rnn_bad", [op]))


def test_a_link_to_a_missing_blob_names_it():
    net = an.Net("rnn_missing")
    _rnn_op(net, forward_only=True)
    op = net.to_def().ops[0]
    op.args["link_external"] = ["rnn/h_states", "rnn/h_states", "nowhere"]
    ws = an.Workspace()
    for k, v in _feeds(np.random.default_rng(5)).items():
        ws.feed(k, v)
    with pytest.raises(an.OperatorError, match="no state or input named 'nowhere'"):
        ws.run_net_once(an.NetDef("rnn_missing", [op]))
