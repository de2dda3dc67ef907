"""The sparse updates fused with SparseLengthsSumGradient (Caffe2's
SparseAdagradFusedWithSparseLengthsSumGradient and RowWiseSparseAdagradFusedWithSparseLengthsSumGradient,
and asyncnet's SparseSGDFusedWithSparseLengthsSumGradient) against the unfused pair of ops,
SparseLengthsSumGradient then the update, bit for bit on numpy (every path: few and many
repeats, small and large inputs), and the optimizer's rewrite of a train net into them."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncnet as an
from asyncnet.errors import OperatorError

pytestmark = pytest.mark.timeout(120)
SOME = settings(max_examples=30, deadline=None)
OPS = {
    "sgd": ("ScatterWeightedSum", "SparseSGDFusedWithSparseLengthsSumGradient"),
    "adagrad": ("SparseAdagrad", "SparseAdagradFusedWithSparseLengthsSumGradient"),
    "rwsadagrad": ("RowWiseSparseAdagrad", "RowWiseSparseAdagradFusedWithSparseLengthsSumGradient"),
}


def step(kind: str, fused: bool, table, moment, idx, dy, lengths, lr, args, lib="numpy"):
    """One update of copies of ``table`` and ``moment``: the fused op, or the pair."""
    conv = (lambda a: a.copy()) if lib == "numpy" else (lambda a: __import__("torch").from_numpy(a.copy()))
    ws = an.Workspace()
    for name, v in (("t", table), ("m", moment), ("i", idx), ("dy", dy), ("l", lengths)):
        ws.feed(name, conv(v))
    ws.feed("lr", conv(np.full(1, lr, table.dtype)))
    ws.feed("one", conv(np.ones(1, table.dtype)))
    net = an.Net("upd")
    unfused, fused_op = OPS[kind]
    if fused:
        ins = ["t", "i", "dy", "lr", "l"] if kind == "sgd" else ["t", "m", "i", "dy", "lr", "l"]
        getattr(net, fused_op)(ins, ["t"] if kind == "sgd" else ["t", "m"], **args)
    else:
        net.SparseLengthsSumGradient(["dy", "l"], "rows")
        if kind == "sgd":
            net.ScatterWeightedSum(["t", "one", "i", "rows", "lr"], "t")
        else:
            getattr(net, unfused)(["t", "m", "i", "rows", "lr"], ["t", "m"], **args)
    ws.run_net_once(net)
    return np.asarray(ws.fetch("t")), (None if kind == "sgd" else np.asarray(ws.fetch("m")))


@st.composite
def cases(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    rows = draw(st.sampled_from([1, 7, 300, 5000]))
    row = draw(st.sampled_from([(), (3,), (64,)]))
    lengths = rng.integers(0, draw(st.sampled_from([2, 20])) + 1, size=draw(st.integers(1, 300))).astype(np.int32)
    idx = rng.integers(0, rows, size=int(lengths.sum()))
    dtype = draw(st.sampled_from(["float32", "float64"]))
    table = rng.normal(size=(rows, *row)).astype(dtype)
    dy = rng.normal(size=(lengths.size, *row)).astype(dtype)
    return table, idx, dy, lengths


@SOME
@given(case=cases(), kind=st.sampled_from(sorted(OPS)), formula=st.sampled_from(["caffe2", "torch"]))
def test_fused_update_gives_the_bits_of_the_pair(case, kind, formula):
    table, idx, dy, lengths = case
    if kind == "rwsadagrad":
        moment = np.abs(np.random.default_rng(1).normal(size=table.shape[0])).astype(table.dtype)
    else:
        moment = np.abs(np.random.default_rng(1).normal(size=table.shape)).astype(table.dtype)
    lr = -0.05 if formula == "caffe2" else 0.05
    args = {} if kind == "sgd" else {"formula": formula}
    want = step(kind, False, table, moment, idx, dy, lengths, lr, args)
    got = step(kind, True, table, moment, idx, dy, lengths, lr, args)
    for g, w in zip(got, want):
        if w is not None:
            np.testing.assert_array_equal(g.view(np.uint8), w.view(np.uint8))


@pytest.mark.parametrize("kind", sorted(OPS))
def test_fused_update_writes_a_cpu_torch_table_in_place(kind):
    torch = pytest.importorskip("torch")
    table = torch.zeros((50, 4))
    moment = torch.ones(50 if kind == "rwsadagrad" else (50, 4))
    ws = an.Workspace()
    for name, v in (("t", table), ("m", moment), ("i", torch.tensor([3, 7, 3])), ("dy", torch.ones((2, 4)))):
        ws.feed(name, v)
    ws.feed("l", torch.tensor([2, 1], dtype=torch.int32))
    ws.feed("lr", np.full(1, 0.5, np.float32))  # a numpy rate beside torch tensors, as the train net's neg_lr
    net = an.Net("upd")
    _, fused_op = OPS[kind]
    ins = ["t", "i", "dy", "lr", "l"] if kind == "sgd" else ["t", "m", "i", "dy", "lr", "l"]
    if kind == "sgd":
        getattr(net, fused_op)(ins, ["t"])
    else:
        getattr(net, fused_op)(ins, ["t", "m"], formula="torch")
    ws.run_net_once(net)
    got = ws.fetch("t")
    assert got is table or got.data_ptr() == table.data_ptr()
    touched = sorted({int(r) for r in torch.nonzero(table.abs().sum(1)).reshape(-1)})
    assert touched == [3, 7]


@pytest.mark.parametrize("kind", sorted(OPS))
def test_fused_update_on_torch_tensors_matches_numpy(kind):
    rng = np.random.default_rng(3)
    lengths = rng.integers(0, 20, size=200).astype(np.int32)
    idx = rng.integers(0, 400, size=int(lengths.sum()))
    table = rng.normal(size=(400, 16)).astype(np.float32)
    dy = rng.normal(size=(200, 16)).astype(np.float32)
    moment = np.ones(400 if kind == "rwsadagrad" else (400, 16), np.float32)
    args = {} if kind == "sgd" else {"formula": "torch"}
    want = step(kind, False, table, moment, idx, dy, lengths, 0.05, args)
    got = step(kind, True, table, moment, idx, dy, lengths, 0.05, args, lib="torch")
    for g, w in zip(got, want):  # CPU tensors run the numpy kernel on views of them: the same bits
        if w is not None:
            np.testing.assert_array_equal(g, w)


def test_a_pooled_gradient_of_the_wrong_shape_is_refused():
    table = np.zeros((10, 4), np.float32)
    with pytest.raises(OperatorError, match="pooled gradient"):
        step(
            "sgd",
            True,
            table,
            table,
            np.array([1, 2, 3]),
            np.zeros((2, 3), np.float32),
            np.array([1, 2], np.int32),
            -0.1,
            {},
        )
    with pytest.raises(OperatorError, match="summing to 3"):
        step(
            "adagrad",
            True,
            table,
            table,
            np.array([1, 2, 3]),
            np.zeros((2, 4), np.float32),
            np.array([1, 1], np.int32),
            -0.1,
            {},
        )


def _dlrm_train(optimizer: str):
    from asyncnet.model.zoo.dlrm import click_log, dlrm

    m = dlrm(num_dense=4, table_sizes=(50, 20), dim=8, bottom=(16,), top=(16,))
    return m, m.train_net(optimizer=optimizer, lr=0.05), click_log(128, num_dense=4, table_sizes=(50, 20))


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad", "rwsadagrad"])
def test_the_optimizer_fuses_each_table_update_with_its_lookup_gradient(optimizer):
    m, net, log = _dlrm_train(optimizer)
    types = [op.type for op in net.ops]
    assert "SparseLengthsSumGradient" not in types
    assert types.count(OPS[optimizer][1]) == 2
    # the same training as the unfused net, bit for bit
    from asyncnet.model import optimizer as opt

    m2, _, _ = _dlrm_train(optimizer)
    real = opt._fusable_lookup_gradients
    opt._fusable_lookup_gradients = lambda net, grads, end: {}
    try:
        net2 = m2.train_net(optimizer=optimizer, lr=0.05)
    finally:
        opt._fusable_lookup_gradients = real
    assert "SparseLengthsSumGradient" in [op.type for op in net2.ops]
    results = []
    for model, train in ((m, net), (m2, net2)):
        ws = an.Workspace()
        ws.run_net_once(model.init_net)
        ws.create_net(train)
        for start in range(0, 128, 32):
            for name, value in log.batch(range(start, start + 32)).items():
                ws.feed(name, value)
            ws.run_net(train.name)
        results.append([np.asarray(ws.fetch(p)).copy() for p in model.params])
    for a, b in zip(*results):
        np.testing.assert_array_equal(a, b)


def test_no_fusion_when_a_later_op_rewrites_the_pooled_gradient():
    from asyncnet.autodiff import GradientSlice
    from asyncnet.model import optimizer as opt

    net = an.Net("n")
    net.SparseLengthsSumGradient(["dy", "l"], "rows")
    net.Scale("dy", "dy", scale=2.0)  # in place after the gradient op: the update must not read it
    grads = {"t": GradientSlice("i", "rows")}
    assert opt._fusable_lookup_gradients(net, grads, len(net.ops)) == {}
    net.ops.pop()
    assert opt._fusable_lookup_gradients(net, grads, len(net.ops)) == {"t": ("dy", "l")}
    assert net.ops == []
