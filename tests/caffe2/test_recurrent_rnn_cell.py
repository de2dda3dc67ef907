"""caffe2.python.recurrent and rnn_cell through RecurrentNetwork, against PyTorch: the same
recurrences written in torch (Caffe2's LSTM gate order i, f, o, g, forget_bias, seq_lengths,
drop_states), outputs compared and every gradient checked against torch autograd; Caffe2's own
test cases (recurrent_network_test.py, rnn_cell_test.py) rewritten in this suite's style."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import asyncnet as an
from caffe2 import convert
from caffe2.proto import caffe2_pb2
from caffe2.python import core, model_helper, recurrent, rnn_cell, workspace

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.timeout(300)


def _t(x, grad=True):
    return torch.tensor(np.asarray(x), dtype=torch.float64, requires_grad=grad)


def _torch_lstm_layer(pre, h, c, w_hh, b_hh, lengths, forget_bias, drop_states):
    """Caffe2's LSTM step over ``pre`` = i2h(x) [T, N, 4H]: gates i, f, o, g."""
    H = h.shape[-1]
    hs, cs = [], []
    for t in range(pre.shape[0]):
        g = pre[t] + h @ w_hh.T + b_hh
        i, f = torch.sigmoid(g[:, :H]), torch.sigmoid(g[:, H : 2 * H] + forget_bias)
        o, gg = torch.sigmoid(g[:, 2 * H : 3 * H]), torch.tanh(g[:, 3 * H :])
        c_new = f * c + i * gg
        h_new = o * torch.tanh(c_new)
        valid = (t < lengths)[:, None] if lengths is not None else torch.ones(h.shape[0], 1, dtype=torch.bool)
        keep_h, keep_c = (torch.zeros_like(h), torch.zeros_like(c)) if drop_states else (h, c)
        h, c = torch.where(valid, h_new, keep_h), torch.where(valid, c_new, keep_c)
        hs.append(h)
        cs.append(c)
    return torch.stack(hs), torch.stack(cs)


def _feed(values):
    for k, v in values.items():
        workspace.FeedBlob(k, v)


def _grad_map(model, losses):
    return {str(k): str(v) for k, v in model.AddGradientOperators(losses).items()}


def _loss_on(model, blob, weight_name):
    prod = model.net.Mul([blob, weight_name], str(blob) + "_weighted")
    return model.net.AveragedLoss(prod, str(blob) + "_loss")


def _check(got, want, what, tol=2e-5):
    np.testing.assert_allclose(got, want.detach().numpy(), rtol=tol, atol=tol, err_msg=what)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    T=st.integers(1, 4),
    N=st.integers(1, 3),
    D=st.integers(1, 4),
    H=st.integers(1, 4),
    forget_bias=st.sampled_from([0.0, 1.0]),
    drop_states=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_lstm_matches_torch_forward_and_gradients(T, N, D, H, forget_bias, drop_states, seed):
    workspace.ResetWorkspace()
    rng = np.random.default_rng(seed)
    m = model_helper.ModelHelper(name="lstm_vs_torch")
    h_all, h_last, c_all, c_last = rnn_cell.LSTM(
        m, "x", "lengths", ("h0", "c0"), D, H, scope="lstm", forget_bias=forget_bias,
        drop_states=drop_states, outputs_with_grads=(0, 3),
    )  # fmt: skip
    grads = _grad_map(m, [_loss_on(m, h_all, "r_all"), _loss_on(m, c_last, "r_last")])
    workspace.RunNetOnce(m.param_init_net)
    feeds = {
        "x": rng.standard_normal((T, N, D)).astype(np.float32),
        "h0": rng.standard_normal((1, N, H)).astype(np.float32),
        "c0": rng.standard_normal((1, N, H)).astype(np.float32),
        "r_all": rng.uniform(0.5, 1.5, (T, N, H)).astype(np.float32),
        "r_last": rng.uniform(0.5, 1.5, (1, N, H)).astype(np.float32),
        "lengths": rng.integers(0, T + 1, N).astype(np.int32),
        "lstm/i2h_b": rng.standard_normal(4 * H).astype(np.float32),
        "lstm/gates_t_b": rng.standard_normal(4 * H).astype(np.float32),
    }
    _feed(feeds)
    workspace.RunNetOnce(m.net)
    p = {n: _t(workspace.FetchBlob(f"lstm/{n}")) for n in ("i2h_w", "i2h_b", "gates_t_w", "gates_t_b")}
    x, h0, c0 = _t(feeds["x"]), _t(feeds["h0"]), _t(feeds["c0"])
    hs, cs = _torch_lstm_layer(
        x @ p["i2h_w"].T + p["i2h_b"], h0[0], c0[0], p["gates_t_w"], p["gates_t_b"],
        torch.tensor(feeds["lengths"]), forget_bias, drop_states,
    )  # fmt: skip
    loss = (hs * _t(feeds["r_all"], False)).mean() + (cs[-1:] * _t(feeds["r_last"], False)).mean()
    loss.backward()
    _check(workspace.FetchBlob(h_all), hs, "hidden_all")
    _check(workspace.FetchBlob(h_last), hs[-1:], "hidden_last")
    _check(workspace.FetchBlob(c_all), cs, "cell_all")
    _check(workspace.FetchBlob(c_last), cs[-1:], "cell_last")
    for name, ref in [*((f"lstm/{n}", t) for n, t in p.items()), ("x", x), ("h0", h0), ("c0", c0)]:
        _check(workspace.FetchBlob(grads[name]), ref.grad, f"gradient of {name}")


