"""Edge cases hypothesis rarely draws: 0-d arrays, empty batches, int64 beyond 2**53."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncnet as an
from asyncnet.autodiff import add_gradient_ops

pytestmark = pytest.mark.timeout(60)


def run(op_type, inputs, n_out=1, **args):
    ws = an.Workspace()
    names = [f"in{i}" for i in range(len(inputs))]
    for n, v in zip(names, inputs):
        ws.feed(n, v)
    net = an.Net("t")
    net.add_op(op_type, names, [f"out{i}" for i in range(n_out)], **args)
    ws.run_net_once(net)
    res = [ws.fetch(f"out{i}") for i in range(n_out)]
    return res[0] if n_out == 1 else res


ZERO_D = [
    ("Add", 2, {}),
    ("Sub", 2, {}),
    ("Mul", 2, {}),
    ("Div", 2, {}),
    ("Scale", 1, {"scale": 2.0}),
    ("Relu", 1, {}),
    ("Tanh", 1, {}),
    ("Sigmoid", 1, {}),
    ("Sum", 2, {}),
    ("Copy", 1, {}),
    ("SumReduceLike", 2, {"scale": 2.0}),
    ("SigmoidGradient", 2, {}),
    ("TanhGradient", 2, {}),
    ("ReluGradient", 2, {}),
]


@pytest.mark.parametrize("op, n_in, args", ZERO_D)
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_0d_inputs_give_0d_arrays_not_numpy_scalars(op, n_in, args, dtype):
    # numpy ufuncs return np.float64 & co for 0-d inputs; a scalar blob is refused by the next op
    out = run(op, [np.array(0.5, dtype)] * n_in, **args)
    assert type(out) is np.ndarray and out.shape == () and out.dtype == dtype


def test_chain_of_elementwise_ops_on_0d_blobs():
    ws = an.Workspace()
    ws.feed("x", np.array(0.5))
    ws.feed("y", np.array(2.0))
    net = an.Net("t")
    net.Add(["x", "y"], "a")
    net.Tanh("a", "b")
    net.Relu("b", "c")
    net.Scale("c", "d", scale=2.0)
    net.Mul(["d", "x"], "e")
    net.Div(["e", "y"], "f")
    net.Sub(["f", "x"], "g")
    net.Sigmoid("g", "h")
    ws.run_net_once(net)
    a = 2.5
    expected = 1 / (1 + np.exp(-(2 * np.tanh(a) * 0.5 / 2.0 - 0.5)))
    np.testing.assert_allclose(ws.fetch("h"), expected)


def test_gradient_of_a_0d_bias_feeds_an_update_op():
    ws = an.Workspace()
    ws.feed("x", np.ones((4, 3), np.float32))
    ws.feed("b", np.array(0.5, np.float32))
    ws.feed("lr", np.array([0.1], np.float32))
    net = an.Net("t")
    net.Add(["x", "b"], "y")
    net.AveragedLoss("y", "loss")
    grads = add_gradient_ops(net, "loss", wrt=["b"])
    net.SGD(["b", grads["b"], "lr"], "b")
    ws.run_net_once(net)  # failed: SGD refused the np.float32 gradient of the 0-d bias
    assert type(ws.fetch(grads["b"])) is np.ndarray
    np.testing.assert_allclose(ws.fetch("b"), 0.4, rtol=1e-6)


def test_weighted_sum_of_0d_arrays_is_an_array():
    out = run("WeightedSum", [np.array(2.0), np.array([0.5]), np.array(4.0), np.array([0.25])])
    assert type(out) is np.ndarray and out == 2.0


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint64, np.int8])
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_integer_div_is_exact_truncation(dtype, data):
    info = np.iinfo(dtype)
    ints = st.integers(int(info.min), int(info.max))
    a = np.array(data.draw(st.lists(ints, min_size=1, max_size=6)), dtype)
    b = np.array(data.draw(st.lists(ints.filter(lambda v: v != 0), min_size=len(a), max_size=len(a))), dtype)
    expected = []
    for x, y in zip(a.tolist(), b.tolist()):  # Python ints: exact, then wrapped like C
        q = abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1)
        expected.append(np.array(q).astype(dtype) if info.min <= q <= info.max else np.array(info.min, dtype))
    np.testing.assert_array_equal(run("Div", [a, b]), np.array(expected, dtype))


def test_integer_div_beyond_float_precision():
    a = np.array([2**62 + 1, -(2**62) - 3, 7, -7], np.int64)
    b = np.array([1, 1, 2, 2], np.int64)
    np.testing.assert_array_equal(run("Div", [a, b]), [2**62 + 1, -(2**62) - 3, 3, -3])


def test_integer_scale_by_an_integral_factor_is_exact():
    x = np.array([2**62 + 1, -(2**53) - 1], np.int64)
    np.testing.assert_array_equal(run("Scale", [x], scale=1.0), x)
    np.testing.assert_array_equal(run("Scale", [x], scale=-1.0), -x)
    np.testing.assert_array_equal(run("Scale", [np.array([3, 5], np.int32)], scale=0.5), [1, 2])  # truncates
    np.testing.assert_array_equal(
        run("Scale", [np.array([100], np.int8)], scale=3.0), np.array([100], np.int8) * np.int8(3)
    )


@pytest.mark.parametrize("axis", [1, -1])
def test_fc_and_its_gradient_on_an_empty_batch(axis):
    x = np.zeros((0, 5), np.float32)
    w = np.ones((3, 5), np.float32)
    b = np.zeros(3, np.float32)
    y = run("FC", [x, w, b], axis=axis)
    assert y.shape == (0, 3) and y.dtype == np.float32
    dw, db, dx = run("FCGradient", [x, w, np.zeros((0, 3), np.float32)], n_out=3, axis=axis)
    assert dw.shape == (3, 5) and not dw.any() and db.shape == (3,) and dx.shape == (0, 5)


def test_softmax_and_gradient_on_empty_and_zero_width():
    for shape in [(0, 4), (2, 0), (0, 0, 3)]:
        x = np.zeros(shape, np.float32)
        assert run("Softmax", [x]).shape == shape
        assert run("SoftmaxGradient", [x, x]).shape == shape
