"""Conv, MaxPool, AveragePool: forwards against torch.nn.functional, gradients against torch
autograd and finite differences (float64, hypothesis geometries)."""

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

pytestmark = pytest.mark.timeout(60)
FEW = settings(max_examples=6, deadline=None)


@st.composite
def conv_case(draw):
    grp = draw(st.sampled_from([1, 2]))
    c, m = grp * draw(st.integers(1, 2)), grp * draw(st.integers(1, 2))
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    sh, sw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    dh, dw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    pads = [draw(st.integers(0, 2)) for _ in range(4)]
    h = draw(st.integers(dh * (kh - 1) + 1, 6))
    w = draw(st.integers(dw * (kw - 1) + 1, 6))
    return dict(
        n=draw(st.integers(1, 2)),
        c=c,
        m=m,
        grp=grp,
        k=(kh, kw),
        s=(sh, sw),
        d=(dh, dw),
        pads=pads,
        hw=(h, w),
        bias=draw(st.booleans()),
        seed=draw(st.integers(0, 2**16)),
    )


def torch_conv(x, w, b, case):
    t, l, bo, r = case["pads"]
    return F.conv2d(F.pad(x, (l, r, t, bo)), w, b, stride=case["s"], dilation=case["d"], groups=case["grp"])


def conv_args(case):
    return dict(
        kernel_h=case["k"][0],
        kernel_w=case["k"][1],
        strides=list(case["s"]),
        dilation_h=case["d"][0],
        dilation_w=case["d"][1],
        pads=case["pads"],
        group=case["grp"],
    )


