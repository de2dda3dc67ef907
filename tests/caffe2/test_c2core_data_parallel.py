"""data_parallel_model: ConvertNetForDevice, AddBlobSync and the device-scope check."""

import numpy as np
import pytest

from caffe2.proto import caffe2_pb2
from caffe2.python import brew, core, data_parallel_model, model_helper, workspace

pytestmark = pytest.mark.timeout(120)


def test_convert_net_for_device_scopes_blobs_and_places_ops() -> None:
    other = model_helper.ModelHelper(name="c2core_other")
    brew.fc(other, "data", "fc", dim_in=3, dim_out=2)
    converted = data_parallel_model.ConvertNetForDevice(other.net, core.DeviceOption(caffe2_pb2.CPU, 1))
    (op,) = converted.Proto().op
    assert list(op.input) == ["cpu_1/data", "cpu_1/fc_w", "cpu_1/fc_b"]
    assert list(op.output) == ["cpu_1/fc"]
    assert op.device_option.device_id == 1
    assert [op.input[0] for op in other.net.Proto().op] == ["data"]


def _model() -> model_helper.ModelHelper:
    model = model_helper.ModelHelper(name="c2core_sync")

    def inputs(m: model_helper.ModelHelper) -> None:
        m.net.ConstantFill([], "data", shape=[2, 3], value=1.0)

    def forward(m: model_helper.ModelHelper, loss_scale: float) -> list:
        fc = brew.fc(m, "data", "fc", dim_in=3, dim_out=1)
        return [m.net.AveragedLoss(fc, "loss")]

    data_parallel_model.Parallelize_CPU(
        model,
        input_builder_fun=inputs,
        forward_pass_builder_fun=forward,
        param_update_builder_fun=None,
        devices=[0, 1],
    )
    return model


def test_add_blob_sync_copies_the_first_devices_blob_to_the_others() -> None:
    workspace.ResetWorkspace()
    model = _model()
    data_parallel_model.AddBlobSync(model, ["sync_num"])
    workspace.RunNetOnce(model.param_init_net)
    workspace.FeedBlob("cpu_0/sync_num", np.array([7.0], np.float32))
    workspace.FeedBlob("cpu_1/sync_num", np.array([0.0], np.float32))
    workspace.CreateNet(model.net)
    workspace.RunNet(model.net)
    assert float(workspace.FetchBlob("cpu_1/sync_num")[0]) == 7.0
    with pytest.raises(ValueError, match="unprefixed"):
        data_parallel_model.AddBlobSync(model, ["cpu_0/x"])


def test_parallelize_refuses_a_gpu_device_scope() -> None:
    with pytest.raises(AssertionError), core.DeviceScope(core.DeviceOption(caffe2_pb2.CUDA, 0)):
        data_parallel_model.Parallelize_GPU(None, None, None)
