"""SpatialBNGradient on numpy arrays runs torch's fused ``native_batch_norm_backward`` from
asyncnet.ops.norm.TORCH_MIN_BN elements (NCHW, float32/float64): the same gradients as the
numpy kernel within float rounding, against torch autograd and finite differences (float64),
numpy arrays out; the other forms keep the numpy kernel."""

from __future__ import annotations

import numpy as np
import pytest
from _gradcheck_helpers import check_all, weighted_mean_head
from _nn_helpers import rand

import asyncnet as an
from asyncnet.autodiff import add_gradient_ops
from asyncnet.ops import norm as norm_mod

torch = pytest.importorskip("torch")
F = torch.nn.functional

pytestmark = pytest.mark.timeout(120)


def _grads(x: np.ndarray, order: str, threshold: int, monkeypatch: pytest.MonkeyPatch) -> dict[str, np.ndarray]:
    """dX, dscale, dbias of mean(SpatialBN(x) * r) with the torch kernel from ``threshold`` elements."""
    monkeypatch.setattr(norm_mod, "TORCH_MIN_BN", threshold)
    c = x.shape[-1] if order == "NHWC" else x.shape[1]
    rng = np.random.default_rng(3)
    nchw = (x.shape[0], c, *x.shape[1:-1]) if order == "NHWC" else x.shape
    r = rng.standard_normal(nchw).astype(x.dtype)
    feeds = {
        "x": x,
        "s": rng.standard_normal(c).astype(x.dtype),
        "b": rng.standard_normal(c).astype(x.dtype),
        "rm": np.zeros(c, x.dtype),
        "rv": np.ones(c, x.dtype),
        "r": np.ascontiguousarray(np.moveaxis(r, 1, -1)) if order == "NHWC" else r,
    }
    net = an.Net("bn")
    net.SpatialBN(["x", "s", "b", "rm", "rv"], ["y", "rm", "rv", "sm", "siv"], order=order)
    grads = add_gradient_ops(net, weighted_mean_head(net, "y"), wrt=["x", "s", "b"])
    with an.Workspace() as ws:
        for k, v in feeds.items():
            ws.feed(k, v.copy())
        ws.run_net_once(net)
        return {k: ws.fetch(grads[k]) for k in ("x", "s", "b")}


