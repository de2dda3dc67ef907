"""Caffe2's immediate mode: ops added to a net also run at once, in a workspace of their own."""

import os

import numpy as np
import pytest

from caffe2.python import core, workspace

pytestmark = pytest.mark.timeout(60)


def test_immediate_mode_runs_ops_in_its_own_workspace_and_cleans_up() -> None:
    workspace.ResetWorkspace()
    workspace.StartImmediate(i_know=True)
    try:
        assert workspace.IsImmediate()
        root = workspace._immediate["root"]
        assert os.path.isdir(root)
        net = core.Net("c2core_immediate")
        x = net.ConstantFill([], "x", shape=[2, 3], value=2.0)
        net.Scale(x, "y", scale=3.0)
        assert sorted(workspace.ImmediateBlobs()) == ["x", "y"]
        np.testing.assert_array_equal(workspace.FetchImmediate("y"), np.full((2, 3), 6.0, np.float32))
        assert not workspace.HasBlob("x")
        assert workspace.FeedImmediate("x", np.zeros((1,), np.float32))
        np.testing.assert_array_equal(workspace.FetchImmediate("x"), [0.0])
    finally:
        workspace.StopImmediate()
    assert not workspace.IsImmediate()
    assert not os.path.exists(root)
    with pytest.raises(RuntimeError):
        workspace.FetchImmediate("x")


def test_gradient_ops_run_immediately_too() -> None:
    workspace.StartImmediate(i_know=True)
    try:
        net = core.Net("c2core_immediate_grad")
        workspace.FeedImmediate("x", np.array([-1.0, 2.0, 3.0], np.float32))
        y = net.Relu("x", "y")
        loss = net.AveragedLoss(y, "loss")
        grads = net.AddGradientOperators([loss])
        np.testing.assert_allclose(workspace.FetchImmediate(str(grads["x"])), [0.0, 1 / 3, 1 / 3], rtol=1e-6)
    finally:
        workspace.StopImmediate()


def test_create_db_writes_a_minidb_that_reads_back_in_order(tmp_path) -> None:
    path = str(tmp_path / "kv.minidb")
    db = workspace.C.create_db("minidb", path, workspace.C.Mode.write)
    for i in range(3):
        t = db.new_transaction()
        t.put(f"k{i}".encode(), f"v{i}".encode())
        del t
    db.close()
    cursor = workspace.C.create_db("minidb", path, workspace.C.Mode.read).new_cursor()
    got = []
    while cursor.valid():
        got.append((cursor.key(), cursor.value()))
        cursor.next()
    assert got == [(b"k0", b"v0"), (b"k1", b"v1"), (b"k2", b"v2")]
    cursor.seek(b"k1")
    assert cursor.key() == b"k1"
    with pytest.raises(RuntimeError, match="reading"):
        workspace.C.create_db("minidb", path, workspace.C.Mode.read).new_transaction()


def test_time_observer_counts_runs_of_its_net_only() -> None:
    workspace.ResetWorkspace()
    net = core.Net("c2core_observed")
    net.ConstantFill([], "z", shape=[4], value=1.0)
    other = core.Net("c2core_not_observed")
    other.ConstantFill([], "w", shape=[4], value=1.0)
    workspace.CreateNet(net)
    workspace.CreateNet(other)
    ob = net.AddObserver("TimeObserver")
    assert ob.average_time() == 0.0 and net.NumObservers() == 1
    workspace.RunNet(net, num_iter=2)
    workspace.RunNet(other)
    assert ob._runs == 2 and ob.average_time() > 0.0
    net.RemoveObserver(ob)
    assert net.NumObservers() == 0
    with pytest.raises(ValueError, match="unknown observer type"):
        net.AddObserver("NoSuchObserver")


def test_numa_placement_is_reported_as_unsupported() -> None:
    workspace.ResetWorkspace()
    workspace.FeedBlob("numa_x", np.zeros(2, np.float32))
    assert workspace.IsNUMAEnabled() is False and workspace.GetNumNUMANodes() == 0
    assert workspace.GetBlobNUMANode("numa_x") == -1
    with pytest.raises(RuntimeError):
        workspace.GetBlobNUMANode("numa_missing")


def test_infer_shapes_and_types_runs_ops_on_zero_filled_inputs() -> None:
    from caffe2.proto import caffe2_pb2

    net = core.Net("c2core_infer")
    net.Relu(net.FC(["x", "w", "b"], "y"), "z")
    net.Cast("z", "zi", to=caffe2_pb2.TensorProto.INT32)
    net.Relu("not_given", "skipped")
    shapes, types = workspace.InferShapesAndTypes([net], {"x": [4, 3], "w": [5, 3], "b": [5]})
    assert shapes["z"] == [4, 5] and types["z"] == caffe2_pb2.TensorProto.FLOAT
    assert shapes["zi"] == [4, 5] and types["zi"] == caffe2_pb2.TensorProto.INT32
    assert "skipped" not in shapes
    shapes, types = workspace.InferShapesAndTypes(
        [net.Proto()],
        {"x": [2, 3], "w": [5, 3], "b": [5]},
        nets_proto=True,
        blob_types=dict.fromkeys("xwb", caffe2_pb2.TensorProto.DOUBLE),
    )
    assert types["y"] == caffe2_pb2.TensorProto.DOUBLE and shapes["y"] == [2, 5]
