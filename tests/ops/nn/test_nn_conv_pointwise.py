"""1x1 Conv (stride 1, no pads, one group: one matmul per example on numpy) against torch's
conv2d, in NCHW and NHWC, with and without bias, float32 and float64."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from _nn_helpers import rand, run

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize(("n", "c", "m", "h", "w"), [(1, 3, 5, 4, 4), (3, 8, 4, 5, 7)])
def test_pointwise_conv_matches_torch(dtype, bias, n, c, m, h, w):
    x = rand(1, (n, c, h, w)).astype(dtype)
    f = rand(2, (m, c, 1, 1)).astype(dtype)
    b = rand(3, (m,)).astype(dtype)
    y = run("Conv", [x, f, b] if bias else [x, f], kernel=1)
    ref = F.conv2d(torch.from_numpy(x), torch.from_numpy(f), torch.from_numpy(b) if bias else None).numpy()
    assert y.dtype == dtype and y.shape == ref.shape and y.flags.c_contiguous
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(y, ref, rtol=tol, atol=tol)


def test_pointwise_conv_nhwc_matches_torch():
    x = rand(4, (2, 3, 4, 6))  # NHWC: C = 6
    f = rand(5, (5, 1, 1, 6))  # [M, kh, kw, C]
    y = run("Conv", [x, f], kernel=1, order="NHWC")
    ref = F.conv2d(torch.from_numpy(x).permute(0, 3, 1, 2), torch.from_numpy(f).permute(0, 3, 1, 2))
    np.testing.assert_allclose(y, ref.permute(0, 2, 3, 1).numpy(), rtol=1e-12, atol=1e-12)
