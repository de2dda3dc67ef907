"""Caffe2's gradient registry on asyncnet's makers: pass-through gradients, gradient checkers."""

import numpy as np
import pytest

from caffe2.python import core, workspace
from caffe2.python.core import CreateOperator, GradientRegistry

pytestmark = pytest.mark.timeout(120)


def test_sum_hands_its_output_gradient_to_every_input() -> None:
    ops, g_in = GradientRegistry.GetGradientForOp(CreateOperator("Sum", ["a", "b", "c"], "s"), ["s_grad"])
    assert ops == [] and [str(g) for g in g_in] == ["s_grad"] * 3


def test_compare_nets_accepts_equal_nets_and_rejects_different_ones() -> None:
    from caffe2.python.gradient_checker import NetGradientChecker

    workspace.ResetWorkspace()
    values = {"x": np.array([0.5, -1.0, 2.0], np.float32)}
    a = core.Net("c2core_cmp_a")
    ya = a.Scale(a.Relu("x", "ra"), "ya", scale=2.0)
    b = core.Net("c2core_cmp_b")
    rb = b.Relu("x", "rb")
    yb = b.Add([rb, rb], "yb")
    NetGradientChecker.CompareNets([a, b], [[ya], [yb]], [0], ["x"], values, threshold=1e-6)
    c = core.Net("c2core_cmp_c")
    yc = c.Scale(c.Relu("x", "rc"), "yc", scale=3.0)
    with pytest.raises(AssertionError):
        NetGradientChecker.CompareNets([a, c], [[ya], [yc]], [0], ["x"], values, threshold=1e-6)
