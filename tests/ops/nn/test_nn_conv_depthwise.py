"""Depthwise Conv (one input channel per group, MobileNet's layers): values and gradients
against torch's conv2d and autograd, on the kernel numpy arrays take (torch's depthwise kernel
through zero-copy views when torch is installed) and on numpy's im2col kernel."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from _gradcheck_helpers import check_all, weighted_mean_head
from _nn_helpers import rand, run

from asyncnet.ops import conv as conv_module

pytestmark = pytest.mark.timeout(60)

CASES = [  # (N, C, multiplier, H, W, stride, pad)
    (1, 8, 1, 9, 9, 1, 1),
    (2, 6, 1, 8, 7, 2, 1),
    (2, 4, 2, 6, 6, 1, 0),
]


def _args(stride: int, pad: int, group: int) -> dict:
    return dict(kernel=3, stride=stride, pad=pad, group=group)


@pytest.mark.parametrize("numpy_only", [False, True], ids=["default", "im2col"])
@pytest.mark.parametrize("case", CASES)
def test_depthwise_conv_matches_torch(case, numpy_only, monkeypatch):
    if numpy_only:
        monkeypatch.setattr(conv_module, "_torch", lambda: None)
    n, c, mult, h, w, s, p = case
    x = rand(1, (n, c, h, w)).astype(np.float32)
    f = rand(2, (c * mult, 1, 3, 3)).astype(np.float32)
    b = rand(3, (c * mult,)).astype(np.float32)
    y = run("Conv", [x, f, b], **_args(s, p, c))
    ref = F.conv2d(torch.from_numpy(x), torch.from_numpy(f), torch.from_numpy(b), stride=s, padding=p, groups=c)
    assert y.dtype == np.float32 and y.shape == tuple(ref.shape)
    np.testing.assert_allclose(y, ref.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("numpy_only", [False, True], ids=["default", "im2col"])
def test_depthwise_conv_gradient_matches_torch_autograd(numpy_only, monkeypatch):
    if numpy_only:
        monkeypatch.setattr(conv_module, "_torch", lambda: None)
    n, c, s = 2, 4, 2
    x, f, b = rand(4, (n, c, 7, 7)), rand(5, (c, 1, 3, 3)), rand(6, (c,))
    y = run("Conv", [x, f, b], **_args(s, 1, c))
    feeds = {"x": x, "w": f, "b": b, "r": rand(7, y.shape)}

    def tfn(x, w, r, b):
        return (F.conv2d(x, w, b, stride=s, padding=1, groups=c) * r).mean()

    check_all(
        lambda net: weighted_mean_head(net, net.Conv(["x", "w", "b"], "y", **_args(s, 1, c))),
        tfn,
        feeds,
        ["x", "w", "b"],
    )
