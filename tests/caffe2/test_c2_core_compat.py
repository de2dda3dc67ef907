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


def test_apply_transform_sets_the_nnpack_engine_and_unknown_names_fail():
    net = core.Net("tf_src")
    net.Conv(["x", "w", "b"], "y", kernel=3, engine="CUDNN")
    net.Relu("y", "z")
    out = workspace.ApplyTransform("ConvToNNPack", net.Proto())
    assert [op.engine for op in out.op] == ["NNPACK", ""]
    assert net.Proto().op[0].engine == "CUDNN"  # the given net is not changed
    with pytest.raises(RuntimeError, match="ConvToNNPack"):
        workspace.ApplyTransform("NoSuchTransform", net.Proto())


def test_apply_transform_if_faster_returns_a_net_that_computes_the_same():
    init = core.Net("tf_init")
    init.GaussianFill([], "x", shape=[1, 2, 6, 6], mean=0.0, std=1.0)
    init.GaussianFill([], "w", shape=[3, 2, 3, 3], mean=0.0, std=1.0)
    init.ConstantFill([], "b", shape=[3], value=0.5)
    net = core.Net("tf_main")
    net.Conv(["x", "w", "b"], "y", kernel=3)
    chosen = workspace.ApplyTransformIfFaster("ConvToNNPack", net.Proto(), init.Proto(), warmup_runs=1, main_runs=3)
    assert [op.type for op in chosen.op] == ["Conv"] and chosen.op[0].engine in ("", "NNPACK")
    workspace.ResetWorkspace()
    workspace.RunNetOnce(init)
    workspace.RunNetOnce(net)
    expected = workspace.FetchBlob("y")
    workspace.RunNetOnce(chosen)
    np.testing.assert_array_equal(workspace.FetchBlob("y"), expected)


def test_immediate_root_folder_exists_while_immediate_mode_is_on():
    import os

    workspace.StartImmediate(i_know=True)
    try:
        root = workspace._immediate_root_folder
        assert root and os.path.isdir(root)
    finally:
        workspace.StopImmediate()
    assert workspace._immediate_root_folder == "" and not os.path.exists(root)


@pytest.mark.parametrize("order", ["NCHW", "NHWC"])
def test_operator_cost_of_conv_counts_the_output_pixels_the_op_produces(order):
    rng = np.random.default_rng(10)
    n, c, h, w, m, k = 2, 3, 9, 7, 4, 3
    x = rng.standard_normal((n, c, h, w) if order == "NCHW" else (n, h, w, c)).astype(np.float32)
    wt = rng.standard_normal((m, c, k, k) if order == "NCHW" else (m, k, k, c)).astype(np.float32)
    op = core.CreateOperator("Conv", ["cx", "cw"], ["cy"], kernel=k, stride=2, pad=1, order=order)
    workspace.ResetWorkspace()
    workspace.FeedBlob("cx", x)
    workspace.FeedBlob("cw", wt)
    workspace.RunOperatorOnce(op)
    y = workspace.FetchBlob("cy")
    pixels = y.shape[2] * y.shape[3] if order == "NCHW" else y.shape[1] * y.shape[2]
    flops, written = workspace.GetOperatorCost(op.SerializeToString(), ["cx", "cw"])
    assert flops == 2 * n * pixels * m * c * k * k
    assert written == y.size * 4
    with pytest.raises(RuntimeError, match="Relu"):
        workspace.GetOperatorCost(core.CreateOperator("Relu", "cx", "r"), ["cx"])


def test_ssa_helpers_version_every_write_and_find_the_ops_on_a_path():
    net = core.Net("ssa_src")
    net.AddExternalInput("a", "p")
    net.Relu("a", "b")  # 0
    net.Scale("b", "b", scale=2.0)  # 1 (b version 2)
    net.Add(["b", "p"], "c")  # 2
    net.Sigmoid("a", "unused")  # 3
    ssa, versions = core.get_ssa(net)
    assert ssa[1] == ([("b", 1)], [("b", 2)]) and ssa[2] == ([("b", 2), ("p", 0)], [("c", 1)])
    assert versions == {"a": 0, "p": 0, "b": 2, "c": 1, "unused": 1}
    assert core.get_undefined_blobs(ssa) == {"a", "p"}
    assert core.get_output_producers(ssa)[("b", 2)] == 1
    assert core.get_op_ids_in_path(ssa, versions, ["a"], ["c"]) == [0, 1, 2]
    assert core.get_op_ids_in_path(ssa, versions, ["b"], ["c"]) == [2]
    start = {"a": 3}
    _, updated = core.get_ssa(net.Proto(), start)
    assert updated is start and start["a"] == 3 and start["b"] == 2
