"""Caffe2's gradient IR in ``caffe2.python.core``: Python gradient makers, the accumulation of
the gradients of a blob read by several ops (names and op order), sparse gradients, StopGradient,
ZeroGradient, version checks; values checked against numpy and finite differences."""

from __future__ import annotations

import numpy as np
import pytest

from caffe2.proto import caffe2_pb2
from caffe2.python import core, workspace
from caffe2.python.core import CreateOperator, GradientRegistry

pytestmark = pytest.mark.timeout(120)


def _summary(ops):
    return [(op.type, list(op.input), list(op.output)) for op in ops]


# Python makers for op types asyncnet does not have: "Twice" (y = 2x, dy -> dx = 2 dy), and
# "Keep" whose gradient reads its input.
@GradientRegistry.RegisterGradient("IrTestTwice")
def _twice_grad(op, g_output):
    device = op.device_option if op.HasField("device_option") else None
    grad = CreateOperator("Scale", [g_output[0]], [op.input[0] + "_grad"], scale=2.0, device_option=device)
    return [grad], [op.input[0] + "_grad"]


@GradientRegistry.RegisterGradient("IrTestKeep")
def _keep_grad(op, g_output):
    return CreateOperator("IrTestKeepGradient", [op.input[0], g_output[0]], [op.input[0] + "_grad"]), [
        op.input[0] + "_grad"
    ]


@GradientRegistry.RegisterGradient("IrTestNone")
def _none_grad(op, g_output):
    return None, [None] * len(op.input)


@pytest.fixture(autouse=True)
def _fresh_workspace():
    workspace.ResetWorkspace()
    yield
    workspace.ResetWorkspace()


def test_registered_python_maker_is_used_and_returned_by_get_gradient_for_op():
    op = CreateOperator("IrTestTwice", "a", "b")
    ops, g_in = GradientRegistry.GetGradientForOp(op, ["b_grad"])
    assert _summary(ops) == [("Scale", ["b_grad"], ["a_grad"])] and g_in == ["a_grad"]
    ops, g_in = GradientRegistry.GetGradientForOp(CreateOperator("IrTestNone", ["a", "c"], "b"), ["b_grad"])
    assert ops == [] and g_in == [None, None]
    assert GradientRegistry.gradient_registry_["IrTestTwice"] is _twice_grad


def test_chain_and_three_readers_get_autosplit_names_in_backward_order():
    fwd = [
        CreateOperator("IrTestTwice", "x", "p"),
        CreateOperator("IrTestTwice", "x", "q"),
        CreateOperator("IrTestTwice", "x", "r"),
        CreateOperator("Sum", ["p", "q", "r"], "s"),
    ]
    ops, grads = GradientRegistry.GetBackwardPass(fwd, {"s": "s_grad"})
    assert _summary(ops) == [
        ("Scale", ["s_grad"], ["x_grad"]),
        ("Scale", ["s_grad"], ["_x_grad_autosplit_0"]),
        ("Scale", ["s_grad"], ["_x_grad_autosplit_1"]),
        ("Sum", ["x_grad", "_x_grad_autosplit_0", "_x_grad_autosplit_1"], ["x_grad"]),
    ]
    assert {k: str(v) for k, v in grads.items()} == {
        "s": "s_grad",
        "p": "s_grad",
        "q": "s_grad",
        "r": "s_grad",
        "x": "x_grad",
    }


def test_list_of_outputs_is_seeded_with_ones_and_a_blob_used_by_a_loss_accumulates_the_seed():
    fwd = [CreateOperator("IrTestTwice", "x", "h"), CreateOperator("IrTestTwice", "h", "y")]
    ops, _ = GradientRegistry.GetBackwardPass(fwd, ["y", "h"])
    assert _summary(ops) == [
        ("ConstantFill", ["y"], ["y_autogen_grad"]),
        ("ConstantFill", ["h"], ["h_autogen_grad"]),
        ("Scale", ["y_autogen_grad"], ["_h_grad_autosplit_0"]),
        ("Sum", ["h_autogen_grad", "_h_grad_autosplit_0"], ["h_autogen_grad"]),
        ("Scale", ["h_autogen_grad"], ["x_grad"]),
    ]


def test_gradient_reading_an_overwritten_input_raises_naming_the_versions():
    fwd = [CreateOperator("IrTestKeep", "x", "y"), CreateOperator("IrTestTwice", "x", "x")]
    with pytest.raises(RuntimeError, match="version"):
        GradientRegistry.GetBackwardPass(fwd, {"y": "y_grad"})
    # overwriting after the reader's gradient no longer needs it is fine
    ok = [CreateOperator("IrTestTwice", "x", "x"), CreateOperator("IrTestKeep", "x", "y")]
    ops, _ = GradientRegistry.GetBackwardPass(ok, {"y": "y_grad"})
    assert _summary(ops) == [("IrTestKeepGradient", ["x", "y_grad"], ["x_grad"]), ("Scale", ["x_grad"], ["x_grad"])]


