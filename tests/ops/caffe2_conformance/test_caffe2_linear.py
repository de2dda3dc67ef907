"""FC / FCTransposed axes, MatMul axes and BatchMatMul, as Caffe2 defines them.

Sources: caffe2/operators/fully_connected_op.h (M = X.size_to_dim(axis), K = X.size_from_dim(axis),
N = W.size_to_dim(axis_w) for FC and W.size_from_dim(axis_w) for FCTransposed, Y = X.shape[:axis]
+ [N]), matmul_op.h (A, B flattened at axis_a, axis_b; C is 2-D), batch_matmul_op.cc (rank >= 2,
trans on the last two dims, broadcast=1 as numpy.matmul and then no gradient), and
operator_test/fc_operator_test.py, matmul_op_test.py, batch_matmul_op_test.py. Gradients are
checked against torch autograd and finite differences (float64).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _gradcheck_helpers import check_all

import asyncnet as an

pytestmark = pytest.mark.timeout(60)


def _rand(seed, shape):
    return np.random.default_rng(seed).normal(size=shape)


def _check(op, feeds, out_shape, torch_fn, wrt, **args):
    feeds = dict(feeds, r=_rand(99, out_shape))

    def build(net):
        getattr(net, op)([k for k in feeds if k != "r"], "y", **args)
        net.Mul(["y", "r"], "yr")
        return net.AveragedLoss("yr", "loss")

    check_all(build, lambda r, **t: (torch_fn(**t) * r).mean(), feeds, wrt)


# (X shape, axis, W shape, axis_w, N)
FC_CASES = [
    ((3, 4), 1, (5, 4), 1, 5),
    ((2, 3, 4), 2, (5, 4), 1, 5),
    ((2, 3, 4), 1, (5, 12), 1, 5),
    ((2, 3, 2, 2), 1, (5, 3, 2, 2), 1, 5),
    ((2, 3, 4), -1, (3, 2, 4), 2, 6),
]


@pytest.mark.parametrize("x_shape,axis,w_shape,axis_w,n", FC_CASES)
def test_fc_axis_and_axis_w(x_shape, axis, w_shape, axis_w, n):
    a = axis % len(x_shape)
    k = int(np.prod(x_shape[a:]))
    feeds = {"x": _rand(0, x_shape), "w": _rand(1, w_shape), "b": _rand(2, (n,))}
    out = x_shape[:a] + (n,)

    def ref(x, w, b):
        return (x.reshape(-1, k) @ w.reshape(n, k).T + b).reshape(out)

    ws = an.Workspace()
    for name, v in feeds.items():
        ws.feed(name, v)
    net = an.Net("fc")
    net.FC(["x", "w", "b"], "y", axis=axis, axis_w=axis_w)
    ws.run_net_once(net)
    assert ws.fetch("y").shape == out
    _check("FC", feeds, out, ref, ["x", "w", "b"], axis=axis, axis_w=axis_w)


@pytest.mark.parametrize(
    "x_shape,axis,w_shape,axis_w", [((3, 4), 1, (4, 5), 1), ((2, 3, 4), 2, (2, 2, 5), 2), ((2, 3, 4), 1, (12, 5), 1)]
)
def test_fc_transposed(x_shape, axis, w_shape, axis_w):
    k = int(np.prod(x_shape[axis:]))
    n = int(np.prod(w_shape[axis_w:]))
    feeds = {"x": _rand(3, x_shape), "w": _rand(4, w_shape), "b": _rand(5, (n,))}
    out = x_shape[:axis] + (n,)
    _check(
        "FCTransposed",
        feeds,
        out,
        lambda x, w, b: (x.reshape(-1, k) @ w.reshape(k, n) + b).reshape(out),
        ["x", "w", "b"],
        axis=axis,
        axis_w=axis_w,
    )


def test_fc_shape_errors():
    ws = an.Workspace()
    ws.feed("x", np.ones((2, 3, 4)))
    ws.feed("w", np.ones((5, 4)))
    ws.feed("b", np.ones(5))
    net = an.Net("bad")
    net.FC(["x", "w", "b"], "y")  # axis=1: K = 12, W has K = 4
    with pytest.raises(an.OperatorError, match="axis_w"):
        ws.run_net_once(net)
    net = an.Net("bad2")
    net.FC(["x", "w", "b"], "y", axis=3)
    with pytest.raises(an.OperatorError, match="out of range"):
        ws.run_net_once(net)


@pytest.mark.parametrize(
    "a_shape,axis_a,b_shape,axis_b,ta,tb",
    [
        ((3, 4), 1, (4, 5), 1, False, False),
        ((2, 3, 4), 2, (4, 5), 1, False, False),
        ((2, 3, 4), 1, (12, 5), 1, False, False),
        ((4, 2, 3), 1, (4, 5), 1, True, False),
        ((3, 4), 1, (5, 2, 2), 1, False, True),
        ((2, 2, 3), 2, (5, 2, 2), 1, True, True),
    ],
)
def test_matmul_axes(a_shape, axis_a, b_shape, axis_b, ta, tb):
    def flat(t, axis):
        return t.reshape(int(np.prod(t.shape[:axis])), -1)

    def ref(a, b):
        a2, b2 = flat(a, axis_a), flat(b, axis_b)
        return (a2.T if ta else a2) @ (b2.T if tb else b2)

    feeds = {"a": _rand(6, a_shape), "b": _rand(7, b_shape)}
    out = tuple(ref(torch.tensor(feeds["a"]), torch.tensor(feeds["b"])).shape)
    _check("MatMul", feeds, out, ref, ["a", "b"], axis_a=axis_a, axis_b=axis_b, trans_a=ta, trans_b=tb)


@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
@pytest.mark.parametrize("batch", [(), (2,), (2, 3)])
def test_batch_matmul(batch, ta, tb):
    m, k, n = 3, 4, 2
    a_shape = batch + ((k, m) if ta else (m, k))
    b_shape = batch + ((n, k) if tb else (k, n))
    feeds = {"a": _rand(8, a_shape), "b": _rand(9, b_shape)}

    def ref(a, b):
        return torch.matmul(a.transpose(-1, -2) if ta else a, b.transpose(-1, -2) if tb else b)

    _check("BatchMatMul", feeds, batch + (m, n), ref, ["a", "b"], trans_a=ta, trans_b=tb)


def test_batch_matmul_broadcast_is_numpy_matmul_without_gradient():
    from asyncnet.autodiff import add_gradient_ops

    ws = an.Workspace()
    cases = [((2, 3, 4), (4, 5)), ((4,), (2, 4, 5)), ((2, 1, 3, 4), (5, 4, 2)), ((4,), (4,))]
    for i, (sa, sb) in enumerate(cases):
        a, b = _rand(i, sa), _rand(i + 10, sb)
        ws.feed("a", a)
        ws.feed("b", b)
        net = an.Net(f"bb{i}")
        net.BatchMatMul(["a", "b"], "y", broadcast=1)
        ws.run_net_once(net)
        np.testing.assert_allclose(ws.fetch("y"), np.matmul(a, b), rtol=1e-12)
    ws.feed("a", _rand(0, (2, 3, 4)))
    ws.feed("b", _rand(1, (4, 5)))
    net = an.Net("nb")
    net.BatchMatMul(["a", "b"], "y")
    with pytest.raises(an.OperatorError, match="equal batch dims"):
        ws.run_net_once(net)
    net = an.Net("g")
    net.BatchMatMul(["a", "b"], "y", broadcast=1)
    net.AveragedLoss("y", "loss")
    with pytest.raises(an.NetDefinitionError, match="broadcast=1"):
        add_gradient_ops(net, "loss", wrt=["a"])
