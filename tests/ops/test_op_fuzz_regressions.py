"""Regressions found by fuzzing every registered op with malformed inputs and arguments: each failure
must be an asyncnet error whose message names the problem (not a raw IndexError, AttributeError,
MemoryError... from inside a kernel), and a failing in-place op must leave its inputs untouched."""

import os

import numpy as np
import pytest
from _op_run import run

import asyncnet as an
from asyncnet.errors import NetDefinitionError, OperatorError

pytestmark = pytest.mark.timeout(60)

F32 = np.float32
RAM_BYTES = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
TOO_BIG = 2 * RAM_BYTES  # elements: more bytes than this machine has, whatever the dtype


def _op_error(op_type, inputs, match, n_out=1, **args):
    with pytest.raises(OperatorError, match=match) as info:
        run(op_type, inputs, n_out, **args)
    cause = info.value.__cause__
    assert not isinstance(cause, (IndexError, KeyError, AttributeError, ZeroDivisionError, MemoryError)), repr(cause)
    return info.value


# -- raw exceptions from inside kernels ---------------------------------------------------------
def test_sparse_lengths_sum_gradient_refuses_0d_lengths():
    _op_error("SparseLengthsSumGradient", [np.ones((2, 2), F32), np.array(2.0, F32)], "1-D int lengths")


def test_sparse_lengths_sum_gradient_refuses_negative_lengths():
    _op_error("SparseLengthsSumGradient", [np.ones((2, 2), F32), np.array([3, -1])], "non-negative lengths")


def test_sparse_lengths_weighted_sum_gradient_checks_weights_and_indices():
    dy, lengths = np.ones((2, 3), F32), np.array([1, 2])
    _op_error("SparseLengthsWeightedSumGradient", [dy, np.ones(2, F32), lengths], r"WEIGHTS .* of shape \(3,\)")
    data, idx = np.ones((4, 3), F32), np.array([0, 1])
    _op_error(
        "SparseLengthsWeightedSumGradient",
        [dy, np.ones(3, F32), lengths, data, idx],
        r"INDICES of shape \(3,\)",
        n_out=2,
    )


def test_sparse_lengths_weighted_sum_gradient_valid_result_unchanged():
    dy, w, lengths = np.array([[1, 2], [3, 4]], F32), np.array([1, 2, 3], F32), np.array([1, 2])
    data, idx = np.arange(8, dtype=F32).reshape(4, 2), np.array([3, 0, 1])
    values, dw = run("SparseLengthsWeightedSumGradient", [dy, w, lengths, data, idx], 2)
    np.testing.assert_array_equal(values, [[1, 2], [6, 8], [9, 12]])
    np.testing.assert_array_equal(dw, [6 + 14, 0 + 4, 6 + 12])


def test_sparse_to_dense_checks_indices_and_like():
    _op_error("SparseToDense", [np.array([0.5, -np.inf], F32), np.ones(2, F32)], "int32 or int64 indices")
    _op_error("SparseToDense", [np.array([0, 1]), np.ones(2, F32), np.array(3.0, F32)], "at least 1 dim in input 2")
    _op_error("SparseToDense", [np.array([0, 1]), np.ones(2, F32), {"a": 1}], "numpy array or torch tensor in input 2")


def test_sparse_to_dense_huge_index_is_refused_before_allocating():
    err = _op_error("SparseToDense", [np.array([TOO_BIG]), np.ones(1, F32)], "rows")
    assert "memory" in str(err)


def test_label_cross_entropy_gradient_refuses_a_non_array():
    _op_error(
        "LabelCrossEntropyGradient",
        [object(), np.array([0]), np.ones(1, F32)],
        "numpy array or torch tensor in input 0",
    )


def test_layer_norm_refuses_a_non_array_gamma():
    _op_error(
        "LayerNorm",
        [np.ones((2, 3), F32), "gamma", np.ones(3, F32)],
        "numpy array or torch tensor in input 1",
        3,
        elementwise_affine=True,
    )


def test_split_gradient_with_no_pieces():
    _op_error("SplitGradient", [np.ones((1, 3), F32), np.ones((1, 3), F32)], "at least one piece", present=[])


@pytest.mark.parametrize(
    "op", ["GaussianFill", "UniformFill", "UniformIntFill", "XavierFill", "RangeFill", "ConstantFill"]
)
def test_fills_refuse_a_shape_beyond_memory(op):
    err = _op_error(op, [], "too large|more than", shape=[4, TOO_BIG])
    assert "(4, " in str(err)


def test_fill_shape_beyond_int64_is_refused():
    _op_error("ConstantFill", [], r"more than 2\*\*63", shape=[2**40, 2**40])


