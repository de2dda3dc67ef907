"""DropoutGrad may write dX over dY, as Caffe2's DropoutGradient (AllowInplace {0, 0}); an
in-place Dropout is then differentiable."""

from __future__ import annotations

import numpy as np
import pytest

import asyncnet as an
from asyncnet.autodiff import add_gradient_ops

pytestmark = pytest.mark.timeout(60)


def test_dropout_grad_in_place_matches_out_of_place():
    dy = np.arange(6, dtype=np.float32).reshape(2, 3)
    mask = np.array([[True, False, True], [False, True, True]])
    ws = an.Workspace()
    ws.feed("dy", dy.copy())
    ws.feed("mask", mask)
    ws.run_operator_once(an.OperatorDef("DropoutGrad", ["dy", "mask"], ["dx"], {"ratio": 0.5}))
    ws.run_operator_once(an.OperatorDef("DropoutGrad", ["dy", "mask"], ["dy"], {"ratio": 0.5}))
    np.testing.assert_array_equal(ws.fetch("dy"), ws.fetch("dx"))
    np.testing.assert_array_equal(ws.fetch("dx"), np.where(mask, dy * 2, 0))


def test_in_place_dropout_is_differentiable():
    x = np.linspace(-1, 1, 8).astype(np.float32)
    ws = an.Workspace()
    ws.feed("x", x.copy())
    net = an.Net("drop_inplace")
    net.add_op("Dropout", ["x"], ["x", "mask"], ratio=0.0)
    net.AveragedLoss("x", "loss")
    grads = add_gradient_ops(net, "loss")
    ws.run_net_once(net)
    np.testing.assert_allclose(ws.fetch(grads["x"]), np.full(8, 1 / 8, np.float32))
