"""Caffe2's n-ary Max and Min against numpy, and their gradients against torch autograd
(float64, no ties)."""

from __future__ import annotations

import numpy as np
import pytest

import asyncnet as an
from asyncnet.autodiff import add_gradient_ops

pytestmark = pytest.mark.timeout(60)

REF = {"Max": np.maximum, "Min": np.minimum}


def _inputs(n: int, dtype=np.float64) -> list[np.ndarray]:
    values = np.random.default_rng(n).permutation(n * 12).astype(dtype) / 5  # no ties
    return [values[i * 12 : (i + 1) * 12].reshape(3, 4) for i in range(n)]


@pytest.mark.parametrize("op", ["Max", "Min"])
@pytest.mark.parametrize("n", [1, 2, 3])
def test_forward(op, n):
    xs = _inputs(n, np.float32)
    ws = an.Workspace()
    for i, x in enumerate(xs):
        ws.feed(f"x{i}", x)
    ws.run_operator_once(an.OperatorDef(op, [f"x{i}" for i in range(n)], ["y"]))
    expected = xs[0]
    for x in xs[1:]:
        expected = REF[op](expected, x)
    np.testing.assert_array_equal(ws.fetch("y"), expected)


@pytest.mark.parametrize("op", ["Max", "Min"])
def test_gradient_matches_torch(op):
    torch = pytest.importorskip("torch")
    xs = _inputs(3)
    r = np.random.default_rng(9).uniform(0.5, 1.5, (3, 4))
    ws = an.Workspace()
    names = [f"x{i}" for i in range(3)]
    for name, x in zip(names, xs):
        ws.feed(name, x)
    ws.feed("r", r)
    net = an.Net("minmax_grad")
    net.add_op(op, names, ["y"])
    net.Mul(["y", "r"], "yr")
    net.AveragedLoss("yr", "loss")
    grads = add_gradient_ops(net, "loss", wrt=names, dtype="float64")
    ws.run_net_once(net)
    ts = [torch.tensor(x, requires_grad=True) for x in xs]
    fn = torch.maximum if op == "Max" else torch.minimum
    (fn(fn(ts[0], ts[1]), ts[2]) * torch.tensor(r)).mean().backward()
    for name, t in zip(names, ts):
        np.testing.assert_allclose(ws.fetch(grads[name]), t.grad.numpy(), rtol=1e-12)


def test_shapes_must_agree():
    ws = an.Workspace()
    ws.feed("a", np.ones(3, np.float32))
    ws.feed("b", np.ones(4, np.float32))
    with pytest.raises(an.OperatorError, match="one shape"):
        ws.run_operator_once(an.OperatorDef("Max", ["a", "b"], ["y"]))
    with pytest.raises(an.NetDefinitionError, match="one per X"):
        ws.run_operator_once(an.OperatorDef("MaxGradient", ["a", "a", "a", "b"], ["da"]))
