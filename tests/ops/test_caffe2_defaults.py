"""Caffe2 behaviours at the edges of two ops: SquaredL2Distance of a 0-d pair and Cast's default type."""

from __future__ import annotations

import numpy as np
import pytest

import asyncnet as an


@pytest.mark.timeout(60)
def test_squared_l2_distance_of_a_0d_pair_is_one_row():
    # Caffe2's distance_op.cc: N = X.dim() > 0 ? X.dim32(0) : 1, an output of shape [N]
    ws = an.Workspace()
    ws.feed("x", np.array(3.0, np.float32))
    ws.feed("y", np.array(1.5, np.float32))
    net = an.Net("l2")
    net.SquaredL2Distance(["x", "y"], "d")
    net.SquaredL2DistanceGradient(["x", "y", "dd"], ["dx", "dy"])
    ws.feed("dd", np.array([2.0], np.float32))
    ws.run_net_once(net)
    np.testing.assert_allclose(ws.fetch("d"), [0.5 * 1.5**2])
    assert ws.fetch("dx").shape == () and float(ws.fetch("dx")) == pytest.approx(1.5 * 2.0)
    assert float(ws.fetch("dy")) == pytest.approx(-3.0)


@pytest.mark.timeout(60)
def test_cast_without_to_gives_float32():
    ws = an.Workspace()
    ws.feed("i", np.array([1, 2, 3], np.int64))
    net = an.Net("cast")
    net.Cast("i", "f")
    ws.run_net_once(net)
    out = ws.fetch("f")
    assert out.dtype == np.float32 and out.tolist() == [1.0, 2.0, 3.0]
