"""GradientChecker.GetLossAndGrad in both of Caffe2's call forms, against numpy."""

import numpy as np
import pytest

from caffe2.python import core, gradient_checker, workspace

pytestmark = pytest.mark.timeout(120)


def _mul_case() -> tuple:
    op = core.CreateOperator("Mul", ["x", "w"], ["y"])
    x = np.array([0.5, -1.5, 2.0, 3.0], np.float32)
    w = np.array([2.0, 0.5, -1.0, 4.0], np.float32)
    grad_ops, g_input = core.GradientRegistry.GetGradientForOp(op, ["y_grad"])
    return op, x, w, grad_ops, g_input


def test_short_form_feeds_only_the_checked_input() -> None:
    op, x, w, grad_ops, g_input = _mul_case()
    workspace.FeedBlob("w", w)
    checker = gradient_checker.GradientChecker(0.01, 0.01)
    loss, grad = checker.GetLossAndGrad(op, grad_ops, x, op.input[0], g_input[0], [0])
    y = x.astype(np.float64) * w
    assert loss == pytest.approx(0.5 * np.sum(y**2), rel=1e-6)
    np.testing.assert_allclose(grad, y * w, rtol=1e-6)


def test_long_form_feeds_every_input_and_matches_the_short_form() -> None:
    op, x, w, grad_ops, g_input = _mul_case()
    checker = gradient_checker.GradientChecker(0.01, 0.01)
    loss, grad = checker.GetLossAndGrad(op, grad_ops, [x, w], list(op.input), 1, g_input[1], [0])
    y = x.astype(np.float64) * w
    assert loss == pytest.approx(0.5 * np.sum(y**2), rel=1e-6)
    np.testing.assert_allclose(grad, y * x, rtol=1e-6)
    short_loss, _ = checker.GetLossAndGrad(op, grad_ops, x, "x", g_input[0], [0])
    assert short_loss == pytest.approx(loss, rel=1e-6)


def test_wrong_argument_count_names_both_forms() -> None:
    op, x, _, grad_ops, g_input = _mul_case()
    checker = gradient_checker.GradientChecker(0.01, 0.01)
    with pytest.raises(TypeError, match="input_to_check"):
        checker.GetLossAndGrad(op, grad_ops, x, g_input[0], [0])