@FEW
@given(case=conv_case())
def test_conv_forward_and_gradient(case):
    seed = case["seed"]
    x = rand(seed, (case["n"], case["c"], *case["hw"]))
    w = rand(seed + 1, (case["m"], case["c"] // case["grp"], *case["k"]))
    b = rand(seed + 2, (case["m"],))
    ins = [x, w, b] if case["bias"] else [x, w]
    y = run("Conv", ins, **conv_args(case))
    ref = torch_conv(torch.tensor(x), torch.tensor(w), torch.tensor(b) if case["bias"] else None, case).numpy()
    np.testing.assert_allclose(y, ref, rtol=1e-10, atol=1e-12)
    feeds = {"x": x, "w": w, "r": rand(seed + 3, y.shape)} | ({"b": b} if case["bias"] else {})
    names = ["x", "w", "b"] if case["bias"] else ["x", "w"]

    def tfn(x, w, r, b=None):
        return (torch_conv(x, w, b, case) * r).mean()

    check_all(lambda net: weighted_mean_head(net, net.Conv(names, "y", **conv_args(case))), tfn, feeds, names)


def test_conv_float32_and_shared_arg_spellings():
    x = np.random.default_rng(0).normal(size=(2, 3, 7, 7)).astype(np.float32)
    w = np.random.default_rng(1).normal(size=(4, 3, 3, 3)).astype(np.float32)
    b = np.zeros(4, np.float32)
    y = run("Conv", [x, w, b], kernel=3, stride=2, pad=1)
    assert y.dtype == np.float32 and y.shape == (2, 4, 4, 4)
    ref = F.conv2d(torch.tensor(x), torch.tensor(w), stride=2, padding=1).numpy()
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5)
    same = run("Conv", [x, w, b], kernels=[3, 3], stride_h=2, stride_w=2, pad_t=1, pad_l=1, pad_b=1, pad_r=1)
    np.testing.assert_array_equal(y, same)


@pytest.mark.parametrize(
    "bad,match",
    [
        (dict(kernel=5), "filter's kernel"),
        (dict(group=2), "divisible by group"),
        (dict(pads=[1, 1]), "pads"),
        (dict(stride=0), "strides"),
    ],
)
def test_conv_errors(bad, match):
    x, w = np.zeros((1, 3, 5, 5)), np.zeros((4, 3, 3, 3))
    with pytest.raises(an.OperatorError, match=match):
        run("Conv", [x, w], **bad)


def test_conv_gradient_wrt_filter_only_has_no_dx():
    net = an.Net("g")
    net.Conv(["x", "w", "b"], "y", kernel=3)
    net.AveragedLoss("y", "loss")
    from asyncnet.autodiff import add_gradient_ops

    add_gradient_ops(net, "loss", wrt=["w"])
    gop = [op for op in net.ops if op.type == "ConvGradient"][0]
    assert len(gop.outputs) == 1  # neither dbias nor dX is computed when nobody reads them
    ws = an.Workspace()
    ws.feed("x", np.ones((1, 1, 4, 4)))
    ws.feed("w", np.ones((2, 1, 3, 3)))
    ws.feed("b", np.zeros(2))
    ws.run_net_once(net)


@st.composite
def pool_case(draw):
    k = draw(st.integers(1, 3))
    pad = draw(st.integers(0, k // 2))  # torch's rule: pad <= kernel / 2
    s = draw(st.integers(1, 3))
    h, w = draw(st.integers(k, 6)), draw(st.integers(k, 6))
    return dict(
        k=k,
        pad=pad,
        s=s,
        shape=(draw(st.integers(1, 2)), draw(st.integers(1, 3)), h, w),
        seed=draw(st.integers(0, 2**16)),
    )


@FEW
@given(case=pool_case())
def test_max_pool(case):
    x = rand(case["seed"], case["shape"])
    args = dict(kernel=case["k"], stride=case["s"], pad=case["pad"])
    y = run("MaxPool", [x], **args)
    np.testing.assert_array_equal(y, F.max_pool2d(torch.tensor(x), case["k"], case["s"], case["pad"]).numpy())
    feeds = {"x": x, "r": rand(case["seed"] + 1, y.shape)}
    check_all(
        lambda net: weighted_mean_head(net, net.MaxPool("x", "y", **args)),
        lambda x, r: (F.max_pool2d(x, case["k"], case["s"], case["pad"]) * r).mean(),
        feeds,
        ["x"],
    )


@pytest.mark.parametrize("k, hw", [(2, (8, 8)), (2, (4, 6)), (3, (6, 3)), (1, (2, 2))])
def test_max_pool_tiling_windows_and_ties(k, hw):
    """Windows that tile the image (the 2x2 pool of the cnn) take a shorter path: same maxima as
    torch, and Caffe2's tie rule (every input equal to its window's maximum gets the whole dY)."""
    rng = np.random.default_rng(k)
    x = rng.integers(0, 3, (3, 2, *hw)).astype(np.float32)  # many ties
    y = run("MaxPool", [x], kernel=k, stride=k)
    np.testing.assert_array_equal(y, F.max_pool2d(torch.tensor(x), k, k).numpy())
    dy = rng.normal(size=y.shape).astype(np.float32)
    dx = run("MaxPoolGradient", [x, y, dy], kernel=k, stride=k)
    up = lambda a: a.repeat(k, axis=2).repeat(k, axis=3)
    np.testing.assert_array_equal(dx, np.where(x == up(y), up(dy), 0))


@FEW
@given(case=pool_case(), include=st.booleans())
def test_average_pool(case, include):
    x = rand(case["seed"], case["shape"])
    args = dict(kernel=case["k"], stride=case["s"], pad=case["pad"], count_include_pad=include)

    def tpool(x):
        return F.avg_pool2d(x, case["k"], case["s"], case["pad"], count_include_pad=include)

    y = run("AveragePool", [x], **args)
    np.testing.assert_allclose(y, tpool(torch.tensor(x)).numpy(), rtol=1e-12, atol=1e-14)
    feeds = {"x": x, "r": rand(case["seed"] + 1, y.shape)}
    check_all(
        lambda net: weighted_mean_head(net, net.AveragePool("x", "y", **args)),
        lambda x, r: (tpool(x) * r).mean(),
        feeds,
        ["x"],
    )


def test_average_pool_default_excludes_padding_like_caffe2():
    x = np.ones((1, 1, 2, 2))
    np.testing.assert_array_equal(run("AveragePool", [x], kernel=2, pad=1), np.ones((1, 1, 3, 3)))


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_global_pooling(op):
    x = rand(0, (2, 3, 4, 5))
    y = run(op, [x], global_pooling=1)
    ref = x.max(axis=(2, 3), keepdims=True) if op == "MaxPool" else x.mean(axis=(2, 3), keepdims=True)
    np.testing.assert_allclose(y, ref, rtol=1e-12)
    feeds = {"x": x, "r": rand(1, y.shape)}
    tf = (
        (lambda x: x.amax(dim=(2, 3), keepdim=True))
        if op == "MaxPool"
        else (lambda x: x.mean(dim=(2, 3), keepdim=True))
    )
    check_all(
        lambda net: weighted_mean_head(net, getattr(net, op)("x", "y", global_pooling=1)),
        lambda x, r: (tf(x) * r).mean(),
        feeds,
        ["x"],
    )


def test_pool_kernel_required():
    with pytest.raises(an.OperatorError, match="kernel size"):
        run("MaxPool", [np.zeros((1, 1, 3, 3))])
