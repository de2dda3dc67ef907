"""RmsProp through ``build_rms_prop`` (against PyTorch's RMSprop and Caffe2's formula),
``UseOptimizer`` per-parameter optimizers, ``lr_injection``, and the ``optimizer_test_util``
mix-ins (which must pass for a working optimizer and fail for a broken one)."""

from __future__ import annotations

import doctest
import importlib
import io
import unittest

import numpy as np
import pytest

from caffe2.python import brew, model_helper, optimizer, test_util, workspace
from caffe2.python.optimizer_context import OptimizerContext, UseOptimizer
from caffe2.python.optimizer_test_util import LRModificationTestBase, OptimizerTestBase

pytestmark = pytest.mark.timeout(120)


def _model(name="rms"):
    m = model_helper.ModelHelper(name=name)
    fc = brew.fc(m, "x", "fc", dim_in=3, dim_out=2)
    sq = m.net.Mul([fc, fc], "sq")
    m.AddGradientOperators([m.AveragedLoss(sq, "loss")])
    return m


def _start(m, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((4, 3)).astype(np.float32)
    workspace.FeedBlob("x", x)
    workspace.RunNetOnce(m.param_init_net)
    workspace.CreateNet(m.net, True)
    return x


def _grads(x, w, b):
    y = x @ w.T + b
    dy = 2 * y / y.size
    return dy.T @ x, dy.sum(0)


def test_rms_prop_three_steps_match_caffe2_formula():
    m = _model()
    alpha, decay, eps = 0.1, 0.9, 0.1
    opt = optimizer.build_rms_prop(m, base_learning_rate=alpha, decay=decay, epsilon=eps)
    x = _start(m)
    w, b = workspace.FetchBlob("fc_w").astype(np.float64), workspace.FetchBlob("fc_b").astype(np.float64)
    ms_w, ms_b = np.zeros_like(w), np.zeros_like(b)
    for _ in range(3):
        gw, gb = _grads(x, w, b)
        ms_w += (1 - decay) * (gw * gw - ms_w)
        ms_b += (1 - decay) * (gb * gb - ms_b)
        w = w - alpha * gw / np.sqrt(eps + ms_w)
        b = b - alpha * gb / np.sqrt(eps + ms_b)
        workspace.RunNet(m.net.Proto().name)
    np.testing.assert_allclose(workspace.FetchBlob("fc_w"), w, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(workspace.FetchBlob("fc_b"), b, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(workspace.FetchBlob("fc_w_mean_squares"), ms_w, rtol=1e-4, atol=1e-6)
    assert sorted(map(str, opt.get_auxiliary_parameters().local)) == [
        "fc_b_mean_squares",
        "fc_b_momentum",
        "fc_w_mean_squares",
        "fc_w_momentum",
    ]
    assert not opt.get_auxiliary_parameters().shared


def test_rms_prop_matches_torch_rmsprop_without_epsilon():
    torch = pytest.importorskip("torch")
    m = _model("rms_torch")
    optimizer.build_rms_prop(m, base_learning_rate=0.05, decay=0.8, epsilon=0.0)
    x = _start(m, seed=3)
    w = torch.tensor(workspace.FetchBlob("fc_w").astype(np.float64), requires_grad=True)
    b = torch.tensor(workspace.FetchBlob("fc_b").astype(np.float64), requires_grad=True)
    ref = torch.optim.RMSprop([w, b], lr=0.05, alpha=0.8, eps=0.0)
    xt = torch.tensor(x.astype(np.float64))
    for _ in range(4):
        ref.zero_grad()
        y = xt @ w.T + b
        (y * y).mean().backward()
        ref.step()
        workspace.RunNet(m.net.Proto().name)
    np.testing.assert_allclose(workspace.FetchBlob("fc_w"), w.detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(workspace.FetchBlob("fc_b"), b.detach().numpy(), rtol=1e-4, atol=1e-5)


def test_rms_prop_rejects_sparse_gradients():
    m = model_helper.ModelHelper(name="rms_sparse")
    w = m.param_init_net.ConstantFill([], "w", shape=[4], value=0.0)
    m.params.append(w)
    out = m.net.Gather([w, "idx"], "g")
    m.AddGradientOperators([m.AveragedLoss(out, "loss")])
    with pytest.raises(ValueError, match="sparse"):
        optimizer.build_rms_prop(m, base_learning_rate=0.1)


def _base_lrs(m):
    found = {}
    for op in m.net.Proto().op:
        if op.type == "LearningRate":
            found[op.output[0]] = [a.f for a in op.arg if a.name == "base_lr"][0]
    return found


def _lr_of(m, param):
    """The learning-rate blob the update of ``param`` reads (WeightedSum's 4th input)."""
    for op in m.net.Proto().op:
        if op.type == "WeightedSum" and op.output[0] == param and op.input[0] == param:
            return op.input[3]
    raise AssertionError(f"no update of {param}")


def test_use_optimizer_by_tag_default_and_nesting():
    m = model_helper.ModelHelper(name="ctx")
    outer, inner, weight, fallback = (optimizer.SgdOptimizer(r) for r in (0.3, 0.2, 0.4, 0.05))
    with UseOptimizer(outer):
        a = brew.fc(m, "x", "a", dim_in=3, dim_out=3)
        with UseOptimizer(inner):
            b = brew.fc(m, a, "b", dim_in=3, dim_out=3)
        c = brew.fc(m, b, "c", dim_in=3, dim_out=3)
    with UseOptimizer({"WEIGHT": weight}):
        d = brew.fc(m, c, "d", dim_in=3, dim_out=1)
    m.AddGradientOperators([m.AveragedLoss(d, "loss")])
    optimizer.build_sgd(m, base_learning_rate=0.05)
    assert m.get_param_info("a_w").optimizer is outer and m.get_param_info("c_b").optimizer is outer
    assert m.get_param_info("b_w").optimizer is inner and m.get_param_info("b_b").optimizer is inner
    assert m.get_param_info("d_w").optimizer is weight and m.get_param_info("d_b").optimizer is None
    lrs = _base_lrs(m)
    expected = {"a_w": 0.3, "a_b": 0.3, "b_w": 0.2, "c_w": 0.3, "d_w": 0.4, "d_b": 0.05}
    assert {p: -lrs[_lr_of(m, p)] for p in expected} == pytest.approx(expected)
    assert fallback._instance_num == outer._instance_num + 3


def test_optimizer_context_empty_after_exit_and_missing_name():
    with UseOptimizer({"BIAS": optimizer.SgdOptimizer(0.1)}):
        assert OptimizerContext.current().has_optimizer("BIAS")
    ctx = OptimizerContext.current()
    assert not ctx.has_optimizer("BIAS")
    with pytest.raises(KeyError, match="BIAS optimizer is not provided"):
        ctx.get_optimizer("BIAS")
    m = model_helper.ModelHelper(name="none")
    brew.fc(m, "x", "fc", dim_in=2, dim_out=1)
    assert m.get_param_info("fc_w").optimizer is None


@pytest.mark.parametrize("injection", [0.0, 0.5])
def test_lr_injection_scales_the_update(injection):
    updates = {}
    for value in (1.0, injection):
        workspace.ResetWorkspace()
        m = _model(f"inj{value}")
        optimizer.build_sgd(m, base_learning_rate=0.1, allow_lr_injection=True)
        _start(m)
        workspace.FeedBlob("fc_w", np.arange(6, dtype=np.float32).reshape(2, 3) / 10)
        workspace.FeedBlob("fc_b", np.array([0.5, -0.5], dtype=np.float32))
        before = workspace.FetchBlob("fc_w").copy()
        assert optimizer.get_lr_injection()[0] == 1.0
        optimizer.set_lr_injection(value)
        workspace.RunNet(m.net.Proto().name)
        updates[value] = workspace.FetchBlob("fc_w") - before
    assert np.abs(updates[1.0]).max() > 1e-3
    np.testing.assert_allclose(updates[injection], injection * updates[1.0], rtol=1e-5, atol=1e-7)


def _run_case(case_cls, name):
    result = unittest.TextTestRunner(stream=io.StringIO(), verbosity=0).run(case_cls(name))
    return result.wasSuccessful() and not result.skipped


class _Rms(OptimizerTestBase, LRModificationTestBase, test_util.TestCase):
    __test__ = False  # run by the tests below, not collected

    def build_optimizer(self, model, **kwargs):
        return optimizer.build_rms_prop(model, base_learning_rate=0.1, epsilon=0.1, **kwargs)

    def check_optimizer(self, opt):
        self.assertTrue(opt.get_auxiliary_parameters().local)


class _TooSlow(_Rms):
    def build_optimizer(self, model, **kwargs):
        return optimizer.build_sgd(model, base_learning_rate=1e-6, **kwargs)


class _NoClip(_Rms):
    def build_optimizer(self, model, **kwargs):
        kwargs["max_gradient_norm"] = 1e6 if "max_gradient_norm" in kwargs else None
        return optimizer.build_sgd(model, base_learning_rate=0.1, **kwargs)


@pytest.mark.parametrize("name", ["testDense", "test_global_norm_based_gradient_clipping", "test_lr_injection"])
def test_test_util_mixins_pass_for_rms_prop(name):
    assert _run_case(_Rms, name)


def test_test_util_dense_fails_when_the_model_does_not_learn():
    assert not _run_case(_TooSlow, "testDense")


def test_test_util_clipping_fails_when_nothing_is_clipped():
    assert not _run_case(_NoClip, "test_global_norm_based_gradient_clipping")


@pytest.mark.parametrize(
    "name", ["caffe2.python.modifier_context", "caffe2.python.optimizer_context", "caffe2.python.optimizer_test_util"]
)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
