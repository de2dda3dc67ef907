"""LambdaRankNdcg against a pairwise loop written from its definition (NDCG-weighted pairwise
logistic loss), a two-item case worked by hand, and its gradient op."""

from __future__ import annotations

import math

import numpy as np
import pytest
from _c2run import run_op
from hypothesis import given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.timeout(120)


def _rank_discounts(values):
    order = sorted(range(len(values)), key=lambda i: (-values[i], -i))  # largest first; ties: later first
    d = [0.0] * len(values)
    for rank, i in enumerate(order, start=1):
        d[i] = 1 / math.log2(rank + 1)
    return d


def _pairwise(y, r):
    n = len(y)
    ideal = _rank_discounts(r)
    idcg = sum(2 ** r[i] * ideal[i] for i in range(n))
    d = _rank_discounts(y)
    loss, dy = 0.0, [0.0] * n
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            w = abs((2 ** r[i] - 2 ** r[j]) * (d[i] - d[j])) / idcg
            s = y[i] - y[j] if r[i] > r[j] else y[j] - y[i]
            loss += w * math.log1p(math.exp(-s))
            dy[i] += w * ((0.0 if r[i] > r[j] else 1.0) - 1 / (1 + math.exp(y[i] - y[j])))
    return loss, dy


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**16), n=st.integers(1, 12), levels=st.integers(2, 5))
def test_loss_and_dy_match_a_pairwise_loop(seed, n, levels):
    rng = np.random.default_rng(seed)
    y = rng.standard_normal(n)
    r = rng.integers(0, levels, n).astype(np.float64)
    loss, dy = run_op("LambdaRankNdcg", {"y": y, "r": r}, ["loss", "dy"])
    ref_loss, ref_dy = _pairwise(y.tolist(), r.tolist())
    assert loss.shape == () and dy.dtype == np.float64
    np.testing.assert_allclose(float(loss), ref_loss, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(dy, ref_dy, rtol=1e-10, atol=1e-12)
    (back,) = run_op("LambdaRankNdcgGradient", {"y": y, "dy": dy, "g": np.array([0.5])}, ["b"])
    np.testing.assert_allclose(back, 0.5 * dy)


def test_two_items_in_the_wrong_order_worked_by_hand():
    """Gains 2, 1; the ideal order gives idcg = 2 + 1/log2(3); both pairs weigh 1 - 1/log2(3)
    and have margin -1."""
    loss, dy = run_op("LambdaRankNdcg", {"y": np.array([0.0, 1.0]), "r": np.array([1.0, 0.0])}, ["loss", "dy"])
    d2 = 1 / math.log2(3)
    w, idcg = 1 - d2, 2 + d2
    assert float(loss) == pytest.approx(2 * w * math.log1p(math.e) / idcg, rel=1e-12)
    sig = 1 / (1 + math.exp(-1))  # sigmoid(y_1 - y_0)
    np.testing.assert_allclose(dy, [w * (0 - sig) / idcg, w * (1 - (1 - sig)) / idcg], rtol=1e-12)


def test_the_gradient_maker_scales_the_saved_dy():
    import asyncnet as an
    from asyncnet.autodiff import add_gradient_ops

    ws = an.Workspace()
    ws.feed("y", np.array([0.3, -0.2, 0.9]))
    ws.feed("r", np.array([2.0, 0.0, 1.0]))
    net = an.Net("n")
    net.LambdaRankNdcg(["y", "r"], ["loss", "dy"])
    names = add_gradient_ops(net, "loss", wrt=["y"], dtype="float64")
    ws.run_net_once(net)
    np.testing.assert_allclose(ws.fetch(names["y"]), ws.fetch("dy"))


def test_module_example_runs():
    import doctest

    from asyncnet.ops import caffe2_listwise

    result = doctest.testmod(caffe2_listwise, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
