"""Softmax, SoftmaxGradient and SoftmaxWithLoss against Caffe2's softmax_ops_test.py.

Sources: caffe2/python/operator_test/softmax_ops_test.py (the reference functions below are its
row-max-subtracted loops in numpy form; n and D drawn from its lists, 0 included),
caffe2/operators/softmax_op.cc and softmax_with_loss_op.cc (X viewed as [size_to_dim(axis),
size_from_dim(axis)], the axis must be < ndim; labels [N] or [N, 1]; the loss is 0-d: with class
ids -sum_i w_i log_softmax(X)[i, label_i] / sum_i w_i (no clamp: Caffe2 computes the log-softmax);
with label_prob -sum_ij w_i T_ij log(max(P_ij, 1e-20)) / sum_i w_i; times `scale`). The gradient
op takes Caffe2's inputs (X, label, [weight,] P, dloss).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _c2run import run_op
from _gradcheck_helpers import check_all
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncnet as an

pytestmark = pytest.mark.timeout(60)
FEW = settings(max_examples=10, deadline=None)


def run(op: str, inputs: dict[str, np.ndarray], outs: tuple[str, ...] = ("out",), **args) -> list[np.ndarray]:
    return run_op(op, inputs, outs, **args)


def ref_softmax(x2: np.ndarray) -> np.ndarray:  # softmax_ops_test.py's label_softmax, rows of a 2-D array
    if x2.shape[1] == 0:
        return np.zeros(x2.shape)
    z = x2 - x2.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


@FEW
@given(n=st.sampled_from([0, 2, 4, 71]), d=st.sampled_from([0, 4, 8, 79]), seed=st.integers(0, 2**16))
def test_softmax(n, d, seed):
    x = np.random.default_rng(seed).random((n, d)).astype(np.float32) + 1e-2
    (p,) = run("Softmax", {"x": x})
    assert p.shape == (n, d) and p.dtype == np.float32
    np.testing.assert_allclose(p, ref_softmax(x), rtol=1e-5, atol=1e-6)


@FEW
@given(n=st.sampled_from([0, 2, 4, 71]), d=st.sampled_from([0, 4, 8, 79]), seed=st.integers(0, 2**16))
def test_softmax_gradient_op(n, d, seed):
    rng = np.random.default_rng(seed)
    y = rng.random((n, d)).astype(np.float32) + 1e-2
    dy = rng.random((n, d)).astype(np.float32)
    (dx,) = run("SoftmaxGradient", {"y": y, "dy": dy})
    want = y * (dy - (y * dy).sum(axis=1, keepdims=True))  # label_softmax_grad
    np.testing.assert_allclose(dx, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("axis", [1, 2, 3, 4])
def test_softmax_axis_flattens_the_trailing_dims(axis):
    x = np.random.default_rng(1).normal(size=(1, 2, 3, 2, 1)) + 1e-2
    n = int(np.prod(x.shape[:axis]))
    (p,) = run("Softmax", {"x": x.astype(np.float32)}, axis=axis)
    np.testing.assert_allclose(p, ref_softmax(x.reshape(n, -1)).reshape(x.shape), rtol=1e-5, atol=1e-6)
    feeds = {"x": x, "r": np.random.default_rng(2).normal(size=x.shape)}

    def build(net):
        net.Softmax("x", "p", axis=axis)
        net.Mul(["p", "r"], "pr")
        return net.AveragedLoss("pr", "loss")

    check_all(build, lambda x, r: (torch.softmax(x.reshape(n, -1), 1).reshape(x.shape) * r).mean(), feeds, ["x"])


def test_softmax_axis_must_be_below_ndim():
    # canonical_axis_index: -ndim <= axis < ndim; Caffe2 refuses axis == ndim
    x = np.ones((2, 3), np.float32)
    np.testing.assert_allclose(run("Softmax", {"x": x}, axis=-1)[0], np.full((2, 3), 1 / 3), rtol=1e-6)
    for axis in (2, -3):
        with pytest.raises(an.OperatorError, match="out of range"):
            run("Softmax", {"x": x}, axis=axis)
    with pytest.raises(an.OperatorError, match="out of range"):
        run("Softmax", {"x": np.ones(3, np.float32)})  # 1-D with the default axis 1


@FEW
@given(n=st.integers(2, 10), d=st.integers(4, 16), only_loss=st.booleans(), label_col=st.booleans())
def test_softmax_with_loss(n, d, only_loss, label_col):
    rng = np.random.default_rng(2603)
    x = rng.random((n, d)).astype(np.float32) + 1e-2
    label = (rng.random(n) * d).astype(np.int32)
    fed = label.reshape(n, 1) if label_col else label  # Caffe2 takes labels [N] or [N, 1]
    p, loss = run("SoftmaxWithLoss", {"x": x, "label": fed}, ("p", "loss"), only_loss=only_loss)
    probs = ref_softmax(x.astype(np.float64))
    want = np.mean([-np.log(max(probs[i, label[i]], 1e-20)) for i in range(n)])
    assert loss.shape == () and loss.dtype == np.float32 and p.shape == (n, d)
    np.testing.assert_allclose(p, probs, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(loss, want, rtol=1e-5)
    feeds = {"x": x.astype(np.float64), "label": fed}

    def build(net):
        net.SoftmaxWithLoss(["x", "label"], ["p", "loss"], only_loss=only_loss)
        return "loss"

    check_all(build, lambda x, label: torch.nn.functional.cross_entropy(x, label.reshape(-1).long()), feeds, ["x"])


def test_softmax_with_loss_has_no_clamp_on_the_log():
    # with class ids Caffe2 reads the loss off its log-softmax (SoftmaxCPU with logarithmic=true), so
    # there is no clamp (the 1e-20 clamp is label_prob's, and the Python test's reference): here p[0] = exp(-100)
    _, loss = run(
        "SoftmaxWithLoss", {"x": np.array([[0.0, 100.0]], np.float32), "label": np.array([0], np.int32)}, ("p", "loss")
    )
    np.testing.assert_allclose(loss, 100.0, rtol=1e-6)


def test_softmax_with_loss_label_prob():
    rng = np.random.default_rng(2603)
    n, d = 4, 5
    x = rng.random((n, d)).astype(np.float32) + 1e-2
    label = rng.random((n, d)).astype(np.float32)
    label /= label.sum(axis=1, keepdims=True)
    _, loss = run("SoftmaxWithLoss", {"x": x, "label": label}, ("p", "loss"), label_prob=1)
    want = np.sum(-np.log(np.maximum(ref_softmax(x), 1e-20)) * label) / n
    np.testing.assert_allclose(loss, want, rtol=1e-5)


def test_softmax_with_loss_weighted():
    rng = np.random.default_rng(2603)
    n, d = 4, 5
    x = rng.random((n, d)).astype(np.float32) + 1e-2
    label = (rng.random(n) * d).astype(np.int32)
    w = rng.random(n).astype(np.float32)
    _, loss = run("SoftmaxWithLoss", {"x": x, "label": label, "w": w}, ("p", "loss"))
    p = ref_softmax(x)
    want = sum(-w[i] * np.log(max(p[i, label[i]], 1e-20)) for i in range(n)) / w.sum()
    np.testing.assert_allclose(loss, want, rtol=1e-5)


def test_softmax_with_loss_axis_2():
    rng = np.random.default_rng(2603)
    n, d = 3, 5
    x = rng.random((n, n, d)).astype(np.float32) + 1e-2
    label = (rng.random((n, n)) * d).astype(np.int32)
    p, loss = run("SoftmaxWithLoss", {"x": x, "label": label}, ("p", "loss"), axis=2)
    probs = ref_softmax(x.reshape(n * n, d))
    assert p.shape == x.shape
    np.testing.assert_allclose(loss, -np.log(probs[np.arange(n * n), label.ravel()]).mean(), rtol=1e-5)


def test_softmax_with_loss_scale():
    x = np.zeros((2, 4), np.float32)
    _, loss = run("SoftmaxWithLoss", {"x": x, "label": np.array([0, 1], np.int32)}, ("p", "loss"), scale=0.5)
    np.testing.assert_allclose(loss, 0.5 * np.log(4), rtol=1e-6)


@pytest.mark.parametrize("mode", ["weighted", "label_prob", "label_prob_weighted", "scale", "axis"])
def test_softmax_with_loss_modes_gradient_against_autograd(mode):
    rng = np.random.default_rng(7)
    n, d = 4, 5
    x = rng.normal(size=(2, n, d) if mode == "axis" else (n, d))
    rows = x.reshape(-1, d).shape[0]
    ids = rng.integers(0, d, rows).astype(np.int32)
    probs = rng.random((rows, d))
    probs /= probs.sum(axis=1, keepdims=True)
    feeds = {
        "x": x,
        "label": probs if mode.startswith("label_prob") else (ids.reshape(2, n) if mode == "axis" else ids),
    }
    args = (
        {"label_prob": 1}
        if mode.startswith("label_prob")
        else {"scale": 2.5}
        if mode == "scale"
        else {"axis": 2}
        if mode == "axis"
        else {}
    )
    if mode.endswith("weighted"):
        feeds["w"] = rng.random(rows) + 0.1

    def build(net):
        net.SoftmaxWithLoss(list(feeds), ["p", "loss"], **args)
        return "loss"

    def ref(x, label, w=None):
        log_p = torch.log_softmax(x.reshape(-1, d), 1)
        per = (
            -(log_p * label).sum(1)
            if mode.startswith("label_prob")
            else -log_p[torch.arange(rows), label.reshape(-1).long()]
        )
        loss = per.mean() if w is None else (per * w).sum() / w.sum()
        return loss * 2.5 if mode == "scale" else loss

    check_all(build, ref, feeds, ["x"])


def test_softmax_with_loss_refuses_bad_label_probs_and_weights():
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(an.OperatorError, match="summing to 1"):
        run("SoftmaxWithLoss", {"x": x, "t": np.full((2, 3), 0.5, np.float32)}, ("p", "loss"), label_prob=1)
    with pytest.raises(an.OperatorError, match="non-negative"):
        run(
            "SoftmaxWithLoss", {"x": x, "t": np.array([[2, -1, 0], [1, 0, 0]], np.float32)}, ("p", "loss"), label_prob=1
        )
    with pytest.raises(an.OperatorError, match="2 weights"):
        run("SoftmaxWithLoss", {"x": x, "t": np.array([0, 1], np.int32), "w": np.ones(3, np.float32)}, ("p", "loss"))
    with pytest.raises(an.NetDefinitionError, match="scale >= 0"):
        run("SoftmaxWithLoss", {"x": x, "t": np.array([0, 1], np.int32)}, ("p", "loss"), scale=-1.0)
    _, loss = run(
        "SoftmaxWithLoss", {"x": x, "t": np.array([0, 1], np.int32), "w": np.zeros(2, np.float32)}, ("p", "loss")
    )
    assert loss == 0 and loss.dtype == np.float32  # Caffe2: weights summing to 0 give a loss of 0
