"""Ceil, Floor, Sign, Mod, Selu, Softplus, ThresholdedRelu, NegateGradient, Glu, SquareRootDivide,
Mean, LpNorm, ArgMax and ArgMin against numpy and torch, their gradients against torch autograd
and finite differences.

Sources: Caffe2's operator tests of these ops (ceil_op_test.py, floor_op_test.py, math_ops_test.py,
mod_op_test.py: fmod or Python's % with sign_follow_divisor; selu_op_test.py's selu_ref;
thresholded_relu_op_test.py: Y = X where X > alpha; glu_op_test.py's glu_ref;
square_root_divide_op_test.py: rows with scale <= 0 unchanged; lpnorm_op_test.py: p=2 is the
*squared* norm, shape (1,); arg_ops_test.py: keepdims defaults to True) and their kernels
(selu_op.cc, softplus_op.cc, lpnorm_op.cc, arg_ops.cc).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _c2run import run_op
from _gradcheck_helpers import autodiff_grads, check_all, weighted_mean_head
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncnet as an

pytestmark = pytest.mark.timeout(120)
FEW = settings(max_examples=15, deadline=None)


def _x(seed: int, shape=(3, 4), lo=-3.0, hi=3.0, dtype=np.float32) -> np.ndarray:
    return np.random.default_rng(seed).uniform(lo, hi, shape).astype(dtype)


@FEW
@given(seed=st.integers(0, 2**16))
def test_ceil_floor_sign(seed):
    x = _x(seed)
    x[0, 0] = 0.0
    c, f, s = run_op("Ceil", {"x": x}, ["c"]), run_op("Floor", {"x": x}, ["f"]), run_op("Sign", {"x": x}, ["s"])
    np.testing.assert_array_equal(c[0], np.ceil(x))
    np.testing.assert_array_equal(f[0], np.floor(x))
    np.testing.assert_array_equal(s[0], np.sign(x))


@FEW
@given(
    data=st.lists(st.integers(-(2**62), 2**62), min_size=1, max_size=8),
    divisor=st.integers(-1000, 1000).filter(bool),
    follow=st.booleans(),
)
def test_mod_is_fmod_or_python_mod(data, divisor, follow):
    x = np.array(data, np.int64)
    (y,) = run_op("Mod", {"x": x}, ["y"], divisor=divisor, sign_follow_divisor=follow)
    expected = np.array([(v % divisor) if follow else int(np.fmod(v, divisor)) for v in data], np.int64)
    np.testing.assert_array_equal(y, expected)


def test_mod_refuses_a_zero_divisor_and_floats():
    with pytest.raises(an.OperatorError, match="non-zero divisor"):
        run_op("Mod", {"x": np.arange(3)}, ["y"], divisor=0)
    with pytest.raises(an.OperatorError, match="int32 or int64"):
        run_op("Mod", {"x": np.ones(3, np.float32)}, ["y"], divisor=2)


_ACTIVATIONS = {
    "Selu": (
        {"alpha": 1.3, "scale": 1.1},
        lambda x: 1.1 * torch.where(x > 0, x, 1.3 * torch.expm1(x)),
    ),
    "Softplus": ({}, torch.nn.functional.softplus),
    "ThresholdedRelu": ({"alpha": 1.5}, lambda x: torch.where(x > 1.5, x, torch.zeros_like(x))),
}


@pytest.mark.parametrize("op", sorted(_ACTIVATIONS))
@FEW
@given(seed=st.integers(0, 2**16))
def test_activation_forward_and_gradient_match_torch(op, seed):
    args, fn = _ACTIVATIONS[op]
    x = _x(seed, dtype=np.float64)
    x[np.abs(x) < 0.05] += 0.1  # away from the kinks of Selu and ThresholdedRelu
    x[np.abs(x - 1.5) < 0.05] += 0.1
    (y,) = run_op(op, {"x": x.astype(np.float32)}, ["y"], **args)
    np.testing.assert_allclose(y, fn(torch.tensor(x)).numpy(), rtol=1e-5, atol=1e-6)
    r = np.random.default_rng(seed + 1).standard_normal(x.shape)

    def build(net):
        getattr(net, op)("x", "y", **args)
        return weighted_mean_head(net, "y")

    check_all(build, lambda x, r: (fn(x) * r).mean(), {"x": x, "r": r}, ["x"])


def test_selu_gradient_takes_dy_of_y_size():
    y = np.array([[-0.5, 2.0]], np.float32)
    (dx,) = run_op("SeluGradient", {"y": y, "dy": np.ones(2, np.float32)}, ["dx"], alpha=1.3, scale=1.1)
    np.testing.assert_allclose(dx, [[-0.5 + 1.3 * 1.1, 1.1]], rtol=1e-6)
    with pytest.raises(an.OperatorError, match="size of Y"):
        run_op("SeluGradient", {"y": y, "dy": np.ones(3, np.float32)}, ["dx"])


def test_negate_gradient_is_identity_forward_and_negates_backward():
    x = _x(3, dtype=np.float64)
    r = np.random.default_rng(4).standard_normal(x.shape)

    def build(net):
        net.NegateGradient("x", "y")
        return weighted_mean_head(net, "y")

    loss, grads = autodiff_grads(build, {"x": x, "r": r}, ["x"])
    np.testing.assert_allclose(loss, (x * r).mean())
    np.testing.assert_allclose(grads["x"], -r / x.size)  # minus the gradient of mean(x * r)
    (y,) = run_op("NegateGradient", {"x": x}, ["y"])
    np.testing.assert_array_equal(y, x)


@FEW
@given(seed=st.integers(0, 2**16), axis=st.integers(-2, 1))
def test_glu_matches_torch(seed, axis):
    x = _x(seed, (4, 6))
    (y,) = run_op("Glu", {"x": x}, ["y"], dim=axis)
    np.testing.assert_allclose(y, torch.nn.functional.glu(torch.tensor(x), dim=axis).numpy(), rtol=1e-6)


def test_glu_needs_an_even_dim():
    with pytest.raises(an.OperatorError, match="even size"):
        run_op("Glu", {"x": np.ones((3, 3), np.float32)}, ["y"], dim=1)


@FEW
@given(seed=st.integers(0, 2**16), dtype=st.sampled_from([np.float32, np.int32, np.int64]))
def test_square_root_divide_and_its_gradient(seed, dtype):
    rng = np.random.default_rng(seed)
    data = rng.standard_normal((4, 3))
    scale = rng.integers(-2, 9, 4).astype(dtype)
    (y,) = run_op("SquareRootDivide", {"d": data.astype(np.float32), "s": scale}, ["y"])
    factor = np.array([1 / np.sqrt(s) if s > 0 else 1.0 for s in scale.astype(np.float64)])
    np.testing.assert_allclose(y, data * factor[:, None], rtol=1e-6)
    r = rng.standard_normal(data.shape)
    t_factor = torch.tensor(factor)[:, None]

    def build(net):
        net.SquareRootDivide(["d", "s"], "y")
        return weighted_mean_head(net, "y")

    check_all(build, lambda d, s, r: (d * t_factor * r).mean(), {"d": data, "s": scale, "r": r}, ["d"])


@pytest.mark.parametrize("k", [1, 3])
def test_mean_and_its_gradient(k):
    rng = np.random.default_rng(k)
    feeds = {f"x{i}": rng.standard_normal((2, 3)) for i in range(k)}
    (y,) = run_op("Mean", dict(feeds), ["y"])
    np.testing.assert_allclose(y, np.mean(list(feeds.values()), axis=0))
    feeds["r"] = rng.standard_normal((2, 3))

    def build(net):
        net.Mean([f"x{i}" for i in range(k)], "y")
        return weighted_mean_head(net, "y")

    def torch_fn(r, **xs):
        return (torch.stack(list(xs.values())).mean(0) * r).mean()

    check_all(build, torch_fn, feeds, [f"x{i}" for i in range(k)])


@pytest.mark.parametrize("p, average", [(1, False), (2, False), (2, True), (1, True)])
def test_lp_norm_and_its_gradient(p, average):
    x = _x(p, (3, 5), dtype=np.float64)
    x[np.abs(x) < 0.05] = 0.3
    (z,) = run_op("LpNorm", {"x": x}, ["z"], p=p, average=average)
    expected = (np.abs(x).sum() if p == 1 else np.square(x).sum()) / (x.size if average else 1)
    assert z.shape == (1,)
    np.testing.assert_allclose(z[0], expected, rtol=1e-12)

    def build(net):
        net.LpNorm("x", "z", p=p, average=average)
        return net.AveragedLoss("z", "loss")

    def torch_fn(x):
        z = x.abs().sum() if p == 1 else (x * x).sum()
        return z / (x.numel() if average else 1)

    check_all(build, torch_fn, {"x": x}, ["x"])


@FEW
@given(
    seed=st.integers(0, 2**16),
    shape=st.lists(st.integers(1, 4), min_size=1, max_size=3),
    axis=st.integers(-3, 2),
    keepdims=st.booleans(),
    op=st.sampled_from(["ArgMax", "ArgMin"]),
)
def test_arg_max_min_match_numpy(seed, shape, axis, keepdims, op):
    x = np.random.default_rng(seed).integers(0, 3, shape).astype(np.float32)  # ties: the first index
    if not -len(shape) <= axis < len(shape):
        axis %= len(shape)
    (i,) = run_op(op, {"x": x}, ["i"], axis=axis, keepdims=keepdims)
    expected = (np.argmax if op == "ArgMax" else np.argmin)(x, axis=axis)
    if keepdims:
        expected = np.expand_dims(expected, axis)
    assert i.dtype == np.int64
    np.testing.assert_array_equal(i, expected)
    default = run_op(op, {"x": x}, ["i"])[0]
    assert default.shape == x.shape[:-1] + (1,)


@pytest.mark.parametrize("average", [False, True])
def test_sum_elements_and_its_gradient(average):
    x = _x(11, (3, 4), dtype=np.float64)
    (s,) = run_op("SumElements", {"x": x}, ["s"], average=average)
    assert s.shape == ()
    np.testing.assert_allclose(s, x.mean() if average else x.sum())

    def build(net):
        net.SumElements("x", "s", average=average)
        return net.AveragedLoss("s", "loss")

    check_all(build, lambda x: x.mean() if average else x.sum(), {"x": x}, ["x"])
    (i,) = run_op("SumElementsInt", {"x": np.arange(5, dtype=np.int32)}, ["i"])
    assert i.dtype == np.int32 and int(i) == 10


@pytest.mark.parametrize("op, axis", [("RowwiseMax", 2), ("ColwiseMax", 1)])
def test_rowwise_colwise_max_and_gradient(op, axis):
    x = np.random.default_rng(axis).permutation(24).reshape(2, 3, 4).astype(np.float64)  # no ties
    (y,) = run_op(op, {"x": x}, ["y"])
    np.testing.assert_array_equal(y, x.max(axis=axis))
    r = np.random.default_rng(0).standard_normal(y.shape)

    def build(net):
        getattr(net, op)("x", "y")
        return weighted_mean_head(net, "y")

    check_all(build, lambda x, r: (x.amax(dim=axis) * r).mean(), {"x": x, "r": r}, ["x"])
