"""data_parallel_model on CPU devices (gradients summed across devices, parameters kept equal)
and the ResNet-50 builder of caffe2.python.models.resnet."""

from __future__ import annotations

import numpy as np
import pytest

from caffe2.python import (
    brew,
    core,
    data_parallel_model,
    model_helper,
    optimizer,
    workspace,
)
from caffe2.python.models import resnet

pytestmark = pytest.mark.timeout(300)


def _linear(devices, data, labels, lr=0.1):
    m = model_helper.ModelHelper(name="dpm_linear")
    per = len(data) // len(devices)

    def inputs(model):
        d = int(core.ScopedName("")[4:-1])
        workspace.FeedBlob(core.ScopedName("data"), data[d * per : (d + 1) * per])
        workspace.FeedBlob(core.ScopedName("label"), labels[d * per : (d + 1) * per])

    def forward(model, loss_scale):
        fc = brew.fc(model, "data", "fc", 3, 1)
        dist = model.SquaredL2Distance([fc, "label"], "dist")
        return [model.Scale(model.AveragedLoss(dist, "avg"), "loss", scale=loss_scale)]

    data_parallel_model.Parallelize(
        m,
        inputs,
        forward,
        optimizer_builder_fun=lambda model: optimizer.build_sgd(model, lr),
        devices=devices,
        cpu_device=True,
    )
    return m


def test_two_cpu_devices_take_the_step_of_the_whole_batch():
    rng = np.random.default_rng(0)
    data = rng.standard_normal((8, 3)).astype(np.float32)
    labels = rng.standard_normal((8, 1)).astype(np.float32)
    m = _linear([0, 1], data, labels)
    types = [op.type for op in m.net.Proto().op]
    assert "Sum" in types and "Copy" in types
    workspace.RunNetOnce(m.param_init_net)
    w0, b0 = workspace.FetchBlob("cpu_0/fc_w"), workspace.FetchBlob("cpu_0/fc_b")
    np.testing.assert_array_equal(workspace.FetchBlob("cpu_1/fc_w"), w0)  # the init net synchronized them
    workspace.CreateNet(m.net)
    workspace.RunNet(m.net)
    y = data @ w0.T + b0  # the mean over both halves of 0.5 * (y - label)^2
    dy = (y - labels) / len(data)
    gw, gb = dy.T @ data, dy.sum(0)
    for d in (0, 1):
        np.testing.assert_allclose(workspace.FetchBlob(f"cpu_{d}/fc_w"), w0 - 0.1 * gw, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(workspace.FetchBlob(f"cpu_{d}/fc_b"), b0 - 0.1 * gb, rtol=1e-5, atol=1e-6)
    (lr,) = data_parallel_model.GetLearningRateBlobNames(m)
    assert lr.startswith("SgdOptimizer_") and lr.endswith("_lr_cpu") and workspace.HasBlob(lr)
    assert {str(b) for b in data_parallel_model.GetCheckpointParams(m)} >= {
        "cpu_0/fc_w",
        "cpu_0/fc_b",
        "optimizer_iteration",
    }


def test_finalize_after_checkpoint_copies_the_first_device():
    rng = np.random.default_rng(1)
    m = _linear([0, 1], rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal((4, 1)).astype(np.float32))
    workspace.RunNetOnce(m.param_init_net)
    workspace.FeedBlob("cpu_0/fc_w", np.full((1, 3), 7.0, np.float32))
    data_parallel_model.FinalizeAfterCheckpoint(m)
    np.testing.assert_array_equal(workspace.FetchBlob("cpu_1/fc_w"), np.full((1, 3), 7.0))


def test_unsupported_setups_are_refused_clearly():
    m = model_helper.ModelHelper(name="dpm_bad")
    with pytest.raises(NotImplementedError, match="ideep"):
        data_parallel_model.Parallelize(m, lambda model: None, lambda model, s: [], devices=[0, 1], ideep=True)
    with pytest.raises(ValueError, match="only supported on the CPU"):
        data_parallel_model.Parallelize(
            m, lambda model: None, lambda model, s: [], devices=[0, 1], combine_spatial_bn=True
        )


def test_resnet50_builds_and_runs_forward():
    m = model_helper.ModelHelper(name="r50", arg_scope={"order": "NCHW"})
    softmax = resnet.create_resnet50(m, "data", num_input_channels=3, num_labels=10, is_test=True)
    convs = [op for op in m.net.Proto().op if op.type == "Conv"]
    assert len(convs) == 53 and str(softmax) == "softmax"
    assert sum(1 for p in m.params if str(p).endswith("_w")) == 54  # 53 convolutions + the last FC
    workspace.RunNetOnce(m.param_init_net)
    workspace.FeedBlob("data", np.random.default_rng(2).standard_normal((1, 3, 64, 64)).astype(np.float32))
    workspace.RunNetOnce(m.net)
    out = workspace.FetchBlob("softmax")
    assert out.shape == (1, 10) and np.isfinite(out).all() and abs(out.sum() - 1) < 1e-5
