"""caffe2.python.core against Caffe2's core_test.py (ported in our own words): name and device
scopes, CreateOperator, the live proto, blob references, net names, gradients."""

from __future__ import annotations

import numpy as np
import pytest

import asyncnet as an
from caffe2.convert import from_asyncnet, to_asyncnet
from caffe2.proto import caffe2_pb2
from caffe2.python import core, scope, utils, workspace

pytestmark = pytest.mark.timeout(60)


def test_name_scope_prefixes_string_blobs():
    with core.NameScope("a"):
        with core.NameScope("b"):
            op = core.CreateOperator("Relu", "x", "y")
            assert scope.CurrentNameScope() == "a/b/"
        with core.NameScope("c", reset=True):
            assert scope.CurrentNameScope() == "c/"
    assert scope.CurrentNameScope() == ""
    assert list(op.input) == ["a/b/x"] and list(op.output) == ["a/b/y"]
    ref = core.BlobReference("already/scoped")
    with core.NameScope("ignored"):
        assert list(core.CreateOperator("Relu", ref, "y").input) == ["already/scoped"]


def test_device_scope_and_explicit_device_option():
    cpu1 = core.DeviceOption(caffe2_pb2.CPU, 0, random_seed=3)
    with core.DeviceScope(cpu1):
        op = core.CreateOperator("Relu", "x", "y")
        explicit = core.CreateOperator("Relu", "x", "y", device_option=core.DeviceOption(caffe2_pb2.CUDA, 1))
    plain = core.CreateOperator("Relu", "x", "y")
    assert op.device_option == cpu1
    assert explicit.device_option.device_type == caffe2_pb2.CUDA and explicit.device_option.device_id == 1
    assert not plain.HasField("device_option")
    assert core.device_option_equal(core.DeviceOption(caffe2_pb2.CPU, 0), core.DeviceOption(caffe2_pb2.CPU, 3))
    assert not core.device_option_equal(core.DeviceOption(caffe2_pb2.CUDA, 0), core.DeviceOption(caffe2_pb2.CUDA, 1))


def test_create_operator_arguments_as_caffe2_types_them():
    op = core.CreateOperator(
        "Foo",
        ["a"],
        ["b"],
        engine="CUDNN",
        f=1.5,
        i=2,
        flag=True,
        s="text",
        fs=[1.0, 2.0],
        ints=[1, 2],
        strs=["u", "v"],
        random_seed=9,
    )
    args = {a.name: a for a in op.arg}
    assert args["f"].f == 1.5 and args["i"].i == 2 and args["flag"].i == 1 and args["s"].s == b"text"
    assert list(args["fs"].floats) == [1.0, 2.0] and list(args["ints"].ints) == [1, 2]
    assert list(args["strs"].strings) == [b"u", b"v"]
    assert op.engine == "CUDNN" and op.device_option.random_seed == 9
    with pytest.raises(ValueError, match="Unknown iterable argument type"):
        core.CreateOperator("Foo", [], [], mixed=[1, 2.5])
    # Caffe2's last release leaves None arguments out (resnet50_trainer passes mean_per_channel=None);
    # MakeArgument itself still refuses None
    assert [a.name for a in core.CreateOperator("Foo", [], [], arg1=None, arg2=3).arg] == ["arg2"]
    with pytest.raises(ValueError, match="Unknown argument type"):
        utils.MakeArgument("arg1", None)


def test_net_names_are_made_unique():
    a, b = core.Net("unique_name_test"), core.Net("unique_name_test")
    assert a.Name() == "unique_name_test" and b.Name() == "unique_name_test_1"
    c = core.Net(a.Proto())
    assert c.Name() == "unique_name_test_2" and c.Proto() is not a.Proto()


