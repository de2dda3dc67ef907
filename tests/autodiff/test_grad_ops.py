"""Every gradient of a forward op against torch autograd and finite differences (float64)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _gradcheck_helpers import check_all, weighted_mean_head
from hypothesis import given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.timeout(60)
FEW = settings(max_examples=12, deadline=None)
shapes = st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple)


def rand(seed: int, shape: tuple[int, ...], away_from_zero: bool = False) -> np.ndarray:
    x = np.random.default_rng(seed).normal(size=shape)
    if away_from_zero:  # keep clear of Relu's kink so finite differences are exact
        x = np.sign(x) * (0.1 + np.abs(x))
    return x


def broadcast_partner(shape: tuple[int, ...], mask: list[int], drop: int) -> tuple[int, ...]:
    """A shape that broadcasts to ``shape``: some dims set to 1, some leading dims dropped."""
    s = tuple(1 if m else d for d, m in zip(shape, mask))
    return s[min(drop, len(s) - 1) :]


@pytest.mark.parametrize("op,tfn", [("Relu", torch.relu), ("Sigmoid", torch.sigmoid), ("Tanh", torch.tanh)])
@FEW
@given(shape=shapes, seed=st.integers(0, 2**16))
def test_activation(op: str, tfn, shape, seed):
    feeds = {"x": rand(seed, shape, away_from_zero=True), "r": rand(seed + 1, shape)}

    def build(net):
        return weighted_mean_head(net, getattr(net, op)("x", "y"))

    check_all(build, lambda x, r: (tfn(x) * r).mean(), feeds, ["x"])


@FEW
@given(shape=shapes, seed=st.integers(0, 2**16))
def test_relu_in_place(shape, seed):
    feeds = {"x": rand(seed, shape, away_from_zero=True), "r": rand(seed + 1, shape)}

    def build(net):
        net.Scale("x", "h", scale=2.0)
        net.Relu("h", "h")
        return weighted_mean_head(net, "h")

    check_all(build, lambda x, r: (torch.relu(2 * x) * r).mean(), feeds, ["x"])


@FEW
@given(
    n=st.integers(1, 4),
    d=st.integers(1, 5),
    extra=st.integers(1, 3),
    axis=st.sampled_from([1, 2]),
    seed=st.integers(0, 2**16),
)
def test_softmax(n, d, extra, axis, seed):
    shape = (n, d, extra)
    feeds = {"x": rand(seed, shape), "r": rand(seed + 1, shape)}

    def build(net):
        return weighted_mean_head(net, net.Softmax("x", "y", axis=axis))

    def tfn(x, r):
        rows = int(np.prod(shape[:axis]))
        return (torch.softmax(x.reshape(rows, -1), 1).reshape(shape) * r).mean()

    check_all(build, tfn, feeds, ["x"])


@pytest.mark.parametrize("op,tfn", [("Add", torch.add), ("Sub", torch.sub), ("Mul", torch.mul), ("Div", torch.div)])
@FEW
@given(
    shape=shapes,
    mask=st.lists(st.booleans(), min_size=3, max_size=3),
    drop=st.integers(0, 2),
    swap=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_binary_broadcast(op, tfn, shape, mask, drop, swap, seed):
    other = broadcast_partner(shape, mask, drop)
    sa, sb = (other, shape) if swap else (shape, other)
    a, b = rand(seed, sa), rand(seed + 1, sb)
    if op == "Div":
        b = np.sign(b) * (0.5 + np.abs(b))
    feeds = {"a": a, "b": b, "r": rand(seed + 2, shape)}

    def build(net):
        return weighted_mean_head(net, getattr(net, op)(["a", "b"], "c"))

    check_all(build, lambda a, b, r: (tfn(a, b) * r).mean(), feeds, ["a", "b"])


@FEW
@given(shape=shapes, k=st.integers(1, 4), scale=st.floats(-3, 3), seed=st.integers(0, 2**16))
def test_sum_scale_copy(shape, k, scale, seed):
    names = [f"x{i}" for i in range(k)]
    feeds = {n: rand(seed + i, shape) for i, n in enumerate(names)}
    feeds["r"] = rand(seed + 99, shape)

    def build(net):
        s = net.Sum(names, "s")
        c = net.Copy(net.Scale(s, "t", scale=scale), "c")
        return weighted_mean_head(net, c)

    def tfn(r, **xs):
        return (sum(xs[n] for n in names) * scale * r).mean()

    check_all(build, tfn, feeds, names)


@FEW
@given(
    m=st.integers(1, 4),
    k=st.integers(1, 4),
    n=st.integers(1, 4),
    ta=st.booleans(),
    tb=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_matmul(m, k, n, ta, tb, seed):
    a = rand(seed, (k, m) if ta else (m, k))
    b = rand(seed + 1, (n, k) if tb else (k, n))
    feeds = {"a": a, "b": b, "r": rand(seed + 2, (m, n))}

    def build(net):
        return weighted_mean_head(net, net.MatMul(["a", "b"], "c", trans_a=ta, trans_b=tb))

    def tfn(a, b, r):
        return ((a.T if ta else a) @ (b.T if tb else b) * r).mean()

    check_all(build, tfn, feeds, ["a", "b"])


@FEW
@given(
    dims=st.lists(st.integers(1, 3), min_size=2, max_size=3),
    out=st.integers(1, 4),
    axis=st.integers(1, 2),
    seed=st.integers(0, 2**16),
)
def test_fc(dims, out, axis, seed):
    axis = min(axis, len(dims) - 1)
    rows, cols = int(np.prod(dims[:axis])), int(np.prod(dims[axis:]))
    feeds = {
        "x": rand(seed, tuple(dims)),
        "w": rand(seed + 1, (out, cols)),
        "b": rand(seed + 2, (out,)),
        "r": rand(seed + 3, tuple(dims[:axis]) + (out,)),
    }  # Caffe2: Y keeps X's dims before axis

    def build(net):
        return weighted_mean_head(net, net.FC(["x", "w", "b"], "y", axis=axis))

    def tfn(x, w, b, r):
        return ((x.reshape(rows, cols) @ w.T + b).reshape(r.shape) * r).mean()

    check_all(build, tfn, feeds, ["x", "w", "b"])


def test_fc_gradient_drops_unneeded_dx():
    import asyncnet as an
    from asyncnet.autodiff import add_gradient_ops

    net = an.Net("n")
    net.FC(["data", "w", "b"], "y")
    net.AveragedLoss("y", "loss")
    add_gradient_ops(net, "loss", wrt=["w", "b"])
    fcg = [op for op in net.ops if op.type == "FCGradient"]
    assert len(fcg) == 1 and len(fcg[0].outputs) == 2


def test_gradient_kernels_reject_bad_shapes():
    import asyncnet as an

    ws = an.Workspace()
    ws.feed("y", np.ones((2, 3)))
    ws.feed("dy", np.ones((3, 2)))
    net = an.Net("bad")
    net.ReluGradient(["y", "dy"], "dx")
    with pytest.raises(an.OperatorError, match="shape"):
        ws.run_net_once(net)
