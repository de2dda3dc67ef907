"""Shape ops: forwards against numpy, gradients against torch autograd and finite differences."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _gradcheck_helpers import check_all, weighted_mean_head
from _nn_helpers import rand, run
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncnet as an

pytestmark = pytest.mark.timeout(60)
FEW = settings(max_examples=8, deadline=None)
shapes = st.lists(st.integers(1, 4), min_size=2, max_size=4).map(tuple)


def test_reshape_caffe2_rules():
    x = np.arange(24.0).reshape(2, 3, 4)
    y, old = run("Reshape", [x], 2, shape=[0, -1, 2])
    np.testing.assert_array_equal(y, x.reshape(2, 6, 2))
    assert old.dtype == np.int64 and list(old) == [2, 3, 4]
    y2, _ = run("Reshape", [x, np.array([4, -1], np.int64)], 2)
    np.testing.assert_array_equal(y2, x.reshape(4, 6))
    for bad in ([5, -1], [-1, -1], [0, 0, 0, 0]):
        with pytest.raises(an.OperatorError, match="reshape|infer|-1|copies"):
            run("Reshape", [x], 2, shape=bad)


def test_reshape_out_of_place_copies_in_place_views():
    ws = an.Workspace()
    x = np.arange(6.0)
    ws.feed("x", x)
    net = an.Net("r")
    net.Reshape("x", ["y", "s"], shape=[2, 3])
    ws.run_net_once(net)
    assert not np.shares_memory(ws.fetch("y"), x)
    net2 = an.Net("r2")
    net2.Reshape("x", ["x", "s"], shape=[3, 2])
    ws.run_net_once(net2)
    assert ws.fetch("x").shape == (3, 2) and np.shares_memory(ws.fetch("x"), x)


@FEW
@given(shape=shapes, seed=st.integers(0, 2**16))
def test_reshape_flatten_grad(shape, seed):
    feeds = {"x": rand(seed, shape), "r": rand(seed + 1, (int(np.prod(shape)),))}

    def build(net):
        net.Reshape("x", ["y", "old"], shape=[-1])
        net.Flatten("x", "f", axis=1)
        net.Reshape("f", ["f1", "old2"], shape=[-1])
        net.Add(["y", "f1"], "s")
        return weighted_mean_head(net, "s")

    check_all(build, lambda x, r: ((x.reshape(-1) * 2) * r).mean(), feeds, ["x"])


@FEW
@given(shape=shapes, seed=st.integers(0, 2**16), data=st.data())
def test_transpose(shape, seed, data):
    axes = data.draw(st.permutations(range(len(shape))))
    x = rand(seed, shape)
    np.testing.assert_array_equal(run("Transpose", [x], axes=list(axes)), x.transpose(axes))
    np.testing.assert_array_equal(run("Transpose", [x]), x.T)
    out_shape = tuple(shape[a] for a in axes)
    feeds = {"x": x, "r": rand(seed + 1, out_shape)}
    check_all(
        lambda net: weighted_mean_head(net, net.Transpose("x", "y", axes=list(axes))),
        lambda x, r: (x.permute(*axes) * r).mean(),
        feeds,
        ["x"],
    )


@FEW
@given(
    n=st.integers(1, 3),
    sizes=st.lists(st.integers(1, 3), min_size=1, max_size=3),
    axis=st.sampled_from([0, 1, -1]),
    seed=st.integers(0, 2**16),
)
def test_concat_split(n, sizes, axis, seed):
    base = [2, 3, 2]
    parts = []
    for i, s in enumerate(sizes):
        shape = list(base)
        shape[axis] = s
        parts.append(rand(seed + i, tuple(shape)))
    y, info = run("Concat", parts, 2, axis=axis)
    np.testing.assert_array_equal(y, np.concatenate(parts, axis=axis))
    assert info.dtype == np.int32 and list(info) == sizes
    pieces = run("Split", [y, info], len(sizes), axis=axis)
    for p, q in zip(pieces if len(sizes) > 1 else [pieces], parts):
        np.testing.assert_array_equal(p, q)
    names = [f"x{i}" for i in range(len(parts))]
    feeds = {k: v for k, v in zip(names, parts)} | {"r": rand(seed + 9, y.shape)}

    def build(net):
        net.Concat(names, ["y", "info"], axis=axis)
        return weighted_mean_head(net, "y")

    check_all(build, lambda r, **xs: (torch.cat([xs[k] for k in names], axis) * r).mean(), feeds, names)


def test_concat_add_axis_and_errors():
    a, b = np.ones((2, 3)), np.zeros((2, 3))
    y, info = run("Concat", [a, b], 2, axis=1, add_axis=1)
    np.testing.assert_array_equal(y, np.stack([a, b], axis=1))
    assert list(info) == [1, 1]
    with pytest.raises(an.OperatorError, match="except along axis 1"):
        run("Concat", [a, np.ones((3, 3))], 2, axis=1)
    with pytest.raises(an.OperatorError, match="dtype"):
        run("Concat", [a, b.astype(np.float32)], 2)


@FEW
@given(seed=st.integers(0, 2**16), drop=st.integers(0, 2), add_axis=st.booleans())
def test_split_grad_with_an_unused_output(seed, drop, add_axis):
    x = rand(seed, (3, 3, 2))
    outs = ["a", "b", "c"]
    kept = [o for i, o in enumerate(outs) if i != drop]
    feeds = {"x": x}
    shape = (3, 2) if add_axis else (3, 1, 2)
    for i, o in enumerate(kept):
        feeds[f"r{o}"] = rand(seed + 1 + i, shape)

    def build(net):
        net.Split("x", outs, axis=1, add_axis=add_axis) if add_axis else net.Split("x", outs, axis=1, split=[1, 1, 1])
        for o in kept:
            net.Mul([o, f"r{o}"], f"m{o}")
        net.Sum([f"m{o}" for o in kept], "s")
        return net.AveragedLoss("s", "loss")

    def tfn(x, **r):
        pieces = torch.split(x, 1, dim=1)
        idx = [i for i in range(3) if i != drop]
        terms = [(pieces[i].reshape(shape) * r[f"r{outs[i]}"]) for i in idx]
        return sum(terms).mean()

    check_all(build, tfn, feeds, ["x"])


def test_split_equal_and_errors():
    x = np.arange(12.0).reshape(2, 6)
    a, b, c = run("Split", [x], 3, axis=1)
    np.testing.assert_array_equal(b, x[:, 2:4])
    with pytest.raises(an.OperatorError, match="equal pieces"):
        run("Split", [x], 4, axis=1)
    with pytest.raises(an.OperatorError, match="summing to 6"):
        run("Split", [x], 2, axis=1, split=[1, 2])


def test_slice_caffe2_negative_rule():
    x = np.arange(20.0).reshape(4, 5)
    np.testing.assert_array_equal(run("Slice", [x], starts=[1, 0], ends=[-1, -2]), x[1:, :4])
    np.testing.assert_array_equal(run("Slice", [x], starts=[0, 2], ends=[-1, 3]), x[:, 2:3])
    starts, ends = np.array([2], np.int32), np.array([3], np.int32)
    np.testing.assert_array_equal(run("Slice", [x, starts, ends]), x[2:3])
    with pytest.raises(an.OperatorError, match="start <= end"):
        run("Slice", [x], starts=[3], ends=[1])


@FEW
@given(seed=st.integers(0, 2**16), s0=st.integers(0, 2), s1=st.integers(-4, 1))
def test_slice_grad(seed, s0, s1):
    x = rand(seed, (3, 4, 2))
    hi1 = 4 + 1 + s1 if s1 < 0 else 4  # s1 is the end of dim 1, Caffe2's rule
    lo1 = 0 if hi1 > 0 else 0
    window = (slice(s0, 3), slice(lo1, hi1))
    if hi1 - lo1 <= 0:
        return
    feeds = {"x": x, "r": rand(seed + 1, x[window].shape)}
    ends = [-1, s1 if s1 < 0 else 4]
    check_all(
        lambda net: weighted_mean_head(net, net.Slice("x", "y", starts=[s0, 0], ends=ends)),
        lambda x, r: (x[window] * r).mean(),
        feeds,
        ["x"],
    )


@FEW
@given(seed=st.integers(0, 2**16), dims=st.sampled_from([[0], [1, 3], [2], [0, 1]]))
def test_expand_dims_squeeze(seed, dims):
    x = rand(seed, (2, 3))
    y = run("ExpandDims", [x], dims=dims)
    np.testing.assert_array_equal(y, np.expand_dims(x, tuple(dims)))
    np.testing.assert_array_equal(run("Squeeze", [y], dims=dims), x)
    feeds = {"x": x, "r": rand(seed + 1, y.shape)}

    def build(net):
        net.ExpandDims("x", "y", dims=dims)
        net.Mul(["y", "r"], "yr")
        net.Squeeze("yr", "z", dims=dims)
        return net.AveragedLoss("z", "loss")

    check_all(build, lambda x, r: (x.reshape(r.shape) * r).mean(), feeds, ["x"])
    with pytest.raises(an.OperatorError, match="size 1"):
        run("Squeeze", [x], dims=[0])
