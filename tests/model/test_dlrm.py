"""DLRM: AUC against the generated log's known optimum and the AUC helper (its torch twin: test_zoo.py)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncnet as an
from asyncnet.model.zoo.dlrm import auc, click_log, dlrm, log_loss

pytestmark = pytest.mark.timeout(120)


def _feed(ws, feeds):
    for k, v in feeds.items():
        ws.feed(k, v)


def test_dlrm_auc_near_the_optimum():
    """Test AUC within 0.02 of the ground truth's, log loss within 0.05 of its (README: the full figures)."""
    tr, te = click_log(16000, seed=0), click_log(4000, seed=1)
    m = dlrm()
    train, ev = m.train_net(optimizer="adagrad", lr=0.05), m.eval_net()
    ws = an.Workspace()
    ws.run_net_once(m.init_net)
    ws.create_net(train)
    for e in range(2):
        order = np.random.default_rng([0, e]).permutation(len(tr))
        for s in range(0, len(order) - 127, 128):
            _feed(ws, tr.batch(order[s : s + 128]))
            ws.run_net("train")
    _feed(ws, te.batch(range(len(te))))
    ws.run_net_once(ev)
    prob = ws.fetch("prob")
    assert auc(te.clicks, prob) >= auc(te.clicks, te.p) - 0.02
    assert log_loss(te.clicks, prob) <= log_loss(te.clicks, te.p) + 0.05


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 5)), min_size=2, max_size=40))
def test_auc_is_the_pairwise_probability(rows):
    labels = np.array([r[0] for r in rows])
    scores = np.array([r[1] for r in rows], float)
    if labels.all() or not labels.any():
        with pytest.raises(ValueError, match="both classes"):
            auc(labels, scores)
        return
    pos, neg = scores[labels], scores[~labels]
    want = ((pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()) / (len(pos) * len(neg))
    assert auc(labels, scores) == pytest.approx(want)


def test_click_log_is_a_fixed_truth():
    a, b = click_log(500, seed=0), click_log(500, seed=1)
    assert not np.array_equal(a.dense, b.dense)
    again = click_log(500, seed=0)
    np.testing.assert_array_equal(a.p, again.p)
    assert abs(a.clicks.mean() - a.p.mean()) < 0.1


def test_the_bottom_mlp_leads_the_forward_then_the_lookups():
    """The op order the async executor sees: the bottom MLP's ops first (the caller takes that
    root), then the lookups (the pool thread's); the fills keep their registration seeds."""
    m = dlrm()
    net, _ = m.gradient_net()
    types = [op.type for op in net.ops]
    assert types[:7] == ["FC", "Relu", "FC", "Relu"] + ["SparseLengthsSum"] * 3
    fills = {op.outputs[0]: op.args.get("seed") for op in m.init_net.ops}
    assert [fills[p] for p in m.params] == list(range(len(m.params)))  # registration order: bottom MLP first
    assert m.params[:2] == ["bot1_w", "bot1_b"]


def _steps(m, steps=6, optimizer="sgd"):
    """Loss bytes of ``steps`` train steps and the parameters' bytes after them."""
    log = click_log(64 * steps, seed=3)
    net = m.train_net(optimizer=optimizer, lr=0.5)
    with an.Workspace() as ws:
        ws.run_net_once(m.init_net)
        ws.create_net(net)
        losses = []
        for s in range(steps):
            _feed(ws, log.batch(range(s * 64, s * 64 + 64)))
            ws.run_net(net.name)  # async: the caller helps, beside one pool thread
            losses.append(np.asarray(ws.fetch("loss")).tobytes())
        return losses, {p: np.asarray(ws.fetch(p)).tobytes() for p in m.params}


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad"])
def test_async_dlrm_splits_its_fc_gradients_with_the_same_bits(optimizer):
    """On an async net type with wide layers each FC gradient is split (dX first, dW and db
    beside it); simple and async, split or not, give byte-identical losses and parameters."""
    split = dlrm(net_type="async_scheduling", num_workers=1, bottom=(256,))
    net, grads = split.gradient_net()
    assert split.split_fc_gradients and not dlrm().split_fc_gradients
    assert not dlrm(net_type="async_scheduling").split_fc_gradients  # the zoo's 16-wide layers: not worth 3 ops each
    fcg = [op for op in net.ops if op.type == "FCGradient"]
    assert fcg and all(len(op.outputs) == 2 for op in fcg)
    dxs = [i for i, op in enumerate(net.ops) if op.type == "MatMul"]
    assert len(dxs) == 3  # top2, top1, bot2 (bot1's input is the data: no dX)
    for i in dxs:  # each layer's dX comes before its FCGradient (same dY and W) and does not wait for it
        dy, w = net.ops[i].inputs
        grad = next(j for j, op in enumerate(net.ops) if op.type == "FCGradient" and list(op.inputs[1:]) == [w, dy])
        assert i < grad and not net.ops[i].control_inputs
    ref = _steps(dlrm(), optimizer=optimizer)
    assert _steps(dlrm(split_fc_gradients=True), optimizer=optimizer) == ref
    assert _steps(dlrm(net_type="async_scheduling", num_workers=1, split_fc_gradients=True), optimizer=optimizer) == ref
    assert (
        _steps(dlrm(net_type="async_scheduling", num_workers=2, split_fc_gradients=False), optimizer=optimizer) == ref
    )


def test_each_table_update_is_one_chain_fused_with_its_gradient():
    """With sparse SGD each table's update reads the pooled gradient itself
    (SparseSGDFusedWithSparseLengthsSumGradient: no SparseLengthsSumGradient left), and is an
    executor chain of its own that another thread can take; the learning-rate ops lead the net."""
    from asyncnet.exec.graph import build_graph

    net = dlrm().train_net(optimizer="sgd")
    assert [op.type for op in net.ops[:3]] == ["Iter", "LearningRate", "Scale"]
    assert "SparseLengthsSumGradient" not in [op.type for op in net.ops]
    g = build_graph([(op.inputs, op.outputs, op.control_inputs) for op in net.ops])
    fused = "SparseSGDFusedWithSparseLengthsSumGradient"
    chains = [[net.ops[i].type for i in ch] for ch in g.chains if fused in [net.ops[i].type for i in ch]]
    assert chains == [[fused]] * 3
    adagrad = dlrm().train_net(optimizer="adagrad")  # no neg_lr: nothing moves
    assert [op.type for op in adagrad.ops[:1]] == ["FC"]
