"""Ports of the Caffe2 operator-test checks an audit found asyncnet failing (each fixed in ops/).

Sources (pytorch/pytorch, caffe2/): python/operator_test/gather_ops_test.py (test_gather_ops:
rows_num may be 0 with indices drawn anyway, the output then has DATA's shape;
TestBatchGatherOps: BatchGather with its reference np.take(axis=1) and a gradient check),
operators/gather_op.h (gather_impl: an empty DATA axis gives DATA's shape, wrap_indices on by
default on axis 0 only; match_outer, and the newest gather_ops_test's test_gather_ops_match_outer,
test_batch_gather_op_match_outer, test_gather_op_match_outer_axis2_data4D_ind4D with
ref_gather_match_outer; GetGatherGradient's dense_gradient), operators/batch_gather_ops.h, operators/concat_split_op.h and
hypothesis_test.py's test_depth_concat_with_order (`order` instead of `axis`: NCHW 1, NHWC 3;
both refused; DepthConcat / DepthSplit the old names), python/operator_test/sparse_ops_test.py
(testScatterWeightedSum: every indexed row scaled by w0 once per occurrence, then the pairs
added), operators/utility_ops.h (ScatterWeightedSumOp's two loops),
python/operator_test/learning_rate_op_test.py (test_gate_learningrate,
test_composite_learning_rate_op) and sgd/learning_rate_op.h, learning_rate_functors.h (gate,
slope (its formula from SlopeLearningRate), pieceWarmup, composite, cyclical, constantThenLinearWarmup, compositeCyclical, cosine,
compositeCosine: their formulas and defaults), hypothesis_test.py (test_sparse_to_dense: its
reference and a gradient check on the values, Caffe2's GetSparseToDenseGradient = Gather;
test_transpose / utility_ops_test.py pass engine=None, which CreateOperator leaves out, as it does
every None-valued argument), python/operator_test/adagrad_test.py and adagrad_test_helper.py
(SparseAdagrad with weight_decay and Caffe2's counter_halflife, default -1, and its count input),
elementwise_op_broadcast_test.py (test_sum_reduce: SumReduceLike given broadcast=1, which Caffe2's
SumReduceLikeOp never reads; test_sum_reduce_empty_blob), operators/distance_op.cc
(SquaredL2Distance: N = X's dim 0, so an empty batch gives an empty D) and
softmax_with_loss_op.cc (an empty batch: weight sum 0, loss 0, P empty), cross_entropy_op.cc
(LabelCrossEntropy: N = X's dim 0 and D the rest, a 1-D X one row; labels [N] or [N, 1]),
utility_ops.h (HasElements: one input or more, true if any has an element), conv_test.py (the
args it passes on the CPU too: shared_buffer, force_algo_fwd/dgrad/wgrad, exhaustive_search; its
error path `assertRaises(RuntimeError)` for a kernel larger than the padded image).
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from _c2run import run_op
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncnet as an
from asyncnet.autodiff import add_gradient_ops

pytestmark = pytest.mark.timeout(60)
FEW = settings(max_examples=15, deadline=None)


def run(op: str, inputs: dict, outs=("out",), **args) -> list:
    return run_op(op, inputs, outs, **args)


# -- Gather: gather_ops_test.test_gather_ops with rows_num = 0, and gather_op.h's wrap_indices ----
@pytest.mark.parametrize("index_num", [0, 3])
def test_gather_of_an_empty_table_has_the_tables_shape(index_num):
    data = np.zeros((0, 10, 20), np.float32)
    ind = np.random.default_rng(0).integers(10, size=index_num).astype(np.int32)  # the test's draw: beyond the 0 rows
    (out,) = run("Gather", {"data": data, "ind": ind})
    assert out.shape == (0, 10, 20) and out.dtype == np.float32
    (t,) = run("Gather", {"data": torch.from_numpy(data), "ind": torch.from_numpy(ind)})
    assert tuple(t.shape) == (0, 10, 20)
    (off_axis,) = run("Gather", {"data": np.zeros((2, 0, 3), np.float32), "ind": ind}, axis=1)
    assert off_axis.shape == (2, 0, 3)


def test_gather_indices_must_be_int_even_when_nothing_is_read():
    with pytest.raises(an.OperatorError, match="int32 or int64"):
        run("Gather", {"data": np.zeros((0, 3), np.float32), "ind": np.zeros(2, np.float32)})


@pytest.mark.parametrize("lib", ["numpy", "torch"])
def test_gather_wraps_negative_indices_on_axis_0_by_default(lib):
    data = np.arange(12, dtype=np.float32).reshape(4, 3)
    ind = np.array([[-1, 0], [-4, 2]], np.int64)
    want = data[ind % 4]
    feed = (lambda a: torch.from_numpy(a)) if lib == "torch" else (lambda a: a)
    (out,) = run("Gather", {"data": feed(data), "ind": feed(ind)})
    np.testing.assert_array_equal(np.asarray(out), want)
    (on_axis1,) = run("Gather", {"data": feed(data), "ind": feed(np.array([-1, 1], np.int32))}, axis=1, wrap_indices=1)
    np.testing.assert_array_equal(np.asarray(on_axis1), data[:, [2, 1]])


def test_gather_axis1_wrap_gradient_is_dense_on_the_wrapped_slices():
    rng = np.random.default_rng(1)
    data, r = rng.random((2, 3)), rng.random((2, 2))
    net = an.Net("g")
    net.Gather(["data", "ind"], "y", axis=1, wrap_indices=1)
    net.Mul(["y", "r"], "yr")
    net.AveragedLoss("yr", "loss")
    names = add_gradient_ops(net, "loss", wrt=["data"], dtype="float64")
    ws = an.Workspace()
    for k, v in {"data": data, "ind": np.array([-1, 2], np.int32), "r": r}.items():
        ws.feed(k, v)
    ws.run_net_once(net)
    want = np.zeros((2, 3))
    want[:, 2] = (r[:, 0] + r[:, 1]) / 4
    np.testing.assert_allclose(ws.fetch(names["data"]), want)


# -- BatchGather: gather_ops_test.TestBatchGatherOps (reference np.take on axis 1, gradient) -----
@FEW
@given(
    batch=st.integers(2, 10),
    rows=st.integers(1, 20),
    block=st.integers(1, 2),
    index_num=st.integers(1, 10),
    seed=st.integers(0, 2**16),
)
def test_batch_gather(batch, rows, block, index_num, seed):
    rng = np.random.default_rng(seed)
    data = rng.uniform(-10, 10, (batch, rows, block)).astype(np.float32)
    ind = rng.integers(0, rows, (index_num, 1)).astype(np.int32)
    (out,) = run("BatchGather", {"data": data, "ind": ind})
    np.testing.assert_array_equal(out, data.take(ind, axis=1))
    r = rng.random(out.shape)
    net = an.Net("g")
    net.BatchGather(["data", "ind"], "y")
    net.Mul(["y", "r"], "yr")
    net.AveragedLoss("yr", "loss")
    names = add_gradient_ops(net, "loss", wrt=["data"], dtype="float64")
    ws = an.Workspace()
    for k, v in {"data": data.astype(np.float64), "ind": ind, "r": r}.items():
        ws.feed(k, v)
    ws.run_net_once(net)
    want = np.zeros(data.shape)
    np.add.at(np.moveaxis(want, 1, 0), ind.reshape(-1), np.moveaxis(r.reshape(batch, -1, block) / r.size, 1, 0))
    np.testing.assert_allclose(ws.fetch(names["data"]), want, rtol=1e-12)


def test_batch_gather_rules():
    with pytest.raises(an.OperatorError, match="at least 2 dims"):
        run("BatchGather", {"data": np.zeros(3, np.float32), "ind": np.zeros(1, np.int32)})
    with pytest.raises(an.OperatorError, match="indices"):  # BatchGather never wraps
        run("BatchGather", {"data": np.zeros((2, 3), np.float32), "ind": np.array([-1], np.int32)})
    with pytest.raises(an.NetDefinitionError, match="wrap_indices"):
        run("BatchGather", {"data": np.zeros((2, 3), np.float32), "ind": np.zeros(1, np.int32)}, wrap_indices=1)


# -- Concat / Split with Caffe2's legacy `order` (test_depth_concat_with_order) and the old names --
@pytest.mark.parametrize("op", ["Concat", "DepthConcat"])
@pytest.mark.parametrize("order, axis", [("NCHW", 1), ("NHWC", 3)])
def test_concat_with_order(op, order, axis):
    rng = np.random.default_rng(2)
    xs = [rng.random((2, 3, 4, 5)).astype(np.float32) for _ in range(3)]
    out, info = run(op, {f"x{i}": x for i, x in enumerate(xs)}, ("y", "info"), order=order)
    np.testing.assert_array_equal(out, np.concatenate(xs, axis=axis))
    np.testing.assert_array_equal(info, [xs[0].shape[axis]] * 3)
    out, _ = run(op, {f"x{i}": x for i, x in enumerate(xs)}, ("y", "info"), order=order.lower(), add_axis=1)
    np.testing.assert_array_equal(out, np.concatenate(xs, axis=axis))  # add_axis is not read with order


@pytest.mark.parametrize("op", ["Split", "DepthSplit"])
@pytest.mark.parametrize("order, axis", [("NCHW", 1), ("NHWC", 3)])
def test_split_with_order(op, order, axis):
    x = np.random.default_rng(3).random((2, 6, 4, 6)).astype(np.float32)
    a, b = run(op, {"x": x}, ("a", "b"), order=order, split=[2, 4])
    np.testing.assert_array_equal(a, x.take(range(2), axis=axis))
    np.testing.assert_array_equal(b, x.take(range(2, 6), axis=axis))


def test_axis_and_order_together_are_refused():
    for op, outs in (("Concat", ["y", "i"]), ("Split", ["a", "b"]), ("DepthConcat", ["y", "i"])):
        with pytest.raises(an.NetDefinitionError, match="not both"):
            getattr(an.Net("n"), op)(["x"], outs, axis=1, order="NHWC")
    with pytest.raises(an.NetDefinitionError, match="order"):
        an.Net("n").Concat(["x"], ["y", "i"], order="CHW")


@pytest.mark.parametrize("op", ["Concat", "DepthConcat"])
def test_concat_with_order_gradient_splits_along_that_axis(op):
    rng = np.random.default_rng(4)
    a, b, r = rng.random((1, 2, 2, 3)), rng.random((1, 2, 2, 1)), rng.random((1, 2, 2, 4))
    net = an.Net("g")
    getattr(net, op)(["a", "b"], ["y", "info"], order="NHWC")
    net.Mul(["y", "r"], "yr")
    net.AveragedLoss("yr", "loss")
    names = add_gradient_ops(net, "loss", wrt=["a", "b"], dtype="float64")
    ws = an.Workspace()
    for k, v in {"a": a, "b": b, "r": r}.items():
        ws.feed(k, v)
    ws.run_net_once(net)
    np.testing.assert_allclose(ws.fetch(names["a"]), r[..., :3] / r.size)
    np.testing.assert_allclose(ws.fetch(names["b"]), r[..., 3:] / r.size)


def test_split_with_order_gradient():
    rng = np.random.default_rng(5)
    x, r = rng.random((1, 2, 2, 4)), rng.random((1, 2, 2, 3))
    net = an.Net("g")
    net.Split("x", ["p", "q"], order="NHWC", split=[1, 3])
    net.Mul(["q", "r"], "qr")
    net.AveragedLoss("qr", "loss")
    names = add_gradient_ops(net, "loss", wrt=["x"], dtype="float64")
    ws = an.Workspace()
    for k, v in {"x": x, "r": r}.items():
        ws.feed(k, v)
    ws.run_net_once(net)
    np.testing.assert_allclose(ws.fetch(names["x"]), np.concatenate([np.zeros((1, 2, 2, 1)), r / r.size], axis=3))


# -- ScatterWeightedSum: sparse_ops_test.testScatterWeightedSum (random w0, repeated indices) -----
def _scatter_ref(d, w0, ind, *args):  # the test's reference, as written there
    r = d.copy()
    for i in ind:
        r[i] *= w0
    for i in range(0, len(args), 2):
        x, w = args[i], args[i + 1]
        for k, j in enumerate(ind):
            r[j] += w * x[k]
    return r


@FEW
@given(
    num_args=st.integers(1, 5),
    first_dim=st.integers(1, 20),
    index_dim=st.integers(1, 10),
    extra_dims=st.lists(st.integers(1, 4), min_size=0, max_size=3),
    ind_type=st.sampled_from([np.int32, np.int64]),
    lib=st.sampled_from(["numpy", "torch"]),
    seed=st.integers(0, 2**16),
)
def test_scatter_weighted_sum(num_args, first_dim, index_dim, extra_dims, ind_type, lib, seed):
    rng = np.random.default_rng(seed)
    d = rng.random((first_dim, *extra_dims)).astype(np.float32)
    w0 = rng.random(1).astype(np.float32)
    ind = rng.integers(0, first_dim, index_dim).astype(ind_type)
    args = []
    for _ in range(num_args):
        args += [rng.random((index_dim, *extra_dims)).astype(np.float32), rng.random(1).astype(np.float32)]
    want = _scatter_ref(d, w0[0], ind, *[a if a.size != 1 or j % 2 == 0 else a[0] for j, a in enumerate(args)])
    feed = (lambda a: torch.from_numpy(a)) if lib == "torch" else (lambda a: a)
    names = ["data", "w0", "indices"] + [f"{'x' if j % 2 == 0 else 'w'}{j // 2 + 1}" for j in range(len(args))]
    ws = an.Workspace()
    for n, v in zip(names, [d, w0, ind, *args]):
        ws.feed(n, feed(v.copy()))
    net = an.Net("s")
    net.ScatterWeightedSum(names, "data")
    ws.run_net_once(net)
    np.testing.assert_allclose(np.asarray(ws.fetch("data")), want, rtol=1e-5, atol=1e-6)


def test_scatter_weighted_sum_scales_a_repeated_row_once_per_occurrence():
    d = np.array([[1.0], [10.0]], np.float32)
    ws = an.Workspace()
    for n, v in dict(
        d=d,
        w0=np.array([0.5], np.float32),
        i=np.array([1, 1, 0], np.int64),
        x=np.array([[1.0], [2.0], [4.0]], np.float32),
        w=np.array([1.0], np.float32),
    ).items():
        ws.feed(n, v)
    net = an.Net("s")
    net.ScatterWeightedSum(["d", "w0", "i", "x", "w"], "d")
    ws.run_net_once(net)
    np.testing.assert_array_equal(ws.fetch("d")[:, 0], [0.5 + 4.0, 10.0 * 0.25 + 1.0 + 2.0])


# -- LearningRate: learning_rate_op_test's gate and composite, and the other functors ---------------
def lr_at(it: int, **args) -> float:
    (out,) = run("LearningRate", {"iter": np.array([it], np.int64)}, **args)
    return float(out)


@FEW
@given(
    it=st.integers(1, 10**5 - 1),
    num_iter=st.integers(100, 999),
    base=st.floats(-1, 1),
    m1=st.floats(-1, 1),
    m2=st.floats(-1, 1),
)
def test_gate_learning_rate(it, num_iter, base, m1, m2):
    want = (m1 if it < num_iter else m2) * base
    got = lr_at(it, policy="gate", num_iter=num_iter, multiplier_1=m1, multiplier_2=m2, base_lr=base)
    assert got == pytest.approx(np.float32(want), rel=1e-6, abs=1e-7)


@settings(max_examples=3, deadline=None)
@given(min_num_iter=st.integers(10, 20), max_num_iter=st.integers(50, 100))
def test_composite_learning_rate(min_num_iter, max_num_iter):  # the test's four sub-policies: exp, step, fixed, exp
    rng = np.random.RandomState(65535)
    iter_nums = rng.randint(low=min_num_iter, high=max_num_iter, size=4)
    accu = copy.deepcopy(iter_nums)
    for i in range(1, 4):
        accu[i] += accu[i - 1]
    scale = rng.uniform(low=2.0, high=2.0, size=4)
    step_size, step_gamma, exp_gamma, base_lr = (
        rng.randint(low=2, high=min_num_iter // 2),
        rng.random_sample(),
        rng.random_sample(),
        0.1,
    )
    args = dict(
        policy="composite",
        sub_policy_num_iters=[int(n) for n in iter_nums],
        base_lr=base_lr,
        sub_policy_0_policy="exp",
        sub_policy_0_lr_scale=scale[0],
        sub_policy_0_gamma=exp_gamma,
        sub_policy_1_policy="step",
        sub_policy_1_lr_scale=scale[1],
        sub_policy_1_stepsize=int(step_size),
        sub_policy_1_gamma=step_gamma,
        sub_policy_2_policy="fixed",
        sub_policy_2_lr_scale=scale[2],
        sub_policy_3_policy="exp",
        sub_policy_3_gamma=exp_gamma,
        sub_policy_3_lr_scale=scale[3],
    )
    ws = an.Workspace()
    net = an.Net("lr")
    net.LearningRate("iter", "lr", **args)
    ws.feed("iter", np.array([1], np.int64))
    ws.create_net(net)
    for it in range(1, int(accu[-1]) + 1):
        if it <= accu[0]:
            m = math.pow(exp_gamma, it)
        elif it <= accu[1]:
            m = math.pow(step_gamma, it // step_size)
        elif it <= accu[2]:
            m = 1.0
        else:
            m = math.pow(exp_gamma, it)
        ws.feed("iter", np.array([it], np.int64))
        ws.run_net("lr")
        assert float(ws.fetch("lr")) == pytest.approx(base_lr * m * 2.0, rel=1e-5, abs=1e-9), it
    # one sub-policy: it runs on past its count
    one = dict(
        policy="composite",
        sub_policy_num_iters=[int(iter_nums[0])],
        sub_policy_0_lr_scale=2.0,
        sub_policy_0_policy="exp",
        sub_policy_0_gamma=exp_gamma,
        base_lr=base_lr,
    )
    for it in (1, int(accu[-1])):
        assert lr_at(it, **one) == pytest.approx(base_lr * 2.0 * exp_gamma**it, rel=1e-5, abs=1e-12)


def test_composite_rules():
    base = dict(base_lr=0.1, policy="composite")
    with pytest.raises(an.NetDefinitionError, match="expected one of"):  # no composite inside a composite
        an.Net("n").LearningRate("i", "lr", sub_policy_num_iters=[3], sub_policy_0_policy="composite", **base)
    with pytest.raises(an.NetDefinitionError, match="unknown argument 'sub_policy_0_gama'"):
        an.Net("n").LearningRate(
            "i", "lr", sub_policy_num_iters=[3], sub_policy_0_policy="exp", sub_policy_0_gama=0.5, **base
        )
    with pytest.raises(an.NetDefinitionError, match="past the 1"):
        an.Net("n").LearningRate(
            "i", "lr", sub_policy_num_iters=[3], sub_policy_0_policy="exp", sub_policy_1_gamma=0.5, **base
        )
    with pytest.raises(an.NetDefinitionError, match="sub_policy_0_policy"):
        an.Net("n").LearningRate("i", "lr", sub_policy_num_iters=[3], **base)
    with pytest.raises(an.NetDefinitionError, match="positive counts"):
        an.Net("n").LearningRate(
            "i", "lr", sub_policy_num_iters=[3, 0], sub_policy_0_policy="fixed", sub_policy_1_policy="fixed", **base
        )
    with pytest.raises(an.NetDefinitionError, match=r"sub-policy 0\) needs gamma"):
        an.Net("n").LearningRate(
            "i", "lr", sub_policy_num_iters=[3], sub_policy_0_policy="exp", sub_policy_0_gamma=0.0, **base
        )
    with pytest.raises(an.OperatorError, match="before the first sub-policy"):
        lr_at(0, sub_policy_num_iters=[3], sub_policy_0_policy="fixed", **base)


def _cyclical(t, base_lr, max_lr, stepsize, decay):  # learning_rate_functors.h's CyclicalLearningRate
    cycle = t // (2 * stepsize) + 1
    x = abs(t / stepsize - 2 * cycle + 1)
    return 1 + (abs(max_lr) / abs(base_lr) - 1) * max(0.0, 1 - x) * decay ** (t // (2 * stepsize))


def _cosine(t, min_lr=0.1, max_lr=0.5, period=50, t_mult=1.0, lr_shrink=0.99):  # CosineLearningRate
    if t_mult != 1.0:
        i = math.floor(math.log(1 - t / period * (1.0 - t_mult)) / math.log(t_mult))
        t_i, t_curr = t_mult**i * period, t - (1.0 - t_mult**i) / (1.0 - t_mult) * period
    else:
        i = math.floor(t / period)
        t_i, t_curr = period, t - period * i
    lo, hi = min_lr * lr_shrink**i, max_lr * lr_shrink**i
    return lo + 0.5 * (hi - lo) * (1 + math.cos(math.pi * t_curr / t_i))


def _warmup(t, s0=0.1, c=10**7, n=10**7):  # ConstantThenLinearWarmupLearningRate
    return s0 if t < c else s0 + (1 - s0) * (t - c) / n if t < c + n else 1.0


@pytest.mark.parametrize(
    "args, multiplier",
    [
        (
            {"policy": "slope", "num_iter_1": 20, "multiplier_1": 1.0, "num_iter_2": 60, "multiplier_2": 0.2},
            lambda t: 1.0 if t < 20 else max(0.2, 1.0 + (t - 20) * (0.2 - 1.0) / 40),
        ),
        (
            {"policy": "slope", "num_iter_1": 19, "num_iter_2": 21},
            lambda t: 0.0,
        ),  # Caffe2's defaults: both multipliers 0
        ({"policy": "gate", "num_iter": 21}, lambda t: 1.0),  # gate's: both 1
        (
            {"policy": "pieceWarmup", "m1": 0.1, "n1": 20, "m2": 0.4, "n2": 63, "m3": 1.0},
            lambda t: 0.1 if t < 20 else 0.4 if t < 63 else 1.0,
        ),
        ({"policy": "pieceWarmup"}, lambda t: 0.5),
        ({"policy": "cyclical", "max_lr": 0.9, "stepsize": 7, "decay": 0.8}, lambda t: _cyclical(t, -0.3, 0.9, 7, 0.8)),
        ({"policy": "cyclical", "stepsize": 5}, lambda t: _cyclical(t, -0.3, 0.005, 5, 1.0)),
        ({"policy": "cosine"}, _cosine),
        (
            {"policy": "cosine", "max_lr": 0.9, "min_lr": 0.2, "period": 15, "t_mult": 2.0, "lr_shrink": 0.5},
            lambda t: _cosine(t, 0.2, 0.9, 15, 2.0, 0.5),
        ),
        (
            {
                "policy": "constantThenLinearWarmup",
                "start_warmup_multiplier": 0.2,
                "constant_warmup_num_iter": 19,
                "linear_warmup_num_iter": 44,
            },
            lambda t: _warmup(t, 0.2, 19, 44),
        ),
        ({"policy": "constantThenLinearWarmup"}, lambda t: 0.1),
        (
            {
                "policy": "compositeCyclical",
                "constant_warmup_num_iter": 5,
                "linear_warmup_num_iter": 15,
                "cyclical_max_lr": 0.6,
                "cyclical_step_size": 9,
                "cyclical_decay": 0.9,
            },
            lambda t: _warmup(t, 0.1, 5, 15) if t < 20 else _cyclical(t - 20, -0.3, 0.6, 9, 0.9),
        ),
        (
            {
                "policy": "compositeCosine",
                "start_warmup_multiplier": 0.3,
                "constant_warmup_num_iter": 1,
                "linear_warmup_num_iter": 19,
                "cosine_max_lr": 0.8,
                "cosine_min_lr": 0.05,
                "cosine_period": 30,
                "cosine_t_mult": 1.5,
                "cosine_lr_shrink": 0.9,
            },
            lambda t: _warmup(t, 0.3, 1, 19) if t < 20 else _cosine(t - 20, 0.05, 0.8, 30, 1.5, 0.9),
        ),
    ],
)
@pytest.mark.parametrize("it", [0, 1, 19, 20, 21, 63, 100, 1234])
def test_the_other_policies_are_their_functors(args, multiplier, it):
    assert lr_at(it, base_lr=-0.3, **args) == pytest.approx(np.float32(-0.3 * multiplier(it)), rel=1e-6, abs=1e-7)


# -- SparseToDense: hypothesis_test.test_sparse_to_dense (reference; gradient on the values) -------
@FEW
@given(
    first_dim=st.integers(2, 10),
    rows=st.integers(1, 6),
    row=st.sampled_from([(), (2,), (2, 3)]),
    dtype=st.sampled_from([np.int32, np.int64, np.float32]),
    seed=st.integers(0, 2**16),
)
def test_sparse_to_dense(first_dim, rows, row, dtype, seed):
    rng = np.random.default_rng(seed)
    x = (rng.random((rows, *row)) * 10).astype(dtype)
    ind = rng.integers(0, first_dim, rows).astype(np.int64)
    d = np.zeros((first_dim, *row), dtype)
    (out,) = run("SparseToDense", {"I": ind, "X": x, "D": d})
    want = np.zeros(d.shape)
    for k, i in enumerate(ind):
        want[i] += x[k]
    np.testing.assert_allclose(out, want, rtol=1e-6)
    r = rng.normal(size=d.shape)
    net = an.Net("g")
    net.SparseToDense(["I", "X", "D"], "y")
    net.Mul(["y", "r"], "yr")
    net.AveragedLoss("yr", "loss")
    names = add_gradient_ops(net, "loss", wrt=["X"], dtype="float64")
    ws = an.Workspace()
    for k, v in {"I": ind, "X": x.astype(np.float64), "D": d.astype(np.float64), "r": r}.items():
        ws.feed(k, v)
    ws.run_net_once(net)
    np.testing.assert_allclose(ws.fetch(names["X"]), r[ind] / r.size, rtol=1e-12)


# -- engine=None and other None-valued arguments: left out, as Caffe2's CreateOperator does --------
def test_none_valued_arguments_are_left_out_as_caffe2_does():
    x = np.arange(24, dtype=np.int64).reshape(2, 3, 4)
    (out,) = run("Transpose", {"x": x}, engine=None, axes=None)  # utility_ops_test.test_transpose, null_axes
    np.testing.assert_array_equal(out, x.T)
    (out,) = run("Transpose", {"x": x}, engine="CUDNN", axes=[1, 0, 2])
    np.testing.assert_array_equal(out, x.transpose(1, 0, 2))
    with pytest.raises(an.NetDefinitionError, match="unknown argument 'axse'"):  # a typo is refused, None or not
        an.Net("n").Transpose("x", "y", axse=None)


# -- SparseAdagrad: adagrad_test_helper's ref_sparse with weight_decay and counter_halflife --------
def _ref_adagrad(param, mom, grad, lr, epsilon, weight_decay=0.0, counter_halflife=-1, count=None):
    if count and count > 0 and counter_halflife > 0:
        weight_decay *= counter_halflife / count
    g = grad + weight_decay * param
    mom_out = mom + np.square(g)
    return (param + lr / (np.sqrt(mom_out) + epsilon) * g).astype(np.float32), mom_out.astype(np.float32)


@FEW
@given(
    rows=st.integers(1, 8),
    row=st.sampled_from([(), (3,), (2, 2)]),
    weight_decay=st.sampled_from([0.0, 0.1]),
    counter_halflife=st.sampled_from([-1, 0, 3]),
    lib=st.sampled_from(["numpy", "torch"]),
    seed=st.integers(0, 2**16),
)
def test_sparse_adagrad_weight_decay_and_counter(rows, row, weight_decay, counter_halflife, lib, seed):
    rng = np.random.default_rng(seed)
    param = rng.standard_normal((rows, *row)).astype(np.float32)
    mom = np.abs(rng.standard_normal((rows, *row))).astype(np.float32)
    ind = rng.choice(rows, size=rng.integers(rows + 1), replace=False).astype(np.int64)
    grad = rng.standard_normal((ind.size, *row)).astype(np.float32)
    lr, eps = np.array([0.4], np.float32), 0.05
    count = None if counter_halflife == -1 else np.where(rng.random(rows) < 0.3, 0.0, rng.random(rows))
    want_p, want_m = param.copy(), mom.copy()
    for k, i in enumerate(ind):
        want_p[i], want_m[i] = _ref_adagrad(
            param[i], mom[i], grad[k], lr[0], eps, weight_decay, counter_halflife, None if count is None else count[i]
        )
    feed = (lambda a: torch.from_numpy(a)) if lib == "torch" else (lambda a: a)
    ws = an.Workspace()
    names = ["param", "mom", "ind", "grad", "lr"] + ([] if count is None else ["count"])
    for n, v in zip(names, [param, mom, ind, grad, lr, count]):
        ws.feed(n, feed(v.copy()))
    net = an.Net("s")
    net.SparseAdagrad(
        names, ["param", "mom"], epsilon=eps, weight_decay=weight_decay, counter_halflife=counter_halflife, engine=None
    )
    ws.run_net_once(net)
    np.testing.assert_allclose(np.asarray(ws.fetch("param")), want_p, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(ws.fetch("mom")), want_m, rtol=1e-5, atol=1e-6)


def test_sparse_adagrad_count_input_rules():
    ins = ["p", "m", "i", "g", "lr"]
    with pytest.raises(an.NetDefinitionError, match="count input"):
        an.Net("n").SparseAdagrad(ins, ["p", "m"], counter_halflife=2)
    with pytest.raises(an.NetDefinitionError, match="count input"):
        an.Net("n").SparseAdagrad(ins + ["c"], ["p", "m"])
    with pytest.raises(an.NetDefinitionError, match="formula='torch'"):
        an.Net("n").SparseAdagrad(ins + ["c"], ["p", "m"], counter_halflife=2, formula="torch")


# -- Gather / BatchGather with match_outer (gather_ops_test's ref_gather_match_outer) ---------------
def _ref_gather_match_outer(data, ind, axis=1):
    out = np.zeros((*data.shape[:axis], *ind.shape[axis:], *data.shape[axis + 1 :]), np.float32)
    if axis == 1:
        for i in range(data.shape[0]):
            out[i] = data[
                i,
                ind[i],
            ]
    else:
        for i in range(data.shape[0]):
            for j in range(data.shape[1]):
                out[i, j] = data[
                    i,
                    j,
                    ind[i, j],
                ]
    return out


def _dense_grad(op, args, data, ind, r):
    net = an.Net("g")
    getattr(net, op)(["d", "i"], "y", **args)
    net.Mul(["y", "r"], "yr")
    net.AveragedLoss("yr", "loss")
    names = add_gradient_ops(net, "loss", wrt=["d"], dtype="float64")
    ws = an.Workspace()
    for k, v in {"d": data, "i": ind, "r": r}.items():
        ws.feed(k, v)
    ws.run_net_once(net)
    return np.asarray(ws.fetch(names["d"]))


@FEW
@given(
    op_axis=st.sampled_from([("Gather", 1), ("BatchGather", 1), ("Gather", 2)]),
    batch=st.integers(1, 6),
    rows=st.integers(1, 6),
    index_num=st.integers(1, 8),
    lib=st.sampled_from(["numpy", "torch"]),
    seed=st.integers(0, 2**16),
)
def test_gather_match_outer(op_axis, batch, rows, index_num, lib, seed):
    op, axis = op_axis
    rng = np.random.default_rng(seed)
    if axis == 1:
        data = rng.random((batch, rows, 5)).astype(np.float32)
        ind = rng.integers(rows, size=(batch, index_num)).astype(np.int32)
    else:
        data = rng.random((batch, rows, 3, 5)).astype(np.float32)
        ind = rng.integers(3, size=(batch, rows, index_num, 2)).astype(np.int32)
    args = {"match_outer": True, **({"axis": axis} if op == "Gather" else {})}
    feed = (lambda a: torch.from_numpy(a)) if lib == "torch" else (lambda a: a)
    (out,) = run(op, {"d": feed(data), "i": feed(ind)}, **args)
    want = _ref_gather_match_outer(data, ind, axis)
    np.testing.assert_array_equal(np.asarray(out), want)
    r = rng.normal(size=want.shape)
    grad = _dense_grad(op, args, feed(data.astype(np.float64)), feed(ind), feed(r))
    expect = np.zeros(data.shape)
    flat, idx = expect.reshape(-1, data.shape[axis], 5), ind.reshape(int(np.prod(data.shape[:axis])), -1)
    np.add.at(flat, (np.arange(flat.shape[0])[:, None].repeat(idx.shape[1], 1), idx), r.reshape(*idx.shape, 5) / r.size)
    np.testing.assert_allclose(grad, expect, rtol=1e-12)


def test_gather_match_outer_needs_the_outer_dims():
    with pytest.raises(an.OperatorError, match="match_outer"):
        run("Gather", {"d": np.zeros((2, 3, 4), np.float32), "i": np.zeros((3, 1), np.int32)}, axis=1, match_outer=True)


def test_gather_dense_gradient():
    rng = np.random.default_rng(7)
    data, ind = rng.random((4, 3)), np.array([[1, 3], [1, 0]], np.int64)
    r = rng.normal(size=(2, 2, 3))
    want = np.zeros((4, 3))
    np.add.at(want, ind.reshape(-1), r.reshape(-1, 3) / r.size)  # Caffe2: SparseToDense(indices, dY, data)
    np.testing.assert_allclose(_dense_grad("Gather", {"dense_gradient": True}, data, ind, r), want, rtol=1e-12)
    net = an.Net("g")
    net.Gather(["d", "i"], "y", axis=1, dense_gradient=False)
    net.AveragedLoss("y", "loss")
    with pytest.raises(ValueError, match="must use dense_gradient"):
        add_gradient_ops(net, "loss", wrt=["d"])


# -- SumReduceLike: elementwise_op_broadcast_test.test_sum_reduce (broadcast=1 is passed, not read) --
@pytest.mark.parametrize(
    "x_shape, y_shape, args, reduce",
    [
        ((2, 3, 4, 5), (4, 5), {}, lambda x: x.sum(0).sum(0)),
        ((2, 3, 4, 5), (2, 3), {"axis": 0}, lambda x: x.sum(3).sum(2)),
        ((2, 3, 4, 5), (3, 4), {"axis": 1}, lambda x: x.sum(0).sum(2)),
        ((2, 3, 4, 50), (1,), {}, lambda x: np.array(x.sum())),
        ((2, 3, 4, 5), (1, 3, 4, 1), {}, lambda x: x.sum(0).sum(2).reshape(1, 3, 4, 1)),
    ],
)
def test_sum_reduce_like(x_shape, y_shape, args, reduce):
    rng = np.random.default_rng(8)
    x, y = rng.random(x_shape).astype(np.float32), rng.random(y_shape).astype(np.float32)
    (out,) = run("SumReduceLike", {"X": x, "Y": y}, broadcast=1, **args)
    assert out.shape == y_shape
    np.testing.assert_allclose(out, np.broadcast_to(reduce(x), y_shape), rtol=1e-5)


def test_sum_reduce_like_empty_blob():
    (out,) = run("SumReduceLike", {"X": np.zeros((2, 0, 5), np.float32), "Y": np.zeros((2, 0), np.float32)}, axis=0)
    assert out.shape == (2, 0)


# -- empty batches: SquaredL2Distance and SoftmaxWithLoss as Caffe2's kernels ----------------------
def test_squared_l2_distance_of_an_empty_batch():
    x = np.zeros((0, 3, 2), np.float32)
    (d,) = run("SquaredL2Distance", {"x": x, "y": x})
    assert d.shape == (0,)
    dx, dy = run("SquaredL2DistanceGradient", {"x": x, "y": x, "dd": np.zeros(0, np.float32)}, ("dx", "dy"))
    assert dx.shape == dy.shape == x.shape


@pytest.mark.parametrize("lib", ["numpy", "torch"])
@pytest.mark.parametrize("args", [{}, {"scale": 2.0}, {"label_prob": 1}])
def test_softmax_with_loss_of_an_empty_batch_is_zero(lib, args):
    x = np.zeros((0, 4), np.float32)
    label = np.zeros((0, 4), np.float32) if args.get("label_prob") else np.zeros(0, np.int32)
    feed = (lambda a: torch.from_numpy(a)) if lib == "torch" else (lambda a: a)
    p, loss = run("SoftmaxWithLoss", {"x": feed(x), "l": feed(label)}, ("p", "loss"), **args)
    assert tuple(p.shape) == (0, 4) and float(loss) == 0.0
    net = an.Net("g")
    net.SoftmaxWithLoss(["x", "l"], ["p", "loss"], **args)
    names = add_gradient_ops(net, "loss", wrt=["x"])
    ws = an.Workspace()
    ws.feed("x", feed(x))
    ws.feed("l", feed(label))
    ws.run_net_once(net)
    assert tuple(ws.fetch(names["x"]).shape) == (0, 4)


# -- LabelCrossEntropy: Caffe2's view of X (cross_entropy_op.cc) -----------------------------------
@pytest.mark.parametrize("shape, label", [((3,), [[1]]), ((2, 3, 2), [0, 5]), ((4, 3), [[0], [2], [1], [1]])])
def test_label_cross_entropy_views_x_as_caffe2(shape, label):
    rng = np.random.default_rng(9)
    x = rng.uniform(0.05, 1, shape).astype(np.float32)
    label = np.array(label, np.int32)
    rows = x.reshape(1 if x.ndim == 1 else x.shape[0], -1)
    want = -np.log(np.maximum(rows[np.arange(rows.shape[0]), label.reshape(-1)], 1e-20))
    (y,) = run("LabelCrossEntropy", {"x": x, "l": label})
    np.testing.assert_allclose(y, want, rtol=1e-6)
    dy = rng.random(rows.shape[0]).astype(np.float32)
    (dx,) = run("LabelCrossEntropyGradient", {"x": x, "l": label, "dy": dy})
    want_dx = np.zeros_like(rows)
    want_dx[np.arange(rows.shape[0]), label.reshape(-1)] = -dy / rows[np.arange(rows.shape[0]), label.reshape(-1)]
    assert dx.shape == x.shape
    np.testing.assert_allclose(dx.reshape(rows.shape), want_dx, rtol=1e-6)


# -- HasElements over several inputs (utility_ops.h's HasElementsOp) -------------------------------
@pytest.mark.parametrize(
    "shapes, want",
    [([(0,)], False), ([(2, 3)], True), ([(0, 3), (0,)], False), ([(0, 3), (1,)], True), ([(2,), (0,), (0, 2)], True)],
)
def test_has_elements_of_several_inputs(shapes, want):
    (out,) = run("HasElements", {f"x{i}": np.zeros(s, np.float32) for i, s in enumerate(shapes)})
    assert out.shape == () and bool(out) is want


# -- Conv: conv_test's implementation-choice args, and its RuntimeError on a bad geometry ----------
@pytest.mark.parametrize("op", ["Conv", "Conv2D"])
def test_conv_takes_caffe2s_implementation_args(op):
    rng = np.random.default_rng(10)
    x, w, b = rng.random((2, 3, 5, 5), np.float32), rng.random((4, 3, 3, 3), np.float32), rng.random(4, np.float32)
    (plain,) = run(op, {"x": x, "w": w, "b": b}, kernel=3, pad=1)
    (tuned,) = run(
        op,
        {"x": x, "w": w, "b": b},
        kernel=3,
        pad=1,
        engine="EIGEN",
        shared_buffer=1,
        force_algo_fwd=-1,
        force_algo_dgrad=-1,
        force_algo_wgrad=-1,
        exhaustive_search=True,
    )
    np.testing.assert_array_equal(tuned, plain)
    net = an.Net("g")
    net.Conv(["x", "w", "b"], "y", kernel=3, shared_buffer=1, force_algo_wgrad=-1)
    net.AveragedLoss("y", "loss")
    add_gradient_ops(net, "loss", wrt=["x", "w"])  # the gradient op takes them too
    grad_op = next(o for o in net.to_def().ops if o.type == "ConvGradient")
    assert grad_op.args["shared_buffer"] == 1 and grad_op.args["force_algo_wgrad"] == -1


def test_a_failing_operator_is_a_runtime_error():
    with pytest.raises(RuntimeError):  # conv_test's error path: the kernel is larger than the padded image
        run("Conv", {"x": np.zeros((1, 1, 2, 2), np.float32), "w": np.zeros((1, 1, 3, 3), np.float32)}, kernel=3)
    with pytest.raises(RuntimeError):  # segment_ops_test.test_sparse_lengths_sum_invalid_index
        run(
            "SparseLengthsSum",
            {"d": np.zeros((5, 2), np.float32), "i": np.array([10000], np.int64), "l": np.array([1], np.int32)},
        )
