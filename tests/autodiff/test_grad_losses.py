"""Losses and Accuracy against numpy and torch, and the loss gradients against autograd and finite differences."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from _gradcheck_helpers import check_all, weighted_mean_head
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncnet as an

pytestmark = pytest.mark.timeout(60)
FEW = settings(max_examples=12, deadline=None)
batch = st.tuples(st.integers(1, 6), st.integers(1, 6), st.integers(0, 2**16))


def run(build, feeds):
    net = an.Net("n")
    build(net)
    ws = an.Workspace()
    for k, v in feeds.items():
        ws.feed(k, v)
    ws.run_net_once(net)
    return ws


@FEW
@given(nds=batch, label_dtype=st.sampled_from([np.int32, np.int64]), column=st.booleans())
def test_softmax_with_loss_forward_vs_torch(nds, label_dtype, column):
    n, d, seed = nds
    rng = np.random.default_rng(seed)
    x = (rng.normal(size=(n, d)) * 5).astype(np.float32)
    label = rng.integers(0, d, n).astype(label_dtype)
    ws = run(
        lambda net: net.SoftmaxWithLoss(["x", "label"], ["p", "loss"]),
        {"x": x, "label": label.reshape(n, 1) if column else label},
    )
    loss = ws.fetch("loss")
    assert loss.shape == () and loss.dtype == np.float32
    np.testing.assert_allclose(
        loss, F.cross_entropy(torch.tensor(x), torch.tensor(label).long()).item(), rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(ws.fetch("p"), torch.softmax(torch.tensor(x), 1).numpy(), rtol=1e-5, atol=1e-7)


def test_softmax_with_loss_is_stable_for_huge_logits():
    x = np.array([[1000.0, 0.0, -1000.0], [0.0, 1e4, 0.0]], np.float32)
    ws = run(
        lambda net: net.SoftmaxWithLoss(["x", "label"], ["p", "loss"]), {"x": x, "label": np.array([2, 1], np.int32)}
    )
    assert np.isfinite(ws.fetch("loss")) and np.isclose(ws.fetch("loss"), 1000.0)


@FEW
@given(nds=batch)
def test_softmax_with_loss_gradient(nds):
    n, d, seed = nds
    rng = np.random.default_rng(seed)
    feeds = {"x": rng.normal(size=(n, d)), "label": rng.integers(0, d, n).astype(np.int32)}
    check_all(
        lambda net: net.SoftmaxWithLoss(["x", "label"], ["p", "loss"])[1],
        lambda x, label: F.cross_entropy(x, label.long()),
        feeds,
        ["x"],
    )


@FEW
@given(nds=batch)
def test_label_cross_entropy_and_averaged_loss(nds):
    n, d, seed = nds
    rng = np.random.default_rng(seed)
    feeds = {"x": rng.normal(size=(n, d)), "label": rng.integers(0, d, n).astype(np.int64)}

    def build(net):
        p = net.Softmax("x", "p")
        xent = net.LabelCrossEntropy([p, "label"], "xent")
        return net.AveragedLoss(xent, "loss")

    check_all(build, lambda x, label: F.nll_loss(torch.log_softmax(x, 1), label), feeds, ["x"])
    ws = run(
        lambda net: net.LabelCrossEntropy(["p", "label"], "xent"),
        {"p": np.array([[0.25, 0.75], [1.0, 0.0]]), "label": np.array([1, 1], np.int32)},
    )
    np.testing.assert_allclose(ws.fetch("xent"), [-np.log(0.75), -np.log(1e-20)])


@FEW
@given(shape=st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple), seed=st.integers(0, 2**16))
def test_squared_l2(shape, seed):
    rng = np.random.default_rng(seed)
    feeds = {"x": rng.normal(size=shape), "y": rng.normal(size=shape), "r": rng.normal(size=shape[:1])}
    ws = run(lambda net: net.SquaredL2(["x", "y"], "d"), feeds)
    diff = (feeds["x"] - feeds["y"]).reshape(shape[0], -1)
    np.testing.assert_allclose(ws.fetch("d"), 0.5 * (diff**2).sum(1))

    def build(net):
        return weighted_mean_head(net, net.SquaredL2(["x", "y"], "d"))

    def tfn(x, y, r):
        return (0.5 * ((x - y) ** 2).reshape(shape[0], -1).sum(1) * r).mean()

    check_all(build, tfn, feeds, ["x", "y"])


@FEW
@given(nds=batch, k=st.integers(1, 4))
def test_accuracy_vs_torch_topk(nds, k):
    n, d, seed = nds
    k = min(k, d)
    rng = np.random.default_rng(seed)
    pred = rng.normal(size=(n, d)).astype(np.float32)
    label = rng.integers(0, d, n).astype(np.int32)
    ws = run(lambda net: net.Accuracy(["pred", "label"], "acc", top_k=k), {"pred": pred, "label": label})
    acc = ws.fetch("acc")
    topk = torch.topk(torch.tensor(pred), k, dim=1).indices.numpy()
    assert acc.shape == () and acc.dtype == np.float32
    np.testing.assert_allclose(acc, (topk == label[:, None]).any(1).mean())


def test_accuracy_ties_go_to_the_lower_index_like_argmax():
    pred = np.array([[0.5, 0.5], [0.5, 0.5]], np.float32)
    ws = run(lambda net: net.Accuracy(["pred", "label"], "acc"), {"pred": pred, "label": np.array([0, 1], np.int32)})
    assert float(ws.fetch("acc")) == 0.5


@pytest.mark.parametrize(
    "label,match",
    [(np.array([0, 3]), "class ids in"), (np.array([0.0, 1.0]), "int32 or int64"), (np.array([0, 1, 1]), "shape")],
)
def test_bad_labels_are_operator_errors(label, match):
    with pytest.raises(an.OperatorError, match=match):
        run(
            lambda net: net.SoftmaxWithLoss(["x", "label"], ["p", "loss"]),
            {"x": np.zeros((2, 3), np.float32), "label": label},
        )
