"""GivenTensorFill and its typed variants, ConstantFill's Caffe2 dtype rules, StopGradient and
NO_GRADIENT (Caffe2's filler_op.cc, given_tensor_fill_op.cc, stop_gradient.cc and the test
caffe2/python/operator_test/given_tensor_fill_op_test.py)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import asyncnet as an
from asyncnet.autodiff import add_gradient_ops

pytestmark = pytest.mark.timeout(60)

# Caffe2's TensorProto.DataType numbers (core.DataType)
FLOAT, INT32, BOOL, INT64, DOUBLE = 1, 2, 5, 10, 13


def run_fill(op_type: str, inputs: dict[str, np.ndarray] | None = None, **args) -> np.ndarray:
    ws, net = an.Workspace(), an.Net("fill")
    for name, value in (inputs or {}).items():
        ws.feed(name, value)
    getattr(net, op_type)(list(inputs or {}), "Y", **args)
    ws.run_net_once(net)
    return ws.fetch("Y")


@settings(max_examples=40, deadline=None)
@given(
    x=hnp.arrays(np.int32, hnp.array_shapes(min_dims=1, max_dims=4, max_side=5), elements=st.integers(-100, 100)),
    t=st.sampled_from(
        [
            (FLOAT, np.float32, "GivenTensorFill"),
            (INT32, np.int32, "GivenTensorIntFill"),
            (BOOL, np.bool_, "GivenTensorBoolFill"),
            (DOUBLE, np.float64, "GivenTensorDoubleFill"),
        ]
    ),
)
def test_given_tensor_fill_as_caffe2s_test(x: np.ndarray, t: tuple[int, type, str]) -> None:
    # the Caffe2 test, as written there: values passed as a (1, size) array, dtype as the enum
    x = x.astype(t[1])
    y = run_fill(t[2], shape=x.shape, dtype=t[0], values=x.reshape((1, x.size)))
    assert y.dtype == x.dtype
    np.testing.assert_array_equal(y, x)


def test_given_tensor_fill_variants_dtypes_and_shape_sources() -> None:
    assert run_fill("GivenTensorFill", shape=[2], values=[1, 2]).dtype == np.float32
    assert run_fill("GivenTensorFill", shape=[2], values=[1.5, 2], dtype="float64").dtype == np.float64
    assert run_fill("GivenTensorInt64Fill", shape=[3], values=[1, 2, 3]).dtype == np.int64
    assert run_fill("GivenTensorInt16Fill", shape=[1], values=[7]).dtype == np.int16
    y = run_fill("GivenTensorFill", {"like": np.zeros((2, 1))}, values=[1, 2, 3, 4, 5, 6], extra_shape=[3])
    np.testing.assert_array_equal(y, np.arange(1, 7, dtype=np.float32).reshape(2, 1, 3))
    y = run_fill("GivenTensorIntFill", {"s": np.array([3, 1])}, input_as_shape=True, values=[4, 5, 6])
    assert y.shape == (3, 1) and y.dtype == np.int32
    assert run_fill("GivenTensorFill", shape=[0], values=[]).shape == (0,)


@pytest.mark.parametrize(
    "args",
    [
        {"values": 3},
        {"values": 0.5, "shape": [1]},
        {"values": [1.0], "shape": 3},
        {"values": [1.0], "shape": -2.5},
        {"values": [1.0], "shape": [10**20]},
        {"values": [1.0, 2.0], "shape": [3]},
    ],
)
def test_given_tensor_fill_bad_args_are_a_definition_error(args: dict) -> None:
    # found by fuzzing: the op's own check ran before the arg types were checked (TypeError, OverflowError)
    from asyncnet.errors import NetDefinitionError

    with pytest.raises(NetDefinitionError, match="GivenTensorFill"):
        run_fill("GivenTensorFill", **args)


def test_given_tensor_fill_runs_again_with_fresh_arrays() -> None:
    ws, net = an.Workspace(), an.Net("fill")
    net.GivenTensorFill([], "Y", shape=[2], values=[1.0, 2.0])
    n = ws.create_net(net)
    n.run()
    ws.fetch("Y")[0] = 99.0  # an in-place update of the result must not change the op's values
    n.run()
    np.testing.assert_array_equal(ws.fetch("Y"), [1.0, 2.0])


@pytest.mark.parametrize(
    "op_type, args, match",
    [
        ("GivenTensorFill", {"shape": [2, 2], "values": [1.0, 2.0, 3.0]}, "holds 4 values, but `values` has 3"),
        ("GivenTensorIntFill", {"shape": [1], "values": [1.5]}, "expected int values"),
        ("GivenTensorInt64Fill", {"shape": [1], "values": [True]}, "expected int values"),
        ("GivenTensorBoolFill", {"shape": [1], "values": [2]}, "bool values"),
        ("GivenTensorFill", {"shape": [1]}, "values"),
        ("GivenTensorFill", {"shape": [1], "values": [1.0], "dtype": "complex"}, "expected one of"),
    ],
)
def test_given_tensor_fill_bad_definitions_fail_at_creation(op_type: str, args: dict, match: str) -> None:
    with pytest.raises(an.NetDefinitionError, match=match):
        getattr(an.Net("bad"), op_type)([], "Y", **args)


def test_given_tensor_fill_size_from_input_checked_at_run_time() -> None:
    with pytest.raises(an.OperatorError, match="holds 6 values, but `values` has 2"):
        run_fill("GivenTensorFill", {"like": np.zeros((2, 3))}, values=[1.0, 2.0])


def test_given_tensor_fill_torch_library() -> None:
    torch = pytest.importorskip("torch")
    y = run_fill("GivenTensorFill", shape=[2], values=[1.0, 2.0], library="torch")
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float32
    assert y.tolist() == [1.0, 2.0]


@pytest.mark.parametrize(
    "args, dtype",
    [
        ({"value": 1.5}, np.float32),
        ({"value": 3}, np.int64),
        ({"value": True}, np.int64),
        ({}, np.float32),
        ({"value": 3, "dtype": FLOAT}, np.float32),
        ({"value": 2.0, "dtype": INT32}, np.int32),
        ({"value": 1, "dtype": "DOUBLE"}, np.float64),
        ({"value": 1, "dtype": "float16"}, np.float16),
    ],
)
def test_constant_fill_dtype_as_caffe2(args: dict, dtype: type) -> None:
    # filler_op.h: dtype is a TensorProto.DataType (default FLOAT); without it, the value's type decides
    y = run_fill("ConstantFill", shape=[2], **args)
    assert y.dtype == dtype
    np.testing.assert_array_equal(y, np.full(2, args.get("value", 0.0), dtype))


@settings(max_examples=40, deadline=None)
@given(value=st.floats(allow_nan=True, allow_infinity=True), dtype=st.sampled_from(["float16", "float32", "float64"]))
def test_constant_fill_shaped_like_a_scalar_rounds_as_np_full(value: float, dtype: str) -> None:
    # the loss gradient's seed (a 0-d input) takes a one-call path: the same bits as np.full's
    ws = an.Workspace()
    ws.feed("loss", np.zeros((), np.float32))
    net = an.Net("f")
    net.ConstantFill("loss", "g", value=value, dtype=dtype)
    with np.errstate(over="ignore"):
        ws.run_net_once(net)
        want = np.full((), value, dtype)
    got = ws.fetch("g")
    assert got.shape == () and got.dtype == want.dtype and got.tobytes() == want.tobytes()


def test_constant_fill_unknown_dtype_number_fails_at_creation() -> None:
    with pytest.raises(an.NetDefinitionError, match="TensorProto.DataType"):
        an.Net("bad").ConstantFill([], "Y", shape=[1], dtype=4)  # STRING: not a tensor type here


def test_stop_gradient_forward_copies_or_works_in_place() -> None:
    ws, net = an.Workspace(), an.Net("sg")
    x = np.arange(3, dtype=np.float32)
    ws.feed("x", x)
    net.StopGradient("x", "y")
    ws.run_net_once(net)
    y = ws.fetch("y")
    np.testing.assert_array_equal(y, x)
    y[0] = 7.0
    assert ws.fetch("x")[0] == 0.0  # a copy, as Caffe2's CopyFrom
    net2 = an.Net("sg2")
    net2.StopGradient("x", "x")
    ws.run_net_once(net2)
    np.testing.assert_array_equal(ws.fetch("x"), x)


def test_stop_gradient_cuts_the_gradient_as_torch_detach() -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    feeds = {
        "x": rng.standard_normal((4, 3)),
        "w1": rng.standard_normal((5, 3)),
        "b1": rng.standard_normal(5),
        "w2": rng.standard_normal((2, 5)),
        "b2": rng.standard_normal(2),
    }
    net = an.Net("t")
    net.FC(["x", "w1", "b1"], "h")
    net.StopGradient("h", "hs")
    net.FC(["hs", "w2", "b2"], "a")
    net.FC(["h", "w2", "b2"], "b")  # a second path that still carries the gradient to w1
    net.Sum(["a", "b"], "y")
    net.AveragedLoss("y", "loss")
    grads = add_gradient_ops(net, "loss", wrt=["w1", "b1", "w2", "b2"])
    ws = an.Workspace()
    for k, v in feeds.items():
        ws.feed(k, v)
    ws.run_net_once(net)

    t = {k: torch.tensor(v, requires_grad=True) for k, v in feeds.items()}
    h = t["x"] @ t["w1"].T + t["b1"]
    y = (h.detach() @ t["w2"].T + t["b2"]) + (h @ t["w2"].T + t["b2"])
    y.mean().backward()
    for name, g in grads.items():
        np.testing.assert_allclose(ws.fetch(g), t[name].grad.numpy(), rtol=1e-10, atol=1e-12)


def test_stop_gradient_alone_leaves_no_path() -> None:
    net = an.Net("t")
    net.FC(["x", "w", "b"], "h")
    net.StopGradient("h", "h")
    net.AveragedLoss("h", "loss")
    with pytest.raises(an.NetDefinitionError, match=r"no gradient of 'loss' reaches \['w'\]"):
        add_gradient_ops(net, "loss", wrt=["w"])


def test_fills_on_the_loss_path_cut_it_as_no_gradient() -> None:
    # Caffe2's NO_GRADIENT(ConstantFill): a fill shaped like X gives X no gradient, and no error
    net = an.Net("t")
    net.FC(["x", "w", "b"], "h")
    net.ConstantFill("h", "zeros", value=0.0)
    net.Add(["h", "zeros"], "y")
    net.AveragedLoss("y", "loss")
    grads = add_gradient_ops(net, "loss", wrt=["w", "b"])
    assert set(grads) == {"w", "b"}
    assert not any(op.type.startswith("ConstantFill") and op.outputs == ["zeros_grad"] for op in net.to_def().ops)


def test_accuracy_on_the_path_is_still_an_error() -> None:
    # Caffe2: SHOULD_NOT_DO_GRADIENT(Accuracy) -- unlike NO_GRADIENT, asking through it is an error
    net = an.Net("t")
    net.Accuracy(["p", "label"], "acc")
    with pytest.raises(an.NetDefinitionError, match="no gradient is registered for Accuracy"):
        add_gradient_ops(net, "acc")


def test_typed_given_fill_ignores_dtype_as_caffe2() -> None:
    # Caffe2's GivenTensorFillOp<T> reads `dtype` only when T is float (its own test fills
    # doubles with dtype=INT32)
    assert run_fill("GivenTensorInt64Fill", shape=[1], values=[3], dtype=INT64).dtype == np.int64
    assert run_fill("GivenTensorIntFill", shape=[1], values=[3], dtype=FLOAT).dtype == np.int32
    got = run_fill("GivenTensorDoubleFill", shape=[2], values=[1.5, 2.0], dtype=INT32)
    assert got.dtype == np.float64 and got.tolist() == [1.5, 2.0]
    with pytest.raises(an.NetDefinitionError, match="dtype"):
        an.Net("bad").GivenTensorIntFill([], "Y", shape=[1], values=[3], dtype="no_such_type")


# -- the other fills of Caffe2's filler_op.cc (tests after caffe2/python/operator_test/filler_ops_test.py)
@pytest.mark.parametrize("shape", [[3, 3], [5, 5, 5], [7, 7, 7, 7], [3, 5], [5, 3]])
def test_diagonal_fill_float_as_caffe2(shape: list[int]) -> None:
    expect = np.zeros(shape)
    np.fill_diagonal(expect, 2.5, wrap=True)  # Caffe2's test reference (wrap: its flat stride on tall 2-D)
    y = run_fill("DiagonalFill", shape=shape, value=2.5)
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, expect)


def test_diagonal_fill_int_and_bad_shapes() -> None:
    y = run_fill("DiagonalFill", shape=[3, 3], dtype=INT32, value=2)
    assert y.dtype == np.int32 and y.tolist() == [[2, 0, 0], [0, 2, 0], [0, 0, 2]]
    for shape in ([3], [2, 2, 3]):
        with pytest.raises(an.OperatorError, match="DiagonalFill"):
            run_fill("DiagonalFill", shape=shape, value=1.0)


@settings(max_examples=30, deadline=None)
@given(lengths=st.lists(st.integers(0, 10), max_size=10))
def test_lengths_range_fill_as_caffe2(lengths: list[int]) -> None:
    y = run_fill("LengthsRangeFill", {"lengths": np.array(lengths, np.int32)})
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, [i for n in lengths for i in range(n)])


@settings(max_examples=30, deadline=None)
@given(shape=st.lists(st.integers(0, 20), min_size=1, max_size=3), a=st.integers(0, 100), b=st.integers(0, 100))
def test_uniform_int_fill_blob_input_as_caffe2(shape: list[int], a: int, b: int) -> None:
    y = run_fill(
        "UniformIntFill",
        {"shape": np.array(shape, np.int64), "a": np.array(a, np.int32), "b": np.array(b, np.int32)},
        input_as_shape=True,
    )
    if b < a:
        assert list(y.shape) == [0, *shape[1:]]
    else:
        assert list(y.shape) == shape and y.dtype == np.int32
        assert ((y >= a) & (y <= b)).all()


def test_uniform_int_fill_using_args_covers_both_ends() -> None:
    y = run_fill("UniformIntFill", shape=[2**3, 5], min=-100, max=100, seed=3)
    assert y.shape == (8, 5) and y.min() >= -100 and y.max() <= 100 and y.min() != y.max()
    z = run_fill("UniformIntFill", shape=[2000], min=0, max=1, seed=1)
    assert set(np.unique(z).tolist()) == {0, 1}  # max is included, as Caffe2's uniform_int_distribution


def test_uniform_fill_bounds_from_inputs_and_bad_arities() -> None:
    y = run_fill(
        "UniformFill",
        {"s": np.array([50], np.int64), "lo": np.array([2.0], np.float32), "hi": np.array([3.0], np.float32)},
        input_as_shape=True,
    )
    assert y.shape == (50,) and ((y >= 2.0) & (y < 3.0)).all()
    with pytest.raises(an.NetDefinitionError, match="0 or 1 inputs"):
        an.Net("bad").UniformFill(["s", "lo"], "Y", input_as_shape=True)
    with pytest.raises(an.NetDefinitionError, match="cannot be set as well"):
        an.Net("bad").UniformIntFill(["s", "lo", "hi"], "Y", input_as_shape=True, min=0)


def test_msra_and_range_fill() -> None:
    y = run_fill("MSRAFill", shape=[150, 50, 3], seed=0)
    assert np.count_nonzero(y) > 0
    assert abs(float(y.std()) - np.sqrt(2.0 / (150 * 3))) < 0.01  # fan_out = size / shape[1]
    np.testing.assert_array_equal(run_fill("RangeFill", shape=[2, 3]), np.arange(6, dtype=np.float32).reshape(2, 3))
    with pytest.raises(an.OperatorError, match="at least 2 dims"):
        run_fill("MSRAFill", shape=[4])


def test_shape_must_be_a_list_and_scalar_shape_is_allowed() -> None:
    with pytest.raises(an.NetDefinitionError):
        an.Net("bad").GaussianFill([], "out", shape=32, mean=0.0, std=1.0)  # Caffe2's test_shape_error
    y = run_fill("ConstantFill", shape=[], value=2.0)
    assert y.shape == () and y == 2.0


def test_new_fills_and_stop_gradient_on_torch_give_the_numpy_values() -> None:
    torch = pytest.importorskip("torch")
    fills = {
        "GivenTensorFill": {"values": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]},
        "GivenTensorInt64Fill": {"values": list(range(6))},
        "MSRAFill": {"seed": 2},
        "UniformIntFill": {"min": -3, "max": 3, "seed": 2},
        "RangeFill": {},
        "DiagonalFill": {"value": 1.5},
    }
    for op_type, args in fills.items():
        a = run_fill(op_type, shape=[2, 3], **args)
        b = run_fill(op_type, shape=[2, 3], library="torch", **args)
        assert isinstance(b, torch.Tensor) and str(b.dtype).endswith(a.dtype.name), op_type
        np.testing.assert_array_equal(b.numpy(), a, err_msg=op_type)
    y = run_fill("LengthsRangeFill", {"lengths": torch.tensor([2, 0, 3], dtype=torch.int32)})
    assert isinstance(y, torch.Tensor) and y.dtype == torch.int32 and y.tolist() == [0, 1, 0, 1, 2]
    x = torch.arange(4.0)
    y = run_fill("StopGradient", {"x": x})
    assert isinstance(y, torch.Tensor) and torch.equal(y, x) and y.data_ptr() != x.data_ptr()


def test_fill_follows_a_torch_shape_input() -> None:
    torch = pytest.importorskip("torch")
    y = run_fill(
        "ConstantFill",
        {"s": torch.tensor([3], dtype=torch.int64)},
        input_as_shape=True,
        extra_shape=[2],
        value=0.0,
        dtype="float32",
    )
    assert isinstance(y, torch.Tensor) and tuple(y.shape) == (3, 2) and y.dtype == torch.float32
