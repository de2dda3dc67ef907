"""data_parallel_model beyond one host and on GPUs: two shards under torchrun (127.0.0.1) train
exactly as one host with the whole batch would (the init net broadcasts shard 0's parameters,
the net sums the gradients over the shards); GPU devices get Caffe2's copy-sum-copy reduction
with CUDA device options (run when two GPUs are present, else only built)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from caffe2.proto import caffe2_pb2
from caffe2.python import brew, core, data_parallel_model, model_helper, optimizer, workspace

pytestmark = pytest.mark.timeout(300)
HERE = Path(__file__).resolve().parent


def _torchrun():
    sys.path.insert(0, str(HERE.parent / "train"))
    from _torchrun import run_torchrun, torchrun_cmd

    return run_torchrun, torchrun_cmd


def _results(text):
    sys.path.insert(0, str(HERE))
    from _dpm_results import results

    return results(text)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["store", "env"])
def test_two_shards_under_torchrun_match_one_host_with_the_whole_batch(mode, tmp_path):
    pytest.importorskip("torch")
    run_torchrun, torchrun_cmd = _torchrun()
    cmd = torchrun_cmd(str(HERE / "_dpm_shard_worker.py"), mode, str(tmp_path / "store"))
    proc = run_torchrun(cmd, "RESULT", timeout=200, cwd=str(tmp_path))
    results = sorted(_results(proc.stdout), key=lambda r: r["rank"])
    assert [r["rank"] for r in results] == [0, 1], proc.stdout[-2000:] + proc.stderr[-3000:]
    r0, r1 = results
    assert r0["w0"] == r1["w0"] and r0["b0"] == r1["b0"]  # the init net's Broadcast gave rank 0's random init
    assert "CreateCommonWorld" in r0["init_ops"] and "Broadcast" in r0["init_ops"]
    assert "Allreduce" in r0["ops"] and "Scale" in r0["ops"]
    rng = np.random.default_rng(0)  # the worker's batch: the shards read halves of it
    data = rng.standard_normal((8, 3)).astype(np.float32)
    labels = rng.standard_normal((8, 1)).astype(np.float32)
    w, b = np.array(r0["w0"], np.float64), np.array(r0["b0"], np.float64)
    for _ in range(3):  # full-batch gradient descent on the mean of 0.5 * (y - label)^2
        dy = (data @ w.T + b - labels) / len(data)
        w, b = w - 0.1 * (dy.T @ data), b - 0.1 * dy.sum(0)
    for r in results:
        np.testing.assert_allclose(r["w"], w, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(r["b"], b, rtol=1e-5, atol=1e-6)


def _gpu_model(devices):
    m = model_helper.ModelHelper(name="dpm_gpu")

    def inputs(model):
        model.param_init_net.GaussianFill([], "data", shape=[4, 3])
        model.param_init_net.GaussianFill([], "label", shape=[4, 1])

    def forward(model, loss_scale):
        fc = brew.fc(model, "data", "fc", 3, 1)
        dist = model.SquaredL2Distance([fc, "label"], "dist")
        return [model.Scale(model.AveragedLoss(dist, "avg"), "loss", scale=loss_scale)]

    data_parallel_model.Parallelize(
        m, inputs, forward, optimizer_builder_fun=lambda model: optimizer.build_sgd(model, 0.1), devices=devices
    )
    return m


def test_gpu_devices_get_cuda_options_and_copy_sum_copy_reduction():
    m = _gpu_model([0, 1])
    ops = list(m.net.Proto().op)
    for op in ops:
        scoped = [b for b in list(op.input) + list(op.output) if b.startswith("gpu_")]
        if op.type in ("Copy", "Sum") or not scoped:
            continue
        dev = op.device_option
        assert dev.device_type == caffe2_pb2.CUDA and all(b.startswith(f"gpu_{dev.device_id}/") for b in scoped)
    copies = [op for op in ops if op.type == "Copy" and op.output[0] == "gpu_0/fc_w_grad_gpu1_copy"]
    assert len(copies) == 1 and list(copies[0].input) == ["gpu_1/fc_w_grad"]
    assert copies[0].device_option.device_type == caffe2_pb2.CUDA and copies[0].device_option.device_id == 0
    (sum_w,) = [op for op in ops if op.type == "Sum" and op.output[0] == "gpu_0/fc_w_grad"]
    assert list(sum_w.input) == ["gpu_0/fc_w_grad", "gpu_0/fc_w_grad_gpu1_copy"] and sum_w.name == "dpm"
    back = [op for op in ops if op.type == "Copy" and list(op.output) == ["gpu_1/fc_w_grad"]]
    assert len(back) == 1 and back[0].device_option.device_id == 1 and list(back[0].input) == ["gpu_0/fc_w_grad"]
    init_copies = [op for op in m.param_init_net.Proto().op if op.type == "Copy"]
    assert ("gpu_0/fc_w", "gpu_1/fc_w", 1) in {(op.input[0], op.output[0], op.device_option.device_id)
                                                for op in init_copies}  # fmt: skip
    assert data_parallel_model.GetDevices(m) == [0, 1]


def _gpus() -> int:
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except ImportError:
        return 0


@pytest.mark.skipif(_gpus() < 2, reason="needs two CUDA devices")
def test_two_gpus_keep_equal_parameters_after_a_step():
    m = _gpu_model([0, 1])
    workspace.RunNetOnce(m.param_init_net)
    workspace.CreateNet(m.net)
    workspace.RunNet(m.net)
    w0, w1 = (np.asarray(workspace.FetchBlob(f"gpu_{d}/fc_w")) for d in (0, 1))
    np.testing.assert_array_equal(w0, w1)


def test_rendezvous_checks():
    m = model_helper.ModelHelper(name="dpm_rdv")
    noop = (lambda model: None, lambda model, s: [])
    with pytest.raises(ValueError, match="missing"):
        data_parallel_model.Parallelize(m, *noop, devices=[0], cpu_device=True, rendezvous={"num_shards": 2})
    rdv = {"kv_handler": None, "shard_id": 0, "num_shards": 2}
    with pytest.raises(NotImplementedError, match="MPI"):
        data_parallel_model.Parallelize(m, *noop, devices=[0], cpu_device=True, rendezvous={**rdv, "mpi_rendezvous": 1})
    with pytest.raises(NotImplementedError, match="engine"):
        data_parallel_model.Parallelize(m, *noop, devices=[0], cpu_device=True, rendezvous={**rdv, "engine": "NCCL"})
    with pytest.raises(NotImplementedError, match="ideep"):
        data_parallel_model.Parallelize(m, *noop, devices=[0], ideep=True)


def test_rendezvous_ops_refuse_bad_arguments():
    import asyncnet as an
    from asyncnet.errors import NetDefinitionError

    for args, match in [({"size": 2, "rank": 2}, "0 <= rank < size"), ({"size": 2, "mpi_rendezvous": 1}, "mpi"),
                        ({"size": 2, "engine": "NCCL"}, "engine")]:  # fmt: skip
        with pytest.raises(NetDefinitionError, match=match):
            an.Net("cw").CreateCommonWorld([], "cw", **args)
    with pytest.raises(NetDefinitionError, match="in-place"):
        an.Net("bc").Broadcast(["cw", "x"], ["y"])


def test_single_shard_broadcast_with_a_local_world():
    import asyncnet as an
    from asyncnet.sync import LocalGradientSync

    ws = an.Workspace()
    ws.feed("cw", LocalGradientSync())
    ws.feed("x", np.arange(3, dtype=np.float32))
    net = an.Net("bc1")
    net.Broadcast(["cw", "x"], ["x"], root=0)
    ws.run_net_once(net)
    np.testing.assert_array_equal(ws.fetch("x"), np.arange(3, dtype=np.float32))
    assert core.IsOperator("FileStoreHandlerCreate") and core.IsOperator("CloneCommonWorld")
