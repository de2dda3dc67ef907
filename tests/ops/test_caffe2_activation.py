"""LeakyRelu, Elu and PRelu against torch.nn.functional, and their gradients against torch
autograd (float64)."""

from __future__ import annotations

import numpy as np
import pytest

import asyncnet as an
from asyncnet.autodiff import add_gradient_ops

torch = pytest.importorskip("torch")
F = torch.nn.functional

pytestmark = pytest.mark.timeout(120)


def _run(op: str, inputs: dict[str, np.ndarray], wrt: list[str], **args):
    """Forward output and the gradients of mean(Y * R) for a fixed random R."""
    ws = an.Workspace()
    for name, value in inputs.items():
        ws.feed(name, value)
    net = an.Net(op)
    net.add_op(op, list(inputs), ["y"], **args)
    rng = np.random.default_rng(3)
    y_shape = next(iter(inputs.values())).shape
    ws.feed("r", rng.uniform(0.5, 1.5, y_shape))
    net.Mul(["y", "r"], "yr")
    net.AveragedLoss("yr", "loss")
    grads = add_gradient_ops(net, "loss", wrt=wrt, dtype="float64")
    ws.run_net_once(net)
    return ws.fetch("y"), {w: ws.fetch(grads[w]) for w in wrt}, ws.fetch("r")


def _torch_grads(fn, tensors: list[np.ndarray], r: np.ndarray):
    ts = [torch.tensor(t, requires_grad=True) for t in tensors]
    y = fn(*ts)
    (y * torch.tensor(r)).mean().backward()
    return y.detach().numpy(), [t.grad.numpy() for t in ts]


X = np.random.default_rng(0).uniform(-2, 2, (2, 3, 4, 5))


@pytest.mark.parametrize("alpha", [0.01, 0.3])
def test_leaky_relu(alpha):
    y, g, r = _run("LeakyRelu", {"x": X}, ["x"], alpha=alpha)
    ty, (tg,) = _torch_grads(lambda x: F.leaky_relu(x, alpha), [X], r)
    np.testing.assert_allclose(y, ty, rtol=1e-12)
    np.testing.assert_allclose(g["x"], tg, rtol=1e-12)


@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_elu(alpha):
    y, g, r = _run("Elu", {"x": X}, ["x"], alpha=alpha)
    ty, (tg,) = _torch_grads(lambda x: F.elu(x, alpha), [X], r)
    np.testing.assert_allclose(y, ty, rtol=1e-12)
    np.testing.assert_allclose(g["x"], tg, rtol=1e-10)


def test_elu_of_large_inputs_is_finite():
    ws = an.Workspace()
    ws.feed("x", np.array([1000.0, -1000.0], np.float32))
    ws.run_operator_once(an.OperatorDef("Elu", ["x"], ["y"]))
    np.testing.assert_array_equal(ws.fetch("y"), [1000.0, -1.0])


@pytest.mark.parametrize("channels", [1, 3])
def test_prelu_nchw(channels):
    w = np.linspace(0.1, 0.4, channels)
    y, g, r = _run("PRelu", {"x": X, "w": w}, ["x", "w"])
    ty, (tgx, tgw) = _torch_grads(F.prelu, [X, w], r)
    np.testing.assert_allclose(y, ty, rtol=1e-12)
    np.testing.assert_allclose(g["x"], tgx, rtol=1e-12)
    np.testing.assert_allclose(g["w"], tgw, rtol=1e-10)


def test_prelu_nhwc_uses_the_last_axis():
    x = np.moveaxis(X, 1, -1).copy()
    w = np.array([0.1, 0.2, 0.3])
    y, g, r = _run("PRelu", {"x": x, "w": w}, ["x", "w"], order="NHWC")
    ty, (tgx, tgw) = _torch_grads(lambda a, b: F.prelu(a.movedim(-1, 1), b).movedim(1, -1), [x, w], r)
    np.testing.assert_allclose(y, ty, rtol=1e-12)
    np.testing.assert_allclose(g["w"], tgw, rtol=1e-10)


def test_prelu_refuses_a_slope_of_the_wrong_size():
    ws = an.Workspace()
    ws.feed("x", X)
    ws.feed("w", np.ones(4))
    with pytest.raises(an.OperatorError, match="no channel axis of that size"):
        ws.run_operator_once(an.OperatorDef("PRelu", ["x", "w"], ["y"]))
