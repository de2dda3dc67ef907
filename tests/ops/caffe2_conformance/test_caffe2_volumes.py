"""Conv, MaxPool and AveragePool on volumes (Conv3D, MaxPool3D, AveragePool3D), SpaceToBatch and
BatchToSpace: outputs against torch (conv3d, max_pool3d, avg_pool3d) and a loop written from
the documented layout, gradients against torch autograd and finite differences."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from _c2run import run_op
from _gradcheck_helpers import autodiff_grads, numeric_grads, weighted_mean_head
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncnet.errors import OperatorError

pytestmark = pytest.mark.timeout(180)
FEW = settings(max_examples=12, deadline=None)


def _torch_pads(head, tail):
    """F.pad's order: the last axis first, (head, tail) per axis."""
    return [p for h, t in zip(reversed(head), reversed(tail)) for p in (h, t)]


@FEW
@given(
    seed=st.integers(0, 2**16),
    group=st.sampled_from([1, 2]),
    kernel=st.lists(st.integers(1, 2), min_size=3, max_size=3),
    stride=st.lists(st.integers(1, 2), min_size=3, max_size=3),
    dilation=st.lists(st.integers(1, 2), min_size=3, max_size=3),
    pads=st.lists(st.integers(0, 1), min_size=6, max_size=6),
    bias=st.booleans(),
    op=st.sampled_from(["Conv", "Conv3D"]),
)
def test_conv3d_matches_torch_with_its_gradients(seed, group, kernel, stride, dilation, pads, bias, op):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, 2 * group, 4, 3, 4))
    w = rng.standard_normal((2 * group, 2, *kernel))
    b = rng.standard_normal(2 * group)
    args = {"kernels": kernel, "strides": stride, "dilations": dilation, "pads": pads, "group": group}
    feeds = {"x": x, "w": w, **({"b": b} if bias else {})}
    (y,) = run_op(op, feeds, ["y"], **args)
    tx = F.pad(torch.from_numpy(x), _torch_pads(pads[:3], pads[3:]))
    ref = F.conv3d(tx, torch.from_numpy(w), torch.from_numpy(b) if bias else None, stride, 0, dilation, group)
    np.testing.assert_allclose(y, ref.numpy(), rtol=1e-10, atol=1e-10)
    feeds["r"] = rng.standard_normal(y.shape)

    def build(net):
        getattr(net, op)(["x", "w", "b"] if bias else ["x", "w"], "y", **args)
        return weighted_mean_head(net, "y")

    wrt = ["x", "w", "b"] if bias else ["x", "w"]
    _, ours = autodiff_grads(build, feeds, wrt)
    t = {k: torch.tensor(v, requires_grad=True) for k, v in feeds.items()}
    tout = F.conv3d(
        F.pad(t["x"], _torch_pads(pads[:3], pads[3:])), t["w"], t["b"] if bias else None, stride, 0, dilation, group
    )
    (tout * t["r"]).mean().backward()
    for k in wrt:
        np.testing.assert_allclose(ours[k], t[k].grad.numpy(), rtol=1e-9, atol=1e-12, err_msg=k)


def test_conv3d_gradient_matches_finite_differences():
    rng = np.random.default_rng(3)
    feeds = {
        "x": rng.standard_normal((1, 2, 3, 3, 3)),
        "w": rng.standard_normal((2, 2, 2, 1, 2)),
        "b": rng.standard_normal(2),
        "r": rng.standard_normal((1, 2, 3, 4, 2)),
    }

    def build(net):
        net.Conv3D(["x", "w", "b"], "y", pads=[0, 1, 0, 1, 0, 0], strides=[1, 1, 2])
        return weighted_mean_head(net, "y")

    _, ours = autodiff_grads(build, feeds, ["x", "w", "b"])
    fd = numeric_grads(build, feeds, ["x", "w", "b"])
    for k in ours:
        np.testing.assert_allclose(ours[k], fd[k], rtol=1e-5, atol=1e-8, err_msg=k)


