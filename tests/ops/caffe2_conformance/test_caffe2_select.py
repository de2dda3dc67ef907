"""Conditional, Assert, Find, PrependDim/MergeDim, CrossEntropy and
WeightedSigmoidCrossEntropyWithLogits against the references of Caffe2's tests
(conditional_test.py, assert_test.py, find_op_test.py: the last position, prepend_dim_test.py,
cross_entropy_ops_test.py's soft_label_xentr_ref and weighted_sigmoid_xentr_logit_ref), the
gradients against torch autograd and finite differences; DotProduct on N-D inputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _c2run import run_op
from _gradcheck_helpers import autodiff_grads, check_all, numeric_grads, weighted_mean_head

import asyncnet as an

pytestmark = pytest.mark.timeout(120)


def test_conditional_picks_rows():
    rng = np.random.default_rng(0)
    t, f = rng.standard_normal((4, 2, 3)), rng.standard_normal((4, 2, 3))
    c = np.array([True, False, False, True])
    (y,) = run_op("Conditional", {"c": c, "t": t, "f": f}, ["y"])
    np.testing.assert_array_equal(y, np.stack([t[0], f[1], f[2], t[3]]))


def test_assert_passes_on_all_true_and_fails_otherwise():
    ws = an.Workspace()
    ws.feed("ok", np.array([1, 2], np.int32))
    ws.feed("bad", np.array([True, False]))
    ok, bad = an.Net("ok"), an.Net("bad")
    ok.Assert(["ok"], [])
    bad.Assert(["bad"], [], error_msg="the flags")
    ws.run_net_once(ok)
    with pytest.raises(an.OperatorError, match="the flags"):
        ws.run_net_once(bad)


def test_find_gives_the_last_position_or_missing_value():
    idx = np.array([3, 1, 3, 7], np.int64)
    (pos,) = run_op("Find", {"i": idx, "q": np.array([[3, 5], [7, 1]], np.int64)}, ["p"], missing_value=-9)
    np.testing.assert_array_equal(pos, [[2, -9], [3, 1]])


def test_prepend_dim_and_merge_dim_round_trip_with_gradient():
    x = np.random.default_rng(1).standard_normal((6, 2))
    (y,) = run_op("PrependDim", {"x": x}, ["y"], dim_size=3)
    np.testing.assert_array_equal(y, x.reshape(3, 2, 2))
    (back,) = run_op("MergeDim", {"y": y}, ["x"])
    np.testing.assert_array_equal(back, x)
    r = np.random.default_rng(2).standard_normal((3, 2, 2))

    def build(net):
        net.PrependDim("x", "y", dim_size=3)
        return weighted_mean_head(net, "y")

    check_all(build, lambda x, r: (x.reshape(3, 2, 2) * r).mean(), {"x": x, "r": r}, ["x"])


def test_dot_product_flattens_trailing_dims():
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal((4, 2, 3)), rng.standard_normal((4, 2, 3))
    (z,) = run_op("DotProduct", {"x": x, "y": y}, ["z"])
    np.testing.assert_allclose(z, (x * y).reshape(4, -1).sum(1))


def test_cross_entropy_with_soft_labels_and_gradient():
    rng = np.random.default_rng(4)
    x = rng.uniform(0.05, 1, (3, 4))
    label = rng.uniform(0, 1, (3, 4))
    (y,) = run_op("CrossEntropy", {"x": x, "l": label}, ["y"])
    np.testing.assert_allclose(y, -(label * np.log(x)).sum(1))
    feeds = {"x": x, "l": label, "r": rng.standard_normal(3)}

    def build(net):
        net.CrossEntropy(["x", "l"], "y")
        return weighted_mean_head(net, "y")

    check_all(build, lambda x, l, r: (-(l * x.log()).sum(1) * r).mean(), feeds, ["x"])


def test_weighted_sigmoid_cross_entropy_matches_torch():
    rng = np.random.default_rng(5)
    logits, targets = rng.standard_normal((3, 4)), rng.choice([0.0, 1.0], (3, 4))
    weights = rng.uniform(0.1, 1, (3, 4))
    feeds = {"x": logits, "t": targets, "w": weights}
    (y,) = run_op("WeightedSigmoidCrossEntropyWithLogits", dict(feeds), ["y"])

    def torch_xent(x, t, w):
        return torch.nn.functional.binary_cross_entropy_with_logits(x, t, weight=w, reduction="none").mean(-1)

    np.testing.assert_allclose(y, torch_xent(*(torch.tensor(v) for v in (logits, targets, weights))).numpy())
    feeds["r"] = rng.standard_normal(3)

    def build(net):
        net.WeightedSigmoidCrossEntropyWithLogits(["x", "t", "w"], "y")
        return weighted_mean_head(net, "y")

    check_all(build, lambda x, t, w, r: (torch_xent(x, t, w) * r).mean(), feeds, ["x"])


@pytest.mark.parametrize("with_lengths", [False, True])
def test_sparse_to_dense_mask_and_its_gradient(with_lengths):
    rng = np.random.default_rng(6)
    ids = np.array([5, 7, 9, 5, 2, 7], np.int64)  # 9 is outside the mask; 5 repeats in row 0
    values, default = rng.standard_normal((6, 2)), rng.standard_normal(2)
    feeds = {"i": ids, "v": values, "d": default}
    if with_lengths:
        feeds["l"] = np.array([4, 2], np.int32)
    out, present = run_op("SparseToDenseMask", dict(feeds), ["o", "p"], mask=[7, 5, 2], return_presence_mask=True)
    if with_lengths:
        expected = np.array([[values[1], values[3], default], [values[5], default, values[4]]])
        np.testing.assert_array_equal(present, [[True, True, False], [True, False, True]])
    else:
        expected = np.array([values[5], values[3], values[4]])
        assert present.all()
    np.testing.assert_array_equal(out, expected)
    feeds["r"] = rng.standard_normal(out.shape)

    def build(net):
        net.SparseToDenseMask([k for k in feeds if k != "r"], "o", mask=[7, 5, 2])
        return weighted_mean_head(net, "o")

    loss, grads = autodiff_grads(build, feeds, ["v"])
    np.testing.assert_allclose(grads["v"], numeric_grads(build, feeds, ["v"])["v"], atol=1e-8)