@pytest.mark.parametrize("activation", ["tanh", "relu"])
@pytest.mark.parametrize("drop_states", [False, True])
def test_basic_rnn_matches_torch(activation, drop_states):
    rng = np.random.default_rng(7)
    T, N, D, H = 4, 3, 2, 5
    m = model_helper.ModelHelper(name="basic_rnn")
    h_all, h_last = rnn_cell.BasicRNN(
        m, "x", "lengths", ["h0"], D, H, scope="rnn", activation=activation, drop_states=drop_states
    )
    grads = _grad_map(m, [_loss_on(m, h_all, "r_all")])
    workspace.RunNetOnce(m.param_init_net)
    feeds = {
        "x": rng.standard_normal((T, N, D)).astype(np.float32),
        "h0": rng.standard_normal((1, N, H)).astype(np.float32),
        "r_all": rng.uniform(0.5, 1.5, (T, N, H)).astype(np.float32),
        "lengths": np.array([4, 2, 0], np.int32),
    }
    _feed(feeds)
    workspace.RunNetOnce(m.net)
    p = {n: _t(workspace.FetchBlob(f"rnn/{n}")) for n in ("i2h_w", "i2h_b", "gates_t_w", "gates_t_b")}
    x, h0 = _t(feeds["x"]), _t(feeds["h0"])
    h = h0[0]
    act = torch.tanh if activation == "tanh" else torch.relu
    hs = []
    for t in range(T):
        h_new = act(x[t] @ p["i2h_w"].T + p["i2h_b"] + h @ p["gates_t_w"].T + p["gates_t_b"])
        valid = torch.tensor(feeds["lengths"] > t)[:, None]
        h = torch.where(valid, h_new, torch.zeros_like(h) if drop_states else h)
        hs.append(h)
    hs = torch.stack(hs)
    (hs * _t(feeds["r_all"], False)).mean().backward()
    _check(workspace.FetchBlob(h_all), hs, "hidden_all")
    _check(workspace.FetchBlob(h_last), hs[-1:], "hidden_last")
    for name, ref in [*((f"rnn/{n}", t) for n, t in p.items()), ("x", x), ("h0", h0)]:
        _check(workspace.FetchBlob(grads[name]), ref.grad, f"gradient of {name}")


