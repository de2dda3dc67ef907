"""MatMul + bias Add + Relu fused at import into one ONNXMatMulAdd with ``activation="Relu"``:
outputs equal onnx's reference evaluator for every executor and tensor library, run after run;
what is not fusable stays apart."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto
from onnx import helper as oh
from onnx.reference import ReferenceEvaluator

from asyncnet.interop.onnx import backend

pytestmark = pytest.mark.timeout(120)


def _model(extra_outputs: tuple[str, ...] = (), read_sum_twice: bool = False) -> onnx.ModelProto:
    g = np.random.default_rng(0)
    inits = [
        onnx.numpy_helper.from_array(g.standard_normal((6, 5)).astype(np.float32), "w"),
        onnx.numpy_helper.from_array(g.standard_normal(5).astype(np.float32), "b"),
    ]
    nodes = [
        oh.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
        oh.make_node("Add", ["m", "b"], ["s"], name="add"),
        oh.make_node("Relu", ["s"], ["r"], name="relu"),
        oh.make_node("Mul", ["r", "s" if read_sum_twice else "r"], ["y"], name="mul"),
    ]
    outputs = ["y", *extra_outputs]
    graph = oh.make_graph(
        nodes,
        "g",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, 6])],
        [oh.make_tensor_value_info(o, TensorProto.FLOAT, ["n", 3, 5]) for o in outputs],
        inits,
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])


@pytest.mark.parametrize("net_type", ["simple", "async_scheduling"])
@pytest.mark.parametrize("tensors", ["numpy", "torch"])
@pytest.mark.parametrize("batch", [4, 64])
def test_matmul_add_relu_is_one_op_and_matches_the_reference(net_type: str, tensors: str, batch: int) -> None:
    model = _model()
    x = np.random.default_rng(1).standard_normal((batch, 3, 6)).astype(np.float32)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    with backend.prepare(model, net_type=net_type, num_workers=2, tensors=tensors) as rep:
        ops = rep.model.predict_net.ops
        assert [op.type for op in ops] == ["ONNXMatMulAdd", "ONNXBinary"]
        assert ops[0].args["activation"] == "Relu" and ops[0].outputs == ["r"]
        runs = [rep.run([x])[0] for _ in range(3)]  # general kernel, then the specialized one
    for got in runs:
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
        np.testing.assert_array_equal(got, runs[0])
    assert (runs[0] >= 0).all() and (want == 0).any()  # the Relu cut something


@pytest.mark.parametrize(("extra", "twice"), [(("s",), False), ((), True)])
def test_a_sum_read_elsewhere_keeps_its_relu(extra: tuple[str, ...], twice: bool) -> None:
    model = _model(extra, twice)
    x = np.random.default_rng(2).standard_normal((2, 3, 6)).astype(np.float32)
    want = ReferenceEvaluator(model).run(None, {"x": x})
    with backend.prepare(model) as rep:
        types = [op.type for op in rep.model.predict_net.ops]
        assert types == ["ONNXMatMulAdd", "Relu", "ONNXBinary"], types
        assert not rep.model.predict_net.ops[0].args.get("activation")
        got = [rep.run([x]) for _ in range(2)][-1]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
