"""asyncnet's native ONNX ops against onnx's reference evaluator on cases the node tests miss
(bidirectional and batch-first recurrences with initial states, torch tensors, async executor)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto
from onnx import helper as oh
from onnx.reference import ReferenceEvaluator

from asyncnet.interop.onnx import backend


def _rnn_model(
    op: str, direction: str, layout: int, lbr: int, with_state: bool, outputs: list[str]
) -> tuple[onnx.ModelProto, dict]:
    g = np.random.default_rng(7)
    seq, batch, inp, hid = 4, 3, 5, 6
    gates = 4 if op == "LSTM" else 3
    dirs = 2 if direction == "bidirectional" else 1
    x_shape = (batch, seq, inp) if layout else (seq, batch, inp)
    s_shape = (batch, dirs, hid) if layout else (dirs, batch, hid)
    feeds = {
        "X": g.standard_normal(x_shape).astype(np.float32),
        "W": g.standard_normal((dirs, gates * hid, inp)).astype(np.float32) * 0.5,
        "R": g.standard_normal((dirs, gates * hid, hid)).astype(np.float32) * 0.5,
        "B": g.standard_normal((dirs, 2 * gates * hid)).astype(np.float32) * 0.5,
    }
    ins = ["X", "W", "R", "B"]
    if with_state:
        feeds["h0"] = g.standard_normal(s_shape).astype(np.float32)
        ins += ["", "h0"]
        if op == "LSTM":
            feeds["c0"] = g.standard_normal(s_shape).astype(np.float32)
            ins.append("c0")
    kw = {"linear_before_reset": lbr} if op == "GRU" else {}
    node = oh.make_node(op, ins, outputs, hidden_size=hid, direction=direction, layout=layout, **kw)
    g_in = [oh.make_tensor_value_info(k, TensorProto.FLOAT, v.shape) for k, v in feeds.items()]
    g_out = [oh.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs if o]
    return oh.make_model(oh.make_graph([node], "rnn", g_in, g_out), opset_imports=[oh.make_opsetid("", 14)]), feeds


CASES = list(itertools.product(["LSTM", "GRU"], ["forward", "reverse", "bidirectional"], [0, 1], [0, 1], [False, True]))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("op,direction,layout,lbr,with_state", [c for c in CASES if c[0] == "GRU" or c[3] == 0])
def test_native_rnn_matches_reference(
    op: str, direction: str, layout: int, lbr: int, with_state: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """numpy arrays (torch's fused recurrence on views when it can run it, and numpy's steps without
    torch), torch tensors on the async executor."""
    from asyncnet.ops import onnx_rnn

    outputs = ["Y", "Y_h", "Y_c"] if op == "LSTM" else ["Y", "Y_h"]
    model, feeds = _rnn_model(op, direction, layout, lbr, with_state, outputs)
    want = ReferenceEvaluator(model).run(None, feeds)
    for net_type, tensors, numpy_steps in (
        ("simple", "numpy", False),
        ("simple", "numpy", True),
        ("async_scheduling", "torch", False),
    ):
        if numpy_steps:
            monkeypatch.setattr(onnx_rnn, "torch_if_installed", lambda: None)
        rep = backend.prepare(model, net_type=net_type, tensors=tensors, check=False)
        assert rep.model.op_counts == {(op, "native"): 1}
        for got, exp in zip(rep.run(feeds), want):
            assert type(got) is np.ndarray and got.dtype == np.float32
            np.testing.assert_allclose(got, exp, rtol=1e-5, atol=1e-5)
        monkeypatch.undo()


@pytest.mark.timeout(60)
def test_lstm_on_numpy_sees_weights_changed_in_place() -> None:
    model, feeds = _rnn_model("LSTM", "bidirectional", 0, 0, True, ["Y", "Y_h", "Y_c"])
    rep = backend.prepare(model, check=False)
    ref = ReferenceEvaluator(model)
    w = feeds["W"].copy()
    for scale in (1.0, 0.5):
        feeds["W"] = w
        w *= scale  # the same array, new values
        for got, exp in zip(rep.run(feeds), ref.run(None, feeds)):
            np.testing.assert_allclose(got, exp, rtol=1e-5, atol=1e-5)


@pytest.mark.timeout(60)
def test_rnn_with_only_the_last_state_output() -> None:
    model, feeds = _rnn_model("LSTM", "forward", 0, 0, False, ["", "Y_h"])
    want = ReferenceEvaluator(model).run(None, feeds)
    rep = backend.prepare(model, check=False)
    np.testing.assert_allclose(rep.run(feeds)[0], want[0], rtol=1e-5, atol=1e-5)


@pytest.mark.timeout(60)
def test_loop_carrying_an_optional_sequence_gives_the_expected_sequence() -> None:
    """ONNX's test_loop16_seq_none, compared element by element (its runner cannot compare it)."""
    from onnx.backend.test.loader import load_model_tests

    case = next(t for t in load_model_tests(kind="node") if t.name == "test_loop16_seq_none")
    inputs, expected = case.data_sets[0]
    got = backend.prepare(case.model).run(inputs)[0]
    assert len(got) == len(expected[0])
    for g, e in zip(got, expected[0]):
        assert g.dtype == e.dtype and g.shape == e.shape
        np.testing.assert_array_equal(g, e)


