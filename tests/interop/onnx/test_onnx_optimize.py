"""Import-time rewrites (shape folding, MatMul + Add fusion, identities of parameters) and the fast
paths of the ONNX ops (one-index Gather, ConstantOfShape, the LSTM's reordered torch weights):
outputs equal onnx's reference evaluator, for more than one batch size."""

from __future__ import annotations

import json

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto
from onnx import helper as oh
from onnx.reference import ReferenceEvaluator

from asyncnet.interop.onnx import backend

pytestmark = pytest.mark.timeout(120)


def _t(name: str, a: np.ndarray) -> onnx.TensorProto:
    return onnx.numpy_helper.from_array(a, name)


def _attention_like() -> onnx.ModelProto:
    """x [batch, 4, 6] -> Linear (MatMul + Add) -> reshape to [batch, 4, 2, 3] through Shape/Gather/
    Unsqueeze/Concat (the batch symbolic), transpose, reshape back to [batch, 4, 6]."""
    g = np.random.default_rng(0)
    inits = [
        _t("w", g.standard_normal((6, 6)).astype(np.float32)),
        _t("b", g.standard_normal(6).astype(np.float32)),
        _t("i0", np.array(0, np.int64)),
        _t("i1", np.array(1, np.int64)),
        _t("ax", np.array([0], np.int64)),
        _t("two", np.array([2], np.int64)),
        _t("three", np.array([3], np.int64)),
        _t("flat", np.array([6], np.int64)),
    ]
    nodes = [
        oh.make_node("Identity", ["w"], ["w2"]),
        oh.make_node("MatMul", ["x", "w2"], ["mm"]),
        oh.make_node("Add", ["b", "mm"], ["lin"]),
        oh.make_node("Shape", ["lin"], ["s"]),
        oh.make_node("Gather", ["s", "i0"], ["batch"]),
        oh.make_node("Gather", ["s", "i1"], ["seq"]),
        oh.make_node("Unsqueeze", ["batch", "ax"], ["b1"]),
        oh.make_node("Unsqueeze", ["seq", "ax"], ["s1"]),
        oh.make_node("Concat", ["b1", "s1", "two", "three"], ["shape4"], axis=0),
        oh.make_node("Reshape", ["lin", "shape4"], ["heads"]),
        oh.make_node("Transpose", ["heads"], ["ht"], perm=[0, 2, 1, 3]),
        oh.make_node("Transpose", ["ht"], ["back"], perm=[0, 2, 1, 3]),
        oh.make_node("Concat", ["b1", "s1", "flat"], ["shape3"], axis=0),
        oh.make_node("Reshape", ["back", "shape3"], ["y"]),
    ]
    graph = oh.make_graph(
        nodes,
        "attn",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4, 6])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4, 6])],
        initializer=inits,
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])


@pytest.mark.parametrize("tensors", ["numpy", "torch"])
def test_shape_arithmetic_is_folded_and_outputs_stay_exact(tensors):
    model = _attention_like()
    rep = backend.prepare(model, tensors=tensors)
    types = [op.type for op in rep.model.predict_net.ops]
    assert types == ["ONNXMatMulAdd", "ONNXLayout"], types  # Reshape, Transpose, Transpose, Reshape: one op
    steps = [json.loads(s)["op"] for s in rep.model.predict_net.ops[1].args["steps"]]
    assert steps == ["ONNXReshape", "ONNXTranspose", "ONNXTranspose", "ONNXReshape"]
    plain = backend.prepare(model, tensors=tensors, optimize=False)
    assert "ONNXShape" in [op.type for op in plain.model.predict_net.ops]
    ref = ReferenceEvaluator(model)
    for batch in (1, 3, 7):
        x = np.random.default_rng(batch).standard_normal((batch, 4, 6)).astype(np.float32)
        want = ref.run(None, {"x": x})[0]
        np.testing.assert_allclose(rep.run([x])[0], want, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(plain.run([x])[0], want, rtol=1e-5, atol=1e-5)


def test_matmul_kept_when_its_output_is_a_graph_output():
    g = np.random.default_rng(1)
    nodes = [oh.make_node("MatMul", ["x", "w"], ["mm"]), oh.make_node("Add", ["mm", "b"], ["y"])]
    graph = oh.make_graph(
        nodes,
        "g",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])],
        [
            oh.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 2]),
            oh.make_tensor_value_info("mm", TensorProto.FLOAT, ["n", 2]),
        ],
        initializer=[
            _t("w", g.standard_normal((3, 2)).astype(np.float32)),
            _t("b", g.standard_normal(2).astype(np.float32)),
        ],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    rep = backend.prepare(model)
    assert [op.type for op in rep.model.predict_net.ops] == ["ONNXMatMul", "ONNXBinary"]
    x = g.standard_normal((5, 3)).astype(np.float32)
    for got, want in zip(rep.run([x]), ReferenceEvaluator(model).run(None, {"x": x})):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_reshape_with_two_symbolic_dims_is_not_given_a_constant_target():
    nodes = [oh.make_node("Shape", ["x"], ["s"]), oh.make_node("Reshape", ["x", "s"], ["y"])]
    graph = oh.make_graph(
        nodes,
        "g",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, ["a", "b"])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b"])],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    rep = backend.prepare(model)
    assert [op.type for op in rep.model.predict_net.ops] == ["ONNXShape", "ONNXReshape"]
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(rep.run([x])[0], x)


