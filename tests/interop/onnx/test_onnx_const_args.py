"""Constant shapes, axes and indices resolved at import (Reshape's target, Unsqueeze's and Squeeze's
axes, Gather's one index become op arguments), chains of such layout ops fused into one
ONNXLayout op, and Softmax / LayerNormalization on numpy arrays
(torch's fused kernels on zero-copy views): outputs equal onnx's reference evaluator."""

from __future__ import annotations

import json

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto
from onnx import helper as oh
from onnx.reference import ReferenceEvaluator

import asyncnet as an
from asyncnet.errors import NetDefinitionError
from asyncnet.interop.onnx import backend

pytestmark = pytest.mark.timeout(120)


def _t(name: str, a: np.ndarray) -> onnx.TensorProto:
    return onnx.numpy_helper.from_array(a, name)


def _views_model() -> onnx.ModelProto:
    """x [batch, 4, 6] -> Reshape [0, 4, 2, 3] (0: copy) -> Unsqueeze 0 -> Transpose -> Squeeze
    -> Gather index -1 on axis 2 -> y [4, batch, 3]."""
    inits = [
        _t("target", np.array([0, 4, 2, 3], np.int64)),
        _t("ax0", np.array([0], np.int64)),
        _t("ax1", np.array([1], np.int64)),
        _t("last", np.array(-1, np.int64)),
    ]
    nodes = [
        oh.make_node("Reshape", ["x", "target"], ["r"]),
        oh.make_node("Unsqueeze", ["r", "ax0"], ["u"]),
        oh.make_node("Transpose", ["u"], ["t"], perm=[2, 0, 1, 3, 4]),
        oh.make_node("Squeeze", ["t", "ax1"], ["s"]),
        oh.make_node("Gather", ["s", "last"], ["y"], axis=2),
    ]
    graph = oh.make_graph(
        nodes,
        "views",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4, 6])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, [4, "batch", 3])],
        initializer=inits,
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])


@pytest.mark.parametrize("tensors", ["numpy", "torch"])
def test_constant_shape_axes_and_index_become_arguments(tensors):
    model = _views_model()
    rep = backend.prepare(model, tensors=tensors)
    (op,) = rep.model.predict_net.ops  # the chain, fused
    assert op.type == "ONNXLayout" and op.inputs == ["x"]
    assert [json.loads(s) for s in op.args["steps"]] == [
        {"op": "ONNXReshape", "allowzero": False, "shape": [0, 4, 2, 3]},
        {"op": "ONNXUnsqueeze", "axes": [0]},
        {"op": "ONNXTranspose", "perm": [2, 0, 1, 3, 4]},
        {"op": "ONNXSqueeze", "axes": [1]},
        {"op": "ONNXGather", "axis": 2, "index": -1},
    ]
    ref = ReferenceEvaluator(model)
    for batch in (1, 3):
        x = np.random.default_rng(batch).standard_normal((batch, 4, 6)).astype(np.float32)
        np.testing.assert_array_equal(rep.run([x])[0], ref.run(None, {"x": x})[0])


def test_gather_index_argument_out_of_range_names_the_op():
    ws = an.Workspace()
    ws.feed("x", np.zeros((2, 3), np.float32))
    net = an.Net("n")
    net.ONNXGather(["x"], "y", axis=1, index=3)
    with pytest.raises(an.OperatorError, match="index 3 out of range"):
        ws.run_net_once(net)


@pytest.mark.parametrize(
    ("op", "inputs", "args"),
    [
        ("ONNXReshape", ["x", "shape"], {"shape": [2, 3]}),
        ("ONNXReshape", ["x"], {}),
        ("ONNXGather", ["x", "i"], {"index": 0}),
        ("ONNXGather", ["x"], {}),
    ],
)
def test_argument_or_input_one_of_them(op, inputs, args):
    net = an.Net("n")
    with pytest.raises(NetDefinitionError, match="one of them"):
        getattr(net, op)(inputs, "y", **args)


def _one_node(node: onnx.NodeProto, x_shape: list, dtype: int, inits: list) -> onnx.ModelProto:
    graph = oh.make_graph(
        [node],
        "g",
        [oh.make_tensor_value_info("x", dtype, x_shape)],
        [oh.make_tensor_value_info("y", dtype, x_shape)],
        initializer=inits,
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])


FLOATS = [(np.float32, TensorProto.FLOAT, 1e-6), (np.float64, TensorProto.DOUBLE, 1e-12)]


@pytest.mark.parametrize(("dtype", "onnx_dtype", "tol"), FLOATS)
@pytest.mark.parametrize("axis", [-1, 1])
@pytest.mark.parametrize("log", [False, True])
def test_softmax_on_numpy_arrays_matches_the_reference(dtype, onnx_dtype, tol, axis, log):
    node = oh.make_node("LogSoftmax" if log else "Softmax", ["x"], ["y"], axis=axis)
    model = _one_node(node, [2, 4, 5], onnx_dtype, [])
    x = (np.random.default_rng(0).standard_normal((2, 4, 5)) * 4).astype(dtype)
    y = backend.prepare(model).run([x])[0]
    assert y.dtype == dtype and type(y) is np.ndarray
    np.testing.assert_allclose(y, ReferenceEvaluator(model).run(None, {"x": x})[0], rtol=tol, atol=tol)