def test_stop_gradient_stops_and_an_unread_stop_gradient_output_is_refused():
    fwd = [
        CreateOperator("IrTestTwice", "x", "h"),
        CreateOperator("StopGradient", "h", "h"),
        CreateOperator("IrTestTwice", "h", "y"),
    ]
    ops, grads = GradientRegistry.GetBackwardPass(fwd, {"y": "y_grad"})
    assert _summary(ops) == [("Scale", ["y_grad"], ["h_grad"])] and set(grads) == {"y"}
    orphan = [CreateOperator("StopGradient", "x", "unused"), CreateOperator("IrTestTwice", "x", "y")]
    with pytest.raises(ValueError, match="unused"):
        GradientRegistry.GetBackwardPass(orphan, {"y": "y_grad"})


def test_accumulated_gradients_of_a_real_net_match_finite_differences():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 4)).astype(np.float32)
    net = core.Net("ir_fd")
    h = net.Relu("x", "h")
    a = net.Sigmoid(h, "a")
    b = net.Tanh(h, "b")
    s = net.Add([a, b], "s")
    t = net.Sub([s, h], "t")
    loss = net.SumElements(net.Mul([t, t], "sq"), "loss")
    grads = net.AddGradientOperators([loss])
    sums = [op for op in net.Proto().op if op.type == "Sum"]
    assert [list(op.output) for op in sums].count(["h_grad"]) == 1
    assert any(i.startswith("_h_grad_autosplit_") for op in sums for i in op.input)
    workspace.FeedBlob("x", x)
    workspace.RunNetOnce(net)

    def f(xv):
        hv = np.maximum(xv.astype(np.float64), 0)
        tv = 1 / (1 + np.exp(-hv)) + np.tanh(hv) - hv
        return float(np.sum(tv * tv))

    eps, num = 1e-5, np.zeros(x.shape)
    for idx in np.ndindex(x.shape):
        d = np.zeros(x.shape)
        d[idx] = eps
        num[idx] = (f(x + d) - f(x - d)) / (2 * eps)
    np.testing.assert_allclose(workspace.FetchBlob(str(grads["x"])), num, rtol=1e-3, atol=1e-4)


def test_add_and_sub_pass_gradients_through_and_broadcast_reduces():
    net = core.Net("ir_add")
    net.AddExternalInput("y_grad")
    net.Add(["p", "q"], "s")
    net.Sub(["s", "r"], "d")
    net.Add(["d", "bias"], "y", broadcast=1)
    grads = net.AddGradientOperators({"y": "y_grad"})
    # without broadcast the gradient passes through Add and Sub's first input: no op, same blob
    assert str(grads["p"]) == str(grads["q"]) == str(grads["s"]) == str(grads["d"])
    grad_ops = net.Proto().op[3:]
    assert [op.type for op in grad_ops].count("Negative") == 1 and str(grads["r"]) == "r_grad"
    assert "SumReduceLike" in [op.type for op in grad_ops] and str(grads["bias"]) == "bias_grad"
    rng = np.random.default_rng(4)
    for name, shape in (("p", (2, 3)), ("q", (2, 3)), ("r", (2, 3)), ("bias", (3,)), ("y_grad", (2, 3))):
        workspace.FeedBlob(name, rng.standard_normal(shape).astype(np.float32))
    workspace.RunNetOnce(net)
    gy = workspace.FetchBlob("y_grad")
    np.testing.assert_allclose(workspace.FetchBlob("bias_grad"), gy.sum(axis=0), rtol=1e-6)
    np.testing.assert_allclose(workspace.FetchBlob("r_grad"), -gy)
    np.testing.assert_allclose(workspace.FetchBlob(str(grads["p"])), gy)