@pytest.mark.parametrize("tensors", ["numpy", "torch"])
@pytest.mark.parametrize("index", [0, -1, 2])
def test_gather_of_one_index(tensors, index):
    node = oh.make_node("Gather", ["x", "i"], ["y"], axis=1)
    graph = oh.make_graph(
        [node],
        "g",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        initializer=[_t("i", np.array(index))],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)])
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    got = backend.prepare(model, tensors=tensors).run([x])[0]
    np.testing.assert_array_equal(got, ReferenceEvaluator(model).run(None, {"x": x})[0])


@pytest.mark.parametrize("tensors", ["numpy", "torch"])
@pytest.mark.parametrize("value", [None, np.array([2.5], np.float32), np.array([7], np.int64), np.array([True])])
def test_constant_of_shape_is_native(tensors, value):
    kw = {} if value is None else {"value": _t("v", value)}
    node = oh.make_node("ConstantOfShape", ["s"], ["y"], **kw)
    graph = oh.make_graph(
        [node],
        "g",
        [oh.make_tensor_value_info("s", TensorProto.INT64, [3])],
        [
            oh.make_tensor_value_info(
                "y",
                onnx.helper.np_dtype_to_tensor_dtype(np.dtype(np.float32) if value is None else value.dtype),
                [2, 1, 3],
            )
        ],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    rep = backend.prepare(model, tensors=tensors)
    assert [op.type for op in rep.model.predict_net.ops] == ["ONNXConstantOfShape"]
    s = np.array([2, 1, 3], np.int64)
    got, want = rep.run([s])[0], ReferenceEvaluator(model).run(None, {"s": s})[0]
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_lstm_on_torch_sees_weights_changed_in_place():
    torch = pytest.importorskip("torch")
    import asyncnet as an

    g = np.random.default_rng(2)
    hid, inp = 4, 3
    w = g.standard_normal((1, 4 * hid, inp)).astype(np.float32)
    r = g.standard_normal((1, 4 * hid, hid)).astype(np.float32)
    x = g.standard_normal((5, 2, inp)).astype(np.float32)
    node = oh.make_node("LSTM", ["X", "W", "R"], ["Y"], hidden_size=hid)
    model = oh.make_model(
        oh.make_graph(
            [node],
            "g",
            [oh.make_tensor_value_info(n, TensorProto.FLOAT, a.shape) for n, a in (("X", x), ("W", w), ("R", r))],
            [oh.make_tensor_value_info("Y", TensorProto.FLOAT, [5, 1, 2, hid])],
        ),
        opset_imports=[oh.make_opsetid("", 14)],
    )
    ref = ReferenceEvaluator(model)
    net = an.Net("n")
    net.ONNXLSTM(["X", "W", "R"], ["Y"], hidden_size=hid, produce=[1])
    with an.Workspace() as ws:
        tw = torch.from_numpy(w.copy())
        for k, v in (("X", torch.from_numpy(x)), ("W", tw), ("R", torch.from_numpy(r))):
            ws.feed(k, v)
        ws.create_net(net)
        for scale in (1.0, 0.5):
            if scale != 1.0:
                tw.mul_(scale)  # the same tensor, new values
            ws.run_net("n")
            want = ref.run(None, {"X": x, "W": w * scale, "R": r})[0]
            np.testing.assert_allclose(ws.fetch("Y", host=True), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op,fill", [("LSTM", 0.0), ("GRU", 0.0), ("LSTM", 0.5)])
def test_zero_initial_states_from_constant_of_shape_are_left_out(op, fill):
    g = np.random.default_rng(4)
    hid, inp, gates = 3, 2, 4 if op == "LSTM" else 3
    inits = [
        _t("W", g.standard_normal((1, gates * hid, inp)).astype(np.float32)),
        _t("R", g.standard_normal((1, gates * hid, hid)).astype(np.float32)),
        _t("B", g.standard_normal((1, 2 * gates * hid)).astype(np.float32)),
        _t("one", np.array([1], np.int64)),
        _t("hid", np.array([hid], np.int64)),
        _t("i1", np.array(1, np.int64)),
        _t("ax", np.array([0], np.int64)),
    ]
    states = ["h0", "h0"] if op == "LSTM" else ["h0"]
    nodes = [
        oh.make_node("Shape", ["X"], ["s"]),
        oh.make_node("Gather", ["s", "i1"], ["batch"]),
        oh.make_node("Unsqueeze", ["batch", "ax"], ["b1"]),
        oh.make_node("Concat", ["one", "b1", "hid"], ["state_shape"], axis=0),
        oh.make_node("ConstantOfShape", ["state_shape"], ["h0"], value=_t("v", np.array([fill], np.float32))),
        oh.make_node(op, ["X", "W", "R", "B", "", *states], ["Y"], hidden_size=hid),
    ]
    graph = oh.make_graph(
        nodes,
        "g",
        [oh.make_tensor_value_info("X", TensorProto.FLOAT, [5, "batch", inp])],
        [oh.make_tensor_value_info("Y", TensorProto.FLOAT, [5, 1, "batch", hid])],
        initializer=inits,
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 14)])
    rep = backend.prepare(model)
    types = [o.type for o in rep.model.predict_net.ops]
    assert (types == [f"ONNX{op}"]) == (fill == 0.0), types
    ref = ReferenceEvaluator(model)
    for batch in (1, 4):
        x = g.standard_normal((5, batch, inp)).astype(np.float32)
        np.testing.assert_allclose(rep.run([x])[0], ref.run(None, {"X": x})[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [(2, 6), (5, 1, 6), (5, 3, 6), (5, 9, 6), (2, 3, 1, 6)])
@pytest.mark.parametrize("tensors", ["numpy", "torch"])
def test_matmul_add_on_any_leading_dims_and_strided_inputs(shape, tensors):
    """ONNXMatMulAdd (one matrix product of all rows when each matrix has few) on contiguous and
    transposed inputs."""
    g = np.random.default_rng(5)
    perm = list(range(len(shape)))
    perm[0], perm[-2] = perm[-2], perm[0]
    nodes = [
        oh.make_node("Transpose", ["x"], ["xt"], perm=perm),
        oh.make_node("MatMul", ["xt", "w"], ["mm"]),
        oh.make_node("Add", ["mm", "b"], ["y"]),
    ]
    in_shape = [shape[p] for p in perm]
    graph = oh.make_graph(
        nodes,
        "mm",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, [*shape[:-1], 4])],
        initializer=[
            _t("w", g.standard_normal((6, 4)).astype(np.float32)),
            _t("b", g.standard_normal(4).astype(np.float32)),
        ],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    rep = backend.prepare(model, tensors=tensors)
    assert [op.type for op in rep.model.predict_net.ops] == ["ONNXTranspose", "ONNXMatMulAdd"]
    x = g.standard_normal(in_shape).astype(np.float32)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(rep.run([x])[0], want, rtol=1e-5, atol=1e-5)