def test_multi_lstm_with_initial_states_as_parameters():
    """Caffe2's test_multi_lstm: two layers, scope None, initial states created as parameters
    (``layer_<i>/initial_hidden_state`` [H], repeated over the batch)."""
    rng = np.random.default_rng(3)
    T, N, D, dims = 5, 3, 4, [3, 2]
    m = model_helper.ModelHelper(name="external")
    seq, lengths = m.net.AddExternalInputs("input_sequence", "seq_lengths")
    h_all, h_last, c_all, c_last = rnn_cell.LSTM(
        model=m, input_blob=seq, seq_lengths=lengths, initial_states=None, dim_in=D, dim_out=dims,
        outputs_with_grads=(0,), return_last_layer_only=True,
    )  # fmt: skip
    grads = _grad_map(m, [_loss_on(m, h_all, "r_all")])
    workspace.RunNetOnce(m.param_init_net)
    feeds = {
        "input_sequence": rng.standard_normal((T, N, D)).astype(np.float32),
        "seq_lengths": rng.integers(1, T + 1, N).astype(np.int32),
        "r_all": rng.uniform(0.5, 1.5, (T, N, dims[-1])).astype(np.float32),
    }
    for i, d in enumerate(dims):
        feeds[f"layer_{i}/initial_hidden_state"] = rng.standard_normal(d).astype(np.float32)
        feeds[f"layer_{i}/initial_cell_state"] = rng.standard_normal(d).astype(np.float32)
    _feed(feeds)
    workspace.RunNetOnce(m.net)
    names = {}
    for i in range(len(dims)):
        prefix = f"layer_{i}/" if i > 0 else ""  # the first layer's input projection is outside the cell
        names[i] = {
            "i2h_w": f"{prefix}i2h_w",
            "i2h_b": f"{prefix}i2h_b",
            "gates_t_w": f"layer_{i}/gates_t_w",
            "gates_t_b": f"layer_{i}/gates_t_b",
            "h0": f"layer_{i}/initial_hidden_state",
            "c0": f"layer_{i}/initial_cell_state",
        }
    tensors = {n: _t(workspace.FetchBlob(n)) for layer in names.values() for n in layer.values()}
    x = _t(feeds["input_sequence"])
    lens = torch.tensor(feeds["seq_lengths"])
    layer_in = x
    for i in range(len(dims)):
        n = {k: tensors[v] for k, v in names[i].items()}
        h0, c0 = n["h0"].expand(N, -1), n["c0"].expand(N, -1)
        layer_in, cs = _torch_lstm_layer(
            layer_in @ n["i2h_w"].T + n["i2h_b"], h0, c0, n["gates_t_w"], n["gates_t_b"], lens, 0.0, False
        )
    (layer_in * _t(feeds["r_all"], False)).mean().backward()
    _check(workspace.FetchBlob(h_all), layer_in, "last layer hidden_all")
    _check(workspace.FetchBlob(c_last), cs[-1:], "last layer cell_last")
    for name, ref in [*tensors.items(), ("input_sequence", x)]:
        _check(workspace.FetchBlob(grads[name]), ref.grad, f"gradient of {name}")


def test_all_layers_returned_and_params():
    m = model_helper.ModelHelper(name="layers")
    outs = rnn_cell.LSTM(m, "x", "lengths", None, 3, [4, 5], scope="deep", return_last_layer_only=False)
    assert len(outs) == 8 and len({str(o) for o in outs}) == 8
    last = rnn_cell.LSTM(m, "x", "lengths", None, 3, [4, 5], scope="deeper")
    assert [str(o) for o in last] == [str(o).replace("deep/", "deeper/") for o in outs[4:]]
    one = rnn_cell.LSTM(m, "x", "lengths", None, 3, 4, scope="one", return_params=True)
    assert one[-1] == {
        "input": {"weights": "one/i2h_w", "biases": "one/i2h_b"},
        "recurrent": {"weights": "one/gates_t_w", "biases": "one/gates_t_b"},
    }


def test_lstm_params_have_param_info():
    """Caffe2's test_lstm_params: initial states made as parameters; every parameter has its info."""
    m = model_helper.ModelHelper(name="lstm_params_test")
    with core.DeviceScope(core.DeviceOption(caffe2_pb2.CPU, 0)):
        rnn_cell.LSTM(m, "input", "seqlengths", None, dim_in=20, dim_out=40, scope="test", drop_states=True)
    params = {str(p) for p in m.GetParams()}
    assert {"test/i2h_w", "test/i2h_b", "test/gates_t_w", "test/gates_t_b"} <= params
    assert {"test/initial_hidden_state", "test/initial_cell_state"} <= params
    for p in m.GetParams():
        assert m.get_param_info(p) is not None


def test_memory_optimization_gives_the_same_gradients():
    T, N, D, H = 4, 2, 3, 4
    results = []
    for mem in (False, True):
        workspace.ResetWorkspace()
        m = model_helper.ModelHelper(name=f"mem_{mem}")
        h_all, *_ = rnn_cell.LSTM(m, "x", "lengths", ("h0", "c0"), D, H, scope="lstm", memory_optimization=mem)
        grads = _grad_map(m, [_loss_on(m, h_all, "r_all")])
        rnn = next(op for op in m.net.Proto().op if op.type == "RecurrentNetwork")
        recompute = [a.strings for a in rnn.arg if a.name == "recompute_blobs_on_backward"][0]
        assert [s.decode() for s in recompute] == (["lstm/gates_t"] if mem else [])
        workspace.RunNetOnce(m.param_init_net)
        r = np.random.default_rng(0)
        _feed(
            {
                "x": r.standard_normal((T, N, D)).astype(np.float32),
                "h0": r.standard_normal((1, N, H)).astype(np.float32),
                "c0": r.standard_normal((1, N, H)).astype(np.float32),
                "r_all": r.uniform(0.5, 1.5, (T, N, H)).astype(np.float32),
                "lengths": np.array([4, 3], np.int32),
                "lstm/i2h_w": r.standard_normal((4 * H, D)).astype(np.float32),
                "lstm/i2h_b": r.standard_normal(4 * H).astype(np.float32),
                "lstm/gates_t_w": r.standard_normal((4 * H, H)).astype(np.float32),
                "lstm/gates_t_b": r.standard_normal(4 * H).astype(np.float32),
            }
        )
        workspace.RunNetOnce(m.net)
        results.append({k: workspace.FetchBlob(v) for k, v in grads.items()})
        if mem:
            scratch = workspace.FetchBlob("lstm/step_workspaces")
            assert all("lstm/gates_t" not in step for step in scratch.saved)
    assert set(results[0]) == set(results[1])
    for k, g in results[0].items():
        np.testing.assert_allclose(results[1][k], g, rtol=1e-6, atol=1e-7, err_msg=k)


