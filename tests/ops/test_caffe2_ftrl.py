"""Ftrl / SparseFtrl against a plain-Python FTRL-proximal written per coordinate, and
optimizer.build_ftrl's ops."""

from __future__ import annotations

import math

import numpy as np
import pytest

import asyncnet as an
from asyncnet.errors import OperatorError

pytestmark = pytest.mark.timeout(120)

HYPER = {"alpha": 0.05, "beta": 0.5, "lambda1": 0.02, "lambda2": 0.03}


def _coordinate(w, n, z, g, alpha, beta, lambda1, lambda2):
    """McMahan et al.'s per-coordinate FTRL-proximal, one step, in Python floats."""
    sigma = (math.sqrt(n + g * g) - math.sqrt(n)) / alpha
    z = z + g - sigma * w
    n = n + g * g
    w = 0.0 if abs(z) <= lambda1 else -(z - math.copysign(lambda1, z)) / ((beta + math.sqrt(n)) / alpha + lambda2)
    return w, n, z


def _reference(w, nz, g, **hyper):
    w, nz = w.astype(np.float64).copy(), nz.astype(np.float64).copy()
    for i in np.ndindex(w.shape):
        w[i], nz[i][0], nz[i][1] = _coordinate(w[i], nz[i][0], nz[i][1], float(g[i]), **hyper)
    return w, nz


def _once(ws, op, inputs, outputs, **args):
    ws.run_operator_once(an.OperatorDef(op, inputs, outputs, args))


@pytest.mark.parametrize("alpha_input", [False, True])
def test_ftrl_matches_per_coordinate_ftrl_over_steps(alpha_input):
    rng = np.random.default_rng(0)
    w, nz = rng.normal(size=(4, 3)), np.stack([rng.uniform(0, 1, (4, 3)), rng.normal(size=(4, 3))], -1)
    ws = an.Workspace()
    ws.feed("w", w.copy())
    ws.feed("nz", nz.copy())
    ws.feed("a", np.array([HYPER["alpha"]]))
    args = {k: v for k, v in HYPER.items() if not (alpha_input and k == "alpha")}
    for step in range(3):
        g = rng.normal(size=(4, 3))
        ws.feed("g", g)
        _once(ws, "Ftrl", ["w", "nz", "g"] + (["a"] if alpha_input else []), ["w", "nz"], **args)
        w, nz = _reference(w, nz, g, **HYPER)
        np.testing.assert_allclose(ws.fetch("w"), w, rtol=1e-12, atol=1e-14, err_msg=f"step {step}")
        np.testing.assert_allclose(ws.fetch("nz"), nz, rtol=1e-12, atol=1e-14)


def test_sparse_ftrl_updates_only_the_indexed_rows():
    rng = np.random.default_rng(1)
    w, nz = rng.normal(size=(5, 2)).astype(np.float32), np.zeros((5, 2, 2), np.float32)
    idx, g = np.array([3, 0], np.int64), rng.normal(size=(2, 2)).astype(np.float32)
    ws = an.Workspace()
    for k, v in {"w": w.copy(), "nz": nz.copy(), "i": idx, "g": g}.items():
        ws.feed(k, v)
    _once(ws, "SparseFtrl", ["w", "nz", "i", "g"], ["w", "nz"], **HYPER)
    rw, rnz = _reference(w[idx], nz[idx], g, **HYPER)
    np.testing.assert_allclose(ws.fetch("w")[idx], rw, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(ws.fetch("nz")[idx], rnz, rtol=1e-5, atol=1e-7)
    rest = [1, 2, 4]
    np.testing.assert_array_equal(ws.fetch("w")[rest], w[rest])
    ws.feed("i", np.array([5], np.int64))
    with pytest.raises(OperatorError, match=r"indices in \[0, 5\)"):
        _once(ws, "SparseFtrl", ["w", "nz", "i", "g"], ["w", "nz"], **HYPER)


def test_ftrl_refuses_accumulators_of_the_wrong_shape():
    ws = an.Workspace()
    ws.feed("w", np.zeros(3, np.float32))
    ws.feed("nz", np.zeros((3,), np.float32))
    ws.feed("g", np.zeros(3, np.float32))
    with pytest.raises(OperatorError, match=r"nz of shape \(3, 2\)"):
        _once(ws, "Ftrl", ["w", "nz", "g"], ["w", "nz"])


def test_build_ftrl_trains_a_model_with_ftrl_ops():
    from caffe2.python import brew, model_helper, optimizer, workspace

    workspace.ResetWorkspace()
    m = model_helper.ModelHelper(name="ftrl_model")
    fc = brew.fc(m, "x", "y", dim_in=3, dim_out=1)
    dist = m.net.SquaredL2Distance([fc, "t"], "d")
    loss = m.net.AveragedLoss(dist, "loss")
    m.AddGradientOperators([loss])
    optimizer.build_ftrl(m, alpha=0.5, beta=1.0, lambda1=0.0, lambda2=0.0)
    assert [op.type for op in m.net.Proto().op].count("Ftrl") == 2
    rng = np.random.default_rng(2)
    x = rng.normal(size=(16, 3)).astype(np.float32)
    workspace.FeedBlob("x", x)
    workspace.FeedBlob("t", (x @ np.array([[1.0], [-2.0], [0.5]], np.float32)).reshape(16, 1))
    workspace.RunNetOnce(m.param_init_net)
    assert workspace.FetchBlob("y_w_ftrl_nz").shape == (1, 3, 2)
    workspace.CreateNet(m.net)
    losses = []
    for _ in range(30):
        workspace.RunNet(m.net)
        losses.append(float(workspace.FetchBlob("loss")))
    assert losses[-1] < 0.5 * losses[0]
