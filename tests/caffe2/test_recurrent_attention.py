"""rnn_cell.LSTMWithAttention (Regular, Recurrent and Dot attention) through RecurrentNetwork,
against the same decoder written in PyTorch: outputs and every gradient (torch autograd),
encoder positions past encoder_lengths masked; Caffe2's rnn_cell_test attention cases in this
suite's style."""

from __future__ import annotations

import numpy as np
import pytest

from caffe2.python import attention, core, model_helper, rnn_cell, workspace

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.timeout(300)


def _t(x, grad=True):
    return torch.tensor(np.asarray(x), dtype=torch.float64, requires_grad=grad)


def _torch_decoder(kind, p, x, h0, c0, ctx0, enc, enc_lengths, dec_lengths, H, forget_bias):
    """The decoder step by step: LSTM on [h, context], then attention with the new h."""
    pre = x @ p["att/decoder/i2h_w"].T + p["att/decoder/i2h_b"]
    enc_t = enc.permute(1, 2, 0)  # [N, E, T_enc]
    w_enc = None if kind == "dot" else enc @ p["att/weighted_encoder_outputs_w"].T + p["att/weighted_encoder_outputs_b"]
    h, c, ctx = h0[0], c0[0], ctx0[0]
    hs, cs, ctxs = [], [], []
    t_enc = enc.shape[0]
    mask = torch.arange(t_enc)[None, :] < torch.tensor(enc_lengths)[:, None]  # [N, T_enc]
    for t in range(x.shape[0]):
        g = pre[t] + torch.cat([h, ctx], 1) @ p["att/decoder/gates_t_w"].T + p["att/decoder/gates_t_b"]
        i, f = torch.sigmoid(g[:, :H]), torch.sigmoid(g[:, H : 2 * H] + forget_bias)
        o, gg = torch.sigmoid(g[:, 2 * H : 3 * H]), torch.tanh(g[:, 3 * H :])
        c_new = f * c + i * gg
        valid = torch.tensor(dec_lengths > t)[:, None]
        h, c = torch.where(valid, o * torch.tanh(c_new), h), torch.where(valid, c_new, c)
        if kind == "dot":
            logits = torch.einsum("nej,ne->nj", enc_t, h)
        else:
            wh = h @ p["att/weighted_decoder_hidden_state_w"].T + p["att/weighted_decoder_hidden_state_b"]
            if kind == "recurrent":
                wh = (
                    wh + ctx @ p["att/weighted_prev_attention_context_w"].T + p["att/weighted_prev_attention_context_b"]
                )
            total = torch.tanh(w_enc + wh)  # [T_enc, N, E]
            logits = (total @ p["att/attention_logits_w"].T + p["att/attention_logits_b"])[..., 0].T  # [N, T_enc]
        weights = torch.softmax(logits.masked_fill(~mask, float("-inf")), dim=1)
        ctx = torch.einsum("nej,nj->ne", enc_t, weights)
        hs.append(h)
        cs.append(c)
        ctxs.append(ctx)
    return torch.stack(hs), torch.stack(cs), torch.stack(ctxs)


