"""An exported LSTM/GRU classifier that reads only the last step of the recurrence's output runs on
its final state instead (the recurrence stops producing Y): outputs equal onnxruntime's on every
executor and tensor library; a model that reads more of Y, or has no static sequence length,
keeps Y."""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from torch import nn

import asyncnet as an
from asyncnet.interop.onnx import backend

pytestmark = pytest.mark.timeout(300)


class Classifier(nn.Module):
    def __init__(self, cell: str, batch_first: bool, read: str):
        super().__init__()
        self.rnn = getattr(nn, cell)(6, 8, batch_first=batch_first)
        self.batch_first, self.read = batch_first, read
        self.head = nn.Linear(8, 3)

    def forward(self, x):  # type: ignore[no-untyped-def]
        out, _ = self.rnn(x)
        if self.read == "mean":
            return self.head(out.mean(dim=1 if self.batch_first else 0))
        return self.head(out[:, -1] if self.batch_first else out[-1])


def _export(model: nn.Module, x: np.ndarray, dynamic: dict) -> bytes:
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model, (torch.from_numpy(x),), f, dynamo=False, opset_version=17, input_names=["x"],
            output_names=["y"], dynamic_axes={"x": dynamic, "y": {0: "batch"}},
        )  # fmt: skip
    return f.getvalue()


def _case(cell: str, batch_first: bool, read: str = "last", dynamic_seq: bool = False) -> tuple[bytes, np.ndarray]:
    torch.manual_seed(0)
    model = Classifier(cell, batch_first, read).eval()
    shape = (4, 5, 6) if batch_first else (5, 4, 6)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    batch_axis, seq_axis = (0, 1) if batch_first else (1, 0)
    dynamic = {batch_axis: "batch", **({seq_axis: "seq"} if dynamic_seq else {})}
    return _export(model, x, dynamic), x


def _recurrence(blob: bytes) -> object:
    return next(op for op in an.onnx.load(blob).predict_net.ops if op.type in ("ONNXLSTM", "ONNXGRU"))


def _check(blob: bytes, x: np.ndarray) -> None:
    want = ort.InferenceSession(blob, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    for net_type in ("simple", "async_scheduling"):
        for tensors in ("numpy", "torch"):
            with backend.prepare(blob, net_type=net_type, num_workers=2, tensors=tensors) as rep:
                for _ in range(3):  # a straight net's fast kernels from the second run on
                    got = rep.run([x])[0]
                    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"{net_type} {tensors}")


@pytest.mark.parametrize("cell", ["LSTM", "GRU"])
@pytest.mark.parametrize("batch_first", [True, False])
def test_the_last_step_is_read_from_the_final_state(cell: str, batch_first: bool) -> None:
    blob, x = _case(cell, batch_first)
    op = _recurrence(blob)
    assert op.args["produce"][:2] == [0, 1] and len(op.outputs) == 1
    _check(blob, x)


def test_a_model_reading_every_step_keeps_y() -> None:
    blob, x = _case("LSTM", True, read="mean")
    assert _recurrence(blob).args["produce"][0] == 1
    _check(blob, x)


def test_a_dynamic_sequence_length_keeps_y() -> None:
    blob, x = _case("LSTM", True, dynamic_seq=True)
    assert _recurrence(blob).args["produce"][0] == 1  # an empty sequence has a state but no last step
    _check(blob, x)
