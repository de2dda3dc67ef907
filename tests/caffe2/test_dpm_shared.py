"""data_parallel_model with shared_model=True (CPU, as resnet50_trainer --use_cpu asks): one set
of parameters read by every device, the devices' gradients summed into it; and the
Parallelize_CPU / Parallelize_GPU spellings."""

import numpy as np
import pytest

from caffe2.proto import caffe2_pb2
from caffe2.python import brew, core, data_parallel_model, model_helper, optimizer, workspace

pytestmark = pytest.mark.timeout(120)


def _build(data, labels, devices, **kwargs):
    m = model_helper.ModelHelper(name="dpm_shared")
    per = len(data) // len(devices)

    def inputs(model):
        d = int(core.ScopedName("")[4:-1])
        workspace.FeedBlob(core.ScopedName("data"), data[d * per : (d + 1) * per])
        workspace.FeedBlob(core.ScopedName("label"), labels[d * per : (d + 1) * per])

    def forward(model, loss_scale):
        dist = model.SquaredL2Distance([brew.fc(model, "data", "fc", 3, 1), "label"], "dist")
        return [model.Scale(model.AveragedLoss(dist, "avg"), "loss", scale=loss_scale)]

    data_parallel_model.Parallelize(m, inputs, forward, optimizer_builder_fun=lambda model: optimizer.build_sgd(model, 0.1),
                                    devices=devices, **kwargs)  # fmt: skip
    return m


