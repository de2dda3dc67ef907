"""Trainers and ``asyncnet train`` on torch tensors (``--tensor torch``, ``--device``)."""

import subprocess
import sys

import numpy as np
import pytest

from asyncnet.tensor.place import cuda_available
from asyncnet.train.trainers import TrainConfig, train

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.timeout(120)


def run(**kw):
    cfg = TrainConfig(epochs=2, hidden=(32,), batch_size=32, seed=0, trace=False, threads=1, **kw)
    return train(cfg)


def test_local_on_torch_tensors_matches_numpy():
    a, b = run(mode="local", tensor="numpy"), run(mode="local", tensor="torch")
    assert [m.test_accuracy for m in a.history.epochs] == [m.test_accuracy for m in b.history.epochs]
    for name, value in a.params.items():  # params come back as host numpy arrays either way
        assert isinstance(b.params[name], np.ndarray)
        np.testing.assert_allclose(b.params[name], value, rtol=1e-4, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("mode", ["sync", "hogwild"])
def test_two_workers_on_torch_tensors_learn(mode):
    result = run(mode=mode, workers=2, backend="threads", tensor="torch")
    assert result.history.best_test_accuracy > 0.9


def test_config_refuses_bad_tensor_and_device_combinations():
    with pytest.raises(ValueError, match="tensor must be numpy or torch"):
        TrainConfig(tensor="jax")
    with pytest.raises(ValueError, match="needs tensor 'torch'"):
        TrainConfig(device="cuda:1")
    with pytest.raises(ValueError, match="expected a device"):
        TrainConfig(tensor="torch", device="tpu")


@pytest.mark.skipif(cuda_available() > 0, reason="checks the error given where CUDA is absent")
def test_cli_refuses_cuda_in_one_line_where_absent(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "asyncnet",
            "train",
            "--tensor",
            "torch",
            "--device",
            "cuda",
            "--quiet",
            "--out",
            str(tmp_path / "run"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "no CUDA" in lines[0] and "Traceback" not in out.stderr


def test_hogwild_torch_workers_share_the_parameter_storage():
    """Two workers' torch parameter tensors are views of the one shared numpy array: an SGD step
    of either writes into the memory both read."""
    from asyncnet.train.data import load_digits
    from asyncnet.train.program import build_program as build_model
    from asyncnet.train.worker import WorkerNets

    ds = load_digits()
    cfg = TrainConfig(mode="hogwild", workers=2, hidden=(16,), batch_size=32, trace=False, threads=1, tensor="torch")
    model = build_model(cfg, ds.input_dim, ds.num_classes)
    seed = WorkerNets(cfg.with_(tensor="numpy"), model)
    shared = {name: np.array(seed.ws.fetch(name), copy=True) for name in model.checkpoint_blobs}
    seed.close()
    a, b = WorkerNets(cfg, model, shared=shared), WorkerNets(cfg, model, shared=shared)
    try:
        w = model.params[0]
        ta, tb = a.ws.fetch(w), b.ws.fetch(w)
        assert (
            isinstance(ta, torch.Tensor)
            and np.shares_memory(ta.numpy(), shared[w])
            and np.shares_memory(tb.numpy(), shared[w])
        )
        before = shared[w].copy()
        a.step(ds.x_train[:32], ds.y_train[:32])
        assert not np.array_equal(shared[w], before)
        np.testing.assert_array_equal(b.ws.fetch(w, host=True), shared[w])
    finally:
        a.close()
        b.close()
