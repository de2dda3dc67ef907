"""asyncnet zoo models (trained briefly) exported to ONNX give asyncnet's outputs in onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import asyncnet as an
from asyncnet.interop.onnx import OnnxExportError, export
from asyncnet.model.zoo import cnn, dlrm, lstm, mlp
from asyncnet.model.zoo.dlrm import click_log


def _train(m, batch: dict, steps: int = 3) -> an.Workspace:  # type: ignore[no-untyped-def]
    train = m.train_net(lr=0.05)
    ws = an.Workspace()
    ws.run_net_once(m.init_net)
    for k, v in batch.items():
        ws.feed(k, v)
    ws.create_net(train)
    ws.run_net(train.name, num_iter=steps)
    return ws


def _asyncnet_out(m, ws: an.Workspace, batch: dict, out: str) -> np.ndarray:  # type: ignore[no-untyped-def]
    for k, v in batch.items():
        ws.feed(k, v)
    ws.run_net_once(m.eval_net())
    return np.asarray(ws.fetch(out, host=True))


def _ort(model, feeds: dict) -> np.ndarray:  # type: ignore[no-untyped-def]
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)[0]


CASES = {
    "lstm": (
        lambda: lstm(hidden=12, num_classes=3),
        lambda g: {"data": g.standard_normal((4, 64), dtype=np.float32), "label": g.integers(0, 3, 4).astype(np.int32)},
        ["data"],
        "softmax",
    ),
    "mlp": (
        lambda: mlp(6, (16,), 4),
        lambda g: {"data": g.standard_normal((5, 6), dtype=np.float32), "label": g.integers(0, 4, 5).astype(np.int32)},
        ["data"],
        "softmax",
    ),
    "cnn": (
        lambda: cnn((4, 8), 3, side=8),
        lambda g: {
            "data": g.standard_normal((3, 1, 8, 8), dtype=np.float32),
            "label": g.integers(0, 3, 3).astype(np.int32),
        },
        ["data"],
        "softmax",
    ),
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", sorted(CASES))
def test_zoo_model_exports_and_matches_onnxruntime(name: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    make, data, inputs, out = CASES[name]
    m = make()
    batch = data(np.random.default_rng(1))
    ws = _train(m, batch)
    want = _asyncnet_out(m, ws, batch, out)
    path = tmp_path / f"{name}.onnx"
    proto = export(m, path, {k: batch[k] for k in inputs}, [out], workspace=ws)
    onnx.checker.check_model(onnx.load(path), full_check=True)
    got = _ort(proto, {k: batch[k] for k in inputs})
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    rep = an.onnx.backend.prepare(str(path))  # and back into asyncnet
    np.testing.assert_allclose(rep.run({k: batch[k] for k in inputs})[0], want, rtol=1e-4, atol=1e-4)


@pytest.mark.timeout(120)
def test_dlrm_exports_and_matches_onnxruntime() -> None:
    m = dlrm(num_dense=4, table_sizes=(20, 30), dim=4, bottom=(8,), top=(8,))
    log = click_log(64, num_dense=4, table_sizes=(20, 30))
    batch = log.batch(range(16))
    ws = _train(m, batch)
    logit = [op for op in m.eval_net().ops if op.type == "SigmoidCrossEntropyWithLogits"][0].inputs[0]
    want = _asyncnet_out(m, ws, batch, logit)
    feeds = {k: v for k, v in batch.items() if k != "click"}
    proto = export(m, None, feeds, [logit], workspace=ws)
    np.testing.assert_allclose(_ort(proto, feeds), want, rtol=1e-4, atol=1e-4)


def test_unexportable_op_names_the_op() -> None:
    net = an.Net("n")
    net.StopGradient(["x"], ["y"])  # an op the exporter has no mapping for, whose output is asked for
    last = net.to_def().ops[-1]
    with pytest.raises(OnnxExportError, match=last.type):
        export(
            (an.Net("init").to_def(), net.to_def()),
            None,
            {"x": np.zeros((2, 2), np.float32)},
            list(last.outputs) or ["x"],
        )