@pytest.mark.parametrize("kind", ["regular", "recurrent", "dot"])
def test_lstm_with_attention_matches_torch(kind):
    rng = np.random.default_rng({"regular": 1, "recurrent": 2, "dot": 3}[kind])
    T, T_enc, N, D, H = 3, 4, 2, 3, 4
    E = H if kind == "dot" else 5
    attention_type = {
        "regular": attention.AttentionType.Regular,
        "recurrent": attention.AttentionType.Recurrent,
        "dot": attention.AttentionType.Dot,
    }[kind]
    m = model_helper.ModelHelper(name=f"att_{kind}")
    outs = rnn_cell.LSTMWithAttention(
        m, "x", "dec_lengths", "h0", "c0", "ctx0", encoder_output_dim=E, encoder_outputs="enc",
        encoder_lengths="enc_lengths", decoder_input_dim=D, decoder_state_dim=H, scope="att",
        attention_type=attention_type, forget_bias=1.0,
    )  # fmt: skip
    h_all, _, _, c_last, ctx_all, _ = outs
    losses = []
    for blob, r in ((h_all, "r_h"), (ctx_all, "r_ctx")):
        losses.append(m.net.AveragedLoss(m.net.Mul([blob, r], str(blob) + "_w"), str(blob) + "_loss"))
    grads = {str(k): str(v) for k, v in m.AddGradientOperators(losses).items()}
    workspace.RunNetOnce(m.param_init_net)
    feeds = {
        "x": rng.standard_normal((T, N, D)).astype(np.float32),
        "h0": rng.standard_normal((1, N, H)).astype(np.float32),
        "c0": rng.standard_normal((1, N, H)).astype(np.float32),
        "ctx0": rng.standard_normal((1, N, E)).astype(np.float32),
        "enc": rng.standard_normal((T_enc, N, E)).astype(np.float32),
        "enc_lengths": np.array([4, 2], np.int32),
        "dec_lengths": np.array([3, 2], np.int32),
        "r_h": rng.uniform(0.5, 1.5, (T, N, H)).astype(np.float32),
        "r_ctx": rng.uniform(0.5, 1.5, (T, N, E)).astype(np.float32),
    }
    for name in [*map(str, m.GetParams()), "att/attention_logits_b"]:
        if name.endswith("_b") and workspace.HasBlob(name):
            feeds[name] = rng.uniform(-0.5, 0.5, workspace.FetchBlob(name).shape).astype(np.float32)
    for k, v in feeds.items():
        workspace.FeedBlob(k, v)
    workspace.RunNetOnce(m.net)
    p = {str(n): _t(workspace.FetchBlob(n)) for n in m.GetParams()}
    if kind != "dot":  # freeze_bias: a computed parameter, not trained (no gradient)
        assert "att/attention_logits_b" not in p
        p["att/attention_logits_b"] = _t(workspace.FetchBlob("att/attention_logits_b"), grad=False)
    x, h0, c0, ctx0, enc = (_t(feeds[k]) for k in ("x", "h0", "c0", "ctx0", "enc"))
    hs, cs, ctxs = _torch_decoder(kind, p, x, h0, c0, ctx0, enc, feeds["enc_lengths"], feeds["dec_lengths"], H, 1.0)
    loss = (hs * _t(feeds["r_h"], False)).mean() + (ctxs * _t(feeds["r_ctx"], False)).mean()
    loss.backward()
    tol = dict(rtol=1e-4, atol=2e-5)
    np.testing.assert_allclose(workspace.FetchBlob(h_all), hs.detach().numpy(), **tol, err_msg="hidden_all")
    np.testing.assert_allclose(workspace.FetchBlob(c_last), cs[-1:].detach().numpy(), **tol, err_msg="cell_last")
    np.testing.assert_allclose(workspace.FetchBlob(ctx_all), ctxs.detach().numpy(), **tol, err_msg="context_all")
    checked = 0
    for name, ref in [*p.items(), ("x", x), ("h0", h0), ("c0", c0), ("ctx0", ctx0), ("enc", enc)]:
        if ref.grad is None:  # a frozen bias: no gradient in either
            continue
        np.testing.assert_allclose(workspace.FetchBlob(grads[name]), ref.grad.numpy(), **tol, err_msg=name)
        checked += 1
    assert checked >= len(p) + 3 - (kind != "dot")


def _seq2seq_decoder(memory_optimization):
    """seq2seq's decoder: AttentionCell over a MultiRNNCell of two LSTMCells, attention
    blobs recomputed on the backward pass (seq2seq_util builds it this way)."""
    E, H, D = 3, 3, 2
    m = model_helper.ModelHelper(name=f"seq2seq_{memory_optimization}")
    cells = [
        rnn_cell.LSTMCell(input_size=D if i == 0 else H, hidden_size=H, forget_bias=0.0,
                          memory_optimization=False, name=f"decoder/layer{i}", forward_only=False)
        for i in range(2)
    ]  # fmt: skip
    decoder = rnn_cell.MultiRNNCell(cells, name="decoder")
    cell = rnn_cell.AttentionCell(
        encoder_output_dim=E, encoder_outputs="enc", encoder_lengths="enc_lengths", decoder_cell=decoder,
        decoder_state_dim=H, name="attention_decoder", attention_type=attention.AttentionType.Recurrent,
        weighted_encoder_outputs=None, attention_memory_optimization=memory_optimization,
    )  # fmt: skip
    states = ["h0_0", "c0_0", "h0_1", "c0_1", "ctx0"]
    outputs_with_grads = [2 * i for i in (*decoder.output_indices, 4)]
    out, _ = cell.apply_over_sequence(m, "x", "dec_lengths", states, outputs_with_grads=outputs_with_grads)
    loss = m.net.AveragedLoss(m.net.Mul([out, "r"], "out_r"), "loss")
    grads = {str(k): str(v) for k, v in m.AddGradientOperators([loss]).items()}
    return m, out, grads


