"""data_parallel_model.Parallelize_BMUF on two CPU devices: local SGD per device, then the block
update of the global model (average, block momentum, Nesterov), checked step by step against
numpy, as Caffe2's own BMUF test checked it."""

import numpy as np
import pytest

from caffe2.python import brew, core, data_parallel_model, model_helper, workspace

pytestmark = pytest.mark.timeout(120)


def _feed(devices, seed=26):
    rng = np.random.default_rng(seed)
    data = rng.random((64, 16))
    labels = np.round(data[:, 0])
    per = len(data) // len(devices)
    for j, d in enumerate(devices):
        workspace.FeedBlob(f"cpu_{d}/data", data[j * per : (j + 1) * per].astype(np.float32))
        workspace.FeedBlob(f"cpu_{d}/label", labels[j * per : (j + 1) * per].astype(np.float32).reshape(-1, 1))


def _forward(model, loss_scale):
    fc = brew.fc(model, "data", "fc", 16, 1, weight_init=("ConstantFill", {}), bias_init=("ConstantFill", {}))
    sq = model.SquaredL2Distance([model.Sigmoid(fc, "sigm"), "label"], "sq")
    return [model.Scale(model.AveragedLoss(sq, "avg"), "loss", scale=loss_scale)]


def _update(model):
    it = brew.iter(model, "ITER")
    lr = model.net.LearningRate([it], "LR", base_lr=-0.1, policy="fixed")
    one = model.param_init_net.ConstantFill([], "ONE", shape=[1], value=1.0)
    for param in model.GetParams():
        model.WeightedSum([param, one, model.param_to_grad[param], lr], param)


def _blobs(names):
    return {n: workspace.FetchBlob(n).copy() for n in names}


@pytest.mark.parametrize("nesterov", [False, True])
def test_bmuf_block_update_matches_numpy(nesterov):
    devices = [0, 1]
    _feed(devices)
    model = model_helper.ModelHelper(name="bmuf")
    data_parallel_model.Parallelize_BMUF(
        model, lambda m: None, _forward, _update, devices=devices, cpu_device=True, nesterov=nesterov
    )
    data_parallel_model.RunInitNet(model)
    assert list(model._device_grouped_blobs) == ["fc_w", "fc_b"]
    np.testing.assert_array_equal(workspace.FetchBlob("cpu_0/fc_w_v"), np.zeros((1, 16), np.float32))
    data_parallel_model.RunNet(model, 1)  # one block: non-zero parameters and momentum
    names = [f"cpu_{d}/fc_{k}" for d in devices for k in "wb"] + [f"cpu_0/fc_{k}_{s}" for k in "wb" for s in "vg"]
    if nesterov:
        names += [f"cpu_0/fc_{k}_prev" for k in "wb"]
    before = _blobs(names)
    workspace.RunNetOnce(model.net)  # the local step of the next block
    local = _blobs(names)
    workspace.RunNetOnce(model._global_model_param_updates_net)
    after = _blobs(names)
    for k in "wb":
        g_prev, v_prev = before[f"cpu_0/fc_{k}_g"], before[f"cpu_0/fc_{k}_v"]
        block_grad = (local[f"cpu_0/fc_{k}"] + local[f"cpu_1/fc_{k}"]) / 2 - g_prev
        v = 0.5 * v_prev + block_grad  # block_momentum 1 - 1/devices, block_learning_rate 1
        np.testing.assert_allclose(after[f"cpu_0/fc_{k}_v"], v, rtol=1e-6, atol=1e-7)
        g = g_prev + v
        if nesterov:
            g = g - 0.5 * (v - before[f"cpu_0/fc_{k}_prev"])
            np.testing.assert_array_equal(after[f"cpu_0/fc_{k}_prev"], after[f"cpu_0/fc_{k}_v"])
        np.testing.assert_allclose(after[f"cpu_0/fc_{k}_g"], g, rtol=1e-6, atol=1e-7)
        for d in devices:  # every device now holds the global model
            np.testing.assert_array_equal(after[f"cpu_{d}/fc_{k}"], after[f"cpu_0/fc_{k}_g"])
    assert not np.array_equal(local["cpu_0/fc_w"], local["cpu_1/fc_w"])  # the local steps differed


def test_bmuf_warmup_broadcasts_the_master():
    devices = [0, 1]
    _feed(devices, seed=3)
    model = model_helper.ModelHelper(name="bmuf_warmup")
    data_parallel_model.Parallelize_BMUF(
        model, lambda m: None, _forward, _update, devices=devices, cpu_device=True, warmup_iterations=2
    )
    data_parallel_model.RunInitNet(model)
    data_parallel_model.RunWarmup(model)
    w0 = workspace.FetchBlob("cpu_0/fc_w")
    np.testing.assert_array_equal(workspace.FetchBlob("cpu_1/fc_w"), w0)
    np.testing.assert_array_equal(workspace.FetchBlob("cpu_0/fc_w_g"), w0)
    assert np.abs(w0).sum() > 0
    data_parallel_model.Synchronize(model)  # one host: nothing to wait for
    assert core.IsOperator("Sub")


@pytest.mark.slow
def test_bmuf_on_two_shards_under_torchrun_matches_two_local_devices(tmp_path):
    """Two shards of one device each (torchrun, a file store) end where one host with two devices
    ends: same data halves, same (constant) initial parameters, two blocks of two local steps."""
    import sys
    from pathlib import Path

    pytest.importorskip("torch")
    here = Path(__file__).resolve().parent
    sys.path.insert(0, str(here.parent / "train"))
    from _torchrun import run_torchrun, torchrun_cmd

    sys.path.insert(0, str(here))
    from _dpm_results import results as _results

    proc = run_torchrun(torchrun_cmd(str(here / "_dpm_shard_worker.py"), "bmuf", str(tmp_path / "store")), "RESULT",
                        timeout=200, cwd=str(tmp_path))  # fmt: skip
    results = sorted(_results(proc.stdout), key=lambda r: r["rank"])
    assert [r["rank"] for r in results] == [0, 1], proc.stdout[-2000:] + proc.stderr[-3000:]
    _feed([0, 1])
    model = model_helper.ModelHelper(name="bmuf_local")
    data_parallel_model.Parallelize_BMUF(
        model, lambda m: None, _forward, _update, devices=[0, 1], cpu_device=True, nesterov=True
    )
    data_parallel_model.RunInitNet(model)
    for _ in range(2):
        data_parallel_model.RunNet(model, 2)
    for r in results:
        np.testing.assert_allclose(r["w"], workspace.FetchBlob("cpu_0/fc_w"), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(r["b"], workspace.FetchBlob("cpu_0/fc_b"), rtol=1e-5, atol=1e-6)
    assert results[0]["w"] == results[1]["w"]
