"""SpatialBN, LayerNorm, Dropout: forwards against torch.nn.functional, gradients against torch
autograd and finite differences (float64)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from _gradcheck_helpers import check_all, weighted_mean_head
from _nn_helpers import rand, run
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncnet as an
from asyncnet.autodiff import add_gradient_ops

pytestmark = pytest.mark.timeout(60)
FEW = settings(max_examples=6, deadline=None)
bn_shapes = st.sampled_from([(3, 2), (2, 3, 2), (2, 2, 3, 2), (1, 3, 2, 2)])


@FEW
@given(shape=bn_shapes, seed=st.integers(0, 2**16), momentum=st.sampled_from([0.9, 0.5]))
def test_spatial_bn_training_matches_torch(shape, seed, momentum):
    c = shape[1]
    x, scale, bias = rand(seed, shape), rand(seed + 1, (c,)), rand(seed + 2, (c,))
    rm, rv = rand(seed + 3, (c,)), np.abs(rand(seed + 4, (c,))) + 0.5
    rm_in, rv_in = rm.copy(), rv.copy()
    ws = an.Workspace()
    for k, v in dict(x=x, s=scale, b=bias, rm=rm_in, rv=rv_in).items():
        ws.feed(k, v)
    net = an.Net("bn")
    net.SpatialBN(["x", "s", "b", "rm", "rv"], ["y", "rm", "rv", "sm", "siv"], momentum=momentum, epsilon=1e-3)
    ws.run_net_once(net)
    trm, trv = torch.tensor(rm), torch.tensor(rv)
    ty = F.batch_norm(
        torch.tensor(x),
        trm,
        trv,
        torch.tensor(scale),
        torch.tensor(bias),
        training=True,
        momentum=1 - momentum,
        eps=1e-3,
    )
    np.testing.assert_allclose(ws.fetch("y"), ty.numpy(), rtol=1e-10, atol=1e-12)
    assert ws.fetch("rm") is rm_in and ws.fetch("rv") is rv_in  # updated in place
    np.testing.assert_allclose(rm_in, trm.numpy(), rtol=1e-12)
    np.testing.assert_allclose(rv_in, trv.numpy(), rtol=1e-12)
    axes = (0, *range(2, x.ndim))
    np.testing.assert_allclose(ws.fetch("siv"), 1 / np.sqrt(x.var(axis=axes) + 1e-3), rtol=1e-12)


@FEW
@given(shape=bn_shapes, seed=st.integers(0, 2**16))
def test_spatial_bn_gradient(shape, seed):
    c = shape[1]
    feeds = {
        "x": rand(seed, shape),
        "s": rand(seed + 1, (c,)),
        "b": rand(seed + 2, (c,)),
        "rm": np.zeros(c),
        "rv": np.ones(c),
        "r": rand(seed + 3, shape),
    }

    def build(net):
        net.SpatialBN(["x", "s", "b", "rm", "rv"], ["y", "rm", "rv", "sm", "siv"])
        return weighted_mean_head(net, "y")

    def tfn(x, s, b, rm, rv, r):
        return (F.batch_norm(x, rm.clone(), rv.clone(), s, b, training=True, eps=1e-5) * r).mean()

    check_all(build, tfn, feeds, ["x", "s", "b"], fd_atol=1e-5)


def test_spatial_bn_test_mode_and_errors():
    x, s, b = rand(0, (2, 3, 2, 2)), rand(1, (3,)), rand(2, (3,))
    rm, rv = rand(3, (3,)), np.abs(rand(4, (3,))) + 0.5
    y = run("SpatialBN", [x, s, b, rm, rv], is_test=1)
    ref = F.batch_norm(*(torch.tensor(v) for v in (x, rm, rv, s, b)), training=False, eps=1e-5)
    np.testing.assert_allclose(y, ref.numpy(), rtol=1e-12)
    with pytest.raises(an.OperatorError, match="shape \\(3,\\)"):
        run("SpatialBN", [x, s[:2], b, rm, rv], is_test=1)
    with pytest.raises(an.NetDefinitionError, match="in-place enforced"):
        an.Workspace().create_net(_bn_net(["y", "m2", "rv", "sm", "siv"]))
    net = _bn_net(["y", "rm", "rv", "sm", "siv"], is_test=1)
    net.AveragedLoss("y", "loss")
    with pytest.raises(an.NetDefinitionError):
        add_gradient_ops(net, "loss", wrt=["x"])


def _bn_net(outs, **args):
    net = an.Net("bn")
    net.SpatialBN(["x", "s", "b", "rm", "rv"], outs[:1] if args.get("is_test") else outs, **args)
    return net


@FEW
@given(
    shape=st.sampled_from([(3, 4), (2, 3, 4), (2, 2, 2, 3)]),
    axis=st.sampled_from([1, -1]),
    affine=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_layer_norm(shape, axis, affine, seed):
    a = axis % len(shape)
    pshape = shape[a:]
    x, gamma, beta = rand(seed, shape), rand(seed + 1, pshape), rand(seed + 2, pshape)
    ins = [x, gamma, beta] if affine else [x]
    y, mean, std = run("LayerNorm", ins, 3, axis=axis, epsilon=1e-4, elementwise_affine=affine)
    ref = F.layer_norm(
        torch.tensor(x),
        pshape,
        torch.tensor(gamma) if affine else None,
        torch.tensor(beta) if affine else None,
        eps=1e-4,
    )
    np.testing.assert_allclose(y, ref.numpy(), rtol=1e-9, atol=1e-12)
    assert mean.shape == (*shape[:a], 1) and std.shape == (*shape[:a], 1)
    np.testing.assert_allclose(std.reshape(-1), np.sqrt(x.reshape(mean.size, -1).var(axis=1) + 1e-4), rtol=1e-12)
    names = ["x", "g", "b"] if affine else ["x"]
    feeds = {"x": x, "g": gamma, "b": beta, "r": rand(seed + 3, shape)}
    if not affine:
        del feeds["g"], feeds["b"]

    def build(net):
        net.LayerNorm(names, ["y", "mu", "sd"], axis=axis, epsilon=1e-4, elementwise_affine=affine)
        return weighted_mean_head(net, "y")

    def tfn(x, r, g=None, b=None):
        return (F.layer_norm(x, pshape, g, b, eps=1e-4) * r).mean()

    check_all(build, tfn, feeds, names, fd_atol=1e-5)


def test_layer_norm_flat_affine_params_like_caffe2():
    """Caffe2 checks only the size of gamma and beta; their gradients keep the shape given."""
    x, gamma, beta = rand(0, (2, 3, 2)), rand(1, (6,)), rand(2, (6,))
    feeds = {"x": x, "g": gamma, "b": beta, "r": rand(3, x.shape)}

    def build(net):
        net.LayerNorm(["x", "g", "b"], ["y", "mu", "sd"], elementwise_affine=1)
        return weighted_mean_head(net, "y")

    def tfn(x, g, b, r):
        return (F.layer_norm(x, (3, 2), g.reshape(3, 2), b.reshape(3, 2)) * r).mean()

    check_all(build, tfn, feeds, ["x", "g", "b"], fd_atol=1e-5)
    with pytest.raises(an.OperatorError, match="6 elements"):
        run("LayerNorm", [x, gamma[:5], beta[:5]], 3, elementwise_affine=1)


def test_dropout_statistics_scaling_and_seed():
    x = np.ones((200, 50), np.float32)
    y, mask = run("Dropout", [x], 2, ratio=0.3, seed=7)
    assert mask.dtype == np.bool_ and abs(mask.mean() - 0.7) < 0.02
    np.testing.assert_array_equal(y, np.where(mask, np.float32(1 / 0.7), 0))
    y2, mask2 = run("Dropout", [x], 2, ratio=0.3, seed=7)
    np.testing.assert_array_equal(mask, mask2)  # same seed, same first mask
    ws = an.Workspace()
    ws.feed("x", x)
    net = an.Net("d")
    net.Dropout("x", ["y", "m"], ratio=0.3, seed=7)
    ws.create_net(net)
    ws.run_net("d")
    first = ws.fetch("m").copy()
    ws.run_net("d")
    assert (ws.fetch("m") != first).any()  # a new mask on every run
    masks = []
    for _ in range(2):  # no seed argument: the net's DeviceOption.random_seed, as Caffe2
        ws2 = an.Workspace()
        ws2.feed("x", x)
        net2 = an.Net("d2", device_option=an.DeviceOption(random_seed=11))
        net2.Dropout("x", ["y", "m"], ratio=0.3)
        ws2.create_net(net2)
        ws2.run_net("d2")
        masks.append(ws2.fetch("m").copy())
        ws2.run_net("d2")
        assert (ws2.fetch("m") != masks[-1]).any()
    np.testing.assert_array_equal(masks[0], masks[1])
    np.testing.assert_array_equal(run("Dropout", [x], 1, ratio=0.3, is_test=1), x)
    assert not run("Dropout", [x], 2, ratio=1.0)[0].any()


@pytest.mark.parametrize("is_test", [False, True])
def test_dropout_gradient(is_test):
    x, r = rand(0, (4, 5)), rand(1, (4, 5))
    net = an.Net("g")
    net.Dropout("x", ["y", "m"], ratio=0.4, seed=3, is_test=is_test)
    net.Mul(["y", "r"], "yr")
    net.AveragedLoss("yr", "loss")
    grads = add_gradient_ops(net, "loss", wrt=["x"], dtype="float64")
    ws = an.Workspace()
    ws.feed("x", x)
    ws.feed("r", r)
    ws.run_net_once(net)
    mask = ws.fetch("m")
    tx = torch.tensor(x, requires_grad=True)
    keep = torch.tensor(mask, dtype=torch.float64) / (1 if is_test else 0.6)
    ((tx * keep) * torch.tensor(r)).mean().backward()
    np.testing.assert_allclose(ws.fetch(grads["x"]), tx.grad.numpy(), rtol=1e-12)
