"""Caffe2's Adagrad updates fused with SparseLengthsWeightedSum's gradient (positional weights):
against the unfused ops (LengthsRangeFill, Gather, SparseLengthsWeightedSumGradient with DATA and
INDICES, then SparseAdagrad / RowWiseSparseAdagrad) bit for bit, and against the loops of
Caffe2's kernels (caffe2/sgd/adagrad_fused.h, rowwise_adagrad_fused.h) written out here in
float64, the Approx forms included."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncnet as an

pytestmark = pytest.mark.timeout(120)
SOME = settings(max_examples=25, deadline=None)
NAME = "SparseAdagradFusedWithSparseLengthsWeightedSumGradient"


def op_name(rowwise: bool, approx: bool) -> str:
    return ("RowWise" if rowwise else "") + NAME + ("Approx" if approx else "")


def feed(ws, lib, **arrays):
    conv = (lambda a: a.copy()) if lib == "numpy" else (lambda a: __import__("torch").from_numpy(a.copy()))
    for name, v in arrays.items():
        ws.feed(name, conv(v))


def fused(case, rowwise, approx, args, lib="numpy"):
    table, moment, aux, idx, dy, lengths, lr = case
    ws = an.Workspace()
    feed(ws, lib, t=table, m=moment, a=aux, i=idx, dy=dy, l=lengths, lr=np.full(1, lr, table.dtype))
    net = an.Net("upd")
    getattr(net, op_name(rowwise, approx))(["t", "m", "a", "i", "dy", "lr", "l"], ["t", "m", "ag"], **args)
    ws.run_net_once(net)
    return [np.asarray(ws.fetch(n)) for n in ("t", "m", "ag")]


def unfused(case, rowwise, args):
    table, moment, aux, idx, dy, lengths, lr = case
    ws = an.Workspace()
    feed(ws, "numpy", t=table, m=moment, a=aux, i=idx, dy=dy, l=lengths, lr=np.full(1, lr, table.dtype))
    net = an.Net("pair")
    net.LengthsRangeFill(["l"], "pos")
    net.Gather(["a", "pos"], "w")
    net.SparseLengthsWeightedSumGradient(["dy", "w", "l", "t", "i"], ["rows", "ag"])
    getattr(net, "RowWiseSparseAdagrad" if rowwise else "SparseAdagrad")(
        ["t", "m", "i", "rows", "lr"], ["t", "m"], **args
    )
    ws.run_net_once(net)
    return [np.asarray(ws.fetch(n)) for n in ("t", "m", "ag")]


def caffe2_loop(case, rowwise, approx, eps=1e-5, wd=0.0):
    """The kernels' loops in float64: aux_grad[k] = <grad[b], param[idx[k]]> (read before every
    update, or, Approx, just before index k's own update), then the Adagrad step of
    aux[j] * grad[b] on row idx[k], k in order."""
    table, moment, aux, idx, dy, lengths, lr = case
    p, m = table.astype(np.float64), moment.astype(np.float64)
    g_all, a = dy.astype(np.float64).reshape(len(lengths), -1), aux.astype(np.float64)
    flat = p.reshape(p.shape[0], -1)
    aux_grad = np.zeros(len(idx))
    if not approx:
        k = 0
        for b, n in enumerate(lengths):
            for _ in range(n):
                aux_grad[k] = g_all[b] @ flat[idx[k]]
                k += 1
    k = 0
    for b, n in enumerate(lengths):
        for j in range(n):
            i = idx[k]
            if approx:
                aux_grad[k] = g_all[b] @ flat[i]
            g = a[j] * g_all[b] + wd * flat[i]
            if rowwise:
                m[i] += np.mean(g * g)
                flat[i] += lr * g / (np.sqrt(m[i]) + eps)
            else:
                mi = m.reshape(m.shape[0], -1)[i]
                mi += g * g
                flat[i] += lr * g / (np.sqrt(mi) + eps)
            k += 1
    return p, m, aux_grad


@st.composite
def cases(draw, dtype="float32"):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    rows = draw(st.sampled_from([1, 4, 300]))
    row = draw(st.sampled_from([(), (3,), (8,)]))
    longest = draw(st.sampled_from([1, 3, 12]))
    lengths = rng.integers(0, longest + 1, size=draw(st.integers(1, 60))).astype(np.int32)
    idx = rng.integers(0, rows, size=int(lengths.sum()))
    table = rng.normal(size=(rows, *row)).astype(dtype)
    rowwise = draw(st.booleans())
    moment = rng.uniform(0, 1, size=(rows,) if rowwise else table.shape).astype(dtype)
    aux = rng.normal(size=longest + draw(st.integers(0, 2))).astype(dtype)
    dy = rng.normal(size=(lengths.size, *row)).astype(dtype)
    return (table, moment, aux, idx, dy, lengths, -0.05), rowwise


@SOME
@given(case=cases(), wd=st.sampled_from([0.0, 0.01]))
def test_the_fused_op_gives_the_bits_of_the_unfused_ops(case, wd):
    case, rowwise = case
    args = {"epsilon": 1e-5, "weight_decay": wd}
    for got, want in zip(fused(case, rowwise, False, args), unfused(case, rowwise, args)):
        np.testing.assert_array_equal(got, want)


@SOME
@given(case=cases(dtype="float64"), approx=st.booleans())
def test_the_fused_op_computes_caffe2s_loop(case, approx):
    case, rowwise = case
    got = fused(case, rowwise, approx, {"weight_decay": 0.01})
    for g, w in zip(got, caffe2_loop(case, rowwise, approx, wd=0.01)):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-12)


def test_approx_reads_rows_updated_by_earlier_repeats():
    rng = np.random.default_rng(3)
    table = rng.normal(size=(2, 4))
    case = (
        table,
        np.zeros((2, 4)),
        np.ones(2),
        np.array([1, 1]),
        rng.normal(size=(1, 4)),
        np.array([2], np.int32),
        -0.5,
    )
    exact, approx = fused(case, False, False, {}), fused(case, False, True, {})
    np.testing.assert_array_equal(exact[0], approx[0])  # the same updates
    assert exact[2][0] == approx[2][0] and exact[2][1] != approx[2][1]  # the repeat reads the updated row
    np.testing.assert_allclose(approx[2], caffe2_loop(case, False, True)[2], rtol=1e-12)


@pytest.mark.parametrize("rowwise", [False, True])
@pytest.mark.parametrize("approx", [False, True])
def test_torch_tensors_give_numpys_bits(rowwise, approx):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    lengths = rng.integers(0, 4, 40).astype(np.int32)
    idx = rng.integers(0, 30, int(lengths.sum()))
    table = rng.normal(size=(30, 8)).astype(np.float32)
    moment = np.zeros(30 if rowwise else (30, 8), np.float32)
    case = (
        table,
        moment,
        rng.normal(size=3).astype(np.float32),
        idx,
        rng.normal(size=(40, 8)).astype(np.float32),
        lengths,
        -0.1,
    )
    want = fused(case, rowwise, approx, {})
    got = fused(case, rowwise, approx, {}, lib="torch")
    assert torch is not None
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_bad_inputs_are_refused_with_the_input_named():
    table = np.zeros((5, 2), np.float32)
    base = dict(
        t=table,
        m=np.zeros((5, 2), np.float32),
        i=np.array([0, 1, 2]),
        dy=np.zeros((2, 2), np.float32),
        l=np.array([1, 2], np.int32),
        lr=np.full(1, -0.1, np.float32),
    )
    for a, match in ((np.ones(1, np.float32), "at least 2 weights"), (np.ones(2), "dtype float32")):
        ws = an.Workspace()
        feed(ws, "numpy", a=a, **base)
        net = an.Net("bad")
        net.SparseAdagradFusedWithSparseLengthsWeightedSumGradient(
            ["t", "m", "a", "i", "dy", "lr", "l"], ["t", "m", "ag"]
        )
        with pytest.raises(an.OperatorError, match=match):
            ws.run_net_once(net)
