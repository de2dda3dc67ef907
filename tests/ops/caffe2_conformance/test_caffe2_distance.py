"""CosineSimilarity, L1Distance, MarginRankingCriterion, CosineEmbeddingCriterion and
ChannelShuffle against torch (cosine_similarity, margin_ranking_loss, channel_shuffle) and the
references of Caffe2's tests (distance_op_test.py, margin_ranking_criterion_op_test.py's and
cosine_embedding_criterion_op_test.py's ref_cec, channel_shuffle_test.py), their gradients
against torch autograd and finite differences."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _c2run import run_op
from _gradcheck_helpers import check_all, weighted_mean_head
from hypothesis import given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.timeout(120)
FEW = settings(max_examples=10, deadline=None)


@FEW
@given(seed=st.integers(0, 2**16), rows=st.booleans())
def test_cosine_similarity_and_l1_distance_match_torch(seed, rows):
    rng = np.random.default_rng(seed)
    shape = (3, 5) if rows else (5,)
    x, y = rng.uniform(-1, 1, shape), rng.uniform(-1, 1, shape)
    x += 0.05 * np.sign(x - y)  # away from the kinks of |x - y|
    tx, ty = torch.tensor(x).reshape(-1, 5), torch.tensor(y).reshape(-1, 5)
    (c,) = run_op("CosineSimilarity", {"x": x, "y": y}, ["c"])
    np.testing.assert_allclose(c, torch.nn.functional.cosine_similarity(tx, ty).numpy(), rtol=1e-10)
    (d,) = run_op("L1Distance", {"x": x, "y": y}, ["d"])
    np.testing.assert_allclose(d, (tx - ty).abs().sum(1).numpy(), rtol=1e-12)
    r = rng.standard_normal(c.shape)
    feeds = {"x": x, "y": y, "r": r}
    for op, fn in (
        ("CosineSimilarity", lambda x, y: torch.nn.functional.cosine_similarity(x.reshape(-1, 5), y.reshape(-1, 5))),
        ("L1Distance", lambda x, y: (x - y).reshape(-1, 5).abs().sum(1)),
    ):

        def build(net, op=op):
            getattr(net, op)(["x", "y"], "o")
            return weighted_mean_head(net, "o")

        check_all(build, lambda x, y, r, fn=fn: (fn(x, y) * r).mean(), feeds, ["x", "y"])


@FEW
@given(seed=st.integers(0, 2**16), margin=st.floats(-0.5, 0.5))
def test_ranking_criteria_match_torch_and_their_references(seed, margin):
    rng = np.random.default_rng(seed)
    x1, x2 = rng.standard_normal(8), rng.standard_normal(8)
    y = rng.choice([-1, 1], 8).astype(np.int32)
    x1[np.abs(margin - y * (x1 - x2)) < 0.1] += 0.2
    (loss,) = run_op("MarginRankingCriterion", {"a": x1, "b": x2, "y": y}, ["l"], margin=margin)
    np.testing.assert_allclose(loss, np.maximum(-y * (x1 - x2) + margin, 0), rtol=1e-12)
    feeds = {"a": x1, "b": x2, "y": y, "r": rng.standard_normal(8)}

    def build(net):
        net.MarginRankingCriterion(["a", "b", "y"], "l", margin=margin)
        return weighted_mean_head(net, "l")

    def torch_fn(a, b, y, r):
        return (torch.nn.functional.margin_ranking_loss(a, b, y.double(), margin=margin, reduction="none") * r).mean()

    check_all(build, torch_fn, feeds, ["a", "b"])
    s = rng.uniform(-1, 1, 8)
    s[np.abs(s - margin) < 0.1] += 0.2
    (out,) = run_op("CosineEmbeddingCriterion", {"s": s, "y": y}, ["o"], margin=margin)
    np.testing.assert_allclose(out, (1 - s) * (y == 1) + np.maximum(s - margin, 0) * (y == -1), rtol=1e-12)
    feeds = {"s": s, "y": y, "r": rng.standard_normal(8)}

    def build_cec(net):
        net.CosineEmbeddingCriterion(["s", "y"], "o", margin=margin)
        return weighted_mean_head(net, "o")

    def torch_cec(s, y, r):
        return (torch.where(y == 1, 1 - s, torch.clamp(s - margin, min=0)) * r).mean()

    check_all(build_cec, torch_cec, feeds, ["s"])


@pytest.mark.parametrize("order", ["NCHW", "NHWC"])
@pytest.mark.parametrize("group", [1, 2, 3])
def test_channel_shuffle_matches_torch_and_its_gradient(order, group):
    rng = np.random.default_rng(group)
    x = rng.standard_normal((2, 6, 3, 2))
    fed = x.transpose(0, 2, 3, 1) if order == "NHWC" else x
    (y,) = run_op("ChannelShuffle", {"x": fed}, ["y"], group=group, order=order)
    ref = torch.nn.functional.channel_shuffle(torch.tensor(x), group).numpy()
    np.testing.assert_array_equal(y, ref.transpose(0, 2, 3, 1) if order == "NHWC" else ref)
    feeds = {"x": fed, "r": rng.standard_normal(fed.shape)}

    def build(net):
        net.ChannelShuffle("x", "y", group=group, order=order)
        return weighted_mean_head(net, "y")

    def torch_fn(x, r):
        xt = x.permute(0, 3, 1, 2) if order == "NHWC" else x
        yt = torch.nn.functional.channel_shuffle(xt, group)
        return ((yt.permute(0, 2, 3, 1) if order == "NHWC" else yt) * r).mean()

    check_all(build, torch_fn, feeds, ["x"])


@pytest.mark.parametrize("with_lengths", [False, True])
def test_pair_wise_loss_matches_torch_and_finite_differences(with_lengths):
    rng = np.random.default_rng(8)
    x = rng.standard_normal((5, 1))
    label = np.array([1.0, 0.0, 2.0, 2.0, 0.0])
    lengths = [3, 2] if with_lengths else [5]
    feeds = {"x": x, "l": label}
    if with_lengths:
        feeds["n"] = np.array(lengths, np.int32)
    (y,) = run_op("PairWiseLoss", dict(feeds), ["y"])

    def torch_loss(x, l):
        out, start = [], 0
        for n in lengths:
            terms = [
                torch.nn.functional.softplus(
                    (1.0 if l[start + i] > l[start + j] else -1.0) * (x[start + j] - x[start + i])
                )
                for i in range(n)
                for j in range(i)
                if l[start + i] != l[start + j]
            ]
            out.append(torch.stack(terms).mean() if terms else torch.zeros((), dtype=x.dtype))
            start += n
        return torch.stack(out)

    np.testing.assert_allclose(y, torch_loss(torch.tensor(x.reshape(-1)), label).numpy(), rtol=1e-12)
    feeds["r"] = rng.standard_normal(len(lengths))

    def build(net):
        net.PairWiseLoss([k for k in feeds if k != "r"], "y")
        return weighted_mean_head(net, "y")

    check_all(build, lambda x, l, r, n=None: (torch_loss(x.reshape(-1), l) * r).mean(), feeds, ["x"])
