"""Caffe2's element-wise math ops against numpy, their gradients against central finite
differences (float64), and torch tensors against numpy."""

from __future__ import annotations

import numpy as np
import pytest

import asyncnet as an
from asyncnet.autodiff import add_gradient_ops
from asyncnet.ops.caffe2_unary import UNARY

pytestmark = pytest.mark.timeout(120)

REFERENCE = {
    "Abs": np.abs,
    "Exp": np.exp,
    "Log": np.log,
    "Sqrt": np.sqrt,
    "Sqr": np.square,
    "Rsqrt": lambda x: 1 / np.sqrt(x),
    "Cube": lambda x: x**3,
    "Reciprocal": np.reciprocal,
    "Negative": np.negative,
    "Cos": np.cos,
    "Sin": np.sin,
    "Tan": np.tan,
    "Softsign": lambda x: x / (1 + np.abs(x)),
}
POSITIVE = {"Log", "Sqrt", "Rsqrt", "Reciprocal"}


def _input(op: str, dtype=np.float64) -> np.ndarray:
    rng = np.random.default_rng(sorted(REFERENCE).index(op))
    lo, hi = (0.3, 2.0) if op in POSITIVE else (-1.2, 1.2)
    x = rng.uniform(lo, hi, (3, 4)).astype(dtype)
    if op == "Abs":
        x[np.abs(x) < 0.05] = 0.5  # away from the kink, where finite differences disagree
    return x


def test_every_op_has_a_reference():
    assert set(UNARY) == set(REFERENCE)


@pytest.mark.parametrize("op", sorted(REFERENCE))
def test_forward_matches_numpy(op):
    x = _input(op, np.float32)
    ws = an.Workspace()
    ws.feed("x", x)
    net = an.Net("fwd")
    net.add_op(op, ["x"], ["y"])
    ws.run_net_once(net)
    y = ws.fetch("y")
    assert y.dtype == np.float32 and y.shape == x.shape
    np.testing.assert_allclose(y, REFERENCE[op](x), rtol=1e-6, atol=1e-6)


def _loss(op: str, x: np.ndarray, r: np.ndarray) -> float:
    return float(np.mean(REFERENCE[op](x) * r))


@pytest.mark.parametrize("op", sorted(REFERENCE))
def test_gradient_matches_finite_differences(op):
    x = _input(op)
    r = np.random.default_rng(7).uniform(0.5, 1.5, x.shape)
    ws = an.Workspace()
    ws.feed("x", x)
    ws.feed("r", r)
    net = an.Net("grad")
    net.add_op(op, ["x"], ["y"])
    net.Mul(["y", "r"], "yr")
    net.AveragedLoss("yr", "loss")
    grads = add_gradient_ops(net, "loss", wrt=["x"], dtype="float64")
    ws.run_net_once(net)
    analytic = ws.fetch(grads["x"])
    eps = 1e-6
    numeric = np.zeros_like(x)
    for i in range(x.size):
        plus, minus = x.copy(), x.copy()
        plus.flat[i] += eps
        minus.flat[i] -= eps
        numeric.flat[i] = (_loss(op, plus, r) - _loss(op, minus, r)) / (2 * eps)
    np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("op", ["Exp", "Sqrt", "Reciprocal", "Negative"])
def test_in_place_ops_whose_gradient_reads_the_output(op):
    x = _input(op)
    ws = an.Workspace()
    ws.feed("x", x.copy())
    net = an.Net("inplace")
    net.add_op(op, ["x"], ["x"])
    net.AveragedLoss("x", "loss")
    grads = add_gradient_ops(net, "loss", dtype="float64")
    ws.run_net_once(net)
    np.testing.assert_allclose(ws.fetch("x"), REFERENCE[op](x), rtol=1e-12)
    assert grads  # the gradient ops read Y, which the in-place op left in x


def test_torch_tensors_give_numpy_results():
    torch = pytest.importorskip("torch")
    for op in sorted(REFERENCE):
        x = _input(op, np.float32)
        ws = an.Workspace()
        ws.feed("x", torch.from_numpy(x.copy()))
        net = an.Net("torch_fwd")
        net.add_op(op, ["x"], ["y"])
        ws.run_net_once(net)
        y = ws.fetch("y")
        assert isinstance(y, torch.Tensor)
        np.testing.assert_allclose(y.numpy(), REFERENCE[op](x), rtol=1e-5, atol=1e-6, err_msg=op)


def test_gradient_shape_mismatch_is_an_error():
    ws = an.Workspace()
    ws.feed("y", np.ones(3, np.float32))
    ws.feed("dy", np.ones(4, np.float32))
    with pytest.raises(an.OperatorError, match="forward blob's shape"):
        ws.run_operator_once(an.OperatorDef("ExpGradient", ["y", "dy"], ["dx"]))