@pytest.mark.parametrize(("dtype", "onnx_dtype", "tol"), FLOATS)
@pytest.mark.parametrize(("axis", "scale_shape", "bias"), [(-1, (5,), True), (1, (4, 5), False), (-1, (1,), True)])
def test_layer_norm_on_numpy_arrays_matches_the_reference(dtype, onnx_dtype, tol, axis, scale_shape, bias):
    g = np.random.default_rng(1)
    inits = [_t("s", g.standard_normal(scale_shape).astype(dtype))]
    if bias:
        inits.append(_t("b", g.standard_normal(scale_shape).astype(dtype)))
    node = oh.make_node("LayerNormalization", ["x", "s", "b"] if bias else ["x", "s"], ["y"], axis=axis, epsilon=1e-3)
    model = _one_node(node, [3, 4, 5], onnx_dtype, inits)
    x = (g.standard_normal((3, 4, 5)) * 3 + 1).astype(dtype)
    rep = backend.prepare(model)
    assert [op.type for op in rep.model.predict_net.ops] == ["ONNXLayerNorm"]
    y = rep.run([x])[0]
    assert y.dtype == dtype
    np.testing.assert_allclose(y, ReferenceEvaluator(model).run(None, {"x": x})[0], rtol=10 * tol, atol=10 * tol)


def _branchy_views_model() -> onnx.ModelProto:
    """x [batch, 6] -> Reshape [-1, 2, 3] -> t (a graph output, read three times): Transpose ->
    Flatten -> y1; Gather index 0 on axis 1 -> Relu -> y2; Unsqueeze 0 -> y3."""
    inits = [_t("target", np.array([-1, 2, 3], np.int64)), _t("zero", np.array(0, np.int64))]
    nodes = [
        oh.make_node("Reshape", ["x", "target"], ["t"]),
        oh.make_node("Transpose", ["t"], ["tt"], perm=[0, 2, 1]),
        oh.make_node("Flatten", ["tt"], ["y1"], axis=1),
        oh.make_node("Gather", ["t", "zero"], ["g"], axis=1),
        oh.make_node("Relu", ["g"], ["y2"]),
        oh.make_node("Unsqueeze", ["t", "zero_axes"], ["y3"]),
    ]
    inits.append(_t("zero_axes", np.array([0], np.int64)))
    graph = oh.make_graph(
        nodes,
        "branchy",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 6])],
        [
            oh.make_tensor_value_info("t", TensorProto.FLOAT, ["batch", 2, 3]),
            oh.make_tensor_value_info("y1", TensorProto.FLOAT, ["batch", 6]),
            oh.make_tensor_value_info("y2", TensorProto.FLOAT, ["batch", 3]),
            oh.make_tensor_value_info("y3", TensorProto.FLOAT, [1, "batch", 2, 3]),
        ],
        initializer=inits,
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])


@pytest.mark.parametrize("tensors", ["numpy", "torch"])
def test_layout_chains_stop_at_values_read_twice_and_graph_outputs(tensors):
    model = _branchy_views_model()
    rep = backend.prepare(model, tensors=tensors)
    ops = rep.model.predict_net.ops
    assert [(op.type, op.outputs) for op in ops] == [
        ("ONNXReshape", ["t"]),
        ("ONNXLayout", ["y1"]),  # Transpose + Flatten
        ("ONNXGather", ["g"]),  # read by Relu, not a layout op
        ("Relu", ["y2"]),
        ("ONNXUnsqueeze", ["y3"]),
    ]
    ref = ReferenceEvaluator(model)
    for batch in (1, 4):
        x = np.random.default_rng(batch).standard_normal((batch, 6)).astype(np.float32)
        for got, want in zip(rep.run([x]), ref.run(None, {"x": x})):
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    ("steps", "match"),
    [
        (["not json"], "expected a JSON object"),
        (['{"op": "Relu"}'], "one of"),
        (['{"op": "ONNXTranspose", "perm": "a"}'], "perm"),
        (['{"op": "ONNXReshape"}'], "one of them"),
    ],
)
def test_layout_op_refuses_bad_steps_when_created(steps, match):
    net = an.Net("n")
    with pytest.raises(NetDefinitionError, match=match):
        net.ONNXLayout(["x"], "y", steps=steps)


def test_layout_op_step_errors_name_the_op():
    ws = an.Workspace()
    ws.feed("x", np.zeros((2, 3), np.float32))
    net = an.Net("n")
    net.ONNXLayout(["x"], "y", steps=['{"op": "ONNXTranspose", "perm": [1, 0]}', '{"op": "ONNXSqueeze", "axes": [0]}'])
    with pytest.raises(an.OperatorError, match="cannot squeeze axis 0 of size 3"):
        ws.run_net_once(net)
