"""Ports of the Caffe2 operator-test checks an audit found asyncnet failing (each fixed in ops/).

Sources (pytorch/pytorch, caffe2/): python/operator_test/gather_ops_test.py (test_gather_ops:
rows_num may be 0 with indices drawn anyway, the output then has DATA's shape;
TestBatchGatherOps: BatchGather with its reference np.take(axis=1) and a gradient check),
operators/gather_op.h (gather_impl: an empty DATA axis gives DATA's shape, wrap_indices on by
default on axis 0 only), operators/batch_gather_ops.h, operators/concat_split_op.h and
hypothesis_test.py's test_depth_concat_with_order (`order` instead of `axis`: NCHW 1, NHWC 3;
both refused; DepthConcat / DepthSplit the old names), python/operator_test/sparse_ops_test.py
(testScatterWeightedSum: every indexed row scaled by w0 once per occurrence, then the pairs
added), operators/utility_ops.h (ScatterWeightedSumOp's two loops).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import torch

import asyncnet as an
from _c2run import run_op
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
@given(batch=st.integers(2, 10), rows=st.integers(1, 20), block=st.integers(1, 2), index_num=st.integers(1, 10),
       seed=st.integers(0, 2**16))
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
@given(num_args=st.integers(1, 5), first_dim=st.integers(1, 20), index_dim=st.integers(1, 10),
       extra_dims=st.lists(st.integers(1, 4), min_size=0, max_size=3), ind_type=st.sampled_from([np.int32, np.int64]),
       lib=st.sampled_from(["numpy", "torch"]), seed=st.integers(0, 2**16))
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
    for n, v in dict(d=d, w0=np.array([0.5], np.float32), i=np.array([1, 1, 0], np.int64),
                     x=np.array([[1.0], [2.0], [4.0]], np.float32), w=np.array([1.0], np.float32)).items():
        ws.feed(n, v)
    net = an.Net("s")
    net.ScatterWeightedSum(["d", "w0", "i", "x", "w"], "d")
    ws.run_net_once(net)
    np.testing.assert_array_equal(ws.fetch("d")[:, 0], [0.5 + 4.0, 10.0 * 0.25 + 1.0 + 2.0])
