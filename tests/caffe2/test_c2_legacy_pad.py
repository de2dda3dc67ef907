"""Caffe2's ``legacy_pad`` on Conv and the pools (LegacyPadding in caffe2_legacy.proto: NOTSET,
VALID, SAME, CAFFE_LEGACY_POOLING), checked against PyTorch (``ceil_mode`` pooling, explicit
pads), TensorFlow's ``SAME`` padding where TensorFlow is installed, and Caffe2's own SqueezeNet
predict net (``assets/squeeze_predict_net.pb``, from Caffe2's test assets) against SqueezeNet 1.1
written in PyTorch."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import asyncnet as an
from asyncnet.autodiff import add_gradient_ops
from asyncnet.ops.conv import CAFFE_LEGACY_POOLING, SAME, VALID, legacy_size_and_pad
from caffe2.proto import caffe2_pb2
from caffe2.python import workspace

torch = pytest.importorskip("torch")
F = torch.nn.functional
pytestmark = pytest.mark.timeout(300)
ASSET = Path(__file__).parent / "assets" / "squeeze_predict_net.pb"


def _run(op, feeds, fetch="y", grad=False, **args):
    """Run one ``op``; with ``grad``, also d(mean of y)/d(each input), fetched as ``"d" + name``."""
    ws = an.Workspace()
    for k, v in feeds.items():
        ws.feed(k, v)
    net = an.Net("legacy")
    getattr(net, op)(list(feeds), fetch, **args)
    if grad:
        net.AveragedLoss(fetch, "loss")
        names = add_gradient_ops(net, "loss", wrt=[k for k in feeds if k != "b"])
        for k, g in names.items():
            net.Copy(str(g), "d" + k)
    ws.run_net_once(net)
    return ws


def _torch_ceil_out(size, k, s, p):
    """PyTorch's ceil_mode output size (pooling_output_shape in ATen), written out."""
    out = math.ceil((size + 2 * p - k) / s) + 1
    if (out - 1) * s >= size + p:
        out -= 1
    return out


@pytest.mark.parametrize("size", range(3, 20))
@pytest.mark.parametrize(
    "k,s,p", [(3, 2, 0), (2, 2, 0), (3, 2, 1), (3, 3, 1), (5, 3, 2), (2, 1, 0), (3, 1, 1), (4, 3, 1)]
)
def test_caffe_legacy_pooling_size_is_torch_ceil_mode(size, k, s, p):
    if size + 2 * p < k:
        return
    head, tail, out = legacy_size_and_pad(CAFFE_LEGACY_POOLING, size, s, k, 1, p)
    assert (head, out) == (p, _torch_ceil_out(size, k, s, p))
    assert (size + head + tail - k) // s + 1 == out  # the derived tail pad gives that size