@pytest.mark.timeout(60)
def test_control_flow_runs_on_asyncnet_nets() -> None:
    """If, Loop and Scan become ONNXIf / ONNXLoop / ONNXScan whose bodies are asyncnet nets."""
    from onnx.backend.test.loader import load_model_tests

    cases = {t.name: t for t in load_model_tests(kind="node")}
    for name, op in (
        ("test_if", "ONNXIf"),
        ("test_loop11", "ONNXLoop"),
        ("test_scan9_sum", "ONNXScan"),
        ("test_scan_sum", "ONNXScan"),
    ):
        rep = backend.prepare(cases[name].model)
        assert [o.type for o in rep.model.predict_net.ops] == [op]
        inputs, expected = cases[name].data_sets[0]
        for g, e in zip(rep.run(inputs), expected):
            np.testing.assert_allclose(g, e, rtol=1e-6)


@pytest.mark.timeout(60)
def test_conv_batch_norm_folded_at_import() -> None:
    g = np.random.default_rng(3)
    t = lambda name, a: oh.make_tensor(name, TensorProto.FLOAT, a.shape, a.astype(np.float32).ravel())
    inits = [
        t("w", g.standard_normal((4, 3, 3, 3))),
        t("b", g.standard_normal(4)),
        t("s", g.standard_normal(4)),
        t("beta", g.standard_normal(4)),
        t("mean", g.standard_normal(4)),
        t("var", g.uniform(0.5, 2, 4)),
    ]
    nodes = [
        oh.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        oh.make_node("BatchNormalization", ["c", "s", "beta", "mean", "var"], ["y"], epsilon=1e-3),
    ]
    graph = oh.make_graph(
        nodes,
        "g",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 5, 5])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 5, 5])],
        initializer=inits,
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 15)])
    x = g.standard_normal((2, 3, 5, 5)).astype(np.float32)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    rep = backend.prepare(model)
    assert [op.type for op in rep.model.predict_net.ops] == ["ONNXConv"]
    np.testing.assert_allclose(rep.run([x])[0], want, rtol=1e-5, atol=1e-5)
    unfolded = backend.prepare(model, optimize=False)
    assert [op.type for op in unfolded.model.predict_net.ops] == ["ONNXConv", "ONNXBatchNorm"]
    np.testing.assert_allclose(unfolded.run([x])[0], want, rtol=1e-5, atol=1e-5)


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "op,direction,lbr,bias",
    [
        ("LSTM", "forward", 0, True),
        ("LSTM", "bidirectional", 0, False),
        ("GRU", "reverse", 1, True),
        ("GRU", "forward", 0, True),
    ],
)
def test_rnn_weights_from_initializers_are_stored_in_torch_gate_order(
    op: str, direction: str, lbr: int, bias: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """W, R and B initializers are reordered once at import (not for GRU without
    linear_before_reset, which torch does not compute); every path gives the reference's outputs."""
    from asyncnet.ops import onnx_rnn

    outputs = ["Y", "Y_h", "Y_c"] if op == "LSTM" else ["Y", "Y_h"]
    model, feeds = _rnn_model(op, direction, 1, lbr, bias, outputs)  # no B: no states (no gap in the inputs)
    want = ReferenceEvaluator(model).run(None, feeds)
    names = ["W", "R", "B"] if bias else ["W", "R"]
    g = model.graph
    g.initializer.extend(onnx.numpy_helper.from_array(feeds.pop(n), n) for n in names)
    keep = [v for v in g.input if v.name not in names]
    del g.input[:]
    g.input.extend(keep)
    node = g.node[0]
    if not bias:
        node.input[3] = ""
        want = ReferenceEvaluator(model).run(None, feeds)
    for tensors, numpy_steps in (("numpy", False), ("numpy", True), ("torch", False)):
        if numpy_steps:
            monkeypatch.setattr(onnx_rnn, "torch_if_installed", lambda: None)
        rep = backend.prepare(model, tensors=tensors, check=False)
        (rnn,) = rep.model.predict_net.ops
        assert rnn.type == "ONNX" + op
        assert rnn.args.get("gate_order", "onnx") == ("onnx" if op == "GRU" and not lbr else "torch")
        for got, exp in zip(rep.run(feeds), want):
            np.testing.assert_allclose(got, exp, rtol=1e-5, atol=1e-5)
        monkeypatch.undo()


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("dtype", "want"), [(TensorProto.FLOAT, "ONNXBinary"), (TensorProto.INT32, "Add")])
def test_float_arithmetic_runs_as_onnx_binary_and_integers_as_add(dtype: int, want: str) -> None:
    node = oh.make_node("Add", ["a", "b"], ["c"])
    model = oh.make_model(
        oh.make_graph(
            [node],
            "g",
            [oh.make_tensor_value_info("a", dtype, [2, 3]), oh.make_tensor_value_info("b", dtype, [3])],
            [oh.make_tensor_value_info("c", dtype, [2, 3])],
        ),
        opset_imports=[oh.make_opsetid("", 17)],
    )
    rep = backend.prepare(model)
    assert [op.type for op in rep.model.predict_net.ops] == [want]
    np_dtype = onnx.helper.tensor_dtype_to_np_dtype(dtype)
    a, b = np.arange(6, dtype=np_dtype).reshape(2, 3), np.array([1, 2, 3], np_dtype)
    np.testing.assert_array_equal(rep.run([a, b])[0], a + b)