def _simple_rnn(T, n, d, step_body, reference_step, seed):
    """Caffe2's recurrent_network_test.simple_rnn: a step net over ``input``, checked against
    the step applied in torch; the gradient of output 0 against torch autograd."""
    rng = np.random.default_rng(seed)
    model = model_helper.ModelHelper(name="external")
    input_blob, initial_input_blob = model.net.AddExternalInputs("input", "initial_input")
    step = model_helper.ModelHelper(name="step", param_model=model)
    input_t, output_t_prev = step.net.AddExternalInput("input_t", "output_t_prev")
    output_t = step_body(step.net, input_t, output_t_prev)
    step.net.AddExternalOutput(output_t)
    out_all, out_last = recurrent.recurrent_net(
        net=model.net,
        cell_net=step.net,
        inputs=[(input_t, input_blob)],
        initial_cell_inputs=[(output_t_prev, initial_input_blob)],
        links={output_t_prev: output_t},
        scope="test_rnn_sum_mull",
    )
    grads = _grad_map(model, [_loss_on(model, out_all, "r_all")])
    values = {
        "input": rng.standard_normal((T, n, d)).astype(np.float32),
        "initial_input": rng.standard_normal((1, n, d)).astype(np.float32),
        "r_all": rng.uniform(0.5, 1.5, (T, n, d)).astype(np.float32),
    }
    _feed(values)
    workspace.RunNetOnce(model.net)
    x, y = _t(values["input"]), _t(values["initial_input"])
    prev, outs = y[0], []
    for t in range(T):
        prev = reference_step(x[t], prev)
        outs.append(prev)
    outs = torch.stack(outs)
    (outs * _t(values["r_all"], False)).mean().backward()
    _check(workspace.FetchBlob(out_all), outs, "all", 1e-4)
    _check(workspace.FetchBlob(out_last), outs[-1:], "last", 1e-4)
    _check(workspace.FetchBlob(grads["input"]), x.grad, "input gradient", 1e-4)
    _check(workspace.FetchBlob(grads["initial_input"]), y.grad, "initial input gradient", 1e-4)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(T=st.integers(1, 4), n=st.integers(1, 5), d=st.integers(1, 5), seed=st.integers(0, 2**16))
def test_sum_mul(T, n, d, seed):
    workspace.ResetWorkspace()
    _simple_rnn(
        T, n, d,
        lambda net, x_t, prev: net.Mul([x_t, net.Sum([x_t, prev])]),
        lambda x_t, prev: x_t * (x_t + prev),
        seed,
    )  # fmt: skip


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(T=st.integers(1, 4), n=st.integers(1, 5), d=st.integers(1, 5), seed=st.integers(0, 2**16))
def test_mul(T, n, d, seed):
    workspace.ResetWorkspace()
    _simple_rnn(T, n, d, lambda net, x_t, prev: net.Mul([x_t, prev]), lambda x_t, prev: x_t * prev, seed)