def test_proto_is_live_and_ops_return_references():
    net = core.Net("live_proto")
    fc = net.FC(["x", "w", "b"], "fc")
    relu = fc.Relu([], "out")
    assert isinstance(relu, core.BlobReference) and relu.Net() is net
    assert list(net.Proto().external_input) == ["x", "w", "b"]
    net.Proto().type = "async_scheduling"
    net.Proto().num_workers = 2
    nd = net.to_asyncnet()
    assert nd.type == "async_scheduling" and nd.num_workers == 2 and [o.type for o in nd.ops] == ["FC", "Relu"]
    auto = net.Sigmoid(relu)
    assert str(auto) == "live_proto/Sigmoid"
    two = net.Split(auto, 2, axis=1)
    assert [str(t) for t in two] == ["live_proto/Split:0", "live_proto/Split:1"]


def test_add_external_inputs_returns_references():
    net = core.Net("ext_in")
    one = net.AddExternalInputs("a")
    both = net.AddExternalInputs("b", "c")
    assert one == "a" and isinstance(one, core.BlobReference)
    assert [str(x) for x in both] == ["b", "c"]
    with pytest.raises(ValueError, match="already contains"):
        net.AddExternalInput("a")
    net.Relu("a", "r")
    net.AddExternalOutputs(core.BlobReference("r"))
    assert list(net.Proto().external_output) == ["r"]


def test_blob_reference_equality_and_scope_parts():
    ref = core.BlobReference("scope/sub/name")
    assert (
        ref == "scope/sub/name" and ref == core.BlobReference("scope/sub/name") and hash(ref) == hash("scope/sub/name")
    )
    assert ref.GetNameScope() == "scope/sub/" and ref.GetUnscopedName() == "name"
    assert str(ref + "_grad") == "scope/sub/name_grad" and str("pre_" + core.BlobReference("x")) == "pre_x"
    with core.NameScope("s"):
        assert str(core.ScopedBlobReference("w")) == "s/w"
    with pytest.raises(AttributeError, match="net source"):
        core.BlobReference("free").Relu([], "y")


def test_unknown_op_method_suggests_names():
    net = core.Net("typo")
    with pytest.raises(AttributeError, match="not a registered operator.*Relu"):
        net.Rellu("x", "y")


def test_const_fills():
    net = core.Net("consts")
    f = net.Const(np.array([[1.0, 2.0]], np.float32))
    i = net.Const(np.array([1, 2], np.int32))
    b = net.Const(True)
    workspace.RunNetOnce(net)
    np.testing.assert_array_equal(workspace.FetchBlob(f), [[1.0, 2.0]])
    assert workspace.FetchBlob(i).dtype == np.int32
    assert workspace.FetchBlob(b).dtype == np.bool_ and workspace.FetchBlob(b).all()


def test_gradients_against_finite_differences():
    rng = np.random.default_rng(1)
    x, w, b = rng.standard_normal((4, 3)), rng.standard_normal((2, 3)), rng.standard_normal(2)
    net = core.Net("grad_fc")
    fc = net.FC(["x", "w", "b"], "fc")
    sq = net.Mul([fc, fc], "sq")
    loss = net.AveragedLoss(sq, "loss")
    grads = net.AddGradientOperators([loss])
    assert str(grads["w"]) == "w_grad" and isinstance(grads["w"], core.BlobReference)
    ops = net.Proto().op
    # the makers' gradient ops are marked; the ones-seed and the accumulating Sum are not (as in Caffe2)
    assert [op.type for op in ops[3:5]] == ["ConstantFill", "AveragedLossGradient"]
    assert all(op.is_gradient_op for op in ops[4:] if op.type != "Sum") and not any(op.is_gradient_op for op in ops[:4])
    for name, value in (("x", x), ("w", w), ("b", b)):
        workspace.FeedBlob(name, value)
    workspace.RunNetOnce(net)

    def loss_of(w_):
        return np.mean((x @ w_.T + b) ** 2)

    eps, num = 1e-6, np.zeros_like(w)
    for idx in np.ndindex(w.shape):
        d = np.zeros_like(w)
        d[idx] = eps
        num[idx] = (loss_of(w + d) - loss_of(w - d)) / (2 * eps)
    np.testing.assert_allclose(workspace.FetchBlob("w_grad"), num, rtol=1e-6, atol=1e-8)


