"""rnn_cell.LSTMWithAttention (Regular, Recurrent and Dot attention) through RecurrentNetwork,
against the same decoder written in PyTorch: outputs and every gradient (torch autograd),
encoder positions past encoder_lengths masked; Caffe2's rnn_cell_test attention cases in this
suite's style."""

from __future__ import annotations

import numpy as np
import pytest

from caffe2.python import attention, model_helper, rnn_cell, workspace

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