def test_retrieve_step_blobs_copies_each_step():
    m = model_helper.ModelHelper(name="extract")
    step = model_helper.ModelHelper(name="extract_step", param_model=m)
    x_t, prev = step.net.AddExternalInput("input_t", "output_t_prev")
    out = step.net.Mul([x_t, prev], "output_t")
    inner = step.net.Tanh(out, "inner")
    final = step.net.Add([inner, prev], "final")
    step.net.AddExternalOutput(final)
    recurrent.recurrent_net(m.net, step.net, [(x_t, "input")], [(prev, "initial")], {prev: final}, scope="ex")
    m.AddGradientOperators([m.net.AveragedLoss("final_all", "l")])
    _feed({"input": np.ones((3, 2, 2), np.float32), "initial": np.ones((1, 2, 2), np.float32)})
    workspace.RunNetOnce(m.net)
    names = recurrent.retrieve_step_blobs(m.net, "extractTest")
    assert {f"extractTest_{b}{t}".encode() for t in range(3) for b in ("inner", "input_t")} <= set(names)
    np.testing.assert_allclose(workspace.FetchBlob("extractTest_inner0"), np.tanh(np.ones((1, 2, 2))), rtol=1e-6)
    np.testing.assert_array_equal(workspace.FetchBlob("extractTest_input_t2"), np.ones((1, 2, 2), np.float32))


def test_the_op_carries_caffe2s_arguments_and_round_trips_through_protobuf(tmp_path):
    m = model_helper.ModelHelper(name="proto_rt")
    h_all, *_ = rnn_cell.LSTM(m, "x", "lengths", ("h0", "c0"), 3, 4, scope="lstm")
    m.AddGradientOperators([m.net.AveragedLoss(h_all, "loss")])
    op = next(o for o in m.net.Proto().op if o.type == "RecurrentNetwork")
    args = {a.name: a for a in op.arg}
    assert args["step_net"].HasField("n") and args["backward_step_net"].HasField("n")
    assert [s.decode() for s in args["recurrent_states"].strings] == ["lstm/lstm/hidden_t_prev_states",
                                                                      "lstm/lstm/cell_t_prev_states"]  # fmt: skip
    assert list(args["link_offset"].ints) == [0, 1, 0, 1, 0] and args["enable_rnn_executor"].i == 1
    assert list(op.output)[-1] == "lstm/step_workspaces"
    path = tmp_path / "lstm.pb"
    convert.write_netdef(m.net.Proto(), path)
    back = convert.read_netdef(path)
    assert back.SerializeToString() == m.net.Proto().SerializeToString()
    nd = convert.load_net_file(path)  # Caffe2's leniency: brew's order/use_cudnn dropped, in the step nets too
    rnn = next(o for o in nd.ops if o.type == "RecurrentNetwork")
    step = an.NetDef.from_json(rnn.args["step_net"])
    assert [o.type for o in step.ops] == ["FC", "Sum", "LSTMUnit"] and "use_cudnn" not in step.ops[0].args
    edited = convert.op_from_asyncnet(dataclasses.replace(convert.op_to_asyncnet(op), name="edited"))
    assert {a.name: a.HasField("n") for a in edited.arg if a.name.endswith("step_net")} == {
        "step_net": True,
        "backward_step_net": True,
    }
    rng = np.random.default_rng(0)
    workspace.RunNetOnce(m.param_init_net)
    feeds = {
        "x": rng.standard_normal((2, 1, 3)).astype(np.float32),
        "h0": np.zeros((1, 1, 4), np.float32),
        "c0": np.zeros((1, 1, 4), np.float32),
        "lengths": np.array([2], np.int32),
    }
    _feed(feeds)
    workspace.RunNetOnce(m.net)
    first = workspace.FetchBlob(h_all)
    workspace.RunNetOnce(core.Net(back))
    np.testing.assert_array_equal(workspace.FetchBlob(h_all), first)


def test_a_step_net_in_protobuf_text_is_accepted():
    """Older Caffe2 passed ``step_net=str(cell_net.Proto())``: protobuf text in ``s``."""
    cell = core.Net("cell_text")
    x_t, acc_prev = cell.AddExternalInputs("x_t", "acc_prev")
    acc = cell.Add([acc_prev, x_t], "acc")
    cell.AddExternalOutputs(acc)
    net = core.Net("text_step")
    recurrent.recurrent_net(net, cell, [(x_t, "xs")], [(acc_prev, "acc0")], {acc_prev: acc}, forward_only=True)
    op = net.Proto().op[0]
    for a in op.arg:
        if a.name == "step_net":
            text = str(a.n)
            a.ClearField("n")
            a.s = text.encode()
    _feed({"xs": np.full((3, 1, 1), 2.0, np.float32), "acc0": np.zeros((1, 1, 1), np.float32)})
    workspace.RunNetOnce(net)
    np.testing.assert_array_equal(workspace.FetchBlob("acc_all").ravel(), [2, 4, 6])