@pytest.mark.parametrize("shape", [(16, 4, 8, 8), (32, 3, 50), (4, 2, 4, 8, 8)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_torch_engine_matches_the_numpy_kernel(shape, dtype, monkeypatch):
    x = np.random.default_rng(0).standard_normal(shape).astype(dtype) * 3 + 1
    numpy_engine = _grads(x, "NCHW", 10**9, monkeypatch)
    torch_engine = _grads(x, "NCHW", 1, monkeypatch)
    tol = 1e-4 if dtype == np.float32 else 1e-10
    for k, want in numpy_engine.items():
        got = torch_engine[k]
        assert type(got) is np.ndarray and got.dtype == want.dtype and got.shape == want.shape, k
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max(), err_msg=k)


@pytest.mark.parametrize("shape", [(3, 2), (2, 3, 2), (2, 2, 3, 2), (3, 2, 2, 1, 2)])
def test_torch_engine_gradient_matches_autograd_and_finite_differences(shape, monkeypatch):
    monkeypatch.setattr(norm_mod, "TORCH_MIN_BN", 1)
    c = shape[1]
    feeds = {
        "x": rand(10, shape),
        "s": rand(11, (c,)),
        "b": rand(12, (c,)),
        "rm": np.zeros(c),
        "rv": np.ones(c),
        "r": rand(13, shape),
    }

    def build(net):
        net.SpatialBN(["x", "s", "b", "rm", "rv"], ["y", "rm", "rv", "sm", "siv"])
        return weighted_mean_head(net, "y")

    def tfn(x, s, b, rm, rv, r):
        return (F.batch_norm(x, rm.clone(), rv.clone(), s, b, training=True, eps=1e-5) * r).mean()

    calls = []
    real = norm_mod._torch_gradient
    monkeypatch.setattr(norm_mod, "_torch_gradient", lambda *a: calls.append(real(*a)) or calls[-1])
    check_all(build, tfn, feeds, ["x", "s", "b"], fd_atol=1e-5)
    assert calls and all(c is not None for c in calls)  # every gradient ran torch's kernel


def test_the_choice_depends_on_the_form_and_size_only():
    big = np.ones((16, 4, 8, 8), np.float32)
    vec = np.ones(4, np.float32)
    assert norm_mod._torch_gradient(big, vec, big, vec, vec, 1e-5) is not None  # 4096 elements, float32
    assert norm_mod._torch_gradient(big[:8], vec, big[:8], vec, vec, 1e-5) is None  # 2048: numpy
    half = big.astype(np.float16)
    assert norm_mod._torch_gradient(half, vec, half, vec, vec, 1e-5) is None
    flat = np.ones((1024, 4), np.float32)
    assert norm_mod._torch_gradient(flat, vec, flat, vec, vec, 1e-5) is not None  # [N, C] too


def test_nhwc_and_read_only_inputs(monkeypatch):
    x = np.random.default_rng(1).standard_normal((8, 4, 4, 16)).astype(np.float32)
    nhwc = _grads(x, "NHWC", 1, monkeypatch)  # NHWC keeps the numpy kernel
    nchw = _grads(np.ascontiguousarray(x.transpose(0, 3, 1, 2)), "NCHW", 1, monkeypatch)
    np.testing.assert_allclose(nhwc["x"], nchw["x"].transpose(0, 2, 3, 1), rtol=1e-4, atol=1e-7)
    for k in ("s", "b"):
        np.testing.assert_allclose(nhwc[k], nchw[k], rtol=1e-4, atol=1e-6)
    ro = np.ones((16, 4, 8, 8), np.float32)
    ro[0, 0, 0, 0] = 2
    ro.flags.writeable = False
    vec = np.ones(4, np.float32)
    dx, ds, db = norm_mod._torch_gradient(ro, vec, ro, vec, vec, 1e-5)
    assert dx.shape == ro.shape and ds.shape == db.shape == (4,)


@pytest.mark.parametrize("shape", [(6, 3), (4, 3, 5), (4, 3, 2, 5)])
def test_torch_tensors_run_torchs_native_kernels(shape, monkeypatch):
    native = []
    real = norm_mod._native
    monkeypatch.setattr(norm_mod, "_native", lambda *a: native.append(real(*a)) or native[-1])
    rng = np.random.default_rng(5)
    c = shape[1]
    x, r = rng.standard_normal(shape) * 2 + 1, rng.standard_normal(shape)
    s, b, rm, rv = rng.standard_normal(c), rng.standard_normal(c), rng.standard_normal(c), rng.random(c) + 0.5
    feeds = {k: torch.tensor(v) for k, v in dict(x=x, s=s, b=b, rm=rm, rv=rv, r=r).items()}
    net = an.Net("bn_torch")
    net.SpatialBN(["x", "s", "b", "rm", "rv"], ["y", "rm", "rv", "sm", "siv"], momentum=0.8, epsilon=1e-3)
    grads = add_gradient_ops(net, weighted_mean_head(net, "y"), wrt=["x", "s", "b"], dtype="float64")
    with an.Workspace() as ws:
        for k, v in feeds.items():
            ws.feed(k, v)
        ws.run_net_once(net)
        got = {k: ws.fetch(k) for k in ("y", "rm", "rv", "siv", *grads.values())}
    want_rm, want_rv = torch.tensor(rm), torch.tensor(rv)
    tt = {k: torch.tensor(v, requires_grad=True) for k, v in dict(x=x, s=s, b=b).items()}
    y = F.batch_norm(tt["x"], want_rm, want_rv, tt["s"], tt["b"], training=True, momentum=0.2, eps=1e-3)
    (y * torch.tensor(r)).mean().backward()
    assert all(isinstance(v, torch.Tensor) for v in got.values())
    assert got["rm"] is feeds["rm"] and got["rv"] is feeds["rv"]  # updated in place
    torch.testing.assert_close(got["y"], y.detach(), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got["rm"], want_rm, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got["rv"], want_rv, rtol=1e-12, atol=1e-12)
    axes = (0, *range(2, len(shape)))
    np.testing.assert_allclose(got["siv"].numpy(), 1 / np.sqrt(x.var(axis=axes) + 1e-3), rtol=1e-12)
    for k in ("x", "s", "b"):
        torch.testing.assert_close(got[grads[k]], tt[k].grad, rtol=1e-10, atol=1e-12)
    assert native == [True, True]  # the forward and the gradient
