"""workspace.C (Caffe2's pybind surface) and the workspace behaviours Caffe2's tests check:
blobs created with a net, RuntimeError on failures, serialized protos, Predictor."""

from __future__ import annotations

import numpy as np
import pytest

import asyncnet as an
from caffe2.python import brew, core, model_helper, workspace

pytestmark = pytest.mark.timeout(60)


def test_c_workspace_is_separate_and_has_dict_views():
    ws = workspace.C.Workspace()
    assert ws.nets == {} and ws.blobs == {}
    net = core.Net("c_ws_net")
    net.ConstantFill([], "c_ws_blob", shape=[2, 3], value=1.0)
    ws.create_net(net)
    assert "c_ws_blob" in ws.blobs  # created with the net, as in Caffe2
    with pytest.raises(RuntimeError, match="already exists"):
        ws.create_net(net)
    ws.create_net(net, overwrite=True).run()
    np.testing.assert_array_equal(ws.blobs["c_ws_blob"].fetch(), np.ones((2, 3), np.float32))
    assert list(ws.nets) == [net.Proto().name]
    assert not workspace.HasBlob("c_ws_blob")  # the module's current workspace is untouched
    with pytest.raises(TypeError):
        ws.create_net("not a net")


def test_c_workspace_runs_ops_nets_and_plans():
    ws = workspace.C.Workspace()
    ws.run(core.CreateOperator("ConstantFill", [], ["from_op"], shape=[1], value=2.0))
    net = core.Net("c_once")
    net.ConstantFill([], ["from_net"], shape=[1], value=3.0)
    ws.run(net)
    assert net.Proto().name not in ws.nets
    plan = core.Plan("c_plan")
    plan_net = core.Net("c_plan_net")
    plan_net.ConstantFill([], ["from_plan"], shape=[1], value=4.0)
    plan.AddStep(core.ExecutionStep("c_step", plan_net, num_iter=1))
    ws.run(plan)
    assert [ws.blobs[n].fetch()[0] for n in ("from_op", "from_net", "from_plan")] == [2.0, 3.0, 4.0]
    assert plan_net.Proto().name in ws.nets


def test_blob_serialize_round_trip_and_tensor_view():
    ws = workspace.C.Workspace()
    value = np.arange(6, dtype=np.int64).reshape(2, 3)
    ws.create_blob("arr").feed(value)
    ws.create_blob("arr_copy").deserialize(ws.blobs["arr"].serialize("arr"))
    np.testing.assert_array_equal(ws.blobs["arr_copy"].fetch(), value)
    ws.create_blob("text").feed(b"hello")
    ws.create_blob("text_copy").deserialize(ws.blobs["text"].serialize("text"))
    assert ws.blobs["text_copy"].fetch() == b"hello"
    tensor = ws.blobs["arr"].tensor()
    tensor.data[0, 0] = 42
    assert ws.blobs["arr"].fetch()[0, 0] == 42
    tensor.init([2, 2], core.DataType.INT32)
    assert ws.blobs["arr"].fetch().dtype == np.int32 and ws.blobs["arr"].fetch().shape == (2, 2)
    with pytest.raises(RuntimeError):
        tensor.init([1], core.DataType.STRING)


def test_current_follows_the_module_workspace():
    net = core.Net("current_net")
    net.ConstantFill([], "current_blob", shape=[1], value=1.0)
    assert "current_blob" not in workspace.C.Workspace.current.blobs
    workspace.RunNetOnce(net.Proto().SerializeToString())
    assert "current_blob" in workspace.C.Workspace.current.blobs
    workspace.ResetWorkspace()
    assert "current_blob" not in workspace.C.Workspace.current.blobs


def test_serialized_ops_and_plans_run():
    net = core.Net("bytes_net")
    net.ConstantFill([], "bytes_blob", shape=[1], value=5.0)
    assert workspace.RunOperatorOnce(net.Proto().op[0].SerializeToString()) is True
    plan = core.Plan("bytes_plan")
    plan.AddStep(core.ExecutionStep("bytes_step", net))
    workspace.ResetWorkspace()
    assert workspace.RunPlan(plan.Proto().SerializeToString()) is True
    assert workspace.FetchBlob("bytes_blob")[0] == 5.0


def test_create_net_needs_existing_inputs_as_caffe2():
    net = core.Net("needs_inputs")
    net.Mul(["a", "b"], "c")
    with pytest.raises(RuntimeError, match="non-existing input blob: 'a'") as err:
        workspace.CreateNet(net)
    assert isinstance(err.value, an.NetDefinitionError)  # still asyncnet's error class
    with pytest.raises(RuntimeError):
        workspace.RunNetOnce(net)
    producer = core.Net("producer")
    producer.ConstantFill([], ["a"], shape=[1], value=2.0)
    producer.ConstantFill([], ["b"], shape=[1], value=3.0)
    workspace.CreateNet(producer)
    assert workspace.HasBlob("a")  # declared by the created net
    workspace.CreateNet(net)  # a and b are outputs of a created net: accepted
    workspace.RunNet(producer)
    workspace.RunNet(net)
    assert workspace.FetchBlob("c")[0] == 6.0


def test_root_folder_defaults_to_dot():
    assert workspace.RootFolder() == "."


def test_predictor_runs_init_then_predict():
    m = model_helper.ModelHelper(name="pred")
    y = brew.fc(
        m,
        "data",
        "y",
        dim_in=4,
        dim_out=2,
        weight_init=("ConstantFill", dict(value=1.0)),
        bias_init=("ConstantFill", dict(value=0.5)),
        axis=0,
    )
    m.net.AddExternalOutput(y)
    workspace.FeedBlob("data", np.zeros(4, np.float32))
    predictor = workspace.Predictor(
        workspace.StringifyProto(m.param_init_net.Proto()), workspace.StringifyProto(m.net.Proto())
    )
    out = predictor.run([np.array([1, 2, 3, 4], np.float32)])
    np.testing.assert_allclose(out[0], [10.5, 10.5])  # axis=0: output shape [dim_out], as in Caffe2


def test_is_operator_with_engine():
    assert core.IsOperatorWithEngine("Relu", "DEFAULT")
    assert not core.IsOperatorWithEngine("Relu", "NOEXIST")