def test_layer_norm_lstm_matches_torch():
    rng = np.random.default_rng(5)
    T, N, D, H = 3, 2, 3, 4
    m = model_helper.ModelHelper(name="ln_lstm")
    h_all, *_ = rnn_cell.LayerNormLSTM(m, "x", "lengths", ("h0", "c0"), D, H, scope="ln", forget_bias=1.0)
    grads = _grad_map(m, [_loss_on(m, h_all, "r_all")])
    workspace.RunNetOnce(m.param_init_net)
    feeds = {
        "x": rng.standard_normal((T, N, D)).astype(np.float32),
        "h0": rng.standard_normal((1, N, H)).astype(np.float32),
        "c0": rng.standard_normal((1, N, H)).astype(np.float32),
        "r_all": rng.uniform(0.5, 1.5, (T, N, H)).astype(np.float32),
        "lengths": np.array([3, 2], np.int32),
        "ln/gates_t_norm_scale": rng.uniform(0.5, 1.5, 4 * H).astype(np.float32),
        "ln/gates_t_norm_bias": rng.standard_normal(4 * H).astype(np.float32),
    }
    _feed(feeds)
    workspace.RunNetOnce(m.net)
    names = ["i2h_w", "i2h_b", "gates_t_w", "gates_t_b", "gates_t_norm_scale", "gates_t_norm_bias"]
    p = {n: _t(workspace.FetchBlob(f"ln/{n}")) for n in names}
    x, h0, c0 = _t(feeds["x"]), _t(feeds["h0"]), _t(feeds["c0"])
    pre = x @ p["i2h_w"].T + p["i2h_b"]
    h, c, hs = h0[0], c0[0], []
    for t in range(T):
        g = torch.nn.functional.layer_norm(pre[t] + h @ p["gates_t_w"].T + p["gates_t_b"], (4 * H,), eps=1e-4)
        g = g * p["gates_t_norm_scale"] + p["gates_t_norm_bias"]
        i, f = torch.sigmoid(g[:, :H]), torch.sigmoid(g[:, H : 2 * H] + 1.0)
        o, gg = torch.sigmoid(g[:, 2 * H : 3 * H]), torch.tanh(g[:, 3 * H :])
        c_new = f * c + i * gg
        valid = torch.tensor(feeds["lengths"] > t)[:, None]
        h, c = torch.where(valid, o * torch.tanh(c_new), h), torch.where(valid, c_new, c)
        hs.append(h)
    hs = torch.stack(hs)
    (hs * _t(feeds["r_all"], False)).mean().backward()
    _check(workspace.FetchBlob(h_all), hs, "hidden_all", 1e-4)
    for name, ref in [*((f"ln/{n}", t) for n, t in p.items()), ("x", x), ("h0", h0), ("c0", c0)]:
        _check(workspace.FetchBlob(grads[name]), ref.grad, f"gradient of {name}", 1e-4)


@pytest.mark.parametrize("linear_before_reset", [False, True])
@pytest.mark.parametrize("drop_states", [False, True])
def test_gru_matches_torch(linear_before_reset, drop_states):
    from caffe2.python import gru_cell

    rng = np.random.default_rng(9)
    T, N, D, H = 4, 3, 2, 3
    m = model_helper.ModelHelper(name="gru")
    h_all, h_last = gru_cell.GRU(
        m, "x", "lengths", ["h0"], D, H, scope="gru", drop_states=drop_states, linear_before_reset=linear_before_reset
    )
    grads = _grad_map(m, [_loss_on(m, h_all, "r_all")])
    workspace.RunNetOnce(m.param_init_net)
    feeds = {
        "x": rng.standard_normal((T, N, D)).astype(np.float32),
        "h0": rng.standard_normal((1, N, H)).astype(np.float32),
        "r_all": rng.uniform(0.5, 1.5, (T, N, H)).astype(np.float32),
        "lengths": np.array([4, 1, 3], np.int32),
    }
    for g in ("reset", "update", "output"):
        feeds[f"gru/{g}_gate_t_b"] = rng.standard_normal(H).astype(np.float32)
    _feed(feeds)
    workspace.RunNetOnce(m.net)
    names = ["i2h_w", "i2h_b", *(f"{g}_gate_t_{k}" for g in ("reset", "update", "output") for k in "wb")]
    p = {n: _t(workspace.FetchBlob(f"gru/{n}")) for n in names}
    x, h0 = _t(feeds["x"]), _t(feeds["h0"])
    pre = x @ p["i2h_w"].T + p["i2h_b"]
    h, hs = h0[0], []

    def fc(v, g):
        return v @ p[f"{g}_gate_t_w"].T + p[f"{g}_gate_t_b"]

    for t in range(T):
        xr, xu, xo = pre[t, :, :H], pre[t, :, H : 2 * H], pre[t, :, 2 * H :]
        r, u = torch.sigmoid(xr + fc(h, "reset")), torch.sigmoid(xu + fc(h, "update"))
        o = torch.tanh(xo + (r * fc(h, "output") if linear_before_reset else fc(r * h, "output")))
        valid = torch.tensor(feeds["lengths"] > t)[:, None]
        h = torch.where(valid, u * h + (1 - u) * o, torch.zeros_like(h) if drop_states else h)
        hs.append(h)
    hs = torch.stack(hs)
    (hs * _t(feeds["r_all"], False)).mean().backward()
    _check(workspace.FetchBlob(h_all), hs, "hidden_all")
    _check(workspace.FetchBlob(h_last), hs[-1:], "hidden_last")
    for name, ref in [*((f"gru/{n}", t) for n, t in p.items()), ("x", x), ("h0", h0)]:
        _check(workspace.FetchBlob(grads[name]), ref.grad, f"gradient of {name}")