def test_lengths_range_fill_huge_total_is_refused_before_allocating():
    _op_error("LengthsRangeFill", [np.array([TOO_BIG, 1], np.int64)], "sum of the lengths")


def test_lengths_range_fill_uint64_lengths():
    np.testing.assert_array_equal(run("LengthsRangeFill", [np.array([2, 1], np.uint64)]), [0, 1, 0])


def test_max_pool_huge_pads_are_refused_before_allocating():
    x = np.ones((1, 1, 3, 3), F32)
    _op_error("MaxPool", [x], "padded", kernel=1, pad_t=2 * RAM_BYTES, pad_b=0, pad_l=0, pad_r=0)


def test_uniform_fill_refuses_infinite_bounds():
    _op_error("UniformFill", [], "finite min and max", shape=[2], max=float("inf"))


def test_uniform_int_fill_refuses_bounds_beyond_int32():
    _op_error("UniformIntFill", [], "int32 range", shape=[2], max=2**40)


def test_negative_zero_std_and_bound_behave_as_zero():
    y = run("GaussianFill", [], shape=[3], std=-0.0, mean=2.0)
    np.testing.assert_array_equal(y, [2, 2, 2])
    y = run("UniformFill", [], shape=[3], min=0.0, max=-0.0)
    np.testing.assert_array_equal(y, [0, 0, 0])


def test_gaussian_fill_refuses_nan_std():
    _op_error("GaussianFill", [], "std >= 0", shape=[2], std=float("nan"))


@pytest.mark.parametrize(
    "op, dtype", [("GivenTensorIntFill", None), ("GivenTensorInt16Fill", None), ("GivenTensorFill", "int32")]
)
def test_given_tensor_fill_values_out_of_the_dtype_range(op, dtype):
    args = {"dtype": dtype} if dtype else {}
    net = an.Net("t")
    with pytest.raises(NetDefinitionError, match="do not fit"):
        net.add_op(op, [], ["y"], shape=[1], values=[2**40], **args)
        an.Workspace().run_net_once(net)


def test_constant_fill_value_out_of_the_dtype_range():
    with pytest.raises(NetDefinitionError, match="does not fit a 64-bit"):
        an.Workspace().run_net_once(_net("ConstantFill", shape=[1], value=2**70))
    with pytest.raises(NetDefinitionError, match="does not fit dtype uint8"):
        an.Workspace().run_net_once(_net("ConstantFill", shape=[1], value=300, dtype="uint8"))


def _net(op_type, **args):
    net = an.Net("t")
    net.add_op(op_type, [], ["y"], **args)
    return net


# -- numpy's own messages instead of the op's ---------------------------------------------------
def test_matmul_gradient_checks_dc_size():
    a, b = np.ones((3, 2), F32), np.ones((2, 3), F32)
    _op_error("MatMulGradient", [a, b, np.ones(1, F32)], "MatMul output", 2)


def test_scale_and_weighted_sum_refuse_strings():
    _op_error("Scale", [np.full(2, "ab")], "numeric array", scale=2.0)
    _op_error("WeightedSum", [np.ones(2, F32), np.array(["ab"])], "real number")


def test_cast_of_strings_names_the_input():
    _op_error("Cast", [np.full(2, "ab")], "cannot convert input 0 'in0'", to=2)
    np.testing.assert_array_equal(run("Cast", [np.array(["12", "3"])], to=2), [12, 3])


def test_copy_of_none_names_the_input():
    _op_error("Copy", [None], "holds None")
    _op_error("StopGradient", [None], "holds None")


def test_layer_norm_of_an_empty_batch():
    y, mean, std = run("LayerNorm", [np.ones((0, 3), F32)], 3)
    assert y.shape == (0, 3) and mean.shape == (0, 1) and std.shape == (0, 1)


# -- a failing in-place update writes nothing ---------------------------------------------------
@pytest.mark.parametrize("op, n_in", [("Adagrad", 4), ("Adam", 6)])
def test_inplace_optimizer_with_bad_lr_leaves_its_inputs(op, n_in):
    ws = an.Workspace()
    shape = (2, 3)
    vals = [np.full(shape, 0.5, F32) for _ in range(n_in - (2 if op == "Adam" else 1))]
    vals.append(np.ones(shape, F32))  # lr of the wrong shape
    if op == "Adam":
        vals.append(np.array([0], np.int64))
    names = [f"in{i}" for i in range(n_in)]
    for n, v in zip(names, vals):
        ws.feed(n, v)
    before = [v.copy() for v in vals]
    outs = names[:3] if op == "Adam" else names[:2]
    net = an.Net("t")
    net.add_op(op, names, outs)
    with pytest.raises(OperatorError, match="one-element array"):
        ws.run_net_once(net)
    for n, b in zip(names, before):
        np.testing.assert_array_equal(ws.fetch(n), b)


