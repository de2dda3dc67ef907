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
            _feed(ws, tr.batch(order[s:s + 128]))
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


def test_lookups_lead_the_forward_and_their_gradients_follow_the_bottom_mlps():
    """The op order the async executor sees (dlrm hoists the lookups; the fills keep their seeds):
    the lookups are the first ops, and in the backward the bottom MLP's gradients precede the
    tables' (the thread ending the interaction's gradient keeps the first ready chain)."""
    m = dlrm()
    net, _ = m.gradient_net()
    types = [op.type for op in net.ops]
    assert types[:3] == ["SparseLengthsSum"] * 3
    bottom = max(i for i, op in enumerate(net.ops) if op.type == "FCGradient" and op.inputs[1] == "bot1_w")
    assert bottom < min(i for i, t in enumerate(types) if t == "SparseLengthsSumGradient")
    fills = {op.outputs[0]: op.args.get("seed") for op in m.init_net.ops}
    assert [fills[p] for p in m.params] == list(range(len(m.params)))  # registration order: bottom MLP first
    assert m.params[:2] == ["bot1_w", "bot1_b"]


def test_each_table_update_shares_a_chain_with_its_gradient():
    """With sparse SGD each ScatterWeightedSum has one parent, its SparseLengthsSumGradient
    (neg_lr reaches it through a control input), so the pair is one executor chain; the
    learning-rate ops lead the net."""
    from asyncnet.exec.graph import build_graph

    net = dlrm().train_net(optimizer="sgd")
    assert [op.type for op in net.ops[:3]] == ["Iter", "LearningRate", "Scale"]
    g = build_graph([(op.inputs, op.outputs, op.control_inputs) for op in net.ops])
    pairs = [[net.ops[i].type for i in ch] for ch in g.chains if "ScatterWeightedSum" in [net.ops[i].type for i in ch]]
    assert pairs == [["SparseLengthsSumGradient", "ScatterWeightedSum"]] * 3
    adagrad = dlrm().train_net(optimizer="adagrad")  # no neg_lr: nothing moves
    assert [op.type for op in adagrad.ops[:1]] == ["SparseLengthsSum"]
