"""Conv on numpy arrays picks torch's kernel for wide filters (asyncnet.ops.conv.TORCH_MIN_REDUCTION):
the same values as the im2col kernel within float32 rounding, numpy arrays out, for every geometry."""

import numpy as np
import pytest

import asyncnet as an
from asyncnet.autodiff import add_gradient_ops
from asyncnet.ops import conv as conv_mod

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.timeout(120)

GEOMETRIES = [
    dict(pad=1),
    dict(pad_t=0, pad_l=1, pad_b=2, pad_r=1),  # asymmetric: torch needs the padded input
    dict(stride=2, pad=1),
    dict(dilation=2, pad=2),
    dict(group=2, pad=1),
    dict(order="NHWC", pad=1),
]


def _run(args: dict, reduction: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    grp = args.get("group", 1)
    n, c, m, hw = 3, 16, 8, 5
    x = rng.standard_normal((n, c, hw, hw)).astype(np.float32)
    w = rng.standard_normal((m, c // grp, 3, 3)).astype(np.float32)
    if args.get("order") == "NHWC":
        x, w = x.transpose(0, 2, 3, 1).copy(), w.transpose(0, 2, 3, 1).copy()
    with an.Workspace() as ws:
        ws.feed("x", x)
        ws.feed("w", w)
        ws.feed("b", rng.standard_normal(m).astype(np.float32))
        net = an.Net("c")
        y = net.Conv(["x", "w", "b"], "y", **args)
        add_gradient_ops(net, net.AveragedLoss(net.Mul([y, y], "y2"), "loss"), wrt=["x", "w", "b"])
        old = conv_mod.TORCH_MIN_REDUCTION
        conv_mod.TORCH_MIN_REDUCTION = reduction
        try:
            ws.run_net_once(net)
        finally:
            conv_mod.TORCH_MIN_REDUCTION = old
        return {k: ws.fetch(k) for k in ("y", "x_grad", "w_grad", "b_grad") if k in ws}


@pytest.mark.parametrize("args", GEOMETRIES, ids=[str(a) for a in GEOMETRIES])
def test_torch_engine_matches_im2col(args):
    numpy_engine = _run(args, reduction=10**9)
    torch_engine = _run(args, reduction=1)
    assert set(numpy_engine) == set(torch_engine) >= {"y", "w_grad"}
    for k, want in numpy_engine.items():
        got = torch_engine[k]
        assert isinstance(got, np.ndarray) and got.dtype == want.dtype and got.shape == want.shape, k
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=k)


def test_the_choice_depends_on_the_filter_width_only():
    x = np.zeros((2, 16, 4, 4), np.float32)
    assert conv_mod._torch_wins(x, np.zeros((8, 16, 3, 3), np.float32)) is torch  # 144 >= 128
    assert conv_mod._torch_wins(x, np.zeros((8, 8, 3, 3), np.float32)) is None  # 72: im2col
    assert conv_mod._torch_wins(x.astype(np.float16), np.zeros((8, 16, 3, 3), np.float16)) is None