@pytest.mark.parametrize("op", ["ConstantFill", "DiagonalFill"])
def test_non_finite_value_into_an_int_fill(op):
    with pytest.raises(NetDefinitionError, match="cannot fill a tensor of dtype int32"):
        an.Workspace().run_net_once(_net(op, shape=[2, 2], value=float("inf"), dtype="int32"))


def test_scale_of_unsigned_torch_tensor_by_a_negative_wraps_as_numpy():
    torch = pytest.importorskip("torch")
    x = np.array([1, 2, 3], np.uint8)
    want = run("Scale", [x], scale=-1.0)
    got = run("Scale", [torch.from_numpy(x.copy())], scale=-1.0)
    np.testing.assert_array_equal(got.numpy(), want)
    np.testing.assert_array_equal(want, [255, 254, 253])


# -- silent wrong results on 0-d inputs ---------------------------------------------------------
def test_transpose_of_a_0d_array_stays_0d():
    y = run("Transpose", [np.array(5, np.int32)])
    assert y.shape == () and y == 5


def test_dropout_of_a_0d_array_gives_an_array_mask():
    y, mask = run("Dropout", [np.array(2.0, F32)], 2, seed=3, ratio=0.0)
    assert isinstance(mask, np.ndarray) and mask.shape == () and mask.dtype == np.bool_
    assert y == 2.0
    torch = pytest.importorskip("torch")
    y, mask = run("Dropout", [torch.tensor(2.0)], 2, seed=3, ratio=0.0)
    assert tuple(mask.shape) == () and float(y) == 2.0


def test_sparse_lengths_weighted_sum_gradient_data_without_indices():
    dy, w, lengths, data = np.ones(1, F32), np.ones(3, F32), np.array([3]), np.ones((3, 1), F32)
    _op_error("SparseLengthsWeightedSumGradient", [dy, w, lengths, data], "DATA and INDICES", 2)


# -- torch tensors give numpy's result ----------------------------------------------------------
def test_scale_of_an_int_torch_tensor_rounds_as_numpy():
    torch = pytest.importorskip("torch")
    x = np.array([2**25 + 3, 7], np.int32)
    want = run("Scale", [x], scale=0.5)
    np.testing.assert_array_equal(want, [2**24 + 1, 3])
    np.testing.assert_array_equal(run("Scale", [torch.from_numpy(x.copy())], scale=0.5).numpy(), want)


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")
def test_constant_fill_like_a_torch_tensor_overflows_as_numpy():
    torch = pytest.importorskip("torch")
    want = run("ConstantFill", [np.ones(2, F32)], value=1e300)
    got = run("ConstantFill", [torch.ones(2)], value=1e300)
    np.testing.assert_array_equal(got.numpy(), want)
    assert np.isinf(want).all()


def test_gather_of_a_0d_index_on_torch():
    torch = pytest.importorskip("torch")
    data, idx = np.array([0, 5, 7]), np.array(-2)
    want = run("Gather", [data, idx])
    got = run("Gather", [torch.from_numpy(data), torch.from_numpy(idx)])
    assert want.shape == () and tuple(got.shape) == () and int(got) == int(want) == 5


def test_max_pool_of_zero_channels_on_torch():
    torch = pytest.importorskip("torch")
    want = run("MaxPool", [np.zeros((1, 0, 3, 4), F32)], kernel=2)
    got = run("MaxPool", [torch.zeros((1, 0, 3, 4))], kernel=2)
    assert want.shape == tuple(got.shape) == (1, 0, 2, 3)


def test_softmax_with_loss_gradient_only_loss_bad_dloss_leaves_p():
    ws = an.Workspace()
    x, label, p = np.zeros((3, 4), F32), np.array([0, 1, 2], np.int32), np.full((3, 4), 0.25, F32)
    for n, v in (("x", x), ("label", label), ("p", p), ("dloss", np.ones(3, F32))):
        ws.feed(n, v)
    net = an.Net("t")
    net.add_op("SoftmaxWithLossGradient", ["x", "label", "p", "dloss"], ["dx"], only_loss=True)
    with pytest.raises(OperatorError, match="scalar loss gradient"):
        ws.run_net_once(net)
    np.testing.assert_array_equal(ws.fetch("p"), np.full((3, 4), 0.25, F32))


@pytest.mark.parametrize("op, inputs", [("CreateCounter", []), ("ResetCounter", ["c"])])
def test_counter_init_count_beyond_int64_is_refused_at_creation(op, inputs):
    net = an.Net("t")
    with pytest.raises(NetDefinitionError, match="does not fit a signed 64-bit"):
        net.add_op(op, inputs, ["y"] if op == "CreateCounter" else [], init_count=2**70)
        an.Workspace().create_net(net)