def test_forward_only_lstm_has_no_backward_and_keeps_no_steps():
    """Caffe2's forward_only (as in its predictor-net test): no backward_step_net, nothing kept."""
    m = model_helper.ModelHelper(name="fwd_only")
    h_all, *_ = rnn_cell.LSTM(m, "x", "lengths", ("h0", "c0"), 3, 4, scope="lstm", forward_only=True)
    op = m.net.Proto().op[-1]
    assert op.type == "RecurrentNetwork" and "backward_step_net" not in {a.name for a in op.arg}
    workspace.RunNetOnce(m.param_init_net)
    _feed(
        {
            "x": np.ones((3, 2, 3), np.float32),
            "h0": np.zeros((1, 2, 4), np.float32),
            "c0": np.zeros((1, 2, 4), np.float32),
            "lengths": np.array([3, 3], np.int32),
        }
    )
    workspace.RunNetOnce(m.net)
    assert workspace.FetchBlob(h_all).shape == (3, 2, 4)
    assert workspace.FetchBlob("lstm/step_workspaces").saved == []


def test_dropout_cell_in_test_mode_passes_the_output_through():
    base = dict(input_size=3, hidden_size=4, forget_bias=0.0, memory_optimization=False)
    outputs = []
    for wrap in (False, True):
        workspace.ResetWorkspace()
        m = model_helper.ModelHelper(name=f"dropout_{wrap}")
        cell = rnn_cell.LSTMCell(name="lstm", **base)
        if wrap:
            cell = rnn_cell.DropoutCell(cell, dropout_ratio=0.5, is_test=1, name="drop")
        out, _ = cell.apply_over_sequence(m, "x", "lengths", ["h0", "c0"])
        assert ("with_dropout_mask" in str(out)) is wrap
        workspace.RunNetOnce(m.param_init_net)
        r = np.random.default_rng(0)
        _feed(
            {
                "x": r.standard_normal((3, 2, 3)).astype(np.float32),
                "h0": np.zeros((1, 2, 4), np.float32),
                "c0": np.zeros((1, 2, 4), np.float32),
                "lengths": np.array([3, 2], np.int32),
                "lstm/i2h_w": r.standard_normal((16, 3)).astype(np.float32),
                "lstm/gates_t_w": r.standard_normal((16, 4)).astype(np.float32),
            }
        )
        workspace.RunNetOnce(m.net)
        outputs.append(workspace.FetchBlob(out))
    np.testing.assert_array_equal(outputs[0], outputs[1])