@pytest.mark.timeout(60)
def test_onnx_binary_refuses_two_libraries_and_unbroadcastable_shapes() -> None:
    torch = pytest.importorskip("torch")
    import asyncnet as an

    net = an.Net("n")
    net.ONNXBinary(["a", "b"], "c", fn="Mul")
    with an.Workspace() as ws:
        ws.feed("a", np.ones(3, np.float32))
        ws.feed("b", torch.ones(3))
        with pytest.raises(an.OperatorError, match="numpy.*torch|torch.*numpy"):
            ws.run_net_once(net)
        ws.feed("b", np.ones(4, np.float32))
        with pytest.raises(an.OperatorError, match="broadcast"):
            ws.run_net_once(net)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize(("axes", "keep"), [([1], 0), ([0, 2], 1), ([-1], 0)])
def test_reduce_mean_gives_numpy_mean_bit_for_bit(dtype: type, axes: list, keep: int) -> None:
    t = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    node = oh.make_node("ReduceMean", ["x", "axes"], ["y"], keepdims=keep)
    model = oh.make_model(
        oh.make_graph(
            [node],
            "g",
            [oh.make_tensor_value_info("x", t, [3, 16, 5])],
            [oh.make_tensor_value_info("y", t, None)],
            initializer=[onnx.numpy_helper.from_array(np.array(axes, np.int64), "axes")],
        ),
        opset_imports=[oh.make_opsetid("", 18)],
    )
    x = np.random.default_rng(3).standard_normal((3, 16, 5)).astype(dtype)
    rep = backend.prepare(model, check=False)
    assert [op.type for op in rep.model.predict_net.ops] == ["ONNXReduce"]
    got = rep.run([x])[0]
    want = x.mean(axis=tuple(axes), keepdims=bool(keep))
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.timeout(60)
def test_simple_predict_net_runs_straight_with_the_simple_nets_errors() -> None:
    """A "simple" predict net is created as a straight net: same outputs, and a kernel failure is
    the simple net's OperatorError naming the op."""
    import asyncnet as an
    from asyncnet.exec.straight import StraightNet

    node = oh.make_node("Reshape", ["x", "s"], ["y"], name="reshape_it")
    model = oh.make_model(
        oh.make_graph(
            [node],
            "g",
            [oh.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 6])],
            [oh.make_tensor_value_info("y", TensorProto.FLOAT, None)],
            initializer=[onnx.numpy_helper.from_array(np.array([-1, 4], np.int64), "s")],
        ),
        opset_imports=[oh.make_opsetid("", 17)],
    )
    rep = backend.prepare(model, check=False)
    assert type(rep.net) is StraightNet and rep.model.predict_net.type == "simple"
    np.testing.assert_array_equal(rep.run([np.arange(12, dtype=np.float32).reshape(2, 6)])[0].shape, (3, 4))
    with pytest.raises(an.OperatorError, match="ONNXReshape") as err:
        rep.run([np.zeros((1, 6), np.float32)])  # 6 values do not make rows of 4
    assert err.value.op_name == "reshape_it"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("tensors", ["numpy", "torch"])
def test_inputs_are_checked_on_every_run_after_a_good_one(tensors: str) -> None:
    model = oh.make_model(
        oh.make_graph(
            [oh.make_node("Relu", ["x"], ["y"])],
            "g",
            [oh.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])],
            [oh.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])],
        ),
        opset_imports=[oh.make_opsetid("", 17)],
    )
    rep = backend.prepare(model, tensors=tensors)
    good = np.array([[-1.0, 0.5, 2.0]], np.float32)
    for _ in range(2):
        np.testing.assert_array_equal(rep.run([good])[0], np.maximum(good, 0))
    for bad, match in (
        (good.astype(np.float64), "dtype"),
        (np.zeros((1, 4), np.float32), "dim 1"),
        (np.zeros(3, np.float32), "rank"),
        ({"z": good}, "not a graph input"),
    ):
        with pytest.raises(backend.OnnxInputError, match=match):
            rep.run(bad if isinstance(bad, dict) else [bad])
    np.testing.assert_array_equal(rep.run({"x": good * 2})[0], np.maximum(good * 2, 0))
