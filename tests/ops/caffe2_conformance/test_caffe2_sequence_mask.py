"""SequenceMask's modes (sequence, window, the four triangles), batch and repeat_from_axis,
against a numpy loop over the [batch, rows, cols, tail] view; the gradient against finite
differences."""

from __future__ import annotations

import numpy as np
import pytest
from _c2run import run_op
from _gradcheck_helpers import autodiff_grads, numeric_grads

import asyncnet as an

pytestmark = pytest.mark.timeout(120)

RULES = {
    "upper": lambda i, j, v: j > i,
    "lower": lambda i, j, v: j < i,
    "upperdiag": lambda i, j, v: j >= i,
    "lowerdiag": lambda i, j, v: j <= i,
    "sequence": lambda i, j, v: j >= v[i],
    "window": lambda i, j, v: j > v[i] + 1 or j < v[i] - 1,
}


def _reference(x, mode, v, view, fill):
    w = x.reshape(view).copy()
    for b in range(view[0]):
        for i in range(view[1]):
            for j in range(view[2]):
                if RULES[mode](i, j, v):
                    w[b, i, j, :] = fill
    return w.reshape(x.shape)


@pytest.mark.parametrize("mode", list(RULES))
@pytest.mark.parametrize("batch,axis,rep", [(-1, 2, None), (0, 2, None), (0, 1, 3), (1, 3, None)])
def test_modes_batch_and_repeat_match_a_loop(mode, batch, axis, rep):
    x = np.random.default_rng(0).uniform(size=(2, 3, 4, 2)).astype(np.float32)
    shape = x.shape
    stop = 4 if rep is None else rep
    view = (
        int(np.prod(shape[: batch + 1])),
        int(np.prod(shape[batch + 1 : axis])),
        int(np.prod(shape[axis:stop])),
        int(np.prod(shape[stop:])),
    )
    v = np.random.default_rng(1).integers(0, view[2], view[1]).astype(np.int32)
    inputs = {"x": x, "v": v} if mode in ("sequence", "window") else {"x": x}
    args = {"mode": mode, "axis": axis, "batch": batch, "fill_val": -7.0, "radius": 1}
    if rep is not None:
        args["repeat_from_axis"] = rep
    (y,) = run_op("SequenceMask", inputs, **args)
    np.testing.assert_array_equal(y, _reference(x, mode, v, view, -7.0))


@pytest.mark.parametrize("mode", ["window", "lowerdiag"])
def test_gradient_matches_finite_differences(mode):
    rng = np.random.default_rng(2)
    feeds = {"x": rng.uniform(size=(2, 3, 4)), "r": rng.uniform(0.5, 1.5, (2, 3, 4))}
    ins = ["x"]
    if mode == "window":
        feeds["c"] = np.array([0, 2, 3], np.int32)
        ins.append("c")

    def build(net: an.Net) -> str:
        net.SequenceMask(ins, "y", mode=mode, axis=2, batch=0, radius=1, fill_val=3.0)
        net.Mul(["y", "r"], "yr")
        return net.AveragedLoss("yr", "loss")

    _, ours = autodiff_grads(build, feeds, ["x"])
    np.testing.assert_allclose(ours["x"], numeric_grads(build, feeds, ["x"])["x"], rtol=1e-4, atol=1e-7)


def test_bad_axes_are_refused():
    with pytest.raises(Exception, match="batch < axis"):
        run_op("SequenceMask", {"x": np.zeros((2, 3), np.float32)}, mode="upper", axis=1, batch=1)