@pytest.mark.parametrize("layer_norm", [False, True])
def test_milstm_matches_torch(layer_norm):
    rng = np.random.default_rng(13)
    T, N, D, H = 3, 2, 3, 2
    m = model_helper.ModelHelper(name="milstm")
    make = rnn_cell.LayerNormMILSTM if layer_norm else rnn_cell.MILSTM
    h_all, h_last, c_all, c_last = make(m, "x", "lengths", ("h0", "c0"), D, H, scope="mi", forget_bias=0.5)
    assert str(h_all) == "mi/hidden_t_intermediate_all"
    grads = _grad_map(m, [_loss_on(m, h_all, "r_all")])
    workspace.RunNetOnce(m.param_init_net)
    feeds = {
        "x": rng.standard_normal((T, N, D)).astype(np.float32),
        "h0": rng.standard_normal((1, N, H)).astype(np.float32),
        "c0": rng.standard_normal((1, N, H)).astype(np.float32),
        "r_all": rng.uniform(0.5, 1.5, (T, N, H)).astype(np.float32),
        "lengths": np.array([3, 1], np.int32),
    }
    for name in ("alpha", "beta1", "beta2", "b", "prev_t_b"):
        feeds[f"mi/{name}"] = rng.uniform(0.5, 1.5, 4 * H).astype(np.float32)
    _feed(feeds)
    workspace.RunNetOnce(m.net)
    names = ["i2h_w", "i2h_b", "prev_t_w", "prev_t_b", "alpha", "beta1", "beta2", "b"]
    names += ["gates_t_norm_scale", "gates_t_norm_bias"] if layer_norm else []
    p = {n: _t(workspace.FetchBlob(f"mi/{n}")) for n in names}
    x, h0, c0 = _t(feeds["x"]), _t(feeds["h0"]), _t(feeds["c0"])
    pre = x @ p["i2h_w"].T + p["i2h_b"]
    h, c, hs = h0[0], c0[0], []
    for t in range(T):
        prev = h @ p["prev_t_w"].T + p["prev_t_b"]
        g = (p["alpha"] * pre[t] + p["beta1"]) * prev + p["beta2"] * pre[t] + p["b"]
        if layer_norm:
            g = torch.nn.functional.layer_norm(g, (4 * H,), eps=1e-4) * p["gates_t_norm_scale"] + p["gates_t_norm_bias"]
        i, f = torch.sigmoid(g[:, :H]), torch.sigmoid(g[:, H : 2 * H] + 0.5)
        o, gg = torch.sigmoid(g[:, 2 * H : 3 * H]), torch.tanh(g[:, 3 * H :])
        c_new = f * c + i * gg
        valid = torch.tensor(feeds["lengths"] > t)[:, None]
        h, c = torch.where(valid, o * torch.tanh(c_new), h), torch.where(valid, c_new, c)
        hs.append(h)
    hs = torch.stack(hs)
    (hs * _t(feeds["r_all"], False)).mean().backward()
    _check(workspace.FetchBlob(h_all), hs, "hidden_all", 1e-4)
    _check(workspace.FetchBlob(c_last), c[None], "cell_last", 1e-4)
    for name, ref in [*((f"mi/{n}", t) for n, t in p.items()), ("x", x), ("h0", h0), ("c0", c0)]:
        _check(workspace.FetchBlob(grads[name]), ref.grad, f"gradient of {name}", 1e-4)


@pytest.mark.parametrize("suffix", [".pb", ".pbtxt"])
def test_cli_runs_a_recurrent_network_file(tmp_path, capsys, suffix):
    """``asyncnet run`` on a Caffe2 file holding RecurrentNetwork and its gradient (step nets in ``n``)."""
    from asyncnet.cli.main import main

    m = model_helper.ModelHelper(name="lstm_file")
    h_all, *_ = rnn_cell.LSTM(m, "x", "lengths", ("h0", "c0"), 3, 4, scope="lstm")
    m.AddGradientOperators([m.net.AveragedLoss(h_all, "loss")])
    path = tmp_path / f"lstm{suffix}"
    convert.write_netdef(m.net.Proto(), path)
    rng = np.random.default_rng(0)
    values = {
        "x": rng.standard_normal((4, 2, 3)).astype(np.float32),
        "h0": np.zeros((1, 2, 4), np.float32),
        "c0": np.zeros((1, 2, 4), np.float32),
        "lengths": np.array([4, 2], np.int32),
        "lstm/i2h_w": rng.standard_normal((16, 3)).astype(np.float32),
        "lstm/i2h_b": np.zeros(16, np.float32),
        "lstm/gates_t_w": rng.standard_normal((16, 4)).astype(np.float32),
        "lstm/gates_t_b": np.zeros(16, np.float32),
    }
    feeds = []
    for k, v in values.items():
        np.save(tmp_path / f"{k.replace('/', '_')}.npy", v)
        feeds += ["--feed", f"{k}={tmp_path / (k.replace('/', '_') + '.npy')}"]
    out = tmp_path / "out.npz"
    args = ["run", str(path), *feeds, "--fetch", "loss", "--fetch", "lstm/gates_t_w_grad", "--save", str(out)]
    assert main(args) == 0
    _feed(values)
    workspace.RunNetOnce(m.net)
    saved = np.load(out)
    np.testing.assert_allclose(saved["lstm/gates_t_w_grad"], workspace.FetchBlob("lstm/gates_t_w_grad"), rtol=1e-6)
    np.testing.assert_allclose(saved["loss"], workspace.FetchBlob("loss"), rtol=1e-6)