def test_seq2seq_style_decoder_gradients_match_finite_differences():
    T, T_enc, N, D, H, E = 3, 4, 2, 2, 3, 3
    rng = np.random.default_rng(21)
    feeds = {
        "x": rng.standard_normal((T, N, D)),
        "enc": rng.standard_normal((T_enc, N, E)),
        "enc_lengths": np.array([4, 3], np.int32),
        "dec_lengths": np.array([3, 2], np.int32),
        "ctx0": rng.standard_normal((1, N, E)),
        "r": rng.uniform(0.5, 1.5, (T, N, H + E)),
        **{f"{k}0_{i}": rng.standard_normal((1, N, H)) for k in "hc" for i in range(2)},
    }
    results = []
    for mem in (False, True):
        workspace.ResetWorkspace()
        m, out, grads = _seq2seq_decoder(mem)
        workspace.RunNetOnce(m.param_init_net)
        if not results:  # every parameter (the frozen attention bias too) random, in float64
            made = [b for b in workspace.Blobs() if getattr(workspace.FetchBlob(b), "dtype", None) == np.float32]
            params = {str(b): rng.standard_normal(workspace.FetchBlob(b).shape) * 0.5 for b in made}
            fixed = {**feeds, **params}
        for k, v in fixed.items():
            workspace.FeedBlob(k, v if v.dtype.kind in "iu" else v.astype(np.float64))
        workspace.RunNetOnce(m.net)
        results.append((m, {k: workspace.FetchBlob(g) for k, g in grads.items()}, float(workspace.FetchBlob("loss"))))
    (m, g_plain, loss0), (_, g_mem, loss1) = results
    assert loss0 == pytest.approx(loss1, rel=1e-12)
    assert set(g_plain) == set(g_mem)
    for k in g_plain:
        np.testing.assert_allclose(g_mem[k], g_plain[k], rtol=1e-9, atol=1e-12, err_msg=k)
    fwd = core.Net(m.net.Proto())
    del fwd.Proto().op[[op.type for op in fwd.Proto().op].index("AveragedLoss") + 1 :]
    probe = [("enc", (1, 0, 2)), ("x", (2, 1, 1)), ("ctx0", (0, 1, 2)), ("h0_1", (0, 0, 1))]
    probe += [(str(p), tuple(0 for _ in fixed[str(p)].shape)) for p in m.GetParams()]
    eps = 1e-6
    for name, idx in probe:
        base = fixed[name].astype(np.float64)
        vals = []
        for sign in (1, -1):
            v = base.copy()
            v[idx] += sign * eps
            workspace.FeedBlob(name, v)
            workspace.RunNetOnce(fwd)
            vals.append(float(workspace.FetchBlob("loss")))
        workspace.FeedBlob(name, base)
        num = (vals[0] - vals[1]) / (2 * eps)
        assert g_plain[name][idx] == pytest.approx(num, rel=1e-4, abs=1e-9), name


def test_milstm_with_attention_cell_runs_and_has_gradients():
    m = model_helper.ModelHelper(name="milstm_att")
    cell = rnn_cell.MILSTMWithAttentionCell(
        encoder_output_dim=3, encoder_outputs="enc", decoder_input_dim=2, decoder_state_dim=4, name="mi_att",
        attention_type=attention.AttentionType.Regular, weighted_encoder_outputs=None, forget_bias=0.0,
        lstm_memory_optimization=False, attention_memory_optimization=False,
    )  # fmt: skip
    out, states = cell.apply_over_sequence(m, "x", "lengths", ["h0", "c0", "ctx0"], outputs_with_grads=[0, 4])
    grads = m.AddGradientOperators([m.net.AveragedLoss(out, "loss")])
    workspace.RunNetOnce(m.param_init_net)
    rng = np.random.default_rng(4)
    shapes = {"x": (3, 2, 2), "enc": (5, 2, 3), "h0": (1, 2, 4), "c0": (1, 2, 4), "ctx0": (1, 2, 3)}
    for k, s in shapes.items():
        workspace.FeedBlob(k, rng.standard_normal(s).astype(np.float32))
    workspace.FeedBlob("lengths", np.array([3, 1], np.int32))
    workspace.RunNetOnce(m.net)
    assert workspace.FetchBlob(out).shape == (3, 2, 7)
    for name in ("mi_att/decoder/alpha", "mi_att/decoder/prev_t_w", "enc", "x"):
        g = workspace.FetchBlob(grads[name])
        assert g.shape == shapes.get(name, g.shape) and np.isfinite(g).all() and np.abs(g).sum() > 0, name
