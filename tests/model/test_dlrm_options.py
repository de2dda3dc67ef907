"""The zoo DLRM's options against a torch module that computes what facebookresearch/dlrm's
DLRM_Net computes with the same flags (written here; checked against the reference script):
the forward, the loss and every gradient with copied weights, training steps with SGD and the
row-wise sparse Adagrad, and the learning-rate schedule."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import asyncnet as an
from asyncnet.autodiff import GradientSlice
from asyncnet.model.zoo.dlrm import click_log, dlrm, lr_schedule, md_dims

pytestmark = pytest.mark.timeout(120)
TABLES = (30, 7, 50)


class RefDLRM(torch.nn.Module):
    """DLRM_Net's forward and loss: bottom MLP (ReLU on every layer), sum embedding bags
    (per-row weights gathered by id; quotient-remainder or mixed-dimension tables), dot
    interaction (the lower triangle row by row, with the diagonal when ``itself``) or cat, top
    MLP (ReLU, then a sigmoid on the last layer), the probability clamped to [t, 1 - t] by a
    threshold, then BCELoss, MSELoss, or BCE weighted by the click's weight."""

    def __init__(self, params, tables, opts):
        super().__init__()
        self.o = {
            "interaction": "dot",
            "interaction_itself": False,
            "loss": "bce",
            "loss_weights": (1.0, 1.0),
            "loss_threshold": 0.0,
            "weighted_pooling": None,
            "qr_collisions": 0,
            "qr_operation": "mult",
            "qr_threshold": 200,
            "md_dims": None,
            "md_threshold": 200,
            **opts,
        }
        self.p = torch.nn.ParameterDict(
            {k.replace(".", "_"): torch.nn.Parameter(torch.tensor(v).clone()) for k, v in params.items()}
        )
        self.tables = tables

    def mlp(self, x, prefix, last_sigmoid):
        i = 1
        while f"{prefix}{i}_w" in self.p:
            x = x @ self.p[f"{prefix}{i}_w"].T + self.p[f"{prefix}{i}_b"]
            last = f"{prefix}{i + 1}_w" not in self.p
            x = torch.sigmoid(x) if last and last_sigmoid else torch.relu(x)
            i += 1
        return x

    def bag(self, table, ids, offsets, w):
        return F.embedding_bag(ids, self.p[table], offsets, mode="sum", per_sample_weights=w)

    def pooled(self, k, n, ids, offsets):
        o = self.o
        w = None
        if o["weighted_pooling"] == "learned":
            w = self.p[f"emb{k}_row_w"][ids]
        elif o["weighted_pooling"] == "fixed":
            w = torch.ones(n, dtype=self.p["bot1_w"].dtype)[ids]
        if o["qr_collisions"] and n > o["qr_threshold"]:
            c = o["qr_collisions"]
            q = self.bag(f"emb{k}_q_table", ids // c, offsets, w)
            r = self.bag(f"emb{k}_r_table", ids % c, offsets, w)
            return {"mult": lambda: q * r, "add": lambda: q + r, "concat": lambda: torch.cat([q, r], 1)}[
                o["qr_operation"]
            ]()
        if o["md_dims"] is not None and n > o["md_threshold"] and f"emb{k}_proj_w" in self.p:
            return self.bag(f"emb{k}_md_table", ids, offsets, w) @ self.p[f"emb{k}_proj_w"].T
        return self.bag(f"emb{k}_table", ids, offsets, w)

    def forward(self, feeds):
        x = self.mlp(torch.tensor(feeds["dense"]), "bot", False)
        ly = []
        for k, n in enumerate(self.tables):
            lengths = torch.tensor(feeds[f"lengths{k}"]).long()
            ly.append(self.pooled(k, n, torch.tensor(feeds[f"ids{k}"]), torch.cumsum(lengths, 0) - lengths))
        if self.o["interaction"] == "dot":
            t = torch.cat([x, *ly], dim=1).view(x.shape[0], -1, x.shape[1])
            z = torch.bmm(t, t.transpose(1, 2))
            extra = 1 if self.o["interaction_itself"] else 0
            pairs = [(i, j) for i in range(z.shape[1]) for j in range(i + extra)]
            r = torch.cat([x, z[:, [i for i, _ in pairs], [j for _, j in pairs]]], dim=1)
        else:
            r = torch.cat([x, *ly], dim=1)
        p = self.mlp(r, "top", True)
        t = self.o["loss_threshold"]
        if 0.0 < t < 1.0:
            p = torch.clamp(p, min=t, max=1.0 - t)
        return p

    def loss(self, feeds):
        p, y = self(feeds), torch.tensor(feeds["click"])
        kind = self.o["loss"]
        if kind == "mse":
            return F.mse_loss(p, y)
        if kind == "bce":
            return F.binary_cross_entropy(p, y)
        ws = torch.tensor(self.o["loss_weights"], dtype=torch.float64)[y.view(-1).long()].view_as(y)
        return (ws * F.binary_cross_entropy(p, y, reduction="none")).mean()


def build(opts, dtype=np.float64, tables=TABLES, dim=4):
    m = dlrm(num_dense=5, table_sizes=tables, dim=dim, bottom=(6,), top=(7,), dtype=dtype, **opts)
    ws = an.Workspace()
    ws.run_net_once(m.init_net)
    return m, ws


def feeds_of(tables=TABLES, n=24, seed=3, dtype=np.float64):
    log = click_log(n, num_dense=5, table_sizes=tables, max_ids=3, seed=seed)
    f = log.batch(range(n))
    f["dense"] = f["dense"].astype(dtype)
    f["click"] = f["click"].astype(dtype)
    return f


def grads_of(m, ws, feeds):
    net, grads = m.gradient_net()
    for k, v in feeds.items():
        ws.feed(k, v)
    ws.run_net_once(net)
    out = {}
    for p, g in grads.items():
        if isinstance(g, GradientSlice):
            dense = np.zeros(m.shapes[p])
            np.add.at(dense, ws.fetch(g.indices), ws.fetch(g.values))
            out[p] = dense
        else:
            out[p] = ws.fetch(g)
    return float(ws.fetch("loss")), ws.fetch("prob"), out


OPTIONS = [
    {},
    {"interaction_itself": True},
    {"interaction": "cat"},
    {"loss": "mse"},
    {"loss": "wbce", "loss_weights": (0.3, 2.0)},
    {"loss_threshold": 0.45},
    {"loss": "mse", "loss_threshold": 0.3},
    {"weighted_pooling": "learned"},
    {"weighted_pooling": "fixed"},
    {"qr_collisions": 4, "qr_threshold": 10},
    {"qr_collisions": 4, "qr_threshold": 10, "qr_operation": "add", "weighted_pooling": "learned"},
    {"qr_collisions": 3, "qr_threshold": 10, "qr_operation": "concat", "interaction": "cat"},
    {"md_dims": [2, 4, 1], "md_threshold": 10},
    {"md_dims": [2, 4, 1], "md_threshold": 5, "interaction": "cat"},
]


@pytest.mark.parametrize("opts", OPTIONS, ids=[repr(o) for o in OPTIONS])
def test_forward_loss_and_gradients_match_the_reference(opts):
    m, ws = build(opts)
    params = {p: ws.fetch(p) for p in m.params}
    if opts.get("loss_threshold"):  # some probabilities past the clamp, some inside
        params["top2_b"] = params["top2_b"] + np.array([0.3])
    for p, v in params.items():
        ws.feed(p, v)
    feeds = feeds_of()
    loss, prob, grads = grads_of(m, ws, feeds)
    ref = RefDLRM(params, TABLES, opts).double()
    ref_loss = ref.loss(feeds)
    ref_loss.backward()
    np.testing.assert_allclose(prob, ref(feeds).detach().numpy(), rtol=1e-12, atol=1e-14)
    assert loss == pytest.approx(ref_loss.item(), rel=1e-12, abs=1e-14)
    assert set(grads) == set(params)
    for p in params:
        np.testing.assert_allclose(grads[p], ref.p[p].grad.numpy(), rtol=1e-10, atol=1e-12, err_msg=p)


def test_the_clamp_stops_the_gradient_and_bce_from_the_logit_stays_exact():
    """Past the clamp both give zero gradient; without a clamp a saturated sigmoid still has
    asyncnet's exact loss (the reference's BCELoss caps log(0) at -100)."""
    m, ws = build({"loss_threshold": 0.1})
    ws.feed("top2_b", np.array([60.0]))
    feeds = feeds_of()
    feeds["click"][:] = 0.0
    _, prob, grads = grads_of(m, ws, feeds)
    assert np.allclose(prob, 0.9) and not np.any(grads["top2_b"])
    m2, ws2 = build({})
    ws2.feed("top2_b", np.array([60.0]))
    loss2, _, grads2 = grads_of(m2, ws2, feeds)
    assert loss2 > 55 and grads2["top2_b"][0] == pytest.approx(1.0, rel=1e-6)


def test_bad_options_are_refused():
    for opts, match in [
        ({"interaction": "sum"}, "interaction"),
        ({"loss": "hinge"}, "loss"),
        ({"loss_threshold": 0.7}, "loss_threshold"),
        ({"weighted_pooling": "yes"}, "weighted_pooling"),
        ({"qr_collisions": 4, "qr_operation": "concat"}, "concat"),
        ({"md_dims": [1, 2]}, "md_dims"),
    ]:
        with pytest.raises(an.NetDefinitionError, match=match):
            dlrm(table_sizes=TABLES, **opts)


def ref_schedule(base, warm, start, n, steps):
    """dlrm's LRPolicyScheduler, step counts 1, 2, ...: warm-up, quadratic decay, hold the last."""
    out, last = [], base
    for s in range(1, steps + 1):
        if s < warm:
            last = base * (1.0 - (warm - s) / warm)
            out.append(last)
        elif start <= s < start + n:
            last = max(1e-7, base * ((n - (s - start)) / n) ** 2)
            out.append(last)
        else:
            out.append(last if n > 0 else base)
    return out


@pytest.mark.parametrize("warm, start, n", [(5, 8, 6), (0, 0, 0), (4, 4, 3), (3, 10, 0)])
def test_lr_schedule_is_dlrms(warm, start, n):
    net = an.Net("lr")
    net.Iter(["iter"], ["iter"])
    args = lr_schedule(warm, start, n)
    net.LearningRate(["iter"], ["lr"], base_lr=0.2, policy=args.pop("lr_policy"), dtype="float64", **args)
    ws = an.Workspace()
    ws.feed("iter", np.zeros(1, np.int64))
    ws.create_net(net)
    got = []
    for _ in range(20):
        ws.run_net("lr")
        got.append(float(ws.fetch("lr")))
    np.testing.assert_allclose(got, ref_schedule(0.2, warm, start, n, 20), rtol=1e-12)


def test_lr_schedule_refuses_a_decay_before_the_warm_up_ends():
    net = an.Net("lr")
    with pytest.raises(an.AsyncNetError, match="decay_start_iter"):
        net.LearningRate(
            ["iter"], ["lr"], base_lr=0.2, policy="warmupPolyDecay", num_iter=5, decay_start_iter=2, num_decay_iter=3
        )
        an.Workspace().create_net(net)


def ref_rowwise_step(param, moment, grad, lr, eps=1e-10):
    """dlrm's RWSAdagrad on a dense table gradient of the rows a batch touched (coalesced):
    moment += mean(g^2) per touched row; param -= lr g / (sqrt(moment) + eps)."""
    rows = torch.nonzero(grad.abs().sum(1)).view(-1)
    g = grad[rows]
    moment[rows] += g.pow(2).mean(1)
    param.data[rows] -= lr * (g / (moment[rows].sqrt() + eps)[:, None])


@pytest.mark.parametrize("optimizer", ["sgd", "rwsadagrad"])
def test_training_steps_match_the_reference(optimizer):
    opts = {"weighted_pooling": "learned", "interaction_itself": True}
    m, ws = build(opts)
    params = {p: ws.fetch(p).copy() for p in m.params}
    ref = RefDLRM(params, TABLES, opts).double()
    lr = 0.05
    net = m.train_net(optimizer=optimizer, lr=lr, lr_args=lr_schedule(2, 3, 4))
    ws.run_net_once(m.init_net)
    for p, v in params.items():
        ws.feed(p, v.copy())
    ws.create_net(net)
    dense_state = {p: torch.zeros_like(t) for p, t in ref.p.items()}
    row_state = {p: torch.zeros(t.shape[0], dtype=t.dtype) for p, t in ref.p.items() if p.endswith("_table")}
    rates = ref_schedule(lr, 2, 3, 4, 6)
    for step in range(6):
        feeds = feeds_of(seed=10 + step)
        for k, v in feeds.items():
            ws.feed(k, v)
        ws.run_net("train")
        ref.zero_grad()
        loss = ref.loss(feeds)
        loss.backward()
        assert float(ws.fetch("loss")) == pytest.approx(loss.item(), rel=1e-9)
        with torch.no_grad():
            for p, t in ref.p.items():
                if optimizer == "sgd":
                    t -= rates[step] * t.grad
                elif p in row_state:
                    ref_rowwise_step(t, row_state[p], t.grad, rates[step])
                else:  # torch.optim.Adagrad's step
                    dense_state[p] += t.grad * t.grad
                    t -= rates[step] * t.grad / (dense_state[p].sqrt() + 1e-10)
    for p in params:
        np.testing.assert_allclose(ws.fetch(p), ref.p[p].detach().numpy(), rtol=1e-9, atol=1e-11, err_msg=p)


def test_md_dims_is_the_alpha_power_rule():
    assert md_dims([100, 10, 1000], 16, 0.5) == [5, 16, 2]
    assert md_dims([100, 10, 1000], 16, 0.5, round_dims=True) == [4, 16, 2]
    assert md_dims([4, 4], 8, 0.3) == [8, 8]


@pytest.mark.parametrize("optimizer", ["momentum", "adam"])
def test_momentum_and_adam_train_as_torch_optim_on_dense_table_gradients(optimizer):
    """Momentum and Adam have no sparse form: each table's gradient is densified, and every
    parameter (every table row included) takes torch.optim.SGD(momentum=0.9)'s or Adam's step."""
    opts = {"weighted_pooling": "learned"}
    m, ws = build(opts)
    params = {p: ws.fetch(p).copy() for p in m.params}
    ref = RefDLRM(params, TABLES, opts).double()
    lr = 0.05
    net = m.train_net(optimizer=optimizer, lr=lr, momentum=0.9)
    assert "SparseToDense" in [op.type for op in net.ops]
    ws.run_net_once(m.init_net)
    for p, v in params.items():
        ws.feed(p, v.copy())
    ws.create_net(net)
    ps = list(ref.p.values())
    opt = torch.optim.SGD(ps, lr=lr, momentum=0.9) if optimizer == "momentum" else torch.optim.Adam(ps, lr=lr)
    for step in range(5):
        feeds = feeds_of(seed=20 + step)
        for k, v in feeds.items():
            ws.feed(k, v)
        ws.run_net("train")
        opt.zero_grad()
        loss = ref.loss(feeds)
        loss.backward()
        opt.step()
        assert float(ws.fetch("loss")) == pytest.approx(loss.item(), rel=1e-9)
    for p in params:
        np.testing.assert_allclose(ws.fetch(p), ref.p[p].detach().numpy(), rtol=1e-7, atol=1e-10, err_msg=p)
