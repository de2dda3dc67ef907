"""rnn_cell.LSTM: Caffe2's names and shapes, the states it returns against a numpy LSTM, and
training through it (char_rnn's use)."""

from __future__ import annotations

import numpy as np
import pytest

from caffe2.python import brew, model_helper, optimizer, rnn_cell, utils, workspace

pytestmark = pytest.mark.timeout(120)


def _sigmoid(z):
    return 1 / (1 + np.exp(-z))


def _numpy_lstm(x, h, c, w_ih, w_hh, b_ih, b_hh):
    """Caffe2's LSTM recurrence (LSTMUnit's gate order i, f, o, g)."""
    hs, cs = [], []
    for t in range(x.shape[0]):
        i, f, o, g = np.split(x[t] @ w_ih.T + b_ih + h @ w_hh.T + b_hh, 4, axis=1)
        c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
        h = _sigmoid(o) * np.tanh(c)
        hs.append(h)
        cs.append(c)
    return np.stack(hs), np.stack(cs)


def test_lstm_names_shapes_and_values():
    rng = np.random.default_rng(0)
    T, N, D, H = 4, 2, 3, 5
    m = model_helper.ModelHelper(name="rnn_values")
    outs = rnn_cell.LSTM(m, "x", "seq_lengths", ("h0", "c0"), D, H, scope="LSTM")
    assert [str(o) for o in outs] == [
        "LSTM/hidden_state_all",
        "LSTM/hidden_state_last",
        "LSTM/cell_state_all",
        "LSTM/cell_state_last",
    ]
    assert [str(p) for p in m.params] == ["LSTM/i2h_w", "LSTM/i2h_b", "LSTM/gates_t_w", "LSTM/gates_t_b"]
    workspace.RunNetOnce(m.param_init_net)
    for name in ("LSTM/i2h_b", "LSTM/gates_t_b"):
        workspace.FeedBlob(name, rng.standard_normal(4 * H).astype(np.float32))
    x = rng.standard_normal((T, N, D)).astype(np.float32)
    h0, c0 = rng.standard_normal((1, N, H)).astype(np.float32), rng.standard_normal((1, N, H)).astype(np.float32)
    for name, value in (("x", x), ("h0", h0), ("c0", c0), ("seq_lengths", np.full(N, T, np.int32))):
        workspace.FeedBlob(name, value)
    workspace.RunNetOnce(m.net)
    w = {n: workspace.FetchBlob(f"LSTM/{n}") for n in ("i2h_w", "i2h_b", "gates_t_w", "gates_t_b")}
    assert w["i2h_w"].shape == (4 * H, D) and w["gates_t_w"].shape == (4 * H, H)
    hs, cs = _numpy_lstm(x, h0[0], c0[0], w["i2h_w"], w["gates_t_w"], w["i2h_b"], w["gates_t_b"])
    np.testing.assert_allclose(workspace.FetchBlob("LSTM/hidden_state_all"), hs, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(workspace.FetchBlob("LSTM/cell_state_all"), cs, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(workspace.FetchBlob("LSTM/hidden_state_last"), hs[-1:], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(workspace.FetchBlob("LSTM/cell_state_last"), cs[-1:], rtol=1e-4, atol=1e-5)


def test_training_through_the_lstm_lowers_the_loss():
    rng = np.random.default_rng(1)
    T, N, D, H = 6, 4, 5, 8
    m = model_helper.ModelHelper(name="rnn_train")
    hidden_all, _, _, _ = rnn_cell.LSTM(m, "x", "seq_lengths", ("h0", "c0"), D, H, scope="LSTM")
    out = brew.fc(m, hidden_all, None, dim_in=H, dim_out=D, axis=2)
    softmax = m.net.Softmax(out, "softmax", axis=2)
    flat, _ = m.net.Reshape(softmax, ["flat", "_"], shape=[-1, D])
    loss = m.net.AveragedLoss(m.net.LabelCrossEntropy([flat, "target"], "xent"), "loss")
    m.AddGradientOperators([loss])
    assert "LSTM/i2h_w" in {str(p) for p in m.param_to_grad}
    optimizer.build_sgd(m, base_learning_rate=0.5)
    seq = rng.integers(0, D, T * N + 1)
    x = np.eye(D, dtype=np.float32)[seq[:-1]].reshape(T, N, D)
    for name, value in (
        ("x", x),
        ("h0", np.zeros((1, N, H), np.float32)),
        ("c0", np.zeros((1, N, H), np.float32)),
        ("seq_lengths", np.full(N, T, np.int32)),
        ("target", seq[:-1].astype(np.int32)),
    ):
        workspace.FeedBlob(name, value)
    workspace.RunNetOnce(m.param_init_net)
    workspace.CreateNet(m.net)
    workspace.RunNet(m.net)
    first = float(workspace.FetchBlob("loss"))
    workspace.RunNet(m.net, 60)
    assert float(workspace.FetchBlob("loss")) < 0.7 * first


def test_utils_debug_reraises_without_a_terminal():
    @utils.debug
    def fails():
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        fails()
