"""Pow, Swish, NanCheck, ReduceSum/Mean/Max/Min (axes, keepdims), ScatterAssign and
SparseMomentumSGDUpdate against numpy / torch, gradients against torch autograd (float64)."""

from __future__ import annotations

import numpy as np
import pytest

import asyncnet as an
from asyncnet.autodiff import add_gradient_ops
from asyncnet.errors import OperatorError

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.timeout(120)


def _once(ws, op: str, inputs: list[str], outputs: list[str], **args) -> None:
    ws.run_operator_once(an.OperatorDef(op, inputs, outputs, args))


def _run(op: str, inputs: dict[str, np.ndarray], wrt: list[str], **args):
    """Output Y and the gradients of mean(Y * R), R fixed random of Y's shape."""
    ws = an.Workspace()
    for name, value in inputs.items():
        ws.feed(name, value)
    net = an.Net(op)
    net.add_op(op, list(inputs), ["y"], **args)
    ws.run_net_once(net)
    r = np.random.default_rng(3).uniform(0.5, 1.5, ws.fetch("y").shape)
    ws.feed("r", r)
    net.Mul(["y", "r"], "yr")
    net.AveragedLoss("yr", "loss")
    grads = add_gradient_ops(net, "loss", wrt=wrt, dtype="float64")
    ws.run_net_once(net)
    return ws.fetch("y"), [ws.fetch(grads[w]) for w in wrt], r


def _torch(fn, arrays, r):
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    y = fn(*ts)
    (y * torch.tensor(r)).mean().backward()
    return y.detach().numpy(), [t.grad.numpy() for t in ts]


def _close(ours, ref):
    y, g = ours
    ry, rg = ref
    np.testing.assert_allclose(y, ry, rtol=1e-10, atol=1e-12)
    for a, b in zip(g, rg, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-10)


def test_pow_with_an_exponent_argument_matches_torch():
    x = np.random.default_rng(0).uniform(0.5, 2.0, (3, 4))
    y, g, r = _run("Pow", {"x": x}, ["x"], exponent=2.5)
    _close((y, g), _torch(lambda t: t**2.5, [x], r))


@pytest.mark.parametrize("e_shape", [(3, 4), (4,), (1, 4), ()])
def test_pow_with_an_exponent_tensor_broadcasts_and_sums_its_gradient(e_shape):
    rng = np.random.default_rng(1)
    x, e = rng.uniform(0.5, 2.0, (3, 4)), rng.uniform(-1.0, 2.0, e_shape)
    y, g, r = _run("Pow", {"x": x, "e": e}, ["x", "e"])
    _close((y, g), _torch(lambda a, b: a**b, [x, e], r))


def test_pow_legacy_broadcast_on_an_axis():
    rng = np.random.default_rng(2)
    x, e = rng.uniform(0.5, 2.0, (2, 3, 4)), rng.uniform(-1.0, 2.0, (3,))
    y, g, r = _run("Pow", {"x": x, "e": e}, ["x", "e"], broadcast=1, axis=1)
    _close((y, g), _torch(lambda a, b: a ** b.reshape(1, 3, 1), [x, e], r))


def test_pow_needs_exactly_one_exponent():
    ws = an.Workspace()
    ws.feed("x", np.ones(2, np.float32))
    with pytest.raises(OperatorError, match="needs an exponent"):
        _once(ws, "Pow", ["x"], ["y"])
    with pytest.raises(OperatorError, match="both"):
        _once(ws, "Pow", ["x", "x"], ["y"], exponent=2.0)


def test_swish_matches_x_times_sigmoid_and_its_gradient():
    x = np.random.default_rng(4).normal(0, 3, (5, 6))
    x[0, :2] = [-800.0, 800.0]  # no overflow warning or nan at the ends
    y, g, r = _run("Swish", {"x": x}, ["x"])
    _close((y, g), _torch(lambda t: t * torch.sigmoid(t), [x], r))


def test_swish_gradient_in_place_on_dy():
    rng = np.random.default_rng(5)
    x, dy = rng.normal(size=(3, 4)).astype(np.float32), rng.normal(size=(3, 4)).astype(np.float32)
    ws = an.Workspace()
    ws.feed("x", x)
    _once(ws, "Swish", ["x"], ["y"])
    ws.feed("g", dy.copy())
    _once(ws, "SwishGradient", ["x", "y", "g"], ["g"])
    s = 1 / (1 + np.exp(-x))
    np.testing.assert_allclose(ws.fetch("g"), dy * (x * s + s * (1 - x * s)), rtol=1e-5, atol=1e-6)


