"""Caffe2 2018 spellings and helpers of ``caffe2.python.core`` and ``workspace``: ``cuda_gpu_id``,
``Net.ClonePartial``, transforms by name, the immediate-mode root folder."""

from __future__ import annotations

import numpy as np
import pytest

from caffe2.convert import device_id_of, op_to_asyncnet
from caffe2.proto import caffe2_pb2
from caffe2.python import core, workspace

pytestmark = pytest.mark.timeout(120)


def test_cuda_gpu_id_is_the_device_index_when_device_id_is_unset():
    opt = caffe2_pb2.DeviceOption()
    opt.device_type = caffe2_pb2.CUDA
    opt.cuda_gpu_id = 3
    assert device_id_of(opt) == 3
    assert core.device_option_equal(opt, core.DeviceOption(caffe2_pb2.CUDA, 3))
    assert not core.device_option_equal(opt, core.DeviceOption(caffe2_pb2.CUDA, 2))
    with core.DeviceScope(opt):
        op = core.CreateOperator("Relu", "x", "y")
    assert op.device_option.cuda_gpu_id == 3
    assert op_to_asyncnet(op).device_option.device_id == 3
    # device_id wins when both are set; a CPU option ignores the index
    opt.device_id = 1
    assert device_id_of(opt) == 1
    cpu = caffe2_pb2.DeviceOption(cuda_gpu_id=5)
    assert core.device_option_equal(cpu, caffe2_pb2.DeviceOption())
    assert core.DeviceOption(caffe2_pb2.CUDA, cuda_gpu_id=2).cuda_gpu_id == 2


def test_cuda_gpu_id_round_trips_through_serialization_and_text():
    from google.protobuf import text_format

    opt = text_format.Parse("device_type: 1 cuda_gpu_id: 4", caffe2_pb2.DeviceOption())
    again = caffe2_pb2.DeviceOption.FromString(opt.SerializeToString())
    assert again.cuda_gpu_id == 4 and device_id_of(again) == 4 and not again.HasField("device_id")


def test_clone_partial_keeps_only_the_needed_ops_and_scopes_what_it_computes():
    net = core.Net("cp_src")
    x = net.AddExternalInput("x")
    h = net.Relu(x, "h")
    g = net.Scale(h, "g", scale=3.0)
    y = net.Add([g, "bias"], "y")
    net.Scale(y, y, scale=2.0)  # in place
    net.Sigmoid(x, "unrelated")
    part, (out,) = net.ClonePartial("part", {"h": "h_in"}, [y])
    assert [op.type for op in part.Proto().op] == ["Scale", "Add", "Scale"]
    assert str(out) == "part/y" and out.Net() is part
    assert set(part.Proto().external_input) == {"h_in", "bias"}
    assert list(part.Proto().external_output) == ["part/y"]
    rng = np.random.default_rng(9)
    hv, bias = rng.random((2, 3)).astype(np.float32), rng.random((2, 3)).astype(np.float32)
    workspace.ResetWorkspace()
    workspace.FeedBlob("h_in", hv)
    workspace.FeedBlob("bias", bias)
    workspace.RunNetOnce(part)
    np.testing.assert_allclose(workspace.FetchBlob("part/y"), 2 * (3 * hv + bias), rtol=1e-6)
    # an input that a needed op also writes cannot be given
    cat, _ = net.Concat([x, "h"], ["cat", "cat_info"], axis=0)
    net.Relu(cat, "out2")
    with pytest.raises(AssertionError, match="generate the given input"):
        net.ClonePartial("bad", ["x", "h", "cat_info"], ["out2"])
