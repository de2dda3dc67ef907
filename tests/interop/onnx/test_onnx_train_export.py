"""``asyncnet train --export-onnx FILE``: the exported model of a zoo model trained one epoch gives,
in onnxruntime, the outputs of the trained model (its checkpoint's parameters through its
inference net on asyncnet) within 1e-4."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

pytestmark = pytest.mark.timeout(300)


def _train(tmp_path, model: str) -> tuple:
    out, path = tmp_path / "run", tmp_path / f"{model}.onnx"
    cmd = [
        sys.executable,
        "-m",
        "asyncnet",
        "train",
        "--model",
        model,
        "--epochs",
        "1",
        "--workers",
        "1",
        "--mode",
        "local",
        "--out",
        str(out),
        "--quiet",
        "--export-onnx",
        str(path),
    ]
    done = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stderr[-2000:]
    return out, path


def _trained_outputs(run_dir, model: str) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The inputs (the first 16 test examples) and the scores asyncnet computes from the checkpoint."""
    import asyncnet as an
    from asyncnet.train.config import TrainConfig
    from asyncnet.train.data import dataset_for
    from asyncnet.train.program import build_program

    cfg = TrainConfig.from_dict(json.loads((run_dir / "metrics.json").read_text())["config"])
    ds = dataset_for(model)
    program = build_program(cfg, ds.input_dim, ds.num_classes)
    feeds = ds.feeds(ds.x_test[:16], ds.y_test[:16])
    inputs = {n: np.ascontiguousarray(feeds[n]) for n in program.inputs}
    with an.Workspace() as ws:
        ws.run_net_once(program.model.init_net)
        program.load(ws, run_dir / "checkpoint.npz")
        for k, v in inputs.items():
            ws.feed(k, v)
        ws.run_net_once(program.inference_net())
        return inputs, np.array(ws.fetch(program.scores, host=True))


@pytest.mark.parametrize("model", ["mlp", "cnn", "lstm", "dlrm"])
def test_exported_model_matches_the_trained_one_in_onnxruntime(tmp_path, model):
    run_dir, path = _train(tmp_path, model)
    onnx.checker.check_model(str(path), full_check=True)
    inputs, expected = _trained_outputs(run_dir, model)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert {i.name for i in sess.get_inputs()} == set(inputs)
    got = sess.run(None, inputs)[0]
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, atol=1e-4, rtol=0)
    untrained = build_untrained(model, inputs)
    assert np.abs(untrained - expected).max() > 1e-4  # the checkpoint's parameters, not the initial ones


def build_untrained(model: str, inputs: dict[str, np.ndarray]) -> np.ndarray:
    import asyncnet as an
    from asyncnet.train.config import TrainConfig
    from asyncnet.train.data import dataset_for
    from asyncnet.train.program import build_program

    ds = dataset_for(model)
    program = build_program(TrainConfig(model=model), ds.input_dim, ds.num_classes)
    with an.Workspace() as ws:
        ws.run_net_once(program.model.init_net)
        for k, v in inputs.items():
            ws.feed(k, v)
        ws.run_net_once(program.inference_net())
        return np.array(ws.fetch(program.scores, host=True))


def test_export_onnx_to_a_bad_path_is_one_line(tmp_path):
    cmd = [
        sys.executable,
        "-m",
        "asyncnet",
        "train",
        "--epochs",
        "1",
        "--workers",
        "1",
        "--mode",
        "local",
        "--out",
        str(tmp_path / "run"),
        "--quiet",
        "--export-onnx",
        str(tmp_path / "no" / "such" / "dir" / "m.onnx"),
    ]
    done = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=280)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "m.onnx" in done.stderr