def test_nan_check_passes_finite_values_and_names_a_nan():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y, g, _ = _run("NanCheck", {"x": x.astype(np.float64)}, ["x"])
    np.testing.assert_array_equal(y, x)
    ws = an.Workspace()
    x[1, 2] = np.nan
    ws.feed("x", x)
    ws.feed("other", np.array([np.inf], np.float32))
    with pytest.raises(OperatorError, match=r"\(1, 2\) in input 0 'x'"):
        _once(ws, "NanCheck", ["x"], ["y"])
    ws.feed("x", np.ones(2, np.float32))
    with pytest.raises(OperatorError, match="input 1 'other'"):
        _once(ws, "NanCheck", ["x", "other"], ["y"])


@pytest.mark.parametrize("kind", ["Sum", "Mean", "Max", "Min"])
@pytest.mark.parametrize(("axes", "keepdims"), [([], 1), ([0, 2], 0), ([-1], 1), ([1], 0)])
def test_reduce_over_axes_matches_torch(kind, axes, keepdims):
    x = np.random.default_rng(6).normal(size=(2, 3, 4))
    y, g, r = _run(f"Reduce{kind}", {"x": x}, ["x"], axes=axes, keepdims=keepdims)
    dims = tuple(axes) or (0, 1, 2)

    def ref(t):
        if kind in ("Sum", "Mean"):
            return getattr(torch, kind.lower())(t, dim=dims, keepdim=bool(keepdims))
        return getattr(torch, "amax" if kind == "Max" else "amin")(t, dim=dims, keepdim=bool(keepdims))

    _close((y, g), _torch(ref, [x], r))


def test_reduce_refuses_an_axis_out_of_range():
    ws = an.Workspace()
    ws.feed("x", np.ones((2, 3), np.float32))
    with pytest.raises(OperatorError, match="axis 2 out of range"):
        _once(ws, "ReduceSum", ["x"], ["y"], axes=[2])


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.int32, np.int64])
def test_scatter_assign_writes_rows_in_place(dtype):
    rng = np.random.default_rng(7)
    d = rng.integers(0, 9, (5, 2, 3)).astype(dtype)
    idx = np.array([4, 1], np.int32)
    s = rng.integers(0, 9, (2, 2, 3)).astype(dtype)
    ws = an.Workspace()
    ws.feed("d", d)
    ws.feed("i", idx)
    ws.feed("s", s)
    _once(ws, "ScatterAssign", ["d", "i", "s"], ["d"])
    ref = d.copy()
    ref[idx] = s
    np.testing.assert_array_equal(ws.fetch("d"), ref)
    ws.feed("i", np.array([5], np.int32))
    with pytest.raises(OperatorError, match=r"indices in \[0, 5\)"):
        _once(ws, "ScatterAssign", ["d", "i", "s"], ["d"])


@pytest.mark.parametrize("nesterov", [False, True])
def test_sparse_momentum_sgd_matches_momentum_sgd_on_the_rows(nesterov):
    rng = np.random.default_rng(8)
    w, m = rng.normal(size=(6, 3)).astype(np.float32), rng.uniform(size=(6, 3)).astype(np.float32)
    idx = np.array([4, 0, 2], np.int64)
    g = rng.normal(size=(3, 3)).astype(np.float32)
    lr = np.array([0.3], np.float32)
    ws = an.Workspace()
    for k, v in {"g": g, "m": m.copy(), "lr": lr, "w": w.copy(), "i": idx, "gr": g, "mr": m[idx], "wr": w[idx]}.items():
        ws.feed(k, v)
    _once(ws, "SparseMomentumSGDUpdate", ["g", "m", "lr", "w", "i"], ["s", "m", "w"], momentum=0.9, nesterov=nesterov)
    _once(ws, "MomentumSGDUpdate", ["gr", "mr", "lr", "wr"], ["sr", "mr", "wr"], momentum=0.9, nesterov=nesterov)
    np.testing.assert_allclose(ws.fetch("s"), ws.fetch("sr"), rtol=1e-6)
    np.testing.assert_allclose(ws.fetch("m")[idx], ws.fetch("mr"), rtol=1e-6)
    np.testing.assert_allclose(ws.fetch("w")[idx], ws.fetch("wr"), rtol=1e-6)
    rest = np.setdiff1d(np.arange(6), idx)
    np.testing.assert_array_equal(ws.fetch("w")[rest], w[rest])
    np.testing.assert_array_equal(ws.fetch("m")[rest], m[rest])


