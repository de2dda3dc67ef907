"""The modules Caffe2's own unit tests import (test_util, hypothesis_test_util,
gradient_checker, device_checker, serialized_test_util) and core.GradientRegistry, checked
against numpy references and finite differences computed here."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given

from caffe2.proto import caffe2_pb2
from caffe2.python import core, device_checker, gradient_checker, test_util, workspace
from caffe2.python import hypothesis_test_util as hu
from caffe2.python.serialized_test import serialized_test_util as serial

pytestmark = pytest.mark.timeout(120)


def test_gradient_registry_names_input_gradients_as_caffe2():
    op = core.CreateOperator("Mul", ["a", "b"], ["c"])
    grad_ops, g_input = core.GradientRegistry.GetGradientForOp(op, ["c_grad"])
    assert [str(g) for g in g_input] == ["a_grad", "b_grad"]
    workspace.FeedBlob("a", np.array([1.0, 2.0], np.float32))
    workspace.FeedBlob("b", np.array([3.0, -4.0], np.float32))
    workspace.FeedBlob("c_grad", np.array([0.5, 2.0], np.float32))
    workspace.RunOperatorsOnce(grad_ops)
    np.testing.assert_allclose(workspace.FetchBlob("a_grad"), [1.5, -8.0])
    np.testing.assert_allclose(workspace.FetchBlob("b_grad"), [0.5, 4.0])


def test_backward_pass_from_a_given_output_gradient():
    ops = [core.CreateOperator("Tanh", ["x"], ["h"]), core.CreateOperator("Scale", ["h"], ["y"], scale=3.0)]
    grad_ops, grad_map = core.GradientRegistry.GetBackwardPass(ops, {"y": "dy"})
    x = np.array([-0.5, 0.25, 1.0], np.float32)
    workspace.FeedBlob("x", x)
    workspace.RunOperatorsOnce(ops)
    workspace.FeedBlob("dy", np.ones(3, np.float32))
    workspace.RunOperatorsOnce(grad_ops)
    np.testing.assert_allclose(workspace.FetchBlob(str(grad_map["x"])), 3.0 * (1 - np.tanh(x) ** 2), rtol=1e-5)


def test_gradient_checker_accepts_a_right_gradient_and_rejects_a_wrong_one():
    x = np.linspace(-1, 1, 5).astype(np.float32)
    checker = gradient_checker.GradientChecker(stepsize=0.01, threshold=0.01)
    ok, grad, estimate = checker.CheckSimple(core.CreateOperator("Tanh", ["x"], ["y"]), [x], 0, [0])
    assert ok and grad.shape == estimate.shape == (5,)
    np.testing.assert_allclose(estimate, np.tanh(x) * (1 - np.tanh(x) ** 2), atol=1e-3)
    wrong = [core.CreateOperator("Scale", ["y_grad"], ["x_grad"], scale=2.0)]  # not Tanh's gradient
    ok, _, _ = checker.CheckSimple(core.CreateOperator("Tanh", ["x"], ["y"]), [x], 0, [0], grad_ops=wrong)
    assert not ok


def test_device_checker_runs_the_op_on_each_device():
    op = core.CreateOperator("Relu", ["x"], ["y"])
    dc = device_checker.DeviceChecker(0.01, [hu.cpu_do, hu.cpu_do])
    assert dc.CheckSimple(op, [np.array([-1.0, 1.0], np.float32)], [0])


class _Case(hu.HypothesisTestCase):
    def runTest(self):  # unittest needs one method to instantiate the case
        pass


def test_reference_checks_pass_and_fail():
    case = _Case()
    op = core.CreateOperator("Relu", ["x"], ["y"])
    x = np.array([-2.0, 0.5], np.float32)
    out = case.assertReferenceChecks(hu.cpu_do, op, [x], lambda x: (np.maximum(x, 0),))
    np.testing.assert_array_equal(out[0], [0.0, 0.5])
    with pytest.raises(AssertionError, match="not matching the reference"):
        case.assertReferenceChecks(hu.cpu_do, op, [x], lambda x: (x,))
    with pytest.raises(RuntimeError, match="tuple/list"):
        case.assertReferenceChecks(hu.cpu_do, op, [x], lambda x: np.maximum(x, 0))
    assert workspace.CurrentWorkspace() == "default" and not workspace.HasBlob("x")


def test_reference_checks_with_a_gradient_reference():
    case = _Case()
    op = core.CreateOperator("Sigmoid", ["x"], ["y"])
    x = np.array([-1.0, 0.0, 2.0], np.float32)

    def grad_ref(g_out, outputs, inputs):
        y = outputs[0]
        return (g_out * y * (1 - y),)

    case.assertReferenceChecks(
        hu.cpu_do, op, [x], lambda x: (1 / (1 + np.exp(-x)),), output_to_grad="y", grad_reference=grad_ref
    )


def test_gradient_checks_and_run_op_raises():
    case = _Case()
    x = np.array([[0.3, -0.7], [1.2, 0.1]], np.float32)
    case.assertGradientChecks(hu.cpu_do, core.CreateOperator("Sigmoid", ["x"], ["y"]), [x], 0, [0])
    split = core.CreateOperator("Split", ["x"], ["a", "b"], axis=0, split=[5, 5])
    case.assertRunOpRaises(hu.cpu_do, split, [x], exception=RuntimeError)


@given(x=hu.tensor(min_dim=1, max_dim=3, max_value=4), **hu.gcs_cpu_only)
def test_hypothesis_strategies_feed_the_checks(x, gc, dc):
    assert x.dtype == np.float32 and 1 <= x.ndim <= 3 and np.all(np.abs(x) <= 1)
    _Case().assertDeviceChecks(dc, core.CreateOperator("Relu", ["x"], ["y"]), [x], [0])


@given(data=hu.lengths_tensor(min_value=1, max_value=5))
def test_lengths_cover_the_rows(data):
    values, lengths = data
    assert lengths.dtype == np.int32 and lengths.sum() == values.shape[0]


def test_test_util_case_resets_and_serialized_case_is_a_hypothesis_case():
    workspace.FeedBlob("left_over", np.ones(1, np.float32))
    case = test_util.TestCase()
    case.setUp()
    assert not workspace.HasBlob("left_over")
    assert test_util.rand_array(2, 3).dtype == np.float32
    assert issubclass(serial.SerializedTestCase, hu.HypothesisTestCase)


def test_gradient_of_a_multi_output_op_ignores_non_differentiable_outputs():
    # Caffe2's makers read only the output gradients they need; Concat's split sizes have none
    op = core.CreateOperator("Concat", ["a", "b"], ["y", "split_info"], axis=1)
    grad_ops, g_input = core.GradientRegistry.GetGradientForOp(op, ["y_grad", "split_info_grad"])
    assert [str(g) for g in g_input] == ["a_grad", "b_grad"]
    a = np.array([[1.0, 2.0]], np.float32)
    b = np.array([[3.0]], np.float32)
    _Case().assertGradientChecks(hu.cpu_do, op, [a, b], 1, [0])
    workspace.FeedBlob("a", a)
    workspace.FeedBlob("b", b)
    workspace.RunOperatorOnce(op)
    workspace.FeedBlob("y_grad", np.array([[10.0, 20.0, 30.0]], np.float32))
    workspace.RunOperatorsOnce(grad_ops)
    np.testing.assert_array_equal(workspace.FetchBlob("a_grad"), [[10.0, 20.0]])
    np.testing.assert_array_equal(workspace.FetchBlob("b_grad"), [[30.0]])


def test_in_place_sum_gradient_passes_the_output_gradient_through():
    """Sum(X1, X2) -> X1: as in Caffe2, every input's gradient is the output's gradient blob, no op."""
    op = core.CreateOperator("Sum", ["X1", "X2"], ["X1"])
    grad_ops, g_input = core.GradientRegistry.GetGradientForOp(op, ["X1_grad"])
    assert [str(g) for g in g_input] == ["X1_grad", "X1_grad"]
    assert grad_ops == []
    checker = gradient_checker.GradientChecker(0.01, 0.05, caffe2_pb2.DeviceOption(), "sum_ws")
    x1, x2 = (np.random.default_rng(k).uniform(-0.5, 0.5, (2, 3)).astype(np.float32) for k in (1, 2))
    for i in (0, 1):
        ok, grad, estimated = checker.CheckSimple(op, [x1, x2], i, [0])
        assert ok
        np.testing.assert_allclose(grad, x1 + x2, rtol=1e-6)  # the checker's loss is |Y|^2 / 2


def test_legacy_hypothesis_arguments_of_caffe2_tests_are_accepted():
    import hypothesis
    import hypothesis.strategies as st

    from caffe2.python import hypothesis_test_util  # noqa: F401 - makes hypothesis take them

    seen = []

    @hypothesis.settings(max_examples=3, timeout=100, database=None)
    @hypothesis.given(xs=st.lists(st.integers(0, 5), average_size=2, max_size=4))
    def run(xs):
        seen.append(xs)

    run()
    assert 1 <= len(seen) <= 3 and all(len(x) <= 4 and all(0 <= v <= 5 for v in x) for x in seen)
    with pytest.raises(hypothesis.errors.InvalidArgument):
        hypothesis.settings(max_examples=-1, timeout=100)  # other arguments are still checked


def test_numpy_aliases_caffe2_tests_use_are_the_builtins():
    from caffe2.python import hypothesis_test_util  # noqa: F401 - restores them

    assert (np.int, np.float, np.object, np.str) == (int, float, object, str)
    assert np.asscalar(np.array([[2.5]])) == 2.5
    assert np.array([1.5]).astype(np.float).dtype == np.float64 and np.bool is np.bool_


def test_legacy_average_size_is_dropped_from_text_and_sets():
    import hypothesis
    import hypothesis.strategies as st

    from caffe2.python import hypothesis_test_util  # noqa: F401

    @hypothesis.settings(max_examples=3, database=None)
    @hypothesis.given(
        t=st.text(alphabet=None, average_size=3, max_size=4), s=st.sets(st.integers(0, 3), average_size=2)
    )
    def run(t, s):
        assert len(t) <= 4 and s <= {0, 1, 2, 3}

    run()