@pytest.mark.parametrize("size", range(1, 16))
@pytest.mark.parametrize("k,s", [(1, 1), (3, 1), (3, 2), (2, 2), (5, 2), (4, 3)])
def test_same_and_valid_sizes(size, k, s):
    if k <= size:
        assert legacy_size_and_pad(VALID, size, s, k, 1, 0) == (0, 0, (size - k) // s + 1)
    if k >= s:
        head, tail, out = legacy_size_and_pad(SAME, size, s, k, 1, 0)
        assert out == math.ceil(size / s) and tail - head in (0, 1)


@pytest.mark.parametrize(
    "shape,k,s,p",
    [
        ((2, 3, 16, 16), 3, 2, 0),
        ((1, 2, 13, 10), 3, 2, 1),
        ((2, 1, 9, 12), 2, 2, 0),
        ((1, 4, 7, 7), 3, 3, 1),
        ((1, 2, 6, 11), 4, 3, 1),
    ],
)
def test_legacy_max_pool_and_its_gradient_match_torch_ceil_mode(shape, k, s, p):
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    ws = _run("MaxPool", {"x": x}, grad=True, kernel=k, stride=s, pad=p, legacy_pad=3)
    xt = torch.tensor(x, requires_grad=True)
    yt = F.max_pool2d(xt, k, s, p, ceil_mode=True)
    yt.mean().backward()
    np.testing.assert_allclose(ws.fetch("y"), yt.detach().numpy(), atol=1e-5)
    np.testing.assert_allclose(ws.fetch("dx"), xt.grad.numpy(), atol=1e-5)


@pytest.mark.parametrize("shape,k,s,p", [((2, 3, 16, 16), 3, 2, 0), ((1, 2, 13, 10), 3, 2, 1), ((1, 4, 7, 7), 3, 3, 1)])
def test_legacy_average_pool_matches_torch_ceil_mode(shape, k, s, p):
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    ws = _run("AveragePool", {"x": x}, grad=True, kernel=k, stride=s, pad=p, legacy_pad=3)
    xt = torch.tensor(x, requires_grad=True)
    yt = F.avg_pool2d(xt, k, s, p, ceil_mode=True, count_include_pad=False)
    yt.mean().backward()
    np.testing.assert_allclose(ws.fetch("y"), yt.detach().numpy(), atol=1e-5)
    np.testing.assert_allclose(ws.fetch("dx"), xt.grad.numpy(), atol=1e-5)


@pytest.mark.parametrize("hw,k,s", [((7, 7), 3, 2), ((8, 5), 3, 2), ((6, 9), 2, 2), ((5, 5), 4, 1), ((9, 9), 5, 3)])
def test_same_conv_pads_the_tail_more_and_its_gradient(hw, k, s):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3, *hw)).astype(np.float32)
    w = rng.standard_normal((4, 3, k, k)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    ws = _run("Conv", {"x": x, "w": w, "b": b}, grad=True, stride=s, legacy_pad=2)
    pads = [legacy_size_and_pad(SAME, n, s, k, 1, 0) for n in hw]
    assert ws.fetch("y").shape == (2, 4, *(math.ceil(n / s) for n in hw))
    xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    (t, bt, _), (l, r, _) = pads
    yt = F.conv2d(F.pad(xt, (l, r, t, bt)), wt, torch.tensor(b), stride=s)
    yt.mean().backward()
    np.testing.assert_allclose(ws.fetch("y"), yt.detach().numpy(), atol=1e-4)
    np.testing.assert_allclose(ws.fetch("dx"), xt.grad.numpy(), atol=1e-4)
    np.testing.assert_allclose(ws.fetch("dw"), wt.grad.numpy(), atol=1e-4)


def test_same_matches_tensorflow():
    tf = pytest.importorskip("tensorflow")
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 2, 8, 7)).astype(np.float32)
    w = rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
    ws = _run("Conv", {"x": x, "w": w}, stride=2, legacy_pad=2)
    ref = tf.nn.conv2d(x.transpose(0, 2, 3, 1), w.transpose(2, 3, 1, 0), strides=2, padding="SAME").numpy()
    np.testing.assert_allclose(ws.fetch("y"), ref.transpose(0, 3, 1, 2), atol=1e-4)
    ws = _run("MaxPool", {"x": x}, kernel=3, stride=2, legacy_pad=2)
    ref = tf.nn.max_pool2d(x.transpose(0, 2, 3, 1), 3, 2, padding="SAME").numpy()
    np.testing.assert_allclose(ws.fetch("y"), ref.transpose(0, 3, 1, 2), atol=1e-6)


def test_valid_ignores_nothing_and_refuses_pads():
    x = np.random.default_rng(4).standard_normal((1, 1, 7, 7)).astype(np.float32)
    np.testing.assert_array_equal(
        _run("MaxPool", {"x": x}, kernel=3, stride=2, legacy_pad=1).fetch("y"),
        _run("MaxPool", {"x": x}, kernel=3, stride=2).fetch("y"),
    )
    for mode in (1, 2):
        with pytest.raises(an.OperatorError, match="takes no pads"):
            _run("MaxPool", {"x": x}, kernel=3, stride=2, pad=1, legacy_pad=mode)
    with pytest.raises(an.NetDefinitionError, match="legacy_pad"):
        _run("MaxPool", {"x": x}, kernel=3, legacy_pad=4)


def test_global_pooling_wins_over_legacy_pad():
    x = np.random.default_rng(5).standard_normal((2, 3, 5, 6)).astype(np.float32)
    y = _run("AveragePool", {"x": x}, global_pooling=1, legacy_pad=3).fetch("y")
    np.testing.assert_allclose(y, x.mean(axis=(2, 3), keepdims=True), atol=1e-6)


def test_nhwc_and_torch_tensors_take_legacy_pad():
    x = np.random.default_rng(6).standard_normal((1, 9, 9, 2)).astype(np.float32)  # NHWC
    ref = F.max_pool2d(torch.tensor(x).permute(0, 3, 1, 2), 3, 2, 1, ceil_mode=True).permute(0, 2, 3, 1).numpy()
    np.testing.assert_allclose(
        _run("MaxPool", {"x": x}, kernel=3, stride=2, pad=1, order="NHWC", legacy_pad=3).fetch("y"), ref
    )
    ws = _run("MaxPool", {"x": torch.tensor(x)}, kernel=3, stride=2, pad=1, order="NHWC", legacy_pad=3)
    np.testing.assert_allclose(np.asarray(ws.fetch("y")), ref)


# -- Caffe2's SqueezeNet (v1.1) predict net, as Caffe2's test assets ship it ------------------------------
_FIRES = {
    2: (64, 16, 64),
    3: (128, 16, 64),
    4: (128, 32, 128),
    5: (256, 32, 128),
    6: (256, 48, 192),
    7: (384, 48, 192),
    8: (384, 64, 256),
    9: (512, 64, 256),
}