def test_shared_model_steps_on_the_whole_batch_with_one_parameter_set():
    rng = np.random.default_rng(4)
    data = rng.standard_normal((8, 3)).astype(np.float32)
    labels = rng.standard_normal((8, 1)).astype(np.float32)
    m = _build(data, labels, [0, 1], cpu_device=True, shared_model=True)
    assert [str(p) for p in m.GetParams()] == ["cpu_0/fc_w", "cpu_0/fc_b"]
    init_outputs = {o for op in m.param_init_net.Proto().op for o in op.output}
    assert "cpu_0/fc_w" in init_outputs and "cpu_1/fc_w" not in init_outputs
    fc1 = next(op for op in m.net.Proto().op if op.type == "FC" and op.output[0] == "cpu_1/fc")
    assert list(fc1.input) == ["cpu_1/data", "cpu_0/fc_w", "cpu_0/fc_b"]
    assert not any(o.startswith("cpu_1/fc_w") and o != "cpu_1/fc_w_grad" for op in m.net.Proto().op for o in op.output)
    workspace.RunNetOnce(m.param_init_net)
    w0, b0 = workspace.FetchBlob("cpu_0/fc_w"), workspace.FetchBlob("cpu_0/fc_b")
    workspace.CreateNet(m.net)
    workspace.RunNet(m.net)
    dy = (data @ w0.T + b0 - labels) / len(data)
    np.testing.assert_allclose(workspace.FetchBlob("cpu_0/fc_w"), w0 - 0.1 * (dy.T @ data), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(workspace.FetchBlob("cpu_0/fc_b"), b0 - 0.1 * dy.sum(0), rtol=1e-5, atol=1e-6)
    assert not workspace.HasBlob("cpu_1/fc_w")


def test_shared_model_only_on_cpu_and_the_spellings():
    data = np.zeros((4, 3), np.float32)
    labels = np.zeros((4, 1), np.float32)
    with pytest.raises(ValueError, match="only supported on CPU"):
        _build(data, labels, [0, 1], shared_model=True)
    m = model_helper.ModelHelper(name="spelled_cpu")
    data_parallel_model.Parallelize_CPU(m, lambda model: None, lambda model, s: [], devices=[0])
    assert m._device_prefix == "cpu" and m._device_type == caffe2_pb2.CPU
    g = model_helper.ModelHelper(name="spelled_gpu")
    data_parallel_model.Parallelize_GPU(g, lambda model: None, lambda model, s: [], devices=[0])
    assert g._device_prefix == "gpu" and g._device_type == caffe2_pb2.CUDA


def _bn_model(name, devices, data, labels, params, **kwargs):
    m = model_helper.ModelHelper(name=name, arg_scope={"order": "NCHW"})
    per = len(data) // len(devices)

    def inputs(model):
        d = int(core.ScopedName("")[4:-1])
        workspace.FeedBlob(core.ScopedName("data"), data[d * per : (d + 1) * per])
        workspace.FeedBlob(core.ScopedName("label"), labels[d * per : (d + 1) * per])

    def forward(model, loss_scale):
        conv = brew.conv(model, "data", "conv", 2, 3, 3, pad=1)
        bn = brew.spatial_bn(model, conv, "conv_spatbn", 3, epsilon=1e-5, momentum=0.9, is_test=False)
        fc = brew.fc(model, brew.relu(model, bn, "relu"), "fc", 3 * 4 * 4, 1)
        dist = model.SquaredL2Distance([fc, "label"], "dist")
        return [model.Scale(model.AveragedLoss(dist, "avg"), "loss", scale=loss_scale)]

    data_parallel_model.Parallelize(m, inputs, forward, optimizer_builder_fun=lambda model: optimizer.build_sgd(model, 0.1),
                                    devices=devices, cpu_device=True, **kwargs)  # fmt: skip
    workspace.RunNetOnce(m.param_init_net)
    for d in devices:
        for k, v in params.items():
            workspace.FeedBlob(f"cpu_{d}/{k}", v)
    workspace.CreateNet(m.net)
    workspace.RunNet(m.net)
    values = {k: workspace.FetchBlob(f"cpu_0/{k}").copy() for k in [*params, "conv_spatbn_rm", "conv_spatbn_riv"]}
    return [op.type for op in m.net.Proto().op], values


@pytest.mark.parametrize("shared", [True, False])
def test_combine_spatial_bn_matches_one_device_with_the_whole_batch(shared):
    rng = np.random.default_rng(5)
    data = rng.standard_normal((8, 2, 4, 4)).astype(np.float32)
    labels = rng.standard_normal((8, 1)).astype(np.float32)
    params = {
        "conv_w": rng.standard_normal((3, 2, 3, 3)).astype(np.float32) * 0.3,
        "conv_b": np.zeros(3, np.float32),
        "conv_spatbn_s": np.array([1.0, 0.5, 2.0], np.float32),
        "conv_spatbn_b": np.array([0.1, -0.2, 0.0], np.float32),
        "fc_w": rng.standard_normal((1, 48)).astype(np.float32) * 0.2,
        "fc_b": np.zeros(1, np.float32),
    }
    _, whole = _bn_model("bn_one", [0], data, labels, params)
    workspace.ResetWorkspace()
    types, both = _bn_model("bn_two", [0, 1], data, labels, params, combine_spatial_bn=True, shared_model=shared)
    assert types.count("ChannelStats") == 2 and types.count("ChannelBackpropStats") == 2
    for k, v in whole.items():
        np.testing.assert_allclose(both[k], v, rtol=1e-4, atol=1e-5, err_msg=k)
    assert np.abs(whole["conv_w"] - params["conv_w"]).max() > 1e-3  # the step moved the weights


def test_checkpoint_of_a_shared_model_holds_the_master_parameters():
    rng = np.random.default_rng(6)
    data = rng.standard_normal((4, 3)).astype(np.float32)
    labels = rng.standard_normal((4, 1)).astype(np.float32)
    m = _build(data, labels, [0, 1], cpu_device=True, shared_model=True)
    names = {str(b) for b in data_parallel_model.GetCheckpointParams(m)}
    assert {"cpu_0/fc_w", "cpu_0/fc_b", "optimizer_iteration"} <= names
    assert not any(n.startswith("cpu_1/") for n in names)
