"""Shape, Size, HasElements and IsEmpty as Caffe2 defines them (caffe2/operators/shape_op.h,
utility_ops.h): int64 shapes and sizes, bool facts, and no gradient through them."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis.extra import numpy as hnp

import asyncnet as an
from asyncnet.autodiff import add_gradient_ops

pytestmark = pytest.mark.timeout(60)


def run(op_type: str, x, **args):
    ws, net = an.Workspace(), an.Net("n")
    ws.feed("x", x)
    getattr(net, op_type)("x", "y", **args)
    ws.run_net_once(net)
    return ws.fetch("y")


@settings(max_examples=40, deadline=None)
@given(x=hnp.arrays(np.float32, hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=4)))
def test_shape_size_and_emptiness(x):
    s = run("Shape", x)
    assert s.dtype == np.int64 and s.tolist() == list(x.shape)
    n = run("Size", x)
    assert n.dtype == np.int64 and n.shape == () and int(n) == x.size
    assert bool(run("HasElements", x)) == (x.size > 0)
    assert bool(run("IsEmpty", x)) == (x.size == 0)


def test_shape_axes_and_their_range():
    x = np.zeros((2, 3, 4), np.float32)
    assert run("Shape", x, axes=[2, 0]).tolist() == [4, 2]
    for axes in ([3], [-1]):
        with pytest.raises(an.OperatorError, match="out of range"):
            run("Shape", x, axes=axes)


def test_torch_inputs_give_torch_results():
    torch = pytest.importorskip("torch")
    x = torch.zeros(2, 5)
    s = run("Shape", x)
    assert isinstance(s, torch.Tensor) and s.dtype == torch.int64 and s.tolist() == [2, 5]
    assert isinstance(run("Size", x), torch.Tensor) and int(run("Size", x)) == 10


def test_shape_then_fill_from_it():
    # the zero state [N, H] of a recurrent net from the batch's size: Shape + Concat + ConstantFill
    ws, net = an.Workspace(), an.Net("n")
    ws.feed("x", np.zeros((7, 3), np.float32))
    ws.feed("h", np.array([5], np.int64))
    net.Shape("x", "n", axes=[0])
    net.Concat(["n", "h"], ["shape", "shape_info"], axis=0)
    net.ConstantFill("shape", "zeros", input_as_shape=True, value=0.0, dtype="float32")
    ws.run_net_once(net)
    assert ws.fetch("zeros").shape == (7, 5) and ws.fetch("zeros").dtype == np.float32


def test_no_gradient_through_shape():
    net = an.Net("t")
    net.Shape("x", "s")
    net.Cast("s", "sf", to=1, from_type=10)
    net.AveragedLoss("sf", "loss")
    with pytest.raises(an.NetDefinitionError, match="no gradient is registered for Shape"):
        add_gradient_ops(net, "loss", wrt=["x"])