def test_gradients_of_two_losses_add_up():
    net = core.Net("two_losses")
    net.Scale("x", "a", scale=2.0)
    net.Scale("x", "c", scale=3.0)
    la = net.AveragedLoss("a", "la")
    lc = net.AveragedLoss("c", "lc")
    net.AddGradientOperators([la, lc])
    workspace.FeedBlob("x", np.ones(3, np.float32))
    workspace.RunNetOnce(net)
    np.testing.assert_allclose(workspace.FetchBlob("x_grad"), np.full(3, 5.0 / 3))


def test_sparse_gradient_is_a_gradient_slice():
    net = core.Net("sparse_grad")
    g = net.Gather(["table", "idx"], "rows")
    net.AveragedLoss(g, "loss")
    grads = net.AddGradientOperators(["loss"])
    assert isinstance(grads["table"], core.GradientSlice)


def test_core_net_round_trips_through_asyncnet_byte_for_byte():
    net = core.Net("rt")
    with core.DeviceScope(core.DeviceOption(caffe2_pb2.CPU)):
        net.ConstantFill([], "y", shape=[2], value=1.0, dtype=core.DataType.FLOAT)
    net.Relu("y", "z", use_cudnn=True)
    net.Proto().op[1].is_gradient_op = True  # a hint asyncnet does not model
    pb = net.Proto()
    assert pb.op[0].HasField("name") and pb.op[0].name == ""  # CreateOperator sets it, empty
    nd = to_asyncnet(pb)
    assert from_asyncnet(nd).SerializeToString() == pb.SerializeToString()
    nd.ops[1].inputs = ["y2"]  # an edit: that op comes back canonical, the other as read
    back = from_asyncnet(nd)
    assert back.op[0] == pb.op[0] and list(back.op[1].input) == ["y2"] and not back.op[1].is_gradient_op


def test_populate_proto_with_file_name():
    net = core.Net("traced")
    net.Relu("x", "y")
    net.PopulateProtoWithFileName()
    name = net.Proto().op[0].name
    assert name.endswith("test_populate_proto_with_file_name") and "test_c2_core.py:" in name


def test_data_type_matches_the_proto_enum():
    for name, value in caffe2_pb2.TensorProto.DataType.items():
        assert getattr(core.DataType, name) == value


def test_asyncnet_api_still_refuses_what_the_caffe2_layer_forgives():
    net = an.Net("strict")
    with pytest.raises(an.NetDefinitionError, match="unknown argument 'use_cudnn'"):
        net.Relu("x", "y", use_cudnn=True)


def test_blob_is_defined_follows_appended_ops_and_edits_through_proto():
    net = core.Net("defined_blobs")
    net.Relu("x", "y")
    assert net.BlobIsDefined("y") and not net.BlobIsDefined("z")
    net.Relu("y", "z")  # appended after the outputs were read once
    assert net.BlobIsDefined("z")
    net.Proto().op[0].output[0] = "renamed"  # an edit through the live proto
    assert net.BlobIsDefined("renamed") and not net.BlobIsDefined("y")
    del net.Proto().op[1]
    assert not net.BlobIsDefined("z")


def test_log_info_prints_messages_and_blobs(caplog):
    """Net.LogInfo: a string becomes a string blob that a Print op logs; a blob is printed as it is."""
    workspace.ResetWorkspace()
    workspace.FeedBlob("x", np.array([1.5, 2.5], dtype=np.float32))
    net = core.Net("log_info")
    net.LogInfo("epoch done", core.BlobReference("x"))
    assert [op.type for op in net.Proto().op] == ["GivenTensorStringFill", "Print", "Print"]
    with caplog.at_level("INFO", logger="asyncnet.ops.print"):
        workspace.RunNetOnce(net)
    lines = [r.getMessage() for r in caplog.records if r.name == "asyncnet.ops.print"]
    assert len(lines) == 2
    assert lines[0].endswith(": epoch done")
    assert lines[1].startswith("Tensor x of type float32. Dims: (2,): 1.5,2.5")
