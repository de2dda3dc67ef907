"""asyncnet's native ONNX ops against onnx's reference evaluator on cases the node tests miss
(bidirectional and batch-first recurrences with initial states, torch tensors, async executor)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper as oh  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from asyncnet.interop.onnx import backend  # noqa: E402


def _rnn_model(op: str, direction: str, layout: int, lbr: int, with_state: bool, outputs: list[str]) -> tuple[onnx.ModelProto, dict]:
    g = np.random.default_rng(7)
    seq, batch, inp, hid = 4, 3, 5, 6
    gates = 4 if op == "LSTM" else 3
    dirs = 2 if direction == "bidirectional" else 1
    x_shape = (batch, seq, inp) if layout else (seq, batch, inp)
    s_shape = (batch, dirs, hid) if layout else (dirs, batch, hid)
    feeds = {"X": g.standard_normal(x_shape).astype(np.float32),
             "W": g.standard_normal((dirs, gates * hid, inp)).astype(np.float32) * 0.5,
             "R": g.standard_normal((dirs, gates * hid, hid)).astype(np.float32) * 0.5,
             "B": g.standard_normal((dirs, 2 * gates * hid)).astype(np.float32) * 0.5}
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
def test_native_rnn_matches_reference(op: str, direction: str, layout: int, lbr: int, with_state: bool) -> None:
    outputs = ["Y", "Y_h", "Y_c"] if op == "LSTM" else ["Y", "Y_h"]
    model, feeds = _rnn_model(op, direction, layout, lbr, with_state, outputs)
    want = ReferenceEvaluator(model).run(None, feeds)
    for net_type, tensors in (("simple", "numpy"), ("async_scheduling", "torch")):
        rep = backend.prepare(model, net_type=net_type, tensors=tensors, check=False)
        assert rep.model.op_counts == {(op, "native"): 1}
        for got, exp in zip(rep.run(feeds), want):
            np.testing.assert_allclose(got, exp, rtol=1e-5, atol=1e-5)


@pytest.mark.timeout(60)
def test_rnn_with_only_the_last_state_output() -> None:
    model, feeds = _rnn_model("LSTM", "forward", 0, 0, False, ["", "Y_h"])
    want = ReferenceEvaluator(model).run(None, feeds)
    rep = backend.prepare(model, check=False)
    np.testing.assert_allclose(rep.run(feeds)[0], want[0], rtol=1e-5, atol=1e-5)
