"""Conv, MaxPool and AveragePool against Caffe2's conv_test.py, group_conv_test.py and pooling_test.py.

Sources: those tests draw stride, pad (or separate pad_t/pad_l/pad_b/pad_r), kernel, dilation,
group, bias and the order (NCHW, NHWC: X [N, H, W, C], filter [M, kh, kw, C/group]) and check
that both orders agree (test_convolution_layout) and that the gradients match finite
differences; caffe2/operators/pool_op.cc (AveragePool's count_include_pad defaults to 0,
global_pooling pools the whole image). The references here are torch.nn.functional on the
explicitly padded NCHW input (Caffe2's asymmetric pads) and central differences.
Caffe2's 1-D forms (X [N, C, L], Conv1D, MaxPool1D...) and its 2-D names (Conv2D...) are
checked too; asyncnet has no 3-D form (documented in docs/compatibility.md); `legacy_pad` is tested in tests/caffe2/test_c2_legacy_pad.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from _c2run import run_op
from _gradcheck_helpers import check_all
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncnet as an

pytestmark = pytest.mark.timeout(60)
FEW = settings(max_examples=12, deadline=None)


def nhwc(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1))


def run(op: str, inputs: dict[str, np.ndarray], **args) -> np.ndarray:
    return run_op(op, inputs, **args)[0]


def _pads(p):  # (t, l, b, r) -> torch's F.pad order
    t, l, b, r = p
    return (l, r, t, b)


@FEW
@given(
    stride_h=st.integers(1, 3),
    stride_w=st.integers(1, 3),
    pad_t=st.integers(0, 2),
    pad_l=st.integers(0, 2),
    pad_b=st.integers(0, 2),
    pad_r=st.integers(0, 2),
    kernel=st.integers(1, 3),
    dilation=st.integers(1, 2),
    group=st.sampled_from([1, 2]),
    use_bias=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_conv_both_orders_against_torch(
    stride_h, stride_w, pad_t, pad_l, pad_b, pad_r, kernel, dilation, group, use_bias, seed
):
    rng = np.random.default_rng(seed)
    n, c, m, size = 2, 2 * group, 2 * group, 7
    x = rng.random((n, c, size, size)).astype(np.float32) - 0.5
    w = rng.random((m, c // group, kernel, kernel)).astype(np.float32) - 0.5
    b = rng.random(m).astype(np.float32) - 0.5
    args = dict(
        stride_h=stride_h,
        stride_w=stride_w,
        pad_t=pad_t,
        pad_l=pad_l,
        pad_b=pad_b,
        pad_r=pad_r,
        kernel=kernel,
        dilation=dilation,
        group=group,
    )
    want = F.conv2d(
        F.pad(torch.tensor(x), _pads((pad_t, pad_l, pad_b, pad_r))),
        torch.tensor(w),
        torch.tensor(b) if use_bias else None,
        stride=(stride_h, stride_w),
        dilation=dilation,
        groups=group,
    ).numpy()
    ins = {"x": x, "w": w, **({"b": b} if use_bias else {})}
    y = run("Conv", ins, **args)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)
    ins_nhwc = {"x": nhwc(x), "w": nhwc(w), **({"b": b} if use_bias else {})}
    y2 = run("Conv", ins_nhwc, order="NHWC", **args)
    np.testing.assert_allclose(y2, nhwc(want), rtol=1e-4, atol=1e-5)  # test_convolution_layout


@pytest.mark.parametrize("order", ["NCHW", "NHWC"])
@pytest.mark.parametrize("group,use_bias", [(1, True), (2, False)])
def test_conv_gradients(order, group, use_bias):
    rng = np.random.default_rng(3)
    n, c, m, k = 2, 2 * group, 2 * group, 2
    x = rng.normal(size=(n, c, 5, 4))
    w = rng.normal(size=(m, c // group, k, k))
    args = dict(stride=2, pad_t=1, pad_l=0, pad_b=0, pad_r=1, group=group, order=order)
    oh, ow = (5 + 1 - k) // 2 + 1, (4 + 1 - k) // 2 + 1
    r = rng.normal(size=(n, m, oh, ow))
    to = nhwc if order == "NHWC" else (lambda a: a)
    feeds = {"x": to(x), "w": to(w), "r": to(r)}
    ins = ["x", "w"]
    if use_bias:
        feeds["b"] = rng.normal(size=m)
        ins.append("b")

    def build(net):
        net.Conv(ins, "y", **args)
        net.Mul(["y", "r"], "yr")
        return net.AveragedLoss("yr", "loss")

    def ref(x, w, r, b=None):
        if order == "NHWC":
            x, w = x.permute(0, 3, 1, 2), w.permute(0, 3, 1, 2)
        y = F.conv2d(F.pad(x, _pads((1, 0, 0, 1))), w, b, stride=2, groups=group)
        return ((y.permute(0, 2, 3, 1) if order == "NHWC" else y) * r).mean()

    check_all(build, ref, feeds, ins)


def _torch_pool(op, x, kernel, stride, pads, count_include_pad=False):
    t = F.pad(torch.tensor(x), _pads(pads), value=-np.inf if op == "MaxPool" else 0.0)
    if op == "MaxPool":
        return F.max_pool2d(t, kernel, stride).numpy()
    s = F.avg_pool2d(t, kernel, stride, divisor_override=1)
    if count_include_pad:
        return (s / (kernel[0] * kernel[1])).numpy()
    ones = F.pad(torch.ones(1, 1, *x.shape[2:], dtype=t.dtype), _pads(pads))
    return (s / F.avg_pool2d(ones, kernel, stride, divisor_override=1)).numpy()


@FEW
@given(
    op=st.sampled_from(["MaxPool", "AveragePool"]),
    stride_h=st.integers(1, 3),
    stride_w=st.integers(1, 3),
    pad_t=st.integers(0, 1),
    pad_l=st.integers(0, 1),
    pad_b=st.integers(0, 1),
    pad_r=st.integers(0, 1),
    kernel=st.integers(2, 3),
    order=st.sampled_from(["NCHW", "NHWC"]),
    count_include_pad=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_pooling_separate_stride_pad(
    op, stride_h, stride_w, pad_t, pad_l, pad_b, pad_r, kernel, order, count_include_pad, seed
):
    x = np.random.default_rng(seed).random((2, 3, 7, 6)).astype(np.float32)
    pads = (pad_t, pad_l, pad_b, pad_r)
    args = dict(stride_h=stride_h, stride_w=stride_w, pad_t=pad_t, pad_l=pad_l, pad_b=pad_b, pad_r=pad_r, kernel=kernel)
    if op == "AveragePool":
        args["count_include_pad"] = count_include_pad
    want = _torch_pool(op, x, (kernel, kernel), (stride_h, stride_w), pads, count_include_pad)
    fed = nhwc(x) if order == "NHWC" else x
    y = run(op, {"x": fed}, order=order, **args)
    np.testing.assert_allclose(y, nhwc(want) if order == "NHWC" else want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("order", ["NCHW", "NHWC"])
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_global_pooling(op, order):
    x = np.random.default_rng(0).random((2, 3, 5, 4)).astype(np.float32)
    red = x.max(axis=(2, 3), keepdims=True) if op == "MaxPool" else x.mean(axis=(2, 3), keepdims=True)
    y = run(op, {"x": nhwc(x) if order == "NHWC" else x}, global_pooling=1, order=order)
    np.testing.assert_allclose(y, nhwc(red) if order == "NHWC" else red, rtol=1e-6)


@pytest.mark.parametrize("order", ["NCHW", "NHWC"])
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_pooling_gradients(op, order):
    rng = np.random.default_rng(4)
    x = rng.permutation(2 * 2 * 5 * 5).reshape(2, 2, 5, 5) / 10.0  # distinct values: no ties for MaxPool
    args = dict(kernel=3, stride=2, pad_t=1, pad_l=0, pad_b=1, pad_r=1)
    out = _torch_pool(op, x, (3, 3), (2, 2), (1, 0, 1, 1))
    r = rng.normal(size=out.shape)
    to = nhwc if order == "NHWC" else (lambda a: a)
    feeds = {"x": to(x), "r": to(r)}

    def build(net):
        getattr(net, op)("x", "y", order=order, **args)
        net.Mul(["y", "r"], "yr")
        return net.AveragedLoss("yr", "loss")

    def ref(x, r):
        xc = x.permute(0, 3, 1, 2) if order == "NHWC" else x
        if op == "MaxPool":
            y = F.max_pool2d(F.pad(xc, (0, 1, 1, 1), value=-np.inf), 3, 2)
        else:
            ones = F.pad(torch.ones_like(xc[:1, :1]), (0, 1, 1, 1))
            y = F.avg_pool2d(F.pad(xc, (0, 1, 1, 1)), 3, 2, divisor_override=1) / F.avg_pool2d(
                ones, 3, 2, divisor_override=1
            )
        return ((y.permute(0, 2, 3, 1) if order == "NHWC" else y) * r).mean()

    check_all(build, ref, feeds, ["x"])


def test_what_asyncnet_does_not_take():
    x = np.zeros((1, 1, 4, 4), np.float32)
    with pytest.raises(an.NetDefinitionError, match="legacy_pad"):
        run("MaxPool", {"x": x}, kernel=2, legacy_pad=5)
    with pytest.raises(an.NetDefinitionError, match="order"):
        run("MaxPool", {"x": x}, kernel=2, order="NCDHW")
    with pytest.raises(an.OperatorError, match="4-D"):
        run(
            "Conv", {"x": np.zeros((1, 1, 4, 4, 4, 4), np.float32), "w": np.zeros((1, 1, 2, 2, 2, 2), np.float32)}
        )  # 4-D conv (volumes, 3-D, are taken)


@pytest.mark.parametrize("op", ["Conv", "MaxPool", "AveragePool", "SpatialBN"])
def test_nhwc_on_torch_tensors_matches_numpy(op):
    rng = np.random.default_rng(5)
    x = rng.random((2, 5, 4, 3)).astype(np.float32)  # NHWC, C = 3
    ins = {"x": x}
    outs, args = ["y"], {"order": "NHWC"}
    if op == "Conv":
        ins["w"] = rng.random((4, 2, 2, 3)).astype(np.float32)  # [M, kh, kw, C]
        args.update(pad=1)
    elif op == "SpatialBN":
        ins.update(
            s=np.ones(3, np.float32), b=np.zeros(3, np.float32), m=np.zeros(3, np.float32), v=np.ones(3, np.float32)
        )
        outs = ["y", "m", "v", "sm", "sv"]
    else:
        args.update(kernel=2, stride=1)
    got = {}
    for lib in ("numpy", "torch"):
        ws = an.Workspace()
        for k, v in ins.items():
            ws.feed(k, torch.tensor(v) if lib == "torch" else v.copy())
        net = an.Net("t")
        getattr(net, op)(list(ins), outs, **args)
        ws.run_net_once(net)
        y = ws.fetch("y")
        assert isinstance(y, torch.Tensor) == (lib == "torch")
        got[lib] = np.asarray(y)
    np.testing.assert_allclose(got["torch"], got["numpy"], rtol=1e-5, atol=1e-5)


def test_list_forms_of_the_window_arguments():
    # Caffe2's ConvPoolOpBase: kernels [h, w], strides [h, w], pads [t, l, b, r], dilations [h, w]
    rng = np.random.default_rng(6)
    x = rng.random((1, 2, 7, 8)).astype(np.float32)
    w = rng.random((3, 2, 2, 3)).astype(np.float32)
    y = run("Conv", {"x": x, "w": w}, kernels=[2, 3], strides=[2, 1], pads=[1, 0, 0, 2], dilations=[2, 1])
    want = F.conv2d(
        F.pad(torch.tensor(x), _pads((1, 0, 0, 2))), torch.tensor(w), stride=(2, 1), dilation=(2, 1)
    ).numpy()
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)
    p = run("MaxPool", {"x": x}, kernels=[3, 2], strides=[1, 2], pads=[0, 1, 1, 0])
    np.testing.assert_allclose(p, _torch_pool("MaxPool", x, (3, 2), (1, 2), (0, 1, 1, 0)), rtol=1e-6)
    with pytest.raises(an.OperatorError, match="kernel"):
        run("Conv", {"x": x, "w": w}, kernel=3)  # the filter is 2 x 3


@FEW
@given(
    op=st.sampled_from(["Conv", "Conv1D"]),
    stride=st.integers(1, 3),
    pad=st.integers(0, 2),
    kernel=st.integers(1, 3),
    order=st.sampled_from(["NCHW", "NHWC"]),
    use_bias=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_1d_convolution(op, stride, pad, kernel, order, use_bias, seed):
    # conv_test.py's test_1d_convolution: strides=[s], pads=[p, p], kernels=[k]; X [N, C, L] or [N, L, C]
    rng = np.random.default_rng(seed)
    x = rng.random((2, 3, 8)).astype(np.float32) - 0.5
    w = rng.random((4, 3, kernel)).astype(np.float32) - 0.5
    b = rng.random(4).astype(np.float32)
    want = F.conv1d(
        F.pad(torch.tensor(x), (pad, pad)), torch.tensor(w), torch.tensor(b) if use_bias else None, stride=stride
    ).numpy()
    t = (lambda a: np.ascontiguousarray(a.transpose(0, 2, 1))) if order == "NHWC" else (lambda a: a)
    ins = {"x": t(x), "w": t(w), **({"b": b} if use_bias else {})}
    y = run(op, ins, strides=[stride], pads=[pad, pad], kernels=[kernel], order=order)
    np.testing.assert_allclose(y, t(want), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["Conv1D", "MaxPool1D", "AveragePool1D"])
@pytest.mark.parametrize("order", ["NCHW", "NHWC"])
def test_1d_gradients(op, order):
    rng = np.random.default_rng(8)
    x = rng.permutation(2 * 2 * 7).reshape(2, 2, 7) / 7.0  # distinct: no MaxPool ties
    t = (lambda a: np.ascontiguousarray(a.transpose(0, 2, 1))) if order == "NHWC" else (lambda a: a)
    tt = (lambda a: a.transpose(1, 2)) if order == "NHWC" else (lambda a: a)
    feeds, ins = {"x": t(x)}, ["x"]
    args = dict(kernel=3, stride=2, pads=[1, 0], order=order)
    if op == "Conv1D":
        feeds["w"], ins = t(rng.normal(size=(3, 2, 3))), ["x", "w"]
    out_len = (7 + 1 - 3) // 2 + 1
    feeds["r"] = t(rng.normal(size=(2, 3 if op == "Conv1D" else 2, out_len)))

    def build(net):
        getattr(net, op)(ins, "y", **args)
        net.Mul(["y", "r"], "yr")
        return net.AveragedLoss("yr", "loss")

    def ref(x, r, w=None):
        xc = F.pad(tt(x), (1, 0), value=-np.inf if op == "MaxPool1D" else 0.0)
        if op == "Conv1D":
            y = F.conv1d(xc, tt(w), stride=2)
        elif op == "MaxPool1D":
            y = F.max_pool1d(xc, 3, 2)
        else:  # count_include_pad=0: the divisor counts real inputs only
            ones = F.pad(torch.ones_like(tt(x)[:1, :1]), (1, 0))
            y = F.avg_pool1d(xc, 3, 2) / F.avg_pool1d(ones, 3, 2)
        return (tt(y) * r).mean()

    check_all(build, ref, feeds, ins)


def test_2d_names_and_1d_argument_rules():
    x = np.random.default_rng(9).random((1, 2, 5, 5)).astype(np.float32)
    w = np.random.default_rng(10).random((3, 2, 2, 2)).astype(np.float32)
    np.testing.assert_array_equal(run("Conv2D", {"x": x, "w": w}, pad=1), run("Conv", {"x": x, "w": w}, pad=1))
    np.testing.assert_array_equal(run("MaxPool2D", {"x": x}, kernel=2), run("MaxPool", {"x": x}, kernel=2))
    np.testing.assert_array_equal(run("AveragePool2D", {"x": x}, kernel=2), run("AveragePool", {"x": x}, kernel=2))
    from asyncnet.autodiff import add_gradient_ops

    net = an.Net("g")
    net.Conv2D(["x", "w"], "y")
    net.AveragedLoss("y", "loss")
    add_gradient_ops(net, "loss", wrt=["x"])
    assert "Conv2DGradient" in [op.type for op in net.to_def().ops]  # Caffe2's gradient name: type + "Gradient"
    x1 = x[:, :, 0]
    for bad, match in (
        ({"kernel_h": 2}, "2-D inputs"),
        ({"kernels": [2, 2]}, "length 1"),
        ({"kernel": 2, "pads": [0, 1, 0, 1]}, "left, right"),
    ):
        with pytest.raises(an.OperatorError, match=match):
            run("MaxPool1D", {"x": x1}, **bad)