def _squeezenet_weights(rng, classes=1000):
    def conv(out, inp, k):
        return (
            (rng.standard_normal((out, inp, k, k)) * math.sqrt(2.0 / (inp * k * k))).astype(np.float32),
            (rng.standard_normal(out) * 0.1).astype(np.float32),
        )

    shapes = {"conv1": (64, 3, 3), "conv10": (classes, 512, 1)}
    for n, (cin, sq, ex) in _FIRES.items():
        shapes.update(
            {f"fire{n}/squeeze1x1": (sq, cin, 1), f"fire{n}/expand1x1": (ex, sq, 1), f"fire{n}/expand3x3": (ex, sq, 3)}
        )
    out = {}
    for name, shape in shapes.items():
        out[name + "_w"], out[name + "_b"] = conv(*shape)
    return out


def _squeezenet_torch(x, wb):
    """SqueezeNet 1.1 (Iandola et al.; torchvision's squeezenet1_1 layout) in PyTorch, eval mode."""

    def conv(t, name, **kw):
        return F.relu(F.conv2d(t, torch.tensor(wb[name + "_w"]), torch.tensor(wb[name + "_b"]), **kw))

    def fire(t, n):
        s = conv(t, f"fire{n}/squeeze1x1")
        return torch.cat([conv(s, f"fire{n}/expand1x1"), conv(s, f"fire{n}/expand3x3", padding=1)], 1)

    t = conv(torch.tensor(x), "conv1", stride=2)
    t = F.max_pool2d(t, 3, 2, ceil_mode=True)
    t = fire(fire(t, 2), 3)
    t = F.max_pool2d(t, 3, 2, ceil_mode=True)
    t = fire(fire(t, 4), 5)
    t = F.max_pool2d(t, 3, 2, ceil_mode=True)
    for n in (6, 7, 8, 9):
        t = fire(t, n)
    t = conv(t, "conv10")
    return torch.softmax(F.adaptive_avg_pool2d(t, 1), 1).numpy()


@pytest.mark.parametrize("hw", [(67, 67), (224, 224)])
def test_caffe2_squeezenet_predict_net_matches_torch(hw):
    pb = caffe2_pb2.NetDef()
    pb.ParseFromString(ASSET.read_bytes())
    assert [op.type for op in pb.op if op.type == "MaxPool"] and all(
        a.i == 3 for op in pb.op for a in op.arg if a.name == "legacy_pad"
    )
    wb = _squeezenet_weights(np.random.default_rng(7))
    assert set(wb) == set(pb.external_input) - {"data"}
    x = np.random.default_rng(8).standard_normal((2, 3, *hw)).astype(np.float32)
    for name, value in wb.items():
        workspace.FeedBlob(name, value)
    workspace.FeedBlob("data", x)
    assert workspace.CreateNet(pb)
    assert workspace.RunNet(pb.name)
    got = workspace.FetchBlob("softmaxout")
    ref = _squeezenet_torch(x, wb)
    assert got.shape == ref.shape == (2, 1000, 1, 1)
    np.testing.assert_allclose(got, ref, atol=1e-5, rtol=0)
    # the ceil-mode pools did produce the extra row and column floor-mode pooling would drop
    pool1 = workspace.FetchBlob("pool1")
    conv1 = (hw[0] - 3) // 2 + 1
    assert pool1.shape[2] == _torch_ceil_out(conv1, 3, 2, 0)


def test_onnx_export_refuses_input_dependent_legacy_pads():
    pytest.importorskip("onnx")
    from asyncnet.interop.onnx import OnnxExportError, export

    net = an.Net("p")
    net.MaxPool("x", "y", kernel=3, stride=2, legacy_pad=3)
    with pytest.raises(OnnxExportError, match="legacy_pad"):
        export((an.Net("init").to_def(), net.to_def()), None, {"x": np.zeros((1, 1, 7, 7), np.float32)}, ["y"])


def test_same_on_1d_inputs_and_torch_tensors():
    rng = np.random.default_rng(9)
    x = rng.standard_normal((2, 3, 9)).astype(np.float32)  # Caffe2's 1-D form [N, C, L]
    w = rng.standard_normal((4, 3, 4)).astype(np.float32)
    head, tail, out = legacy_size_and_pad(SAME, 9, 2, 4, 1, 0)
    ref = F.conv1d(F.pad(torch.tensor(x), (head, tail)), torch.tensor(w), stride=2).numpy()
    assert ref.shape[-1] == out == 5
    np.testing.assert_allclose(_run("Conv", {"x": x, "w": w}, stride=2, legacy_pad=2).fetch("y"), ref, atol=1e-5)
    x4 = rng.standard_normal((1, 3, 8, 7)).astype(np.float32)
    w4 = rng.standard_normal((2, 3, 3, 3)).astype(np.float32)
    want = _run("Conv", {"x": x4, "w": w4}, stride=2, legacy_pad=2).fetch("y")
    got = _run("Conv", {"x": torch.tensor(x4), "w": torch.tensor(w4)}, stride=2, legacy_pad=2).fetch("y")
    np.testing.assert_allclose(np.asarray(got), want, atol=1e-5)
