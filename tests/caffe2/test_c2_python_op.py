"""Caffe2's Python operator: functions run as ops, with builders, the workspace, and gradients
checked by finite differences."""

from __future__ import annotations

import numpy as np
import pytest

from caffe2.python import core, gradient_checker, workspace
from caffe2.python import hypothesis_test_util as hu

pytestmark = pytest.mark.timeout(60)


def test_function_sees_inputs_and_writes_outputs():
    seen = {}

    def f(inputs, outputs):
        seen["shape"] = inputs[0].shape
        outputs[0].reshape(inputs[0].shape)
        outputs[0].data[...] = inputs[0].data[::-1] + 1
        outputs[1].feed(np.array(["done"], dtype=object))

    x = np.array([1.0, 2.0, 3.0], np.float32)
    workspace.FeedBlob("x", x)
    assert workspace.RunOperatorOnce(core.CreatePythonOperator(f, ["x"], ["y", "tag"]))
    assert seen["shape"] == (3,)
    np.testing.assert_array_equal(workspace.FetchBlob("y"), [4.0, 3.0, 2.0])
    assert list(workspace.FetchBlob("tag")) == [b"done"]
    np.testing.assert_array_equal(workspace.FetchBlob("x"), x)


def test_builder_runs_once_per_created_net():
    built = []

    def builder(start):
        state = {"n": start}
        built.append(state)

        def count(inputs, outputs):
            state["n"] += 1
            outputs[0].feed(np.array(state["n"], np.int64))

        return count

    net = core.Net("python_builder")
    net.Python((builder, [10], {}))([], ["count"])
    for k in range(2):
        clone = net.Clone(f"python_builder_{k}")
        workspace.CreateNet(clone)
        for _ in range(3):
            workspace.RunNet(clone)
        assert int(workspace.FetchBlob("count")) == 13
    assert len(built) == 2


def test_pass_workspace_and_errors():
    def read(inputs, outputs, ws):
        outputs[0].feed(ws.blobs["hidden"].fetch() * 3)

    net = core.Net("python_ws")
    net.ConstantFill([], "hidden", shape=[2], value=2.0)
    net.Python(read, pass_workspace=True)([], ["tripled"])
    workspace.RunNetOnce(net)
    np.testing.assert_array_equal(workspace.FetchBlob("tripled"), [6.0, 6.0])

    def fail(inputs, outputs):
        raise RuntimeError("deliberate failure")

    with pytest.raises(RuntimeError, match="deliberate failure"):
        workspace.RunOperatorOnce(core.CreatePythonOperator(fail, [], []))


def _square(inputs, outputs):
    outputs[0].feed(inputs[0].data ** 2)
    outputs[1].feed(inputs[1].data * 3)


def _square_grad(inputs, outputs):  # x1, x2, y1, y2, dy1, dy2 -> dx1, dx2
    outputs[0].feed(2 * inputs[0].data * inputs[4].data)
    outputs[1].feed(3 * inputs[5].data)


def test_gradient_matches_finite_differences():
    op = core.CreatePythonOperator(_square, ["x1", "x2"], ["y1", "y2"], grad_f=_square_grad)
    x1 = np.array([0.5, -1.0, 2.0], np.float32)
    x2 = np.array([[1.0, -2.0]], np.float32)
    checker = gradient_checker.GradientChecker(stepsize=0.01, threshold=0.01, device_option=hu.cpu_do)
    for index in (0, 1):
        ok, grad, estimate = checker.CheckSimple(op, [x1, x2], index, [0, 1])
        assert ok, (grad, estimate)


def test_gradient_of_selected_inputs_only():
    def grad_first(inputs, outputs):  # x1, x2, y1, y2, dy1 -> dx1
        outputs[0].feed(2 * inputs[0].data * inputs[4].data)

    net = core.Net("python_grad_sel")
    y1, _ = net.Python(_square, grad_f=grad_first, grad_output_indices=[0], grad_input_indices=[0])(
        ["x1", "x2"], ["y1", "y2"]
    )
    loss = net.AveragedLoss(y1, "loss")
    grads = net.AddGradientOperators([loss])
    assert "x2" not in grads
    workspace.FeedBlob("x1", np.array([1.0, -3.0], np.float32))
    workspace.FeedBlob("x2", np.array([5.0], np.float32))
    workspace.RunNetOnce(net)
    np.testing.assert_allclose(workspace.FetchBlob(str(grads["x1"])), [1.0, -3.0])  # d mean(x1^2) = x1


def test_no_grad_f_means_no_gradient():
    net = core.Net("python_nograd")
    y1, _ = net.Python(_square)(["x1", "x2"], ["y1", "y2"])
    loss = net.AveragedLoss(y1, "loss")
    with pytest.raises(ValueError, match="without grad_f"):
        net.AddGradientOperators([loss])
