"""InstanceNorm (forward and gradient against torch's instance_norm and finite differences, both
orders), Percentile (the example of Caffe2's operator doc and its interpolation rule) and
PiecewiseLinearTransform (against a numpy transcription of the rule of piecewise_linear_transform_test.py).

Sources: Caffe2's instance_norm_test.py (outputs Y, mean, inv_stdev; NHWC equals NCHW
transposed), percentile_op.cc (its doc example: [[3, 5, 3], [5, 1, 6]] -> [[0.2, 1.0, 0.6],
[0.5, 0.3, 1.0]]), piecewise_linear_transform_test.py's transform().
"""

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
FEW = settings(max_examples=10, deadline=None)


@FEW
@given(seed=st.integers(0, 2**16), order=st.sampled_from(["NCHW", "NHWC"]), eps=st.floats(1e-6, 1e-3))
def test_instance_norm_matches_torch_in_both_orders(seed, order, eps):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, 3, 4, 5))
    scale, bias = rng.standard_normal(3), rng.standard_normal(3)
    fed = x.transpose(0, 2, 3, 1) if order == "NHWC" else x
    y, mean, inv = run_op("InstanceNorm", {"x": fed, "s": scale, "b": bias}, ["y", "m", "i"], epsilon=eps, order=order)
    ref = torch.nn.functional.instance_norm(
        torch.tensor(x), weight=torch.tensor(scale), bias=torch.tensor(bias), eps=eps
    ).numpy()
    np.testing.assert_allclose(y.transpose(0, 3, 1, 2) if order == "NHWC" else y, ref, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(mean, x.mean(axis=(2, 3)), rtol=1e-12)
    np.testing.assert_allclose(inv, 1 / np.sqrt(x.var(axis=(2, 3)) + eps), rtol=1e-12)


@pytest.mark.parametrize("order", ["NCHW", "NHWC"])
def test_instance_norm_gradient_matches_torch_and_finite_differences(order):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 3, 2, 3))
    fed = x.transpose(0, 2, 3, 1) if order == "NHWC" else x
    feeds = {"x": fed, "s": rng.standard_normal(3), "b": rng.standard_normal(3), "r": rng.standard_normal(fed.shape)}

    def build(net):
        net.InstanceNorm(["x", "s", "b"], "y", epsilon=1e-5, order=order)
        return weighted_mean_head(net, "y")

    def torch_fn(x, s, b, r):
        xt = x.permute(0, 3, 1, 2) if order == "NHWC" else x
        y = torch.nn.functional.instance_norm(xt, weight=s, bias=b, eps=1e-5)
        return ((y.permute(0, 2, 3, 1) if order == "NHWC" else y) * r).mean()

    check_all(build, torch_fn, feeds, ["x", "s", "b"], rtol=1e-6, atol=1e-8)


def test_instance_norm_checks_its_parameters():
    with pytest.raises(an.OperatorError, match="scale and bias of shape"):
        run_op("InstanceNorm", {"x": np.ones((1, 2, 3)), "s": np.ones(3), "b": np.ones(2)}, ["y"])


def test_percentile_follows_caffe2s_doc_example():
    x = np.array([[3, 5, 3], [5, 1, 6]], np.float32)
    pairs = np.array([[3, 0.2], [5, 0.5], [1, 0.3], [3, 0.6]], np.float32)
    (p,) = run_op("Percentile", {"x": x, "p": pairs, "l": np.array([2, 1, 1], np.int32)}, ["y"])
    np.testing.assert_allclose(p, [[0.2, 1.0, 0.6], [0.5, 0.3, 1.0]])


def test_percentile_interpolates_between_samples_and_clamps():
    pairs = np.array([[1, 0.1], [3, 0.5], [7, 0.9]], np.float32)
    x = np.array([[0.0], [1.0], [2.0], [5.0], [8.0]], np.float32)
    (p,) = run_op("Percentile", {"x": x, "p": pairs, "l": np.array([3], np.int32)}, ["y"])
    np.testing.assert_allclose(p[:, 0], [0.0, 0.1, 0.3, 0.7, 1.0], rtol=1e-6)
    with pytest.raises(an.OperatorError, match="lengths summing"):
        run_op("Percentile", {"x": x, "p": pairs, "l": np.array([2], np.int32)}, ["y"])


def _transform_ref(x, bounds, slopes, intercepts):  # piecewise_linear_transform_test.py's transform
    n = len(slopes)
    x_ = np.clip(x, bounds[0], bounds[-1])
    index = np.minimum(np.maximum(np.searchsorted(bounds, x_) - 1, 0), n - 1)
    return slopes[index] * x_ + intercepts[index]


@FEW
@given(seed=st.integers(0, 2**16), n=st.integers(1, 6), from_inputs=st.booleans())
def test_piecewise_linear_transform_matches_the_reference(seed, n, from_inputs):
    rng = np.random.default_rng(seed)
    slopes, intercepts = rng.uniform(-1, 1, (2, n)), rng.uniform(-1, 1, (2, n))
    bounds = np.sort(rng.uniform(0.1, 0.9, (2, n + 1)), axis=1)
    x = rng.uniform(0, 1, (5, 2))
    if from_inputs:
        (y,) = run_op("PiecewiseLinearTransform", {"x": x, "b": bounds, "s": slopes, "i": intercepts}, ["y"])
    else:
        args = {"bounds": bounds.ravel().tolist(), "slopes": slopes.ravel().tolist()}
        (y,) = run_op("PiecewiseLinearTransform", {"x": x}, ["y"], intercepts=intercepts.ravel().tolist(), **args)
    for j in range(2):
        np.testing.assert_allclose(y[:, j], _transform_ref(x[:, j], bounds[j], slopes[j], intercepts[j]), rtol=1e-12)


def test_piecewise_linear_transform_binary_and_bad_bounds():
    x = np.array([[0.7, 0.3], [0.1, 0.9]], np.float32)
    args = {"bounds": [0.0, 0.5, 1.0], "slopes": [1.0, 2.0], "intercepts": [0.0, -0.5]}
    (y,) = run_op("PiecewiseLinearTransform", {"x": x}, ["y"], binary=True, **args)
    np.testing.assert_allclose(y[:, 1], [0.3, 1.3], rtol=1e-6)
    np.testing.assert_allclose(y[:, 0], 1 - y[:, 1], rtol=1e-6)
    with pytest.raises(an.OperatorError, match="sorted"):
        run_op("PiecewiseLinearTransform", {"x": x[:, :1]}, ["y"], bounds=[1.0, 0.0], slopes=[1.0], intercepts=[0.0])