@FEW
@given(
    seed=st.integers(0, 2**16),
    kernel=st.lists(st.integers(1, 3), min_size=3, max_size=3),
    stride=st.lists(st.integers(1, 2), min_size=3, max_size=3),
    pad=st.integers(0, 1),
    order=st.sampled_from(["NCHW", "NHWC"]),
    include_pad=st.booleans(),
)
def test_pool3d_matches_torch_with_its_gradients(seed, kernel, stride, pad, order, include_pad):
    pad = min(pad, min(kernel) // 2)  # torch wants the pad at most half the kernel
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, 3, 4, 5, 4))
    args = {"kernels": kernel, "strides": stride, "pads": [pad] * 6, "order": order}
    feed = np.ascontiguousarray(np.moveaxis(x, 1, -1)) if order == "NHWC" else x
    (mx,) = run_op("MaxPool3D", {"x": feed}, ["y"], **args)
    (av,) = run_op("AveragePool", {"x": feed}, ["y"], count_include_pad=include_pad, **args)
    if order == "NHWC":
        mx, av = np.moveaxis(mx, -1, 1), np.moveaxis(av, -1, 1)
    t = torch.tensor(x, requires_grad=True)
    tmax = F.max_pool3d(t, kernel, stride, pad)
    tavg = F.avg_pool3d(t, kernel, stride, pad, count_include_pad=include_pad)
    np.testing.assert_allclose(mx, tmax.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(av, tavg.detach().numpy(), rtol=1e-10)
    r = rng.standard_normal(tavg.shape)
    feeds = {"x": x, "r": r}
    for op, tref, extra in (("MaxPool3D", tmax, {}), ("AveragePool3D", tavg, {"count_include_pad": include_pad})):

        def build(net, op=op, extra=extra):
            getattr(net, op)("x", "y", kernels=kernel, strides=stride, pads=[pad] * 6, **extra)
            return weighted_mean_head(net, "y")

        _, ours = autodiff_grads(build, feeds, ["x"])
        (theirs,) = torch.autograd.grad((tref * torch.from_numpy(r)).mean(), t, retain_graph=True)
        np.testing.assert_allclose(ours["x"], theirs.numpy(), rtol=1e-9, atol=1e-12, err_msg=op)


def test_global_pooling_of_a_volume_is_the_mean_and_max_over_it():
    x = np.random.default_rng(4).standard_normal((2, 3, 3, 4, 5)).astype(np.float32)
    (avg,) = run_op("AveragePool3D", {"x": x}, ["y"], global_pooling=True)
    (mx,) = run_op("MaxPool", {"x": x}, ["y"], global_pooling=True)
    np.testing.assert_allclose(avg, x.mean(axis=(2, 3, 4), keepdims=True), rtol=1e-6)
    np.testing.assert_array_equal(mx, x.max(axis=(2, 3, 4), keepdims=True))


def test_a_window_larger_than_the_padded_volume_is_an_operator_error():
    x, w = np.zeros((1, 1, 2, 2, 2), np.float32), np.zeros((1, 1, 3, 3, 3), np.float32)
    with pytest.raises(OperatorError, match="dilated kernel"):
        run_op("Conv3D", {"x": x, "w": w}, ["y"])


def test_2d_only_arguments_on_a_volume_are_refused():
    x = np.zeros((1, 1, 2, 2, 2), np.float32)
    with pytest.raises(OperatorError, match="kernel_h is for 2-D"):
        run_op("MaxPool3D", {"x": x}, ["y"], kernels=[1, 1, 1], kernel_h=2)


# -- SpaceToBatch / BatchToSpace -------------------------------------------------------------------


def _space_to_batch_loop(x, block, top, left, bottom, right):
    """out[(i * b + j) * N + n, c, y, x] = padded[n, c, y * b + i, x * b + j]."""
    p = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)))
    n, c, h, w = p.shape
    out = np.zeros((n * block * block, c, h // block, w // block), x.dtype)
    for i in range(block):
        for j in range(block):
            for k in range(n):
                for y in range(h // block):
                    for z in range(w // block):
                        out[(i * block + j) * n + k, :, y, z] = p[k, :, y * block + i, z * block + j]
    return out


@FEW
@given(
    seed=st.integers(0, 2**16),
    block=st.integers(1, 3),
    pads=st.lists(st.integers(0, 2), min_size=4, max_size=4),
    n=st.integers(1, 3),
    cells=st.tuples(st.integers(1, 3), st.integers(1, 3)),
)
def test_space_to_batch_matches_the_documented_layout_and_inverts(seed, block, pads, n, cells):
    top, left, bottom, right = pads
    h, w = cells[0] * block + 2, cells[1] * block + 2  # room for the pads
    h, w = h - top - bottom, w - left - right
    x = np.random.default_rng(seed).standard_normal((n, 2, h, w)).astype(np.float32)
    args = {"block_size": block, "pad_t": top, "pad_l": left, "pad_b": bottom, "pad_r": right}
    if (h + top + bottom) % block or (w + left + right) % block:
        with pytest.raises(OperatorError, match="multiples of block_size"):
            run_op("SpaceToBatch", {"x": x}, ["y"], **args)
        return
    (y,) = run_op("SpaceToBatch", {"x": x}, ["y"], **args)
    np.testing.assert_array_equal(y, _space_to_batch_loop(x, block, top, left, bottom, right))
    (back,) = run_op("BatchToSpace", {"y": y}, ["z"], **args)
    np.testing.assert_array_equal(back, x)


@pytest.mark.parametrize("op", ["SpaceToBatch", "BatchToSpace"])
def test_space_batch_gradients_match_finite_differences(op):
    rng = np.random.default_rng(5)
    shape = (2, 2, 3, 5) if op == "SpaceToBatch" else (8, 2, 2, 3)
    args = {"block_size": 2, "pad_t": 1, "pad_l": 0, "pad_b": 0, "pad_r": 1}
    (y,) = run_op(op, {"x": rng.standard_normal(shape)}, ["y"], **args)
    feeds = {"x": rng.standard_normal(shape), "r": rng.standard_normal(y.shape)}

    def build(net):
        getattr(net, op)("x", "y", **args)
        return weighted_mean_head(net, "y")

    _, ours = autodiff_grads(build, feeds, ["x"])
    np.testing.assert_allclose(ours["x"], numeric_grads(build, feeds, ["x"])["x"], rtol=1e-6, atol=1e-9)


def test_space_to_batch_refuses_another_layout():
    with pytest.raises(OperatorError, match="order 'NCHW'"):
        run_op("SpaceToBatch", {"x": np.zeros((1, 2, 2, 1), np.float32)}, ["y"], order="NHWC")


@pytest.mark.parametrize("op_type", ["Softsign", "Sin", "Abs"])
def test_an_in_place_op_whose_gradient_reads_its_input_cannot_be_differentiated(op_type):
    """Caffe2's gradient makers refuse these (the input is gone); its Exp (reading Y) is fine."""
    from caffe2.python import core

    op = core.CreateOperator(op_type, ["X"], ["X"])
    with pytest.raises(ValueError, match=f"in-place {op_type}"):
        core.GradientRegistry.GetGradientForOp(op, ["X_grad"])
    with pytest.raises(ValueError, match="in.place"):
        core.GradientRegistry.GetBackwardPass([op], {"X": "X_grad"})
    grad_ops, _ = core.GradientRegistry.GetBackwardPass([core.CreateOperator("Exp", ["X"], ["X"])], {"X": "X_grad"})
    assert [o.type for o in grad_ops] == ["ExpGradient"]


@pytest.mark.parametrize("module", ["caffe2_volumetric", "caffe2_space_batch"])
def test_module_examples_run(module):
    import doctest
    import importlib

    mod = importlib.import_module(f"asyncnet.ops.{module}")
    result = doctest.testmod(mod, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
