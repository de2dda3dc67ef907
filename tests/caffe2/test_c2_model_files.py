"""A Caffe2 model as it ships (init_net.pb with GivenTensorFill weights, predict_net.pb): it loads,
runs, matches the same LeNet in PyTorch within 1e-5, and serializes back to the same bytes."""

from __future__ import annotations

import numpy as np
import pytest

from caffe2.convert import from_asyncnet, read_netdef, to_asyncnet
from caffe2.proto import caffe2_pb2
from caffe2.python import core, utils, workspace

torch = pytest.importorskip("torch")
F = torch.nn.functional
pytestmark = pytest.mark.timeout(120)


def _weights(rng):
    def w(*shape):
        return (rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32)

    return {
        "conv1_w": w(6, 1, 5, 5),
        "conv1_b": w(6, 1)[:, 0],
        "conv2_w": w(16, 6, 5, 5),
        "conv2_b": w(16, 1)[:, 0],
        "fc3_w": w(32, 16 * 4 * 4),
        "fc3_b": w(32, 1)[:, 0],
        "pred_w": w(10, 32),
        "pred_b": w(10, 1)[:, 0],
    }


def _pair(weights):
    init = caffe2_pb2.NetDef(name="lenet_init")
    for name, value in weights.items():
        init.op.append(core.CreateOperator("GivenTensorFill", [], [name], shape=list(value.shape), values=value))
    pred = caffe2_pb2.NetDef(name="lenet_predict", external_input=["data", *weights], external_output=["softmax"])
    ops = [
        ("Conv", ["data", "conv1_w", "conv1_b"], ["conv1"], {"kernel": 5, "order": "NCHW"}),
        ("MaxPool", ["conv1"], ["pool1"], {"kernel": 2, "stride": 2}),
        ("Conv", ["pool1", "conv2_w", "conv2_b"], ["conv2"], {"kernel": 5}),
        ("MaxPool", ["conv2"], ["pool2"], {"kernel": 2, "stride": 2}),
        ("FC", ["pool2", "fc3_w", "fc3_b"], ["fc3"], {}),
        ("Relu", ["fc3"], ["fc3"], {}),
        ("FC", ["fc3", "pred_w", "pred_b"], ["pred"], {}),
        ("Softmax", ["pred"], ["softmax"], {}),
    ]
    for t, i, o, a in ops:
        pred.op.append(core.CreateOperator(t, i, o, **a))
    return init, pred


def _torch_lenet(x, w):
    t = {k: torch.from_numpy(v) for k, v in w.items()}
    h = F.max_pool2d(F.conv2d(torch.from_numpy(x), t["conv1_w"], t["conv1_b"]), 2)
    h = F.max_pool2d(F.conv2d(h, t["conv2_w"], t["conv2_b"]), 2)
    h = F.relu(F.linear(h.reshape(h.shape[0], -1), t["fc3_w"], t["fc3_b"]))
    return F.softmax(F.linear(h, t["pred_w"], t["pred_b"]), dim=1).numpy()


def test_lenet_pair_loads_runs_matches_torch_and_round_trips(tmp_path):
    rng = np.random.default_rng(7)
    weights = _weights(rng)
    init, pred = _pair(weights)
    (tmp_path / "init_net.pb").write_bytes(init.SerializeToString())
    (tmp_path / "predict_net.pb").write_bytes(pred.SerializeToString())
    init_pb, pred_pb = read_netdef(tmp_path / "init_net.pb"), read_netdef(tmp_path / "predict_net.pb")
    for pb, path in ((init_pb, "init_net.pb"), (pred_pb, "predict_net.pb")):
        assert from_asyncnet(to_asyncnet(pb)).SerializeToString() == (tmp_path / path).read_bytes()
    x = rng.random((3, 1, 28, 28)).astype(np.float32)
    workspace.RunNetOnce(init_pb)
    workspace.FeedBlob("data", x)
    workspace.RunNetOnce(pred_pb)
    np.testing.assert_allclose(workspace.FetchBlob("softmax"), _torch_lenet(x, weights), rtol=1e-5, atol=1e-6)


def test_given_tensor_fill_weights_are_the_fed_ones(tmp_path):
    weights = _weights(np.random.default_rng(8))
    init, _ = _pair(weights)
    workspace.RunNetOnce(init)
    for name, value in weights.items():
        np.testing.assert_array_equal(workspace.FetchBlob(name), value)
    back = utils.Caffe2TensorToNumpyArray(utils.NumpyArrayToCaffe2Tensor(weights["conv1_w"]))
    np.testing.assert_array_equal(back, weights["conv1_w"])
