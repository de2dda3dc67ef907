"""ReduceFront*/ReduceBack* against numpy (with and without lengths), and their gradients
against central finite differences (float64)."""

from __future__ import annotations

import numpy as np
import pytest

import asyncnet as an
from asyncnet.autodiff import add_gradient_ops

pytestmark = pytest.mark.timeout(120)

SIDES = ("Front", "Back")
KINDS = {"Sum": np.sum, "Mean": np.mean, "Max": np.max}


def _axes(ndim: int, k: int, side: str) -> tuple[int, ...]:
    return tuple(range(k)) if side == "Front" else tuple(range(ndim - k, ndim))


def _run(op: str, inputs: dict[str, np.ndarray], **args) -> np.ndarray:
    ws = an.Workspace()
    for name, value in inputs.items():
        ws.feed(name, value)
    ws.run_operator_once(an.OperatorDef(op, list(inputs), ["y"], args))
    return ws.fetch("y")


@pytest.mark.parametrize("side", SIDES)
@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("k", [0, 1, 2, 3])
def test_matches_numpy(side, kind, k):
    x = np.random.default_rng(k).standard_normal((2, 3, 4)).astype(np.float32)
    y = _run(f"Reduce{side}{kind}", {"x": x}, num_reduce_dim=k)
    np.testing.assert_allclose(y, KINDS[kind](x, axis=_axes(3, k, side)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("side", SIDES)
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_lengths_count_a_prefix_of_the_reduced_positions(side, kind):
    x = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    lengths = np.array([1, 3, 2, 3] if side == "Front" else [4, 1, 2], np.int32)
    y = _run(f"Reduce{side}{kind}", {"x": x, "n": lengths}, num_reduce_dim=1)
    rows = x.T if side == "Front" else x
    expected = [KINDS[kind](row[:n]) for row, n in zip(rows, lengths)]
    np.testing.assert_allclose(y, expected, rtol=1e-6)


def _loss(op_side: str, kind: str, x: np.ndarray, k: int, r: np.ndarray) -> float:
    return float(np.mean(KINDS[kind](x, axis=_axes(x.ndim, k, op_side)) * r))


@pytest.mark.parametrize("side", SIDES)
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_gradient_matches_finite_differences(side, kind):
    k = 2
    x = np.random.default_rng(5).permutation(24).reshape(2, 3, 4).astype(np.float64) / 7  # distinct: a unique max
    kept = x.shape[k:] if side == "Front" else x.shape[: x.ndim - k]
    r = np.random.default_rng(2).uniform(0.5, 1.5, kept)
    ws = an.Workspace()
    ws.feed("x", x)
    ws.feed("r", r)
    net = an.Net("reduce_grad")
    net.add_op(f"Reduce{side}{kind}", ["x"], ["y"], num_reduce_dim=k)
    net.Mul(["y", "r"], "yr")
    net.AveragedLoss("yr", "loss")
    grads = add_gradient_ops(net, "loss", wrt=["x"], dtype="float64")
    ws.run_net_once(net)
    numeric = np.zeros_like(x)
    for i in range(x.size):
        plus, minus = x.copy(), x.copy()
        plus.flat[i] += 1e-6
        minus.flat[i] -= 1e-6
        numeric.flat[i] = (_loss(side, kind, plus, k, r) - _loss(side, kind, minus, k, r)) / 2e-6
    np.testing.assert_allclose(ws.fetch(grads["x"]), numeric, rtol=1e-5, atol=1e-9)


def test_sum_gradient_takes_x_or_its_shape():
    x = np.ones((2, 3), np.float32)
    dy = np.array([1.0, 2.0, 3.0], np.float32)
    by_x = _run("ReduceFrontSumGradient", {"dy": dy, "x": x}, num_reduce_dim=1)
    by_shape = _run("ReduceFrontSumGradient", {"dy": dy, "shape": np.array([2, 3], np.int64)}, num_reduce_dim=1)
    np.testing.assert_array_equal(by_x, by_shape)
    np.testing.assert_array_equal(by_x, [[1, 2, 3], [1, 2, 3]])


def test_bad_lengths_and_dims_are_errors():
    x = np.ones((2, 3), np.float32)
    with pytest.raises(an.OperatorError, match="lengths"):
        _run("ReduceBackSum", {"x": x, "n": np.array([4, 1], np.int32)}, num_reduce_dim=1)
    with pytest.raises(an.OperatorError, match="num_reduce_dim=3"):
        _run("ReduceFrontSum", {"x": x}, num_reduce_dim=3)
