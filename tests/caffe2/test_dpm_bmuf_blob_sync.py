"""Parallelize_BMUF's add_blobs_to_sync: the named blobs of the first device reach every other
device in the global update net (and only there)."""

import numpy as np
import pytest

from caffe2.python import brew, data_parallel_model, model_helper, workspace

pytestmark = pytest.mark.timeout(120)

DEVICES = [0, 1, 2]


def _inputs(model):
    model.param_init_net.ConstantFill([], "data", shape=[4, 3], value=1.0)
    model.param_init_net.ConstantFill([], "label", shape=[4, 1], value=0.5)


def _forward(model, loss_scale):
    fc = brew.fc(model, "data", "fc", 3, 1, weight_init=("ConstantFill", {"value": 0.1}))
    model.param_init_net.UniformFill([], ["sync_num"], shape=[1])
    loss = model.AveragedLoss(model.SquaredL2Distance([fc, "label"], "d"), "l")
    return [model.Scale(loss, "loss", scale=loss_scale)]


def _update(model):
    one = model.param_init_net.ConstantFill([], "one", shape=[1], value=1.0)
    lr = model.param_init_net.ConstantFill([], "lr", shape=[1], value=-0.1)
    for p in model.GetParams():
        model.WeightedSum([p, one, model.param_to_grad[p], lr], p)


def _model(**kwargs):
    model = model_helper.ModelHelper(name="bmuf_sync")
    data_parallel_model.Parallelize_BMUF(model, _inputs, _forward, _update, devices=DEVICES, cpu_device=True, **kwargs)
    data_parallel_model.RunInitNet(model)
    return model


def test_added_blob_is_copied_from_the_first_device_by_the_global_update():
    model = _model(add_blobs_to_sync=["sync_num"])
    workspace.FeedBlob("cpu_0/sync_num", np.array([2603.0], np.float32))
    workspace.RunNetOnce(model.net)
    assert workspace.FetchBlob("cpu_1/sync_num")[0] != 2603.0  # the local steps leave it alone
    workspace.RunNetOnce(model._global_model_param_updates_net)
    for d in DEVICES:
        np.testing.assert_array_equal(workspace.FetchBlob(f"cpu_{d}/sync_num"), [2603.0])
    assert "sync_num" in model._device_grouped_blobs


def test_without_add_blobs_to_sync_the_blob_stays_per_device():
    model = _model()
    workspace.FeedBlob("cpu_0/sync_num", np.array([2603.0], np.float32))
    workspace.RunNetOnce(model._global_model_param_updates_net)
    assert all(workspace.FetchBlob(f"cpu_{d}/sync_num")[0] != 2603.0 for d in DEVICES[1:])


def test_prefixed_names_are_refused():
    with pytest.raises(ValueError, match="unprefixed"):
        _model(add_blobs_to_sync=["cpu_0/sync_num"])


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_two_shards_get_shard_zeros_blob_on_every_device(tmp_path):
    import sys
    from pathlib import Path

    pytest.importorskip("torch")
    here = Path(__file__).resolve().parent
    sys.path.insert(0, str(here.parent / "train"))
    sys.path.insert(0, str(here))
    from _dpm_results import results
    from _torchrun import run_torchrun, torchrun_cmd

    cmd = torchrun_cmd(str(here / "_dpm_bmuf_sync_worker.py"), str(tmp_path / "store"))
    proc = run_torchrun(cmd, "RESULT", timeout=200, cwd=str(tmp_path))
    out = sorted(results(proc.stdout), key=lambda r: r["rank"])
    assert [r["rank"] for r in out] == [0, 1], proc.stdout[-2000:] + proc.stderr[-3000:]
    assert all(v != 2603.0 for r in out for v in r["before"].values())
    assert [sorted(r["after"]) for r in out] == [["0", "1"], ["2", "3"]]
    assert all(v == 2603.0 for r in out for v in r["after"].values())
