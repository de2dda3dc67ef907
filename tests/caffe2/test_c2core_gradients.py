"""Caffe2's gradient registry on asyncnet's makers: pass-through gradients, gradient checkers."""

import pytest

from caffe2.python.core import CreateOperator, GradientRegistry

pytestmark = pytest.mark.timeout(120)


def test_sum_hands_its_output_gradient_to_every_input() -> None:
    ops, g_in = GradientRegistry.GetGradientForOp(CreateOperator("Sum", ["a", "b", "c"], "s"), ["s_grad"])
    assert ops == [] and [str(g) for g in g_in] == ["s_grad"] * 3

