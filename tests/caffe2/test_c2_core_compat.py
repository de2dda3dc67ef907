"""Caffe2 2018 spellings and helpers of ``caffe2.python.core`` and ``workspace``: ``cuda_gpu_id``,
``Net.ClonePartial``, transforms by name, the immediate-mode root folder."""

from __future__ import annotations

import pytest

from caffe2.convert import device_id_of, op_to_asyncnet
from caffe2.proto import caffe2_pb2
from caffe2.python import core

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
