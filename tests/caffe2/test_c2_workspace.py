"""caffe2.python.workspace against Caffe2's workspace_test.py (ported in our own words): return
values, copies on feed and fetch, named workspaces, nets, operators and plans."""

from __future__ import annotations

import numpy as np
import pytest

import asyncnet as an
from caffe2.proto import caffe2_pb2
from caffe2.python import core, utils, workspace

pytestmark = pytest.mark.timeout(60)


def test_run_operator_once_and_blobs():
    op = core.CreateOperator("ConstantFill", [], "testblob", shape=[1, 2, 3, 4], value=1.0)
    assert workspace.RunOperatorOnce(op) is True
    assert workspace.HasBlob("testblob") and not workspace.HasBlob("nonexisting")
    assert workspace.Blobs() == ["testblob"]
    np.testing.assert_array_equal(workspace.FetchBlob("testblob"), np.ones((1, 2, 3, 4), np.float32))


def test_run_net_once_returns_true_and_create_run_net():
    net = core.Net("test-run-net")
    net.ConstantFill([], "testblob", shape=[1, 2, 3, 4], value=2.0)
    assert workspace.RunNetOnce(net) is True
    assert workspace.RunNetOnce(net.Proto()) is True
    assert workspace.CreateNet(net) is True
    assert workspace.RunNet(net.Proto().name) is True
    assert workspace.RunNet(net, num_iter=3) is True  # a Net object, as resnet50_trainer passes it
    assert workspace.Nets() == [net.Name()]
    with pytest.raises(an.NetDefinitionError, match="already exists"):
        workspace.CreateNet(net)
    assert workspace.CreateNet(net, overwrite=True) is True


def test_run_net_allow_fail():
    net = core.Net("failing")
    workspace.FeedBlob("three", np.arange(3, dtype=np.float32))
    net.Split("three", ["half_a", "half_b"], axis=0)
    workspace.CreateNet(net)
    assert workspace.RunNet(net, allow_fail=True) is False
    with pytest.raises(an.AsyncNetError):
        workspace.RunNet(net)


def test_feed_copies_and_fetch_copies():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert workspace.FeedBlob("x", x) is True
    x[0, 0] = 100.0  # Caffe2 copied at feed: the blob is unchanged
    got = workspace.FetchBlob("x")
    assert got[0, 0] == 0.0
    got[0, 1] = -5.0  # and copied at fetch
    assert workspace.FetchBlob("x")[0, 1] == 1.0


@pytest.mark.parametrize(
    "dtype", [np.float32, np.float64, np.int32, np.int64, np.bool_, np.uint8, np.int8, np.int16, np.uint16, np.float16]
)
def test_feed_fetch_types(dtype):
    x = (np.arange(12).reshape(3, 4) % 3).astype(dtype)
    workspace.FeedBlob("x", x)
    got = workspace.FetchBlob("x")
    assert got.dtype == x.dtype and got.shape == x.shape
    np.testing.assert_array_equal(got, x)


def test_feed_zero_dim_strings_and_blob_reference():
    workspace.FeedBlob(core.BlobReference("z"), np.array(3.5, np.float32))
    assert workspace.FetchBlob("z").shape == ()
    workspace.FeedBlob("s", np.array(["ab", "cde"]))
    got = workspace.FetchBlob(core.BlobReference("s"))
    assert got.dtype == object and list(got) == [b"ab", b"cde"]  # Caffe2's std::string elements
    workspace.FeedBlob("plain", "a plain string")
    assert workspace.FetchBlob("plain") == b"a plain string"
    assert workspace.FetchBlobs(["z", "plain"])[1] == b"a plain string"
    workspace.FeedBlob("raw", b"\x00\x01 bytes")
    assert workspace.FetchBlob("raw") == b"\x00\x01 bytes"
    workspace.FeedBlob("u", "\u00e9t\u00e9")
    assert workspace.FetchBlob("u") == "\u00e9t\u00e9".encode()


def test_feed_tensor_proto():
    proto = utils.NumpyArrayToCaffe2Tensor(np.array([[1, 2], [3, 4]], np.int32))
    workspace.FeedBlob("t", proto)
    np.testing.assert_array_equal(workspace.FetchBlob("t"), [[1, 2], [3, 4]])


def test_unsupported_dtype_is_refused_naming_blob_and_dtype():
    with pytest.raises(TypeError, match=r"FeedBlob\('c'\).*complex128"):
        workspace.FeedBlob("c", np.ones(2, np.complex128))
    with pytest.raises(TypeError, match=r"FeedBlob\('lst'\).*list"):
        workspace.FeedBlob("lst", [1, 2, 3])
    assert not workspace.HasBlob("c") and not workspace.HasBlob("lst")


def test_fetch_missing_blob_is_both_keyerror_and_runtimeerror():
    with pytest.raises(RuntimeError):
        workspace.FetchBlob("nope")
    with pytest.raises(KeyError):
        workspace.FetchBlob("nope")


def test_blob_dict_view():
    workspace.blobs["a"] = np.ones(3, np.float32)
    assert "a" in workspace.blobs and len(workspace.blobs) == 1 and list(workspace.blobs) == ["a"]
    np.testing.assert_array_equal(workspace.blobs["a"], np.ones(3))


def test_named_workspaces():
    workspace.FeedBlob("in_default", np.ones(1, np.float32))
    with pytest.raises(RuntimeError, match="does not exist"):
        workspace.SwitchWorkspace("never_made")
    workspace.SwitchWorkspace("test", True)
    assert workspace.CurrentWorkspace() == "test"
    assert workspace.Blobs() == []
    workspace.FeedBlob("in_test", np.ones(1, np.float32))
    assert "test" in workspace.Workspaces() and "default" in workspace.Workspaces()
    workspace.SwitchWorkspace("default")
    assert workspace.Blobs() == ["in_default"]
    with workspace.WorkspaceGuard("test"):
        assert workspace.Blobs() == ["in_test"]
        assert workspace.ResetWorkspace() is True
        assert workspace.Blobs() == []
    assert workspace.CurrentWorkspace() == "default"


