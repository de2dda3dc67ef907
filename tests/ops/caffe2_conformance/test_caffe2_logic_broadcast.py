"""Comparison, logic and Cast ops, and Caffe2's legacy broadcast=1/axis, from Caffe2's tests.

Sources: caffe2/python/operator_test/elementwise_ops_test.py (comparisons and logic ops against
numpy), elementwise_op_broadcast_test.py (the four legacy broadcast cases and their gradients),
cast_op_test.py and caffe2.proto's TensorProto.DataType numbers.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _gradcheck_helpers import check_all
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncnet as an

pytestmark = pytest.mark.timeout(60)
FEW = settings(max_examples=15, deadline=None)


def run(op: str, inputs: dict[str, np.ndarray], n_out: int = 1, **args):
    ws = an.Workspace()
    for k, v in inputs.items():
        ws.feed(k, v)
    net = an.Net("t")
    outs = [f"out{i}" for i in range(n_out)]
    getattr(net, op)(list(inputs), outs, **args)
    ws.run_net_once(net)
    return ws.fetch(outs[0]) if n_out == 1 else [ws.fetch(o) for o in outs]


COMPARE = {
    "LT": np.less,
    "LE": np.less_equal,
    "GT": np.greater,
    "GE": np.greater_equal,
    "EQ": np.equal,
    "NE": np.not_equal,
}
LOGIC = {"And": np.logical_and, "Or": np.logical_or, "Xor": np.logical_xor}


@pytest.mark.parametrize("op", sorted(COMPARE))
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64, np.float64, np.bool_])
@FEW
@given(data=st.data())
def test_comparisons_against_numpy(op, dtype, data):
    shape = data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    a = rng.integers(-2, 3, size=shape).astype(dtype)  # small integers: many ties for LE/GE/EQ
    b = rng.integers(-2, 3, size=shape[-1:]).astype(dtype)  # numpy broadcasting of the last dim
    c = run(op, {"a": a, "b": b})
    assert c.dtype == np.bool_ and c.shape == shape
    np.testing.assert_array_equal(c, COMPARE[op](a, b))


@pytest.mark.parametrize("op", sorted(LOGIC))
def test_logic_ops_against_numpy(op):
    rng = np.random.default_rng(0)
    a, b = rng.random((3, 4)) > 0.5, rng.random((4,)) > 0.5
    np.testing.assert_array_equal(run(op, {"a": a, "b": b}), LOGIC[op](a, b))
    np.testing.assert_array_equal(run("Not", {"a": a}), ~a)
    with pytest.raises(an.OperatorError, match="bool"):
        run(op, {"a": a.astype(np.float32), "b": b.astype(np.float32)})
    with pytest.raises(an.OperatorError, match="bool"):
        run("Not", {"a": a.astype(np.int32)})


def test_comparison_errors():
    with pytest.raises(an.OperatorError, match="one dtype"):
        run("LT", {"a": np.zeros(3, np.float32), "b": np.zeros(3, np.float64)})
    with pytest.raises(an.OperatorError, match="broadcast"):
        run("EQ", {"a": np.zeros(3), "b": np.zeros(4)})


# elementwise_op_broadcast_test.py: (A shape, B shape, args, B as numpy must see it)
LEGACY_CASES = [
    ((2, 3, 4, 5), (4, 5), {}, (4, 5)),  # no axis: B matches A's last dims
    ((2, 3, 4, 5), (3, 4), {"axis": 1}, (3, 4, 1)),  # intermediate dims
    ((2, 3, 4, 5), (2,), {"axis": 0}, (2, 1, 1, 1)),  # the first dim
    ((2, 3, 4, 5), (1, 4, 1), {"axis": 1}, (1, 4, 1)),  # single-element dims at both ends
    ((2, 3, 4, 5), (1,), {}, ()),  # one element: a scalar
    ((2, 3, 4, 5), (3,), {"axis_str": "C"}, (3, 1, 1)),  # axis named by NCHW's letter
]
ARITH = {
    "Add": (np.add, torch.add),
    "Sub": (np.subtract, torch.sub),
    "Mul": (np.multiply, torch.mul),
    "Div": (np.divide, torch.div),
}


@pytest.mark.parametrize("a_shape,b_shape,args,b_seen", LEGACY_CASES)
@pytest.mark.parametrize("op", sorted(ARITH))
def test_legacy_broadcast_forward(op, a_shape, b_shape, args, b_seen):
    rng = np.random.default_rng(1)
    a = rng.random(a_shape).astype(np.float32)
    b = (rng.random(b_shape) + 0.5).astype(np.float32)
    c = run(op, {"a": a, "b": b}, broadcast=1, **args)
    assert c.shape == a_shape and c.dtype == np.float32
    np.testing.assert_array_equal(c, ARITH[op][0](a, b.reshape(b_seen)))
    g = run("GT", {"a": a, "b": b}, broadcast=1, **args)
    np.testing.assert_array_equal(g, a > b.reshape(b_seen))


@pytest.mark.parametrize("a_shape,b_shape,args,b_seen", LEGACY_CASES[1:4])
@pytest.mark.parametrize("op", sorted(ARITH))
def test_legacy_broadcast_gradients(op, a_shape, b_shape, args, b_seen):
    a_shape = tuple(min(d, 3) for d in a_shape)  # smaller: finite differences per element
    b_shape = tuple(min(d, 3) for d in b_shape)
    b_seen = tuple(min(d, 3) for d in b_seen)
    rng = np.random.default_rng(2)
    feeds = {"a": rng.normal(size=a_shape), "b": rng.random(b_shape) + 0.5, "r": rng.normal(size=a_shape)}

    def build(net):
        getattr(net, op)(["a", "b"], "c", broadcast=1, **args)
        net.Mul(["c", "r"], "cr")
        return net.AveragedLoss("cr", "loss")

    tfn = ARITH[op][1]
    check_all(build, lambda a, b, r: (tfn(a, b.reshape(b_seen)) * r).mean(), feeds, ["a", "b"])


def test_legacy_broadcast_rules_from_caffe2():
    a = np.zeros((2, 3, 4), np.float32)
    with pytest.raises(an.OperatorError, match="dimension mismatch"):
        run("Add", {"a": a, "b": np.zeros(3, np.float32)}, broadcast=1)  # suffix 4 != 3
    with pytest.raises(an.OperatorError, match="out of range"):
        run("Add", {"a": a, "b": np.zeros((3, 4), np.float32)}, broadcast=1, axis=2)
    with pytest.raises(an.OperatorError, match="at most"):
        run("Add", {"a": np.zeros(4, np.float32), "b": np.zeros((2, 4), np.float32)}, broadcast=1)
    with pytest.raises(an.NetDefinitionError, match="without broadcast=1"):
        run("Add", {"a": a, "b": a}, axis=1)
    with pytest.raises(an.NetDefinitionError, match="together"):
        run("Mul", {"a": a, "b": a}, broadcast=1, axis=1, axis_str="C")
    with pytest.raises(an.NetDefinitionError, match="only with input 0"):
        an.Net("inplace_b").Add(["a", "b"], "b", broadcast=1)
    # without broadcast=1 numpy's rule applies: (3,) would align with A's last dim
    with pytest.raises(an.OperatorError, match="do not broadcast"):
        run("Add", {"a": a, "b": np.zeros(3, np.float32)})


CAFFE2_ENUM = {
    1: np.float32,
    2: np.int32,
    3: np.uint8,
    5: np.bool_,
    6: np.uint8,
    7: np.int8,
    8: np.uint16,
    9: np.int16,
    10: np.int64,
    12: np.float16,
    13: np.float64,
}


@pytest.mark.parametrize("to,dtype", sorted(CAFFE2_ENUM.items()))
def test_cast_to_caffe2_enum_numbers(to, dtype):
    x = np.array([-1.5, 0.0, 0.7, 2.9], np.float32)
    y = run("Cast", {"x": x}, to=to)
    assert y.dtype == dtype
    if dtype in (np.int8, np.int16, np.int32, np.int64):
        np.testing.assert_array_equal(y, [-1, 0, 0, 2])  # C++ conversion truncates toward zero
    elif dtype is np.bool_:
        np.testing.assert_array_equal(y, [True, False, True, True])


def test_cast_names_and_errors():
    x = np.array([1, 0, 3], np.int64)
    for to, dtype in [
        ("FLOAT", np.float32),
        ("float", np.float32),
        ("INT32", np.int32),
        ("bool", np.bool_),
        ("DOUBLE", np.float64),
        ("float64", np.float64),
        ("int64", np.int64),
    ]:
        assert run("Cast", {"x": x}, to=to).dtype == dtype, to
    for bad in (0, 4, 14, 99, "STRING", "complex64", "nonsense"):
        with pytest.raises(an.NetDefinitionError, match="Cast to="):
            run("Cast", {"x": x}, to=bad)
    assert run("Cast", {"x": x}).dtype == np.float32  # no `to`: FLOAT, Caffe2's cast::GetCastDataType default


def test_cast_gradient_casts_back_and_needs_from_type():
    from asyncnet.autodiff import add_gradient_ops

    ws = an.Workspace()
    ws.feed("x", np.array([1.0, -2.0, 3.0], np.float64))
    net = an.Net("g")
    net.Cast("x", "xf", to="float", from_type=13)
    net.AveragedLoss("xf", "loss")
    names = add_gradient_ops(net, "loss", wrt=["x"], dtype="float32")
    ws.run_net_once(net)
    dx = ws.fetch(names["x"])
    assert dx.dtype == np.float64
    np.testing.assert_allclose(dx, np.full(3, 1 / 3))
    bad = an.Net("g2")
    bad.Cast("x", "xf", to="float")
    bad.AveragedLoss("xf", "loss")
    with pytest.raises(an.NetDefinitionError, match="from_type"):
        add_gradient_ops(bad, "loss", wrt=["x"])
