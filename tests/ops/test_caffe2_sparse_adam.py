"""SparseAdam against Caffe2's kernel written out (a loop over the indices in order) and against
asyncnet's dense Adam on every row."""

from __future__ import annotations

import numpy as np
import pytest

import asyncnet as an


def _caffe2_loop(p, m1, m2, idx, g, lr, it, b1=0.9, b2=0.999, eps=1e-5):
    """adam_op.h's SparseAdamOp (enableRAdam off), row by row in index order, in float64."""
    p, m1, m2 = p.astype(np.float64), m1.astype(np.float64), m2.astype(np.float64)
    t = it + 1
    correction = np.sqrt(1 - b2**t) / (1 - b1**t)
    steps = np.zeros_like(g, dtype=np.float64)
    for i, k in enumerate(idx):
        m1[k] = m1[k] * b1 + g[i] * (1 - b1)
        m2[k] = m2[k] * b2 + g[i] * g[i] * (1 - b2)
        steps[i] = correction * m1[k] / (np.sqrt(m2[k]) + eps)
        p[k] = p[k] + lr * steps[i]
    return p, m1, m2, steps


def _run(p, m1, m2, idx, g, lr, it, outputs=3, **args):
    ws = an.Workspace()
    for name, v in dict(p=p, m1=m1, m2=m2, i=idx, g=g).items():
        ws.feed(name, v.copy())
    ws.feed("lr", np.array([lr], np.float32))
    ws.feed("it", np.array([it], np.int64))
    net = an.Net("sparse_adam")
    outs = ["p", "m1", "m2", "ng"][:outputs]
    net.SparseAdam(["p", "m1", "m2", "i", "g", "lr", "it"], outs, **args)
    ws.run_net_once(net)
    return [ws.fetch(o) for o in outs]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("idx", [[4, 1, 2], [3, 0, 3, 3, 1]], ids=["distinct", "repeated"])
def test_sparse_adam_is_caffe2s_loop(idx):
    rng = np.random.default_rng(7)
    p = rng.standard_normal((6, 3)).astype(np.float32)
    m1 = rng.standard_normal((6, 3)).astype(np.float32) * 0.1
    m2 = rng.random((6, 3)).astype(np.float32) * 0.1
    idx = np.array(idx, np.int64)
    g = rng.standard_normal((idx.size, 3)).astype(np.float32)
    got = _run(p, m1, m2, idx, g, -0.01, 4, outputs=4)
    want = _caffe2_loop(p, m1, m2, idx, g, -0.01, 4)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6)
    untouched = np.setdiff1d(np.arange(6), idx)
    np.testing.assert_array_equal(got[0][untouched], p[untouched])


@pytest.mark.timeout(60)
def test_sparse_adam_on_every_row_is_dense_adam():
    rng = np.random.default_rng(3)
    p = rng.standard_normal((5, 4)).astype(np.float32)
    g = rng.standard_normal((5, 4)).astype(np.float32)
    zeros = np.zeros_like(p)
    sparse = _run(p, zeros, zeros, np.arange(5), g, -0.05, 0)
    ws = an.Workspace()
    for name, v in dict(p=p, m1=zeros, m2=zeros, g=g).items():
        ws.feed(name, v.copy())
    ws.feed("lr", np.array([-0.05], np.float32))
    ws.feed("it", np.array([0], np.int64))
    net = an.Net("dense_adam")
    net.Adam(["p", "m1", "m2", "g", "lr", "it"], ["p", "m1", "m2"])
    ws.run_net_once(net)
    for name, got in zip(("p", "m1", "m2"), sparse):
        np.testing.assert_allclose(got, ws.fetch(name), rtol=1e-5, atol=1e-6, err_msg=name)  # float32 rounding order


@pytest.mark.timeout(60)
def test_sparse_adam_refuses_bad_rows_and_indices():
    p = np.zeros((3, 2), np.float32)
    with pytest.raises(an.AsyncNetError, match=r"\[0, 3\)"):
        _run(p, p, p, np.array([5]), np.ones((1, 2), np.float32), -0.1, 0)
    with pytest.raises(an.AsyncNetError, match="rows of shape"):
        _run(p, p, p, np.array([0, 1]), np.ones((1, 2), np.float32), -0.1, 0)