def test_reset_workspace_drops_nets_and_blobs():
    net = core.Net("to_reset")
    net.ConstantFill([], "b", shape=[1], value=1.0)
    workspace.CreateNet(net)
    workspace.RunNet(net)
    assert workspace.ResetWorkspace() is True
    assert workspace.Blobs() == [] and workspace.Nets() == []


def _counting_plan(num_iter):
    init = core.Net("init")
    init.ConstantFill([], "counter", shape=[1], value=0.0)
    init.ConstantFill([], "one", shape=[1], value=1.0)
    body = core.Net("body")
    body.Add(["counter", "one"], "counter")
    plan = core.Plan("count_plan")
    plan.AddStep(core.ExecutionStep("init", init))
    plan.AddStep(core.ExecutionStep("loop", body, num_iter=num_iter))
    return plan


def test_run_plan():
    plan = _counting_plan(7)
    assert [n.name for n in plan.Proto().network] == [n.Name() for n in plan.Nets()]
    assert workspace.RunPlan(plan) is True
    np.testing.assert_array_equal(workspace.FetchBlob("counter"), [7.0])


def test_run_plan_in_background():
    handle = workspace.RunPlanInBackground(_counting_plan(5))
    handle.wait(30)
    assert handle.is_done() and handle.is_succeeded()
    np.testing.assert_array_equal(workspace.FetchBlob("counter"), [5.0])


def test_plan_from_a_bare_step_and_should_stop_blob():
    init = core.Net("stop_init")
    init.ConstantFill([], "n", shape=[1], value=0.0)
    init.ConstantFill([], "step", shape=[1], value=1.0)
    init.ConstantFill([], "limit", shape=[1], value=4.0)
    body = core.Net("stop_body")
    body.Add(["n", "step"], "n")
    body.GE(["n", "limit"], "stop")
    workspace.RunNetOnce(init)
    step = core.execution_step("until_four", [body], should_stop_blob="stop")
    assert workspace.RunPlan(step) is True
    np.testing.assert_array_equal(workspace.FetchBlob("n"), [4.0])


def test_global_init_and_registered_operators():
    assert workspace.GlobalInit(["caffe2", "--caffe2_log_level=0"]) is None
    ops = workspace.RegisteredOperators()
    assert "FC" in ops and "Relu" in ops


def test_unknown_argument_is_dropped_at_the_boundary(caplog):
    net = core.Net("lenient_conv")
    net.Relu("x", "y", use_cudnn=True, cudnn_exhaustive_search=False, ws_nbytes_limit=64 * 1024 * 1024)
    workspace.FeedBlob("x", np.array([-1.0, 1.0], np.float32))
    with caplog.at_level("WARNING", logger="caffe2"):
        assert workspace.RunNetOnce(net) is True
    np.testing.assert_array_equal(workspace.FetchBlob("y"), [0.0, 1.0])
    assert [a.name for a in net.Proto().op[0].arg] == ["use_cudnn", "cudnn_exhaustive_search", "ws_nbytes_limit"]


def test_device_option_cuda_feed_without_cuda_is_a_clear_error():
    if workspace.NumCudaDevices():
        pytest.skip("a CUDA device is present")
    with pytest.raises(an.AsyncNetError):
        workspace.FeedBlob("g", np.ones(2, np.float32), core.DeviceOption(caffe2_pb2.CUDA, 0))


def test_feeding_a_cpu_torch_tensor_gives_a_numpy_copy():
    torch = pytest.importorskip("torch")
    t = torch.arange(4, dtype=torch.float32)
    workspace.FeedBlob("t", t)
    t[0] = 9.0
    got = workspace.FetchBlob("t")
    assert isinstance(got, np.ndarray) and got[0] == 0.0
    workspace.FeedBlob("w", np.ones(4, np.float32))
    net = core.Net("mixed")
    net.Add(["t", "w"], "s")
    workspace.RunNetOnce(net)  # one library: fed torch CPU tensors are Caffe2 CPU tensors too
    np.testing.assert_array_equal(workspace.FetchBlob("s"), [1, 2, 3, 4])


def test_integer_adagrad_moment_is_taken_as_float():
    workspace.FeedBlob("w", np.ones((3, 2), np.float32))
    workspace.FeedBlob("h", np.full((3, 2), 0))  # int64 zeros, as dlrm feeds them
    workspace.FeedBlob("idx", np.array([0, 2], np.int64))
    workspace.FeedBlob("g", np.ones((2, 2), np.float32))
    workspace.FeedBlob("lr", np.array([-0.5], np.float32))
    net = core.Net("int_moment")
    net.SparseAdagrad(["w", "h", "idx", "g", "lr"], ["w", "h"], epsilon=1e-8)
    workspace.CreateNet(net)
    workspace.RunNet(net)
    np.testing.assert_allclose(workspace.FetchBlob("h"), [[1, 1], [0, 0], [1, 1]])
    np.testing.assert_allclose(workspace.FetchBlob("w"), [[0.5, 0.5], [1, 1], [0.5, 0.5]], rtol=1e-6)


def test_cuda_and_cudnn_versions_are_zero_as_in_caffe2_without_cuda_support():
    assert workspace.has_cuda_support is False
    assert workspace.GetCUDAVersion() == 0 and workspace.GetCuDNNVersion() == 0
