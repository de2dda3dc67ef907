"""ONNX LSTM and GRU -> Caffe2 NetDef pair (the importer's ONNXLSTM / ONNXGRU) -> ONNX again:
onnxruntime (onnx's reference evaluator for layout=1, which onnxruntime refuses) gives the same
outputs on the model that came back as on the original."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from caffe2.python.onnx import backend, frontend  # noqa: E402

pytestmark = pytest.mark.timeout(120)

H, IN, SEQ, BATCH = 4, 3, 5, 2


def _model(kind, direction, layout, with_b, with_h0, outputs, linear_before_reset=0):
    oh, rng = onnx.helper, np.random.default_rng(3)
    gates, dirs = (4 if kind == "LSTM" else 3), (2 if direction == "bidirectional" else 1)
    inits = {
        "W": rng.standard_normal((dirs, gates * H, IN)),
        "R": rng.standard_normal((dirs, gates * H, H)) * 0.5,
    }
    ins = ["x", "W", "R"]
    if with_b or with_h0:
        inits["B"] = rng.standard_normal((dirs, 2 * gates * H)) * 0.3
        ins.append("B")
    if with_h0:
        ins.append("")  # sequence_lens
        inits["h0"] = rng.standard_normal((dirs, BATCH, H) if layout == 0 else (BATCH, dirs, H))
        ins.append("h0")
        if kind == "LSTM":
            inits["c0"] = rng.standard_normal(inits["h0"].shape)
            ins.append("c0")
    attrs = {"hidden_size": H, "direction": direction, "layout": layout}
    if kind == "GRU":
        attrs["linear_before_reset"] = linear_before_reset
    node = oh.make_node(kind, ins, outputs, **attrs)
    x_shape = [SEQ, BATCH, IN] if layout == 0 else [BATCH, SEQ, IN]
    state = [dirs, BATCH, H] if layout == 0 else [BATCH, dirs, H]
    shapes = [[SEQ, dirs, BATCH, H] if layout == 0 else [BATCH, SEQ, dirs, H], state, state]
    graph = oh.make_graph(
        [node],
        f"{kind.lower()}_graph",
        [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, x_shape)],
        [oh.make_tensor_value_info(o, onnx.TensorProto.FLOAT, shapes[i]) for i, o in enumerate(outputs) if o],
        initializer=[onnx.numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    return model, {"x": rng.standard_normal(x_shape).astype(np.float32)}


def _ort(model, feeds):
    """onnxruntime; its CPU kernels refuse layout=1, so those models run on onnx's reference evaluator."""
    if any(a.name == "layout" and a.i == 1 for a in model.graph.node[0].attribute):
        from onnx.reference import ReferenceEvaluator

        return ReferenceEvaluator(model).run(None, feeds)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


CASES = [
    ("LSTM", "forward", 0, True, True, ["y", "yh", "yc"], 0),
    ("LSTM", "reverse", 0, False, False, ["y", "yh"], 0),
    ("LSTM", "bidirectional", 1, True, True, ["y", "", "yc"], 0),
    ("LSTM", "forward", 0, True, False, ["", "yh"], 0),
    ("GRU", "forward", 0, True, True, ["y", "yh"], 0),
    ("GRU", "bidirectional", 0, True, False, ["y", "yh"], 1),
    ("GRU", "reverse", 1, False, False, ["y"], 1),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(str(v) for v in c[:4]) + "-" + "+".join(c[5]))
def test_rnn_goes_back_to_onnx(case):
    model, feeds = _model(*case)
    init, pred = backend.Caffe2Backend.onnx_graph_to_caffe2_net(model)
    assert {op.type for op in pred.op} == {"ONNX" + case[0]}
    back = frontend.caffe2_net_to_onnx_model(pred, init, {"x": (onnx.TensorProto.FLOAT, list(feeds["x"].shape))})
    onnx.checker.check_model(back, full_check=True)
    assert [n.op_type for n in back.graph.node] == [case[0]]
    # the weights go back in ONNX's gate order, each written once (no unread initializer)
    assert {i.name for i in back.graph.initializer} <= set(back.graph.node[0].input)
    want, got = _ort(model, feeds), _ort(back, feeds)
    assert len(got) == len(want) == sum(1 for o in case[5] if o)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-6)
    # and the Caffe2 pair itself computes them (asyncnet's kernels against onnxruntime)
    for g, w in zip(backend.prepare(model).run(feeds["x"]), want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
