"""Real models exported with torch.onnx.export (random weights) give onnxruntime's outputs on
asyncnet: simple and async_scheduling executors, numpy and torch tensors."""

from __future__ import annotations

import io

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")

from asyncnet.interop.onnx import backend

nn = torch.nn


class Block(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int):
        super().__init__()
        self.c1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(c_out)
        self.c2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(c_out)
        self.skip = (
            nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))
            if stride != 1 or c_in != c_out
            else nn.Identity()
        )

    def forward(self, x):  # type: ignore[no-untyped-def]
        return torch.relu(self.b2(self.c2(torch.relu(self.b1(self.c1(x))))) + self.skip(x))


def resnet() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 7, 2, 3, bias=False),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.MaxPool2d(3, 2, 1),
        Block(16, 16, 1),
        Block(16, 32, 2),
        Block(32, 64, 2),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, 10),
    )


class Inception(nn.Module):
    def __init__(self, c: int):
        super().__init__()
        self.b1 = nn.Conv2d(c, 8, 1)
        self.b2 = nn.Sequential(nn.Conv2d(c, 8, 1), nn.ReLU(), nn.Conv2d(8, 12, 3, padding=1))
        self.b3 = nn.Sequential(nn.Conv2d(c, 4, 1), nn.ReLU(), nn.Conv2d(4, 6, 5, padding=2))
        self.b4 = nn.Sequential(nn.MaxPool2d(3, 1, 1), nn.Conv2d(c, 6, 1))

    def forward(self, x):  # type: ignore[no-untyped-def]
        return torch.relu(torch.cat([self.b1(x), self.b2(x), self.b3(x), self.b4(x)], 1))


def inception() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, 2, 1),
        nn.ReLU(),
        Inception(16),
        Inception(32),
        nn.AvgPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * 8 * 8, 10),
    )


def mobilenet() -> nn.Module:
    def dw(c_in: int, c_out: int, s: int) -> nn.Module:
        return nn.Sequential(
            nn.Conv2d(c_in, c_in, 3, s, 1, groups=c_in, bias=False),
            nn.BatchNorm2d(c_in),
            nn.ReLU6(),
            nn.Conv2d(c_in, c_out, 1, bias=False),
            nn.BatchNorm2d(c_out),
            nn.ReLU6(),
        )

    return nn.Sequential(
        nn.Conv2d(3, 16, 3, 2, 1),
        nn.ReLU6(),
        dw(16, 32, 1),
        dw(32, 64, 2),
        dw(64, 64, 1),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, 10),
    )


class Transformer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.head = nn.Linear(32, 5)

    def forward(self, x):  # type: ignore[no-untyped-def]
        return self.head(self.enc(x).mean(dim=1))


class LSTMClassifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(50, 16)
        self.lstm = nn.LSTM(16, 24, batch_first=True)
        self.head = nn.Linear(24, 3)

    def forward(self, ids):  # type: ignore[no-untyped-def]
        out, _ = self.lstm(self.emb(ids))
        return self.head(out[:, -1])


class GRUClassifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gru = nn.GRU(8, 12, batch_first=True, bidirectional=True)
        self.head = nn.Linear(24, 3)

    def forward(self, x):  # type: ignore[no-untyped-def]
        out, _ = self.gru(x)
        return self.head(out[:, -1])


MODELS = {
    "gru": (GRUClassifier, lambda g: g.standard_normal((2, 6, 8), dtype=np.float32)),
    "resnet": (resnet, lambda g: g.standard_normal((2, 3, 32, 32), dtype=np.float32)),
    "inception": (inception, lambda g: g.standard_normal((2, 3, 32, 32), dtype=np.float32)),
    "mobilenet": (mobilenet, lambda g: g.standard_normal((2, 3, 32, 32), dtype=np.float32)),
    "transformer": (Transformer, lambda g: g.standard_normal((2, 7, 32), dtype=np.float32)),
    "lstm": (LSTMClassifier, lambda g: g.integers(0, 50, (2, 9)).astype(np.int64)),
}


def exported(name: str) -> tuple[bytes, np.ndarray]:
    """The model's ONNX bytes (torch's TorchScript exporter, opset 17) and an input."""
    make, data = MODELS[name]
    torch.manual_seed(0)
    model = make().eval()
    with torch.no_grad():  # non-trivial batch-norm statistics
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 1.5)
    x = data(np.random.default_rng(0))
    f = io.BytesIO()
    torch.onnx.export(
        model, (torch.from_numpy(x),), f, dynamo=False, opset_version=17, input_names=["x"], output_names=["y"]
    )
    return f.getvalue(), x


def ort_run(blob: bytes, x: np.ndarray) -> np.ndarray:
    sess = ort.InferenceSession(blob, providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", sorted(MODELS))
def test_real_model_matches_onnxruntime(name: str) -> None:
    blob, x = exported(name)
    want = ort_run(blob, x)
    for net_type in ("simple", "async_scheduling"):
        for tensors in ("numpy", "torch"):
            rep = backend.prepare(blob, net_type=net_type, num_workers=2, tensors=tensors)
            got = rep.run([x])[0]
            again = rep.run({"x": x})[0]  # prepared once, run twice
            assert got.shape == want.shape and got.dtype == want.dtype
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"{name} {net_type} {tensors}")
            np.testing.assert_array_equal(got, again)


@pytest.mark.timeout(120)
def test_cnn_runs_on_native_ops() -> None:
    blob, _ = exported("resnet")
    counts = backend.prepare(blob).model.op_counts
    assert not [op for (op, how) in counts if how == "reference"], counts
