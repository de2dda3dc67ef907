"""Gradient-check helpers: run a net's autodiff gradients, finite differences, torch autograd."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

import asyncnet as an
from asyncnet.autodiff import add_gradient_ops

Build = Callable[[an.Net], str]  # appends forward ops, returns the loss blob name


def autodiff_grads(
    build: Build, feeds: dict[str, np.ndarray], wrt: list[str], dtype: str = "float64"
) -> tuple[float, dict[str, np.ndarray]]:
    net = an.Net("grad")
    loss = build(net)
    names = add_gradient_ops(net, loss, wrt=wrt, dtype=dtype)
    ws = an.Workspace()
    for k, v in feeds.items():
        ws.feed(k, v.copy())
    ws.run_net_once(net)
    return float(ws.fetch(loss)), {w: ws.fetch(names[w]) for w in wrt}


def numeric_grads(
    build: Build, feeds: dict[str, np.ndarray], wrt: list[str], eps: float = 1e-6
) -> dict[str, np.ndarray]:
    """Central differences of the forward net's loss (use float64 feeds)."""
    net = an.Net("fd")
    loss = build(net)
    ws = an.Workspace()
    for k, v in feeds.items():
        ws.feed(k, v.copy())
    ws.create_net(net)

    def f() -> float:
        ws.run_net("fd")
        return float(ws.fetch(loss))

    out = {}
    for w in wrt:
        x = ws.fetch(w)
        g = np.zeros_like(x)
        for idx in np.ndindex(x.shape):
            orig = x[idx]
            x[idx] = orig + eps
            hi = f()
            x[idx] = orig - eps
            lo = f()
            x[idx] = orig
            g[idx] = (hi - lo) / (2 * eps)
        out[w] = g
    return out


def torch_grads(
    fn: Callable[..., torch.Tensor], feeds: dict[str, np.ndarray], wrt: list[str]
) -> tuple[float, dict[str, np.ndarray]]:
    """``fn(**tensors)`` -> scalar loss; gradients of the ``wrt`` tensors by torch autograd."""
    t = {k: torch.tensor(v, requires_grad=k in wrt) for k, v in feeds.items()}
    loss = fn(**t)
    loss.backward()
    return float(loss.detach()), {w: t[w].grad.numpy() for w in wrt}


def check_all(
    build: Build,
    torch_fn: Callable[..., torch.Tensor],
    feeds: dict[str, np.ndarray],
    wrt: list[str],
    rtol: float = 1e-6,
    atol: float = 1e-9,
    fd_atol: float = 1e-6,
) -> None:
    """Autodiff (float64) == torch autograd, and == finite differences."""
    loss, ours = autodiff_grads(build, feeds, wrt)
    tloss, theirs = torch_grads(torch_fn, feeds, wrt)
    np.testing.assert_allclose(loss, tloss, rtol=1e-9, atol=1e-12)
    fd = numeric_grads(build, feeds, wrt)
    for w in wrt:
        assert ours[w].shape == feeds[w].shape and ours[w].dtype == feeds[w].dtype, w
        np.testing.assert_allclose(ours[w], theirs[w], rtol=rtol, atol=atol, err_msg=f"torch, d/d{w}")
        np.testing.assert_allclose(ours[w], fd[w], rtol=1e-4, atol=fd_atol, err_msg=f"finite differences, d/d{w}")


def weighted_mean_head(net: an.Net, y: str) -> str:
    """loss = mean(y * r): every element of y gets a distinct weight (feed "r")."""
    net.Mul([y, "r"], "yr")
    return net.AveragedLoss("yr", "loss")
