"""Every first operator against a numpy reference, over hypothesis-generated inputs."""

import numpy as np
import pytest
from _op_run import run
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from asyncnet import OperatorError

floats = st.floats(-10, 10, allow_nan=False, width=32)


def arrays(shape, dtype=np.float32):
    return hnp.arrays(dtype, shape, elements=floats)


@st.composite
def broadcastable_pair(draw):
    shapes = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=4))
    return draw(arrays(shapes.input_shapes[0])), draw(arrays(shapes.input_shapes[1]))


@pytest.mark.parametrize("op, ref", [("Add", np.add), ("Sub", np.subtract), ("Mul", np.multiply)])
@given(pair=broadcastable_pair())
def test_binary_ops(op, ref, pair):
    a, b = pair
    np.testing.assert_array_equal(run(op, [a, b]), ref(a, b))


@given(pair=broadcastable_pair())
def test_div(pair):
    a, b = pair
    b = np.where(np.abs(b) < 0.5, np.float32(1), b)
    np.testing.assert_array_equal(run("Div", [a, b]), a / b)


def test_int_div_truncates_and_zero_is_error():
    np.testing.assert_array_equal(run("Div", [np.array([7, -7], np.int32), np.array([2, 2], np.int32)]), [3, -3])
    with pytest.raises(OperatorError, match="ZeroDivisionError"):
        run("Div", [np.array([1], np.int32), np.array([0], np.int32)])


@given(xs=st.integers(1, 4).flatmap(lambda n: st.lists(arrays((3, 2)), min_size=n, max_size=n)))
def test_sum(xs):
    expected = xs[0].copy()
    for x in xs[1:]:
        expected += x
    np.testing.assert_array_equal(run("Sum", xs), expected)


@given(x=arrays((2, 3)), s=st.floats(-4, 4, allow_nan=False))
def test_scale(x, s):
    out = run("Scale", [x], scale=s)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, x * np.float32(s))


@given(x=arrays((3, 4)))
def test_copy_is_a_new_array(x):
    out = run("Copy", [x])
    np.testing.assert_array_equal(out, x)
    assert out is not x


@given(
    data=st.data(), m=st.integers(1, 5), k=st.integers(1, 5), n=st.integers(1, 5), ta=st.booleans(), tb=st.booleans()
)
def test_matmul(data, m, k, n, ta, tb):
    a = data.draw(arrays((k, m) if ta else (m, k), np.float64))
    b = data.draw(arrays((n, k) if tb else (k, n), np.float64))
    ref = (a.T if ta else a) @ (b.T if tb else b)
    np.testing.assert_allclose(run("MatMul", [a, b], trans_a=ta, trans_b=tb), ref, rtol=1e-12, atol=1e-12)


@given(data=st.data(), m=st.integers(1, 5), n=st.integers(1, 5), extra=st.integers(1, 3))
def test_fc(data, m, n, extra):
    x = data.draw(arrays((m, 2, extra), np.float64))
    w = data.draw(arrays((n, 2 * extra), np.float64))
    b = data.draw(arrays((n,), np.float64))
    np.testing.assert_allclose(run("FC", [x, w, b]), x.reshape(m, -1) @ w.T + b, rtol=1e-12, atol=1e-12)


@given(x=arrays((3, 5)))
def test_activations(x):
    np.testing.assert_array_equal(run("Relu", [x]), np.maximum(x, 0))
    np.testing.assert_allclose(run("Sigmoid", [x]), 1 / (1 + np.exp(-x.astype(np.float64))), rtol=1e-6)
    np.testing.assert_allclose(run("Tanh", [x]), np.tanh(x), rtol=1e-6)


@given(x=arrays((2, 3, 4)), axis=st.integers(1, 2))
def test_softmax(x, axis):
    x2 = x.reshape(int(np.prod(x.shape[:axis])), -1).astype(np.float64)
    e = np.exp(x2 - x2.max(1, keepdims=True))
    ref = (e / e.sum(1, keepdims=True)).reshape(x.shape)
    out = run("Softmax", [x], axis=axis)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-7)


def test_sigmoid_no_overflow():
    out = run("Sigmoid", [np.array([-1000.0, 1000.0], np.float32)])
    np.testing.assert_array_equal(out, [0.0, 1.0])


@given(shape=st.lists(st.integers(0, 4), max_size=3), value=st.floats(-5, 5, allow_nan=False))
def test_constant_fill(shape, value):
    out = run("ConstantFill", [], shape=shape, value=value)
    np.testing.assert_array_equal(out, np.full(shape, value, np.float32))
    assert run("ConstantFill", [], shape=shape, value=3, dtype="int64").dtype == np.int64


def test_constant_fill_shape_from_input():
    x = np.zeros((2, 3))
    assert run("ConstantFill", [x], value=1.0, extra_shape=[4]).shape == (2, 3, 4)
    assert run("ConstantFill", [np.array([5, 1])], input_as_shape=True).shape == (5, 1)


@pytest.mark.parametrize(
    "op, kw",
    [("GaussianFill", {"mean": 1.0, "std": 2.0}), ("UniformFill", {"min": -1.0, "max": 3.0}), ("XavierFill", {})],
)
def test_random_fills_are_seeded(op, kw):
    a = run(op, [], shape=[50, 40], seed=7, **kw)
    b = run(op, [], shape=[50, 40], seed=7, **kw)
    c = run(op, [], shape=[50, 40], seed=8, **kw)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert a.dtype == np.float32 and a.shape == (50, 40)
    if op == "GaussianFill":
        ref = np.random.default_rng(7).normal(1.0, 2.0, (50, 40)).astype(np.float32)
        np.testing.assert_array_equal(a, ref)
        assert abs(a.mean() - 1.0) < 0.2 and abs(a.std() - 2.0) < 0.2
    if op == "UniformFill":
        assert a.min() >= -1.0 and a.max() < 3.0
    if op == "XavierFill":
        s = np.sqrt(3.0 / 40)
        assert np.abs(a).max() <= s and np.abs(a).max() > 0.9 * s


@pytest.mark.parametrize(
    "op, inputs, match",
    [
        ("Add", [np.ones(2, np.float32), np.ones(2, np.float64)], "one dtype"),
        ("Add", [np.ones(2), np.ones(3)], "do not broadcast"),
        ("Relu", [np.ones(2, np.int32)], "float array"),
        ("Relu", ["abc"], "numpy array"),
        ("MatMul", [np.ones((2, 3)), np.ones((2, 3))], "columns"),
        ("MatMul", [np.ones(3), np.ones((3, 2))], "axis_a=1 is out of range"),  # Caffe2's canonical_axis_index
        ("FC", [np.ones((2, 3)), np.ones((4, 3)), np.ones(5)], "b of shape"),
        ("Sum", [np.ones(2), np.ones(3)], "of shape"),
        ("Softmax", [object()], "numpy array"),
    ],
)
def test_bad_inputs_are_operator_errors(op, inputs, match):
    with pytest.raises(OperatorError, match=match):
        run(op, inputs)


def test_fill_errors():
    with pytest.raises(OperatorError, match="std >= 0"):
        run("GaussianFill", [], shape=[2], std=-1.0)
    with pytest.raises(OperatorError, match="min <= max"):
        run("UniformFill", [], shape=[2], min=2.0, max=1.0)
    with pytest.raises(OperatorError, match="shape"):
        run("XavierFill", [], shape=[])
