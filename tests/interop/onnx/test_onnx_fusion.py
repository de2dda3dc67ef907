"""Conv fusions at import (Conv + Relu/Clip, Conv + residual Add + Relu) and the ONNXConv op:
outputs equal onnx's reference evaluator for every executor and tensor library, at two batch
sizes; what is not fusable stays apart; bad inputs give clear errors."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto
from onnx import helper as oh
from onnx.reference import ReferenceEvaluator

import asyncnet as an
from asyncnet.errors import NetDefinitionError, OperatorError
from asyncnet.interop.onnx import backend

pytestmark = pytest.mark.timeout(120)


def _t(name: str, a: np.ndarray) -> onnx.TensorProto:
    return onnx.numpy_helper.from_array(a, name)


def _model(nodes: list, inits: list, outputs: list[str], c: int = 4) -> onnx.ModelProto:
    g = oh.make_graph(
        nodes,
        "g",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, ["n", c, 8, 8])],
        [oh.make_tensor_value_info(o, TensorProto.FLOAT, ["n", None, None, None]) for o in outputs],
        inits,
    )
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])


def _w(g: np.random.Generator, *shape: int) -> np.ndarray:
    return (g.standard_normal(shape) * 0.5).astype(np.float32)


def _residual_block() -> onnx.ModelProto:
    """relu(conv_a(x) + conv_skip(x)), the skip convolution after the body's in node order; then a
    Clip(0, 6) after a grouped convolution with asymmetric pads, and a pointwise one with Relu."""
    g = np.random.default_rng(0)
    inits = [
        _t("wa", _w(g, 8, 4, 3, 3)),
        _t("ba", _w(g, 8)),
        _t("ws", _w(g, 8, 4, 1, 1)),
        _t("wg", _w(g, 8, 2, 3, 3)),
        _t("wp", _w(g, 6, 8, 1, 1)),
        _t("bp", _w(g, 6)),
        _t("lo", np.array(0, np.float32)),
        _t("hi", np.array(6, np.float32)),
    ]
    nodes = [
        oh.make_node("Conv", ["x", "wa", "ba"], ["a"], pads=[1, 1, 1, 1]),
        oh.make_node("Conv", ["x", "ws"], ["s"]),
        oh.make_node("Add", ["a", "s"], ["sum"]),
        oh.make_node("Relu", ["sum"], ["r"]),
        oh.make_node("Conv", ["r", "wg"], ["gc"], pads=[0, 1, 2, 1], group=4),
        oh.make_node("Clip", ["gc", "lo", "hi"], ["c6"]),
        oh.make_node("Conv", ["c6", "wp", "bp"], ["p"]),
        oh.make_node("Relu", ["p"], ["y"]),
    ]
    return _model(nodes, inits, ["y"])


@pytest.mark.parametrize("net_type", ["simple", "async_scheduling"])
@pytest.mark.parametrize("tensors", ["numpy", "torch"])
def test_fused_block_matches_the_reference(net_type: str, tensors: str) -> None:
    if tensors == "torch":
        pytest.importorskip("torch")
    model = _residual_block()
    rep = backend.prepare(model, net_type=net_type, num_workers=2, tensors=tensors)
    ops = rep.model.predict_net.ops
    assert [op.type for op in ops] == ["ONNXConv", "ONNXConv", "ONNXConv", "ONNXConv"]
    assert [(op.args.get("activation", ""), op.args.get("residual", False)) for op in ops] == [
        ("", False),
        ("Relu", True),
        ("Clip", False),
        ("Relu", False),
    ]
    ref = ReferenceEvaluator(model)
    g = np.random.default_rng(1)
    for batch in (1, 3, 3):  # the third run takes a straight net's specialized code
        x = g.standard_normal((batch, 4, 8, 8)).astype(np.float32)
        (want,) = ref.run(None, {"x": x})
        (got,) = rep.run(x)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        assert got.min() >= 0


def test_not_fused_when_the_value_is_read_twice_an_output_or_broadcast() -> None:
    g = np.random.default_rng(2)
    inits = [_t("w", _w(g, 4, 4, 3, 3)), _t("w2", _w(g, 4, 4, 3, 3)), _t("row", _w(g, 1, 4, 1, 8))]
    nodes = [
        oh.make_node("Conv", ["x", "w"], ["a"], pads=[1, 1, 1, 1]),
        oh.make_node("Relu", ["a"], ["ra"]),  # a is also a graph output: Relu stays apart
        oh.make_node("Conv", ["ra", "w2"], ["b"], pads=[1, 1, 1, 1]),
        oh.make_node("Add", ["b", "row"], ["y"]),  # Z broadcasts: not a residual
    ]
    model = _model(nodes, inits, ["a", "y"])
    rep = backend.prepare(model)
    assert [op.type for op in rep.model.predict_net.ops] == ["ONNXConv", "Relu", "ONNXConv", "ONNXBinary"]
    x = g.standard_normal((2, 4, 8, 8)).astype(np.float32)
    for want, got in zip(ReferenceEvaluator(model).run(None, {"x": x}), rep.run(x)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_unoptimized_import_keeps_the_ops_apart() -> None:
    model = _residual_block()
    rep = backend.prepare(model, optimize=False)
    assert [op.type for op in rep.model.predict_net.ops].count("Relu") == 2


def _conv_net(ws: an.Workspace, inputs: list[str], net_type: str = "simple", **args: object) -> an.Net:
    net = an.Net(f"conv_{net_type}", type=net_type)
    net.ONNXConv(inputs, "y", **args)
    return net


@pytest.mark.parametrize(
    "shape, w_shape, args",
    [
        ((2, 4, 7, 7), (6, 4, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
        ((2, 4, 7, 7), (6, 4, 1, 1), {}),  # pointwise, small batch: torch
        ((16, 4, 5, 5), (6, 4, 1, 1), {}),  # pointwise from POINTWISE_NUMPY_BATCH on: numpy's matmul
        ((1, 4, 7, 7), (4, 1, 3, 3), {"pads": [0, 2, 1, 0], "group": 4}),  # asymmetric pads
        ((2, 4, 9, 9), (6, 2, 3, 3), {"dilations": [2, 2], "group": 2}),
    ],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_onnx_conv_matches_torch(shape: tuple, w_shape: tuple, args: dict, dtype: type) -> None:
    torch = pytest.importorskip("torch")
    g = np.random.default_rng(3)
    x, w, b = g.standard_normal(shape).astype(dtype), _w(g, *w_shape).astype(dtype), _w(g, w_shape[0]).astype(dtype)
    t = lambda a: torch.from_numpy(a.astype(np.float64))
    p = args.get("pads", [0, 0, 0, 0])
    xt = torch.nn.functional.pad(t(x), (p[1], p[3], p[0], p[2]))
    ref = torch.nn.functional.conv2d(
        xt, t(w), t(b), args.get("strides", [1, 1]), 0, args.get("dilations", [1, 1]), args.get("group", 1)
    )
    z = g.standard_normal(tuple(ref.shape)).astype(dtype)
    want = np.clip(ref.numpy() + z, -0.5, 1.0)
    ws = an.Workspace()
    for k, v in {"x": x, "w": w, "b": b, "z": z}.items():
        ws.feed(k, v)
    net = _conv_net(
        ws, ["x", "w", "b", "z"], kernels=list(w_shape[2:]), residual=True, activation="Clip", min=-0.5, max=1.0, **args
    )
    straight = _conv_net(
        ws,
        ["x", "w", "b", "z"],
        "straight",
        kernels=list(w_shape[2:]),
        residual=True,
        activation="Clip",
        min=-0.5,
        max=1.0,
        **args,
    )
    ws.run_net_once(net)
    got = ws.fetch("y")
    assert got.dtype == dtype and got.shape == want.shape
    tol = 2e-2 if dtype == np.float16 else 1e-4
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    ws.create_net(straight)
    for _ in range(3):  # the specializing run, then the variant: the general kernel's bits
        ws.run_net("conv_straight")
        np.testing.assert_array_equal(ws.fetch("y"), got)
    ws.feed("x", torch.from_numpy(x))
    for k in ("w", "b", "z"):
        ws.feed(k, torch.from_numpy(ws.fetch(k)))
    ws.run_net_once(net)
    np.testing.assert_allclose(ws.fetch("y").numpy(), want, rtol=tol, atol=tol)


def test_onnx_conv_errors() -> None:
    ws = an.Workspace()
    ws.feed("x", np.ones((1, 2, 4, 4), np.float32))
    ws.feed("w", np.ones((3, 2, 1, 1), np.float32))
    ws.feed("z", np.ones((1, 3, 4, 5), np.float32))
    with pytest.raises(
        NetDefinitionError, match=r"expected 4 inputs \(X, W, B, Z\) for bias=True, residual=True, got 2"
    ):
        ws.run_net_once(_conv_net(ws, ["x", "w"], kernels=[1, 1], residual=True))
    with pytest.raises(NetDefinitionError, match="activation='Clip' only"):
        ws.run_net_once(_conv_net(ws, ["x", "w"], kernels=[1, 1], bias=False, min=0.0))
    with pytest.raises(OperatorError, match=r"expected Z 'z' of the convolution's shape \(1, 3, 4, 4\)"):
        ws.run_net_once(_conv_net(ws, ["x", "w", "z"], kernels=[1, 1], bias=False, residual=True))


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("op_type", ["LSTM", "GRU"])
def test_recurrence_of_a_transposed_batch_matches_the_reference(direction: str, op_type: str) -> None:
    """x [batch, seq, in] transposed to sequence first (a view the fused kernel reads batch first)."""
    pytest.importorskip("torch")
    g = np.random.default_rng(4)
    dirs, hidden, gates = (2 if direction == "bidirectional" else 1), 3, (4 if op_type == "LSTM" else 3)
    inits = [
        _t("w", _w(g, dirs, gates * hidden, 5)),
        _t("r", _w(g, dirs, gates * hidden, hidden)),
        _t("b", _w(g, dirs, 2 * gates * hidden)),
    ]
    extra = {"linear_before_reset": 1} if op_type == "GRU" else {}
    nodes = [
        oh.make_node("Transpose", ["x"], ["xt"], perm=[1, 0, 2]),
        oh.make_node(op_type, ["xt", "w", "r", "b"], ["y", "y_h"], hidden_size=hidden, direction=direction, **extra),
    ]
    graph = oh.make_graph(
        nodes,
        "g",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4, 5])],
        [
            oh.make_tensor_value_info("y", TensorProto.FLOAT, [4, dirs, "n", hidden]),
            oh.make_tensor_value_info("y_h", TensorProto.FLOAT, [dirs, "n", hidden]),
        ],
        inits,
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    ref = ReferenceEvaluator(model)
    for tensors in ("numpy", "torch"):
        rep = backend.prepare(model, tensors=tensors)
        for batch in (1, 3, 3):
            x = g.standard_normal((batch, 4, 5)).astype(np.float32)
            for got, want in zip(rep.run(x), ref.run(None, {"x": x})):
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_fused_ops_export_back_to_the_same_function() -> None:
    """ONNXConv (residual, Relu, Clip), ONNXMatMul and ONNXMaxPool written back as ONNX nodes."""
    ort = pytest.importorskip("onnxruntime")
    from caffe2.python.onnx import backend as c2backend
    from caffe2.python.onnx import frontend

    model = _residual_block()
    g = model.graph
    g.node.extend(
        [
            oh.make_node("MaxPool", ["y"], ["mp"], kernel_shape=[2, 2], strides=[2, 2]),
            oh.make_node("Reshape", ["mp", "flat"], ["f"]),
            oh.make_node("MatMul", ["f", "f_t"], ["z"]),
        ]
    )
    g.initializer.append(_t("flat", np.array([-1, 96], np.int64)))
    g.initializer.append(_t("f_t", np.random.default_rng(5).standard_normal((96, 2)).astype(np.float32)))
    del g.output[:]
    g.output.append(oh.make_tensor_value_info("z", TensorProto.FLOAT, ["n", 2]))
    init, pred = c2backend.Caffe2Backend.onnx_graph_to_caffe2_net(model)
    assert {"ONNXConv", "ONNXMatMul", "ONNXMaxPool"} <= {op.type for op in pred.op}
    back = frontend.caffe2_net_to_onnx_model(pred, init, {"x": (TensorProto.FLOAT, [2, 4, 8, 8])})
    onnx.checker.check_model(back, full_check=True)
    x = np.random.default_rng(6).standard_normal((2, 4, 8, 8)).astype(np.float32)
    run = lambda m: ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[
        0
    ]
    np.testing.assert_allclose(run(back), run(model), rtol=1e-5, atol=1e-5)
