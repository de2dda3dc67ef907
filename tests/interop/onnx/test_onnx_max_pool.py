"""ONNXMaxPool's separable kernel (numpy arrays and CPU torch tensors) against onnx's reference
evaluator over kernels, strides and symmetric or one-sided pads, with infinities, and against a
window-by-window loop with NaN (which propagates, as in torch's max pool; onnx's reference
evaluator skips it, the spec says nothing); the
Relu after an Inception block's Concat of convolutions moves into the convolutions."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
torch = pytest.importorskip("torch")
from onnx import TensorProto
from onnx import helper as oh
from onnx.reference import ReferenceEvaluator

import asyncnet as an
from asyncnet.interop.onnx import backend

pytestmark = pytest.mark.timeout(120)

KERNELS = [(1, 2), (2, 2), (3, 3), (2, 3), (3, 1), (5, 5)]
STRIDES = [(1, 1), (2, 2), (1, 2), (3, 1)]
PADS = [(0, 0, 0, 0), (1, 1, 1, 1), (0, 1, 1, 0), (1, 0, 0, 1), (2, 2, 2, 2)]


def _reference(x: np.ndarray, k: tuple, s: tuple, p: tuple) -> np.ndarray:
    node = oh.make_node("MaxPool", ["x"], ["y"], kernel_shape=list(k), strides=list(s), pads=[p[0], p[1], p[2], p[3]])
    return ReferenceEvaluator(node).run(None, {"x": x})[0]


def _windows(x: np.ndarray, k: tuple, s: tuple, p: tuple) -> np.ndarray:
    """Each window's np.max (NaN propagating), padding never winning: one window at a time."""
    xp = np.pad(x, ((0, 0), (0, 0), (p[0], p[2]), (p[1], p[3])), constant_values=-np.inf)
    oh, ow = (xp.shape[2] - k[0]) // s[0] + 1, (xp.shape[3] - k[1]) // s[1] + 1
    y = np.empty((*x.shape[:2], oh, ow), x.dtype)
    for i in range(oh):
        for j in range(ow):
            y[:, :, i, j] = xp[:, :, i * s[0] : i * s[0] + k[0], j * s[1] : j * s[1] + k[1]].max(axis=(2, 3))
    return y


def _ours(x: object, k: tuple, s: tuple, p: tuple) -> object:
    ws = an.Workspace()
    ws.feed("x", x)
    net = an.Net("m")
    net.ONNXMaxPool(["x"], "y", kernels=list(k), strides=list(s), pads=list(p))
    ws.run_net_once(net)
    return ws.fetch("y")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_max_pool_equals_the_reference_evaluator(dtype: type) -> None:
    g = np.random.default_rng(0)
    checked = 0
    for k, s, p in itertools.product(KERNELS, STRIDES, PADS):
        if max(p[0], p[2]) >= k[0] or max(p[1], p[3]) >= k[1]:
            continue  # ONNX: a pad is smaller than its kernel dim
        x = g.standard_normal((2, 3, 9, 8)).astype(dtype)
        x[1, 2, 4, 4], x[0, 1, 8, 7] = np.inf, -np.inf
        with_nan = x.copy()
        with_nan[0, 0, 0, 0] = with_nan[1, 1, 5, 3] = np.nan
        for inputs, want in ((x, _reference(x, k, s, p)), (with_nan, _windows(with_nan, k, s, p))):
            for got in (_ours(inputs, k, s, p), _ours(torch.from_numpy(inputs.copy()), k, s, p).numpy()):
                assert got.dtype == want.dtype and got.shape == want.shape, (k, s, p)
                np.testing.assert_array_equal(got, want, err_msg=f"kernel {k} stride {s} pads {p}")
        checked += 1
    assert checked > 60


def test_max_pool_of_an_empty_batch_and_a_strided_input() -> None:
    x = np.zeros((0, 3, 5, 5), np.float32)
    assert _ours(x, (3, 3), (1, 1), (1, 1, 1, 1)).shape == (0, 3, 5, 5)
    base = np.random.default_rng(1).standard_normal((2, 4, 6, 7)).astype(np.float32)
    view = base[:, ::2]  # a non-contiguous view
    np.testing.assert_array_equal(
        _ours(view, (3, 3), (2, 2), (1, 1, 1, 1)), _reference(view, (3, 3), (2, 2), (1, 1, 1, 1))
    )
    assert not base[:, ::2].flags.c_contiguous


def _inception(concat_reader: str = "Relu", branch4: str = "Conv") -> onnx.ModelProto:
    g = np.random.default_rng(2)
    w = lambda *s: onnx.numpy_helper.from_array((g.standard_normal(s) * 0.5).astype(np.float32), f"w{len(s)}_{s[0]}")
    inits = [w(3, 4, 1, 1), w(5, 4, 3, 3)]
    nodes = [
        oh.make_node("Conv", ["x", inits[0].name], ["a"], kernel_shape=[1, 1]),
        oh.make_node("Conv", ["x", inits[1].name], ["b"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
    ]
    if branch4 == "Conv":
        inits.append(w(2, 4, 1, 1))
        nodes.append(oh.make_node("Conv", ["x", inits[2].name], ["c"], kernel_shape=[1, 1]))
    else:
        nodes.append(oh.make_node("MaxPool", ["x"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]))
    nodes.append(oh.make_node("Concat", ["a", "b", "c"], ["cat"], axis=1))
    outputs = ["y"]
    nodes.append(oh.make_node("Relu", ["cat"], ["y"]))
    if concat_reader == "Relu and Sigmoid":
        nodes.append(oh.make_node("Sigmoid", ["cat"], ["s"]))
        outputs.append("s")
    graph = oh.make_graph(
        nodes,
        "inception",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4, 6, 6])],
        [oh.make_tensor_value_info(o, TensorProto.FLOAT, ["n", None, None, None]) for o in outputs],
        inits,
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])


@pytest.mark.parametrize(
    ("reader", "branch4", "fused"),
    [("Relu", "Conv", True), ("Relu and Sigmoid", "Conv", False), ("Relu", "MaxPool", False)],
)
def test_the_relu_after_a_concat_of_convolutions_moves_into_them(reader: str, branch4: str, fused: bool) -> None:
    model = _inception(reader, branch4)
    ops = an.onnx.load(model).predict_net.ops
    assert ("Relu" not in [op.type for op in ops]) is fused
    convs = [op for op in ops if op.type == "ONNXConv"]
    assert all(op.args.get("activation") == "Relu" for op in convs) is fused
    x = np.random.default_rng(3).standard_normal((2, 4, 6, 6)).astype(np.float32)
    want = ReferenceEvaluator(model).run(None, {"x": x})
    for net_type in ("simple", "async_scheduling"):
        for tensors in ("numpy", "torch"):
            with backend.prepare(model, net_type=net_type, num_workers=2, tensors=tensors) as rep:
                for _ in range(2):
                    got = rep.run([x])
                    for a, b in zip(got, want):
                        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5, err_msg=f"{net_type} {tensors}")