def test_table_read_by_two_lookups_gets_concatenated_sparse_gradient():
    rng = np.random.default_rng(5)
    table = rng.standard_normal((6, 2)).astype(np.float32)
    i1, i2 = np.array([0, 2, 2], np.int32), np.array([5, 0], np.int32)
    net = core.Net("ir_sparse")
    net.Gather(["table", "i1"], "e1")
    net.Gather(["table", "i2"], "e2")
    s1 = net.SumElements("e1", "s1")
    s2 = net.SumElements(net.Mul(["e2", "e2"], "e2sq"), "s2")
    grads = net.AddGradientOperators([s1, s2])
    g = grads["table"]
    assert isinstance(g, core.GradientSlice)
    assert (str(g.indices), str(g.values)) == ("table_grad_indices_concat", "table_grad_values_concat")
    concat = net.Proto().op[-2:]
    assert [op.type for op in concat] == ["Concat", "Concat"]
    assert list(concat[0].output) == ["table_grad_indices_concat", "table_grad_indices_concat_split"]
    assert all(name.startswith("_table_grad_") and "_autosplit_" in name for op in concat for name in op.input)
    for name, value in (("table", table), ("i1", i1), ("i2", i2)):
        workspace.FeedBlob(name, value)
    workspace.RunNetOnce(net)
    dense = np.zeros_like(table)
    np.add.at(dense, workspace.FetchBlob(str(g.indices)), workspace.FetchBlob(str(g.values)))
    expected = np.zeros_like(table)
    np.add.at(expected, i1, 1.0)
    np.add.at(expected, i2, 2 * table[i2])
    np.testing.assert_allclose(dense, expected, rtol=1e-6)


def test_sparse_and_dense_gradients_of_one_blob_are_summed_densely():
    rng = np.random.default_rng(6)
    table = rng.standard_normal((4, 3)).astype(np.float32)
    idx = np.array([1, 1, 3], np.int32)
    net = core.Net("ir_mixed")
    net.Gather(["table", "idx"], "rows")
    a = net.SumElements("rows", "a")
    b = net.SumElements(net.Mul(["table", "table"], "tsq"), "b")
    grads = net.AddGradientOperators([a, b])
    assert isinstance(grads["table"], core.BlobReference) and str(grads["table"]) == "table_grad"
    assert "SparseToDense" in [op.type for op in net.Proto().op]
    workspace.FeedBlob("table", table)
    workspace.FeedBlob("idx", idx)
    workspace.RunNetOnce(net)
    expected = 2 * table
    np.add.at(expected, idx, 1.0)
    np.testing.assert_allclose(workspace.FetchBlob("table_grad"), expected, rtol=1e-6)


def test_sparse_output_gradient_into_a_dense_op_is_made_dense():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((4, 2)).astype(np.float32)
    w = rng.standard_normal((2, 2)).astype(np.float32)
    net = core.Net("ir_ensure_dense")
    net.FC(["x", "w", "b"], "h")
    net.EnsureDense("h", "h")
    net.Gather(["h", "i"], "rows")
    grads = net.AddGradientOperators([net.SumElements("rows", "loss")])
    ops = net.Proto().op
    s2d = [op for op in ops if op.type == "SparseToDense"]
    assert len(s2d) == 1 and list(s2d[0].output) == ["h_grad"]
    assert list(s2d[0].input) == ["h_grad_indices", "h_grad_values", "h"]
    for name, value in (("x", x), ("w", w), ("b", np.zeros(2, np.float32)), ("i", np.array([0, 3, 3], np.int32))):
        workspace.FeedBlob(name, value)
    workspace.RunNetOnce(net)
    dh = np.zeros((4, 2), np.float32)
    np.add.at(dh, [0, 3, 3], 1.0)
    np.testing.assert_allclose(workspace.FetchBlob(str(grads["x"])), dh @ w, rtol=1e-6)
    np.testing.assert_allclose(workspace.FetchBlob(str(grads["w"])), dh.T @ x, rtol=1e-6)


def test_zero_gradient_supplies_the_missing_output_gradient_of_lstm_unit():
    net = core.Net("ir_zero_grad")
    h_prev, c_prev, gates, lengths, t = net.AddExternalInput("h", "c", "g", "s", "t")
    hidden, cell = net.LSTMUnit([h_prev, c_prev, gates, lengths, t], ["hidden_t", "cell_t"])
    with pytest.raises(Exception, match="all its outputs"):
        net.Clone("copy").AddGradientOperators([hidden])
    net.ZeroGradient(cell, [])
    grads = net.AddGradientOperators([hidden])
    fill = [op for op in net.Proto().op if op.type == "ConstantFill" and list(op.output) == ["cell_t_grad"]]
    assert len(fill) == 1 and "g" in grads
    rng = np.random.default_rng(8)
    workspace.FeedBlob("h", rng.standard_normal((1, 2, 3)).astype(np.float32))
    workspace.FeedBlob("c", rng.standard_normal((1, 2, 3)).astype(np.float32))
    workspace.FeedBlob("g", rng.standard_normal((1, 2, 12)).astype(np.float32))
    workspace.FeedBlob("s", np.array([1, 1], np.int32))
    workspace.FeedBlob("t", np.array([0], np.int32))
    workspace.RunNetOnce(net)
    assert workspace.FetchBlob(str(grads["g"])).shape == (1, 2, 12)