@pytest.mark.parametrize("weighted", [False, True])
def test_spatial_softmax_with_loss_matches_torch_cross_entropy(weighted):
    rng = np.random.default_rng(9)
    x = rng.normal(size=(2, 3, 4, 5))
    lab = rng.integers(-1, 3, (2, 4, 5)).astype(np.int32)
    w = rng.uniform(0.2, 1.0, (2, 4, 5))
    inputs = {"x": x, "l": lab, **({"w": w} if weighted else {})}
    ws = an.Workspace()
    for k, v in inputs.items():
        ws.feed(k, v)
    net = an.Net("sswl")
    net.SpatialSoftmaxWithLoss(list(inputs), ["p", "loss"], scale=2.0)
    grads = add_gradient_ops(net, "loss", wrt=["x"], dtype="float64")
    ws.run_net_once(net)
    t = torch.tensor(x, requires_grad=True)
    tl = torch.tensor(lab, dtype=torch.long)
    per = torch.nn.functional.cross_entropy(t, tl, ignore_index=-1, reduction="none")
    tw = torch.tensor(w if weighted else np.ones_like(w)) * (tl != -1)
    loss = 2.0 * (per * tw).sum() / tw.sum()
    loss.backward()
    np.testing.assert_allclose(ws.fetch("p"), torch.softmax(t, 1).detach().numpy(), rtol=1e-10)
    np.testing.assert_allclose(ws.fetch("loss"), loss.item(), rtol=1e-10)
    np.testing.assert_allclose(ws.fetch(grads["x"]), t.grad.numpy(), rtol=1e-8, atol=1e-12)


def test_spatial_softmax_with_loss_all_ignored_gives_zero_loss_and_gradient():
    ws = an.Workspace()
    ws.feed("x", np.ones((1, 2, 2, 2), np.float32))
    ws.feed("l", -np.ones((1, 2, 2), np.int32))
    net = an.Net("ignored")
    net.SpatialSoftmaxWithLoss(["x", "l"], ["p", "loss"])
    grads = add_gradient_ops(net, "loss", wrt=["x"])
    ws.run_net_once(net)
    assert float(ws.fetch("loss")) == 0.0
    np.testing.assert_array_equal(ws.fetch(grads["x"]), np.zeros((1, 2, 2, 2), np.float32))


@pytest.mark.parametrize("order", ["NCHW", "NHWC"])
@pytest.mark.parametrize("size", [1, 3, 5])
def test_lrn_matches_torch_local_response_norm(order, size):
    x = np.random.default_rng(10).normal(size=(2, 6, 3, 4))
    xin = x if order == "NCHW" else x.transpose(0, 2, 3, 1)
    args = {"size": size, "alpha": 0.3, "beta": 0.75, "bias": 2.0, "order": order}
    y, g, r = _run("LRN", {"x": xin}, ["x"], **args)
    r_nchw = r if order == "NCHW" else r.transpose(0, 3, 1, 2)
    ry, rg = _torch(lambda t: torch.nn.functional.local_response_norm(t, size, 0.3, 0.75, 2.0), [x], r_nchw)
    if order == "NHWC":
        ry, rg = ry.transpose(0, 2, 3, 1), [rg[0].transpose(0, 2, 3, 1)]
    _close((y, g), (ry, rg))


def test_lrn_even_size_window_and_its_gradient_follow_caffe2():
    """size 4: channels c-1 .. c+2 (Caffe2's pre_pad (size-1)/2), checked by finite differences."""
    x = np.random.default_rng(11).normal(size=(1, 5, 2, 2))
    ws = an.Workspace()
    ws.feed("x", x)
    _once(ws, "LRN", ["x"], ["y", "s"], size=4, alpha=0.5, beta=0.6, bias=1.5)
    sq = np.pad(x**2, ((0, 0), (1, 2), (0, 0), (0, 0)))
    scale = 1.5 + 0.5 / 4 * sum(sq[:, i : i + 5] for i in range(4))
    np.testing.assert_allclose(ws.fetch("s"), scale, rtol=1e-12)
    np.testing.assert_allclose(ws.fetch("y"), x * scale**-0.6, rtol=1e-12)
    dy = np.random.default_rng(12).normal(size=x.shape)
    ws.feed("dy", dy)
    _once(ws, "LRNGradient", ["x", "y", "s", "dy"], ["dx"], size=4, alpha=0.5, beta=0.6, bias=1.5)
    eps, num = 1e-6, np.zeros_like(x)
    for i in np.ndindex(x.shape):
        for sign in (1, -1):
            xp = x.copy()
            xp[i] += sign * eps
            ws.feed("xp", xp)
            _once(ws, "LRN", ["xp"], ["yp"], size=4, alpha=0.5, beta=0.6, bias=1.5)
            num[i] += sign * (ws.fetch("yp") * dy).sum() / (2 * eps)
    np.testing.assert_allclose(ws.fetch("dx"), num, rtol=1e-6, atol=1e-8)


def test_lrn_window_wider_than_the_channels_sums_them_all():
    x = np.random.default_rng(13).normal(size=(2, 3, 2))
    ws = an.Workspace()
    ws.feed("x", x)
    _once(ws, "LRN", ["x"], ["y", "s"], size=10**9 + 1, alpha=1.0, beta=0.5, bias=1.0)
    total = (x**2).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(ws.fetch("s"), np.broadcast_to(1.0 + total / (10**9 + 1), x.shape), rtol=1e-12)
