"""Exported LSTM/GRU models run by the fast recurrent kernel (torch's recurrence on zero-copy views
of the weights) match onnx's reference evaluator and onnxruntime, run after run."""

import io

import numpy as np
import onnx
import pytest
import torch
from onnx.reference import ReferenceEvaluator
from torch import nn

from asyncnet.interop.onnx import backend

pytestmark = pytest.mark.timeout(180)


class _Rnn(nn.Module):
    def __init__(self, cell: str, batch_first: bool):
        super().__init__()
        self.rnn = getattr(nn, cell)(6, 5, batch_first=batch_first)

    def forward(self, x):
        out, _ = self.rnn(x)
        return out


def _exported(cell: str, batch_first: bool) -> bytes:
    torch.manual_seed(0)
    f = io.BytesIO()
    shape = (3, 7, 6)
    torch.onnx.export(
        _Rnn(cell, batch_first).eval(),
        (torch.zeros(shape),),
        f,
        input_names=["x"],
        output_names=["y"],
        opset_version=17,
        dynamo=False,
        dynamic_axes={"x": {0: "a", 1: "b"}},
    )
    return f.getvalue()


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("cell", ["LSTM", "GRU"])
@pytest.mark.parametrize("batch_first", [True, False])
def test_exported_recurrence_matches_the_reference_evaluator_and_onnxruntime(cell, batch_first):
    ort = pytest.importorskip("onnxruntime")
    blob = _exported(cell, batch_first)
    x = np.random.default_rng(1).standard_normal((3, 7, 6), dtype=np.float32)
    want = ReferenceEvaluator(onnx.load_from_string(blob)).run(None, {"x": x})[0]
    sess = ort.InferenceSession(blob, providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], want, rtol=1e-4, atol=1e-5)
    with backend.prepare(blob) as rep:
        ops = [op.type for op in rep.model.predict_net.ops]
        assert f"ONNX{cell}" in ops
        runs = [rep.run([x])[0] for _ in range(3)]  # the first run general, the next ones specialized
    for got in runs:
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
        np.testing.assert_array_equal(got, runs[0])


@pytest.mark.parametrize("op", ["ONNXLSTM", "ONNXGRU"])
def test_torch_inputs_keep_autograd_only_where_it_records(op: str) -> None:
    import asyncnet as an

    g = np.random.default_rng(4)
    gates = 4 if op == "ONNXLSTM" else 3
    arrays = [g.standard_normal(s).astype(np.float32) for s in [(5, 2, 3), (1, gates * 4, 3), (1, gates * 4, 4)]]
    outs = {}
    for grad in (False, True):
        ws = an.Workspace()
        x = torch.from_numpy(arrays[0].copy()).requires_grad_(grad)
        for n, v in zip(["x", "w", "r"], [x, *map(torch.from_numpy, arrays[1:])]):
            ws.feed(n, v)
        net = an.Net("n")
        args = {"linear_before_reset": 1} if op == "ONNXGRU" else {}
        getattr(net, op)(["x", "w", "r"], ["y"], hidden_size=4, produce=[1], gate_order="torch", **args)
        ws.run_net_once(net)
        y = ws.fetch("y")
        assert y.requires_grad is grad
        if grad:
            y.sum().backward()
            assert x.grad is not None and x.grad.shape == x.shape
        outs[grad] = y.detach().numpy()
    np.testing.assert_allclose(outs[False], outs[True], rtol=1e-6, atol=1e-6)
