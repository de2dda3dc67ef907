"""TopK (against torch.topk and top_k_test.py's tie rule: equal values, smaller index first) and
Tile (against numpy.tile), their gradients against torch autograd and finite differences."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _c2run import run_op
from _gradcheck_helpers import check_all, weighted_mean_head
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncnet as an

pytestmark = pytest.mark.timeout(120)
FEW = settings(max_examples=15, deadline=None)


@FEW
@given(seed=st.integers(0, 2**16), shape=st.lists(st.integers(1, 4), min_size=1, max_size=3), data=st.data())
def test_top_k_matches_the_tie_rule_and_flattened_indices(seed, shape, data):
    x = np.random.default_rng(seed).integers(0, 3, shape).astype(np.float32)  # many ties
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    k = data.draw(st.integers(1, shape[axis]))
    v, i, flat = run_op("TopK", {"x": x}, ["v", "i", "f"], k=k, axis=axis)
    moved = np.moveaxis(x, axis, -1)
    order = np.array(
        [sorted(range(moved.shape[-1]), key=lambda j: (-row[j], j))[:k] for row in moved.reshape(-1, moved.shape[-1])]
    )
    expected_i = np.moveaxis(order.reshape(moved.shape[:-1] + (k,)), -1, axis)
    np.testing.assert_array_equal(i, expected_i)
    np.testing.assert_array_equal(v, np.take_along_axis(x, expected_i, axis=axis))
    np.testing.assert_array_equal(x.reshape(-1)[flat], v.reshape(-1))
    assert i.dtype == np.int64 and flat.dtype == np.int64


def test_top_k_gradient_matches_torch():
    x = np.random.default_rng(1).permutation(24).reshape(2, 3, 4).astype(np.float64)  # no ties
    r = np.random.default_rng(2).standard_normal((2, 2, 4))

    def build(net):
        net.TopK("x", ["v", "i"], k=2, axis=1)
        return weighted_mean_head(net, "v")

    check_all(build, lambda x, r: (torch.topk(x, 2, dim=1).values * r).mean(), {"x": x, "r": r}, ["x"])


def test_top_k_refuses_a_k_beyond_the_axis():
    with pytest.raises(an.OperatorError, match="expected k"):
        run_op("TopK", {"x": np.ones((2, 3), np.float32)}, ["v", "i"], k=4)


@pytest.mark.parametrize("as_inputs", [False, True])
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_tile_and_its_gradient(axis, as_inputs):
    rng = np.random.default_rng(axis)
    x = rng.standard_normal((2, 3, 2))
    reps = [1, 1, 1]
    reps[axis] = 3
    feeds = {"x": x}
    args = {"tiles": 3, "axis": axis}
    if as_inputs:
        feeds.update(t=np.array([3], np.int32), a=np.array([axis], np.int32))
        args = {}
    (y,) = run_op("Tile", dict(feeds), ["y"], **args)
    np.testing.assert_array_equal(y, np.tile(x, reps))
    feeds["r"] = rng.standard_normal(y.shape)

    def build(net):
        net.Tile([k for k in feeds if k != "r"], "y", **args)
        return weighted_mean_head(net, "y")

    check_all(build, lambda r, x, **_: (x.repeat(*reps) * r).mean(), feeds, ["x"])