def test_wrong_arity_names_the_schema_and_sum_ops_take_the_device_option():
    net = core.Net("ir_schema")
    a, b, one = net.AddExternalInput("a", "b", "one")
    m = net.Mul(a, b)
    with pytest.raises(Exception, match="schema"):
        net.Sub([m, one]).Net().AddGradientOperators([str(net.Proto().op[-1].output[0])])
    cuda = core.DeviceOption(caffe2_pb2.CUDA, 1)
    fwd = [CreateOperator("IrTestTwice", "x", n, device_option=cuda) for n in ("p", "q")]
    fwd.append(CreateOperator("IrTestNone", ["p", "q"], "y", device_option=cuda))
    fwd.append(CreateOperator("Sum", ["p", "q"], "z", device_option=cuda))
    ops, _ = GradientRegistry.GetBackwardPass(fwd, {"z": "z_grad"})
    assert ops[-1].type == "Sum" and ops[-1].device_option == cuda


def test_maker_gradient_ops_are_marked_as_gradient_ops():
    net = core.Net("ir_marked")
    net.FC(["x", "w", "b"], "y")
    net.AveragedLoss("y", "loss")
    net.AddGradientOperators(["loss"])
    marked = [(op.type, op.is_gradient_op) for op in net.Proto().op[2:]]
    assert marked == [("ConstantFill", False), ("AveragedLossGradient", True), ("FCGradient", True)]


def _if_net(cond_value: bool):
    from caffe2.python.net_builder import NetBuilder, ops

    with NetBuilder(_use_control_ops=True) as nb:
        ops.Copy(ops.Const(np.array([cond_value])), "cond")
        ops.Copy(ops.Const(np.array([1.5, -2.0], np.float32)), "x")
        ops.Copy(ops.Const(np.array([3.0], np.float32)), "wa")
        ops.Copy(ops.Const(np.array([0.5], np.float32)), "wb")
        ops.ConstantFill([], "y", shape=[2], value=0.0)  # a blob the branches write must exist before
        with ops.IfNet("cond"):
            ops.Mul(["x", "wa"], "h", broadcast=1)
            ops.Mul(["h", "h"], "y")
        with ops.Else():
            ops.Mul(["x", "wb"], "y", broadcast=1)
        ops.SumElements("y", "loss")
    return nb.get()[0]


@pytest.mark.parametrize("cond_value", [True, False])
def test_if_gradient_runs_the_taken_branch_backward_and_zeroes_the_other(cond_value):
    net = _if_net(cond_value)
    grads = net.AddGradientOperators(["loss"])
    grad_ifs = [op for op in net.Proto().op if op.type == "If" and op.is_gradient_op]
    assert len(grad_ifs) == 1
    workspace.RunNetOnce(net)
    x, wa, wb = np.array([1.5, -2.0]), 3.0, 0.5
    if cond_value:  # loss = sum((x wa)^2)
        expect = {"x": 2 * wa * wa * x, "wa": [np.sum(2 * wa * x * x)], "wb": [0.0]}
    else:  # loss = sum(x wb)
        expect = {"x": np.full(2, wb), "wa": [0.0], "wb": [np.sum(x)]}
    for blob, value in expect.items():
        np.testing.assert_allclose(workspace.FetchBlob(str(grads[blob])), value, rtol=1e-6)


@pytest.mark.parametrize("inputs, out", [(["acc", "w"], "acc"), (["w", "acc"], "acc"), (["acc", "w"], "w")])
def test_in_place_mul_is_refused(inputs, out):
    """Mul's gradient reads both inputs; one written over by the product would be read in its
    place (the gradient of w came out 0.375 where 1.5 is right), so the gradient is refused, as
    Caffe2's Mul gradient maker refuses it."""
    net = core.Net("in_place_mul")
    net.Mul(inputs, out)
    net.Mul([out, out], "s")
    with pytest.raises(Exception, match="in place"):
        net.AddGradientOperators(["s"])


def test_div_in_place_on_the_dividend_differentiates_and_on_the_divisor_is_refused():
    workspace.ResetWorkspace()
    a, b = np.array([2.0, -3.0], np.float32), np.array([0.5, 4.0], np.float32)
    workspace.FeedBlob("a", a.copy())
    workspace.FeedBlob("b", b.copy())
    net = core.Net("div_dividend")
    net.Div(["a", "b"], "a")
    net.SumElements("a", "s")
    grads = net.AddGradientOperators(["s"])
    workspace.RunNetOnce(net)
    np.testing.assert_allclose(workspace.FetchBlob(grads["b"]), -a / b**2, rtol=1e-6)  # d sum(a/b) / db
    refused = core.Net("div_divisor")
    refused.Div(["a", "b"], "b")
    refused.SumElements("b", "s")
    with pytest.raises(Exception, match="in place"):
        refused.AddGradientOperators(["s"])
