"""caffe2.python.onnx: a torch model exported to ONNX becomes a Caffe2 init/predict .pb pair that
runs through caffe2.python.workspace and `asyncnet run`, matching onnxruntime; and back to ONNX."""

import doctest
import importlib
import os
import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")

from caffe2.convert import from_asyncnet, read_netdef, to_asyncnet  # noqa: E402
from caffe2.proto import caffe2_pb2  # noqa: E402
from caffe2.python import core, workspace  # noqa: E402
from caffe2.python.onnx import backend, frontend  # noqa: E402

pytestmark = pytest.mark.timeout(300)
SRC = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "src")


class _Net(torch.nn.Module):
    """Conv, batch norm, pooling, a residual add and a linear head: the ops of a small CNN."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.fc = torch.nn.Linear(8 * 4 * 4, 5)

    def forward(self, x):
        h = torch.relu(self.bn(self.conv1(x)))
        h = torch.max_pool2d(h, 2)
        h = torch.relu(self.conv2(h) + h)
        return torch.softmax(self.fc(torch.flatten(h, 1)), dim=1)


@pytest.fixture(scope="module")
def onnx_model(tmp_path_factory):
    torch.manual_seed(0)
    net = _Net().eval()
    with torch.no_grad():  # batch-norm statistics that are not the identity
        net.bn.running_mean.uniform_(-0.5, 0.5)
        net.bn.running_var.uniform_(0.5, 2.0)
    path = tmp_path_factory.mktemp("onnx") / "net.onnx"
    torch.onnx.export(
        net,
        (torch.zeros(2, 3, 8, 8),),
        str(path),
        input_names=["data"],
        output_names=["prob"],
        opset_version=17,
        dynamo=False,
    )
    return onnx.load(str(path))


def _x(seed=1):
    return np.random.default_rng(seed).standard_normal((2, 3, 8, 8)).astype(np.float32)


def _ort(model, x):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"data": x})[0]


def test_pb_pair_from_onnx_runs_in_workspace_and_matches_onnxruntime(onnx_model, tmp_path):
    init, pred = backend.Caffe2Backend.onnx_graph_to_caffe2_net(onnx_model, device="CPU")
    assert isinstance(init, caffe2_pb2.NetDef) and isinstance(pred, caffe2_pb2.NetDef)
    assert {op.type for op in init.op} <= {"GivenTensorFill", "GivenTensorInt64Fill"}
    assert init.name.endswith("_init") and pred.name.endswith("_predict")
    assert list(pred.external_output) == ["prob"] and "data" in pred.external_input
    (tmp_path / "init_net.pb").write_bytes(init.SerializeToString())
    (tmp_path / "predict_net.pb").write_bytes(pred.SerializeToString())
    init_pb, pred_pb = read_netdef(tmp_path / "init_net.pb"), read_netdef(tmp_path / "predict_net.pb")
    assert from_asyncnet(to_asyncnet(pred_pb)).SerializeToString() == (tmp_path / "predict_net.pb").read_bytes()
    x = _x()
    workspace.SwitchWorkspace("onnx_pb_pair", True)
    try:
        assert workspace.RunNetOnce(init_pb)
        workspace.FeedBlob("data", x)
        assert workspace.CreateNet(pred_pb)
        assert workspace.RunNet(pred_pb.name)
        got = workspace.FetchBlob("prob")
    finally:
        workspace.ResetWorkspace()
        workspace.SwitchWorkspace("default")
    np.testing.assert_allclose(got, _ort(onnx_model, x), rtol=0, atol=1e-5)


def test_pb_pair_runs_with_asyncnet_cli(onnx_model, tmp_path):
    init, pred = backend.Caffe2Backend.onnx_graph_to_caffe2_net(onnx_model)
    (tmp_path / "init_net.pb").write_bytes(init.SerializeToString())
    (tmp_path / "predict_net.pb").write_bytes(pred.SerializeToString())
    x = _x(2)
    np.save(tmp_path / "x.npy", x)
    env = {**os.environ, "PYTHONPATH": os.path.abspath(SRC)}
    cmd = [sys.executable, "-m", "asyncnet", "run", str(tmp_path / "predict_net.pb"), "--init",
           str(tmp_path / "init_net.pb"), "--feed", f"data={tmp_path / 'x.npy'}", "--fetch", "prob",
           "--save", str(tmp_path / "out.npz")]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env)
    assert done.returncode == 0, done.stderr
    np.testing.assert_allclose(np.load(tmp_path / "out.npz")["prob"], _ort(onnx_model, x), rtol=0, atol=1e-5)


def test_cli_init_refused_for_onnx_model(onnx_model, tmp_path):
    onnx.save(onnx_model, str(tmp_path / "m.onnx"))
    env = {**os.environ, "PYTHONPATH": os.path.abspath(SRC)}
    cmd = [sys.executable, "-m", "asyncnet", "run", str(tmp_path / "m.onnx"), "--init", str(tmp_path / "m.onnx")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env)
    assert done.returncode != 0 and "Traceback" not in done.stderr and "--init" in done.stderr


def test_prepare_and_run_model(onnx_model):
    x = _x(3)
    rep = backend.prepare(onnx_model, device="CPU")
    assert rep.uninitialized == ["data"]
    before = workspace.CurrentWorkspace()
    out = rep.run([x])
    assert workspace.CurrentWorkspace() == before and not workspace.HasBlob("prob")
    np.testing.assert_allclose(out.prob, _ort(onnx_model, x), rtol=0, atol=1e-5)
    np.testing.assert_allclose(rep.run({"data": x})[0], out.prob, rtol=0, atol=0)
    np.testing.assert_allclose(backend.run_model(onnx_model, [x])[0], out.prob, rtol=0, atol=0)
    with pytest.raises(RuntimeError, match="Expected 1 values"):
        rep.run([x, x])


def test_run_node_matches_numpy():
    node = onnx.helper.make_node("Gemm", ["a", "b", "c"], ["y"], alpha=0.5, transB=1)
    rng = np.random.default_rng(4)
    a, b, c = (rng.standard_normal(s).astype(np.float32) for s in ((3, 4), (2, 4), (2,)))
    (y,) = backend.run_node(node, [a, b, c])
    np.testing.assert_allclose(y, 0.5 * a @ b.T + c, rtol=1e-6, atol=1e-6)


def test_tensor_filling_ops_follow_caffe2_types():
    cases = {
        np.float32: "GivenTensorFill",
        np.float64: "GivenTensorDoubleFill",
        np.int64: "GivenTensorInt64Fill",
        np.int32: "GivenTensorIntFill",
        np.int8: "GivenTensorIntFill",
        np.bool_: "GivenTensorBoolFill",
    }
    for dtype, op_type in cases.items():
        value = (np.arange(6) % 2 if dtype is np.bool_ else np.arange(6) - 2).astype(dtype).reshape(2, 3)
        op = backend.Caffe2Backend._create_tensor_filling_op(onnx.numpy_helper.from_array(value, "t"))
        assert op.type == op_type and list(op.output) == ["t"]
        assert [a.name for a in op.arg] == ["values", "shape"] and list(op.arg[1].ints) == [2, 3]
        workspace.RunOperatorOnce(op)
        got = workspace.FetchBlob("t")
        assert got.dtype == (np.int32 if dtype is np.int8 else dtype) and np.array_equal(got, value)
    workspace.ResetWorkspace()


def test_supports_device():
    assert backend.supports_device("CPU")
    assert backend.supports_device("CUDA") == (torch.cuda.is_available() and torch.cuda.device_count() > 0)


def _cnn_pair():
    """A Caffe2 CNN as Caffe2 users wrote them: GivenTensorFill weights, Conv, Relu, MaxPool, FC, Softmax."""
    rng = np.random.default_rng(7)
    weights = {
        "conv_w": rng.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.3,
        "conv_b": rng.standard_normal(4).astype(np.float32) * 0.1,
        "fc_w": rng.standard_normal((5, 4 * 4 * 4)).astype(np.float32) * 0.2,
        "fc_b": rng.standard_normal(5).astype(np.float32) * 0.1,
    }
    init = caffe2_pb2.NetDef(name="cnn_init")
    for name, value in weights.items():
        init.op.append(core.CreateOperator("GivenTensorFill", [], [name], shape=list(value.shape), values=value))
    pred = core.Net("cnn_predict")
    pred.Proto().external_input.extend(["data", *weights])
    h = pred.Conv(["data", "conv_w", "conv_b"], "conv", kernel=3, pad=1, order="NCHW")
    h = pred.MaxPool(pred.Relu(h, "relu"), "pool", kernel=2, stride=2)
    pred.Softmax(pred.FC([h, "fc_w", "fc_b"], "fc"), "prob")
    pred.Proto().external_output.append("prob")
    return init, pred.Proto()


def test_frontend_matches_caffe2_run():
    init, pred = _cnn_pair()
    x = _x(5)
    workspace.SwitchWorkspace("onnx_frontend", True)
    try:
        workspace.RunNetOnce(init)
        workspace.FeedBlob("data", x)
        workspace.RunNetOnce(pred)
        want = workspace.FetchBlob("prob")
    finally:
        workspace.ResetWorkspace()
        workspace.SwitchWorkspace("default")
    model = frontend.caffe2_net_to_onnx_model(pred, init, {"data": (onnx.TensorProto.FLOAT, [2, 3, 8, 8])})
    onnx.checker.check_model(model, full_check=True)
    assert model.graph.name == pred.name and [o.name for o in model.graph.output] == ["prob"]
    assert {"conv_b", "conv_w", "fc_b", "fc_w"} <= {i.name for i in model.graph.initializer}
    np.testing.assert_allclose(_ort(model, x), want, rtol=0, atol=1e-5)
    init2, pred2 = backend.Caffe2Backend.onnx_graph_to_caffe2_net(model)  # and back again
    np.testing.assert_allclose(backend.prepare(model).run(x).prob, want, rtol=0, atol=1e-5)
    assert [op.type for op in init2.op].count("GivenTensorFill") >= 4 and list(pred2.external_output) == ["prob"]


@pytest.mark.parametrize("optimize_case", ["cnn", "ops"])
def test_onnx_to_caffe2_and_back(onnx_model, optimize_case):
    """ONNX -> Caffe2 pair -> ONNX: onnxruntime gives the same outputs on both models."""
    if optimize_case == "cnn":
        model, feeds = onnx_model, {"data": _x(8)}
    else:  # ops the importer keeps as ONNX* ops or ONNXReference
        oh = onnx.helper
        nodes = [
            oh.make_node("Transpose", ["x"], ["t"], perm=[1, 0]),
            oh.make_node("Gemm", ["t", "w"], ["g"], alpha=0.5, transB=1),
            oh.make_node("Clip", ["g", "lo", "hi"], ["c"]),
            oh.make_node("ReduceMean", ["c"], ["r"], axes=[1], keepdims=1),
            oh.make_node("Sub", ["c", "r"], ["s"]),
            oh.make_node("Unsqueeze", ["s", "ax"], ["u"]),
            oh.make_node("Squeeze", ["u", "ax"], ["q"]),
            oh.make_node("LogSoftmax", ["q"], ["ls"], axis=1),
            oh.make_node("HardSigmoid", ["ls"], ["y"], alpha=0.3),
        ]
        rng = np.random.default_rng(9)
        inits = [
            onnx.numpy_helper.from_array(rng.standard_normal((5, 3)).astype(np.float32), "w"),
            onnx.numpy_helper.from_array(np.array(-0.5, np.float32), "lo"),
            onnx.numpy_helper.from_array(np.array(0.7, np.float32), "hi"),
            onnx.numpy_helper.from_array(np.array([0], np.int64), "ax"),
        ]
        graph = oh.make_graph(nodes, "ops", [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [3, 4])],
                              [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4, 5])], initializer=inits)  # fmt: skip
        model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
        feeds = {"x": rng.standard_normal((3, 4)).astype(np.float32)}
    init, pred = backend.Caffe2Backend.onnx_graph_to_caffe2_net(model)
    if optimize_case == "ops":
        types = {op.type for op in pred.op}
        assert "ONNXReference" in types and any(t.startswith("ONNX") and t != "ONNXReference" for t in types)
    value_info = {k: (onnx.helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape)) for k, v in feeds.items()}
    back = frontend.caffe2_net_to_onnx_model(pred, init, value_info)
    onnx.checker.check_model(back, full_check=True)

    def run(m):
        sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        return sess.run(None, feeds)[0]

    np.testing.assert_allclose(run(back), run(model), rtol=0, atol=1e-5)


def test_frontend_from_core_net_and_missing_value_info():
    init = core.Net("fe_init")
    init.GivenTensorFill([], "w", shape=[3, 2], values=[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    init.GivenTensorFill([], "b", shape=[3], values=[0.5, -0.5, 0.0])
    pred = core.Net("fe_pred")
    pred.Proto().external_input.extend(["x", "w", "b"])
    pred.Relu(pred.FC(["x", "w", "b"], "h"), "y")
    pred.Proto().external_output.append("y")
    model = frontend.Caffe2Frontend.caffe2_net_to_onnx_model(pred, init, {"x": (onnx.TensorProto.FLOAT, [4, 2])})
    x = np.random.default_rng(6).standard_normal((4, 2)).astype(np.float32)
    w = np.arange(1, 7, dtype=np.float32).reshape(3, 2)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], np.maximum(x @ w.T + [0.5, -0.5, 0], 0), atol=1e-6)
    graph = frontend.caffe2_net_to_onnx_graph(pred, init, {"x": (onnx.TensorProto.FLOAT, [4, 2])})
    assert isinstance(graph, onnx.GraphProto)
    with pytest.raises(RuntimeError, match="Could not find value info of inputs: x"):
        frontend.caffe2_net_to_onnx_model(pred, init, {})
    with pytest.raises(ValueError, match="name -> \\(type, shape\\)"):
        frontend.caffe2_net_to_onnx_model(pred, init, [("x", 1)])


@pytest.mark.parametrize(
    "name", ["caffe2.python.onnx.backend", "caffe2.python.onnx.frontend", "caffe2.python.onnx.workspace"]
)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
