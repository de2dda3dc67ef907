"""Sparse lookups and updates: forwards against numpy/torch, sparse gradients (GradientSlice)
against torch autograd and finite differences, in-place updates against their sequential
definitions and torch.optim.Adagrad, and threads sharing one table."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from _gradcheck_helpers import numeric_grads
from _nn_helpers import rand, run
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncnet as an
from asyncnet.autodiff import GradientSlice, add_gradient_ops

pytestmark = pytest.mark.timeout(60)
FEW = settings(max_examples=10, deadline=None)


@st.composite
def bags(draw):
    rows, dim = draw(st.integers(1, 6)), draw(st.integers(1, 3))
    lengths = draw(st.lists(st.integers(0, 4), min_size=1, max_size=4))
    idx = draw(st.lists(st.integers(0, rows - 1), min_size=sum(lengths), max_size=sum(lengths)))
    return rows, dim, np.array(lengths, np.int32), np.array(idx, np.int64), draw(st.integers(0, 2**16))


def densify(ws, g, shape):
    dense = np.zeros(shape)
    np.add.at(dense, ws.fetch(g.indices), ws.fetch(g.values))
    return dense


def sparse_grad(build, feeds, wrt):
    net = an.Net("g")
    loss = build(net)
    grads = add_gradient_ops(net, loss, wrt=[wrt], dtype="float64")
    ws = an.Workspace()
    for k, v in feeds.items():
        ws.feed(k, v.copy())
    ws.run_net_once(net)
    return ws, grads[wrt], net


@FEW
@given(case=bags(), weighted=st.booleans())
def test_sparse_lengths_sum_and_sparse_gradient(case, weighted):
    rows, dim, lengths, idx, seed = case
    table, w, r = rand(seed, (rows, dim)), rand(seed + 1, idx.shape), rand(seed + 2, (lengths.size, dim))
    offsets = torch.tensor(np.r_[0, np.cumsum(lengths)[:-1]])
    ref = F.embedding_bag(
        torch.tensor(idx),
        torch.tensor(table),
        offsets,
        mode="sum",
        per_sample_weights=torch.tensor(w) if weighted else None,
    ).numpy()
    out = (
        run("SparseLengthsWeightedSum", [table, w, idx, lengths])
        if weighted
        else run("SparseLengthsSum", [table, idx, lengths])
    )
    np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-12)
    feeds = {"t": table, "w": w, "i": idx, "l": lengths, "r": r}

    def build(net):
        if weighted:
            net.SparseLengthsWeightedSum(["t", "w", "i", "l"], "y")
        else:
            net.SparseLengthsSum(["t", "i", "l"], "y")
        net.Mul(["y", "r"], "yr")
        return net.AveragedLoss("yr", "loss")

    ws, g, net = sparse_grad(build, feeds, "t")
    assert isinstance(g, GradientSlice)
    assert ws.fetch(g.values).shape == (idx.size, dim)  # one row per index, never the table
    assert not any(op.type == "SparseToDense" for op in net.ops)
    tt = torch.tensor(table, requires_grad=True)
    emb = F.embedding_bag(
        torch.tensor(idx), tt, offsets, mode="sum", per_sample_weights=torch.tensor(w) if weighted else None
    )
    (emb * torch.tensor(r)).mean().backward()
    dense = densify(ws, g, table.shape)
    np.testing.assert_allclose(dense, tt.grad.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(dense, numeric_grads(build, feeds, ["t"])["t"], rtol=1e-4, atol=1e-6)


@FEW
@given(case=bags())
def test_weighted_sum_gradient_on_weights(case):
    rows, dim, lengths, idx, seed = case
    feeds = {
        "t": rand(seed, (rows, dim)),
        "w": rand(seed + 1, idx.shape),
        "i": idx,
        "l": lengths,
        "r": rand(seed + 2, (lengths.size, dim)),
    }

    def build(net):
        net.SparseLengthsWeightedSum(["t", "w", "i", "l"], "y", grad_on_weights=1)
        net.Mul(["y", "r"], "yr")
        return net.AveragedLoss("yr", "loss")

    ws, g, _ = sparse_grad(build, feeds, "w")
    np.testing.assert_allclose(ws.fetch(g), numeric_grads(build, feeds, ["w"])["w"], rtol=1e-4, atol=1e-7)


@FEW
@given(rows=st.integers(1, 5), ishape=st.sampled_from([(3,), (2, 2), (0,)]), seed=st.integers(0, 2**16))
def test_gather_sparse_gradient(rows, ishape, seed):
    table = rand(seed, (rows, 2, 3))
    idx = np.random.default_rng(seed).integers(0, rows, ishape)
    np.testing.assert_array_equal(run("Gather", [table, idx]), table[idx])
    feeds = {"t": table, "i": idx, "r": rand(seed + 1, (*ishape, 2, 3))}

    def build(net):
        net.Gather(["t", "i"], "y")
        net.Mul(["y", "r"], "yr")
        net.Sum(["yr", "yr"], "s")
        return net.AveragedLoss("s", "loss")

    if idx.size == 0:
        return
    ws, g, _ = sparse_grad(build, feeds, "t")
    assert isinstance(g, GradientSlice) and ws.fetch(g.indices).shape == (idx.size,)
    tt = torch.tensor(table, requires_grad=True)
    (tt[torch.tensor(idx)] * 2 * torch.tensor(feeds["r"])).mean().backward()
    np.testing.assert_allclose(densify(ws, g, table.shape), tt.grad.numpy(), rtol=1e-12, atol=1e-14)


def test_two_lookups_join_slices_and_dense_use_densifies():
    table = rand(0, (5, 2))
    feeds = {"t": table, "i": np.array([0, 4, 0]), "j": np.array([4, 1]), "l": np.array([2, 1], np.int32)}

    def two_lookups(net):
        net.SparseLengthsSum(["t", "i", "l"], "a")
        net.Gather(["t", "j"], "b")
        net.Add(["a", "b"], "s")
        return net.AveragedLoss("s", "loss")

    ws, g, _ = sparse_grad(two_lookups, feeds, "t")
    assert isinstance(g, GradientSlice) and sorted(ws.fetch(g.indices).tolist()) == [0, 0, 1, 4, 4]
    np.testing.assert_allclose(densify(ws, g, table.shape), numeric_grads(two_lookups, feeds, ["t"])["t"], atol=1e-8)

    def lookup_and_dense(net):
        net.Gather(["t", "j"], "b")
        net.AveragedLoss("b", "l1")
        net.AveragedLoss("t", "l2")
        net.Add(["l1", "l2"], "loss")
        return "loss"

    ws, g, _ = sparse_grad(lookup_and_dense, feeds, "t")
    assert isinstance(g, str)
    np.testing.assert_allclose(ws.fetch(g), numeric_grads(lookup_and_dense, feeds, ["t"])["t"], atol=1e-8)


def test_lookup_of_an_intermediate_gets_a_dense_gradient():
    feeds = {
        "x": rand(0, (4, 3)),
        "w": rand(1, (5, 3)),
        "b": rand(2, (5,)),
        "i": np.array([2, 0, 2]),
        "r": rand(3, (3, 5)),
    }

    def build(net):
        net.FC(["x", "w", "b"], "h")  # h [4, 5] is computed, then looked up
        net.Gather(["h", "i"], "rows")
        net.Mul(["rows", "r"], "rr")
        return net.AveragedLoss("rr", "loss")

    ws, g, net = sparse_grad(build, feeds, "w")
    assert any(op.type == "SparseToDense" for op in net.ops)
    np.testing.assert_allclose(ws.fetch(g), numeric_grads(build, feeds, ["w"])["w"], rtol=1e-5, atol=1e-8)


def test_lookup_errors():
    table = np.zeros((3, 2))
    with pytest.raises(an.OperatorError, match=r"indices in \[0, 3\)"):
        run("Gather", [table, np.array([3])])
    with pytest.raises(an.OperatorError, match="summing to 2"):
        run("SparseLengthsSum", [table, np.array([0, 1]), np.array([1, 2], np.int32)])
    with pytest.raises(an.OperatorError, match="int32 or int64"):
        run("SparseLengthsSum", [table, np.array([0.0]), np.array([1], np.int32)])


def _sequential_scatter(x0, a0, idx, terms):
    """Caffe2's loops (sparse_ops_test's reference): every indexed row scaled by a0 once per
    occurrence, then each pair added row by row in k order."""
    out = x0.copy()
    for i in idx:
        out[i] *= a0
    for x, w in terms:
        for k, i in enumerate(idx):
            out[i] += x[k] * w
    return out


@FEW
@given(rows=st.integers(1, 5), k=st.integers(0, 8), a0=st.sampled_from([1.0, 0.5]), seed=st.integers(0, 2**16))
def test_scatter_weighted_sum_in_place_sequential(rows, k, a0, seed):
    rng = np.random.default_rng(seed)
    x0, idx = rand(seed, (rows, 3)), rng.integers(0, rows, k)
    x1, x2 = rand(seed + 1, (k, 3)), rand(seed + 2, (k, 3))
    want = _sequential_scatter(x0, a0, idx, [(x1, 0.3), (x2, -2.0)])
    ws = an.Workspace()
    for n, v in dict(x0=x0, a0=np.array([a0]), i=idx, x1=x1, w1=np.array(0.3), x2=x2, w2=np.array([-2.0])).items():
        ws.feed(n, v)
    held = ws.fetch("x0")
    net = an.Net("s")
    net.ScatterWeightedSum(["x0", "a0", "i", "x1", "w1", "x2", "w2"], "x0")
    ws.run_net_once(net)
    assert ws.fetch("x0") is held
    np.testing.assert_allclose(held, want, rtol=1e-12)


def test_scatter_weighted_sum_schema():
    net = an.Net("s")
    with pytest.raises(an.NetDefinitionError, match="odd number"):
        net.ScatterWeightedSum(["x0", "a0", "i", "x1", "w1", "x2"], "x0")
    with pytest.raises(an.NetDefinitionError, match="in-place"):
        net.ScatterWeightedSum(["x0", "a0", "i", "x1", "w1"], "y")


@FEW
@given(rows=st.integers(1, 5), k=st.integers(1, 8), seed=st.integers(0, 2**16))
def test_sparse_adagrad_caffe2_applies_repeats_in_order(rows, k, seed):
    rng = np.random.default_rng(seed)
    p0, idx, g = rand(seed, (rows, 2)), rng.integers(0, rows, k), rand(seed + 1, (k, 2))
    m0 = np.abs(rand(seed + 2, (rows, 2)))
    p_ref, m_ref = p0.copy(), m0.copy()
    for kk, i in enumerate(idx):  # Caffe2's loop, fed lr = -0.1
        m_ref[i] += g[kk] ** 2
        p_ref[i] += -0.1 * g[kk] / (np.sqrt(m_ref[i]) + 1e-5)
    p, m = _sparse_adagrad(p0, m0, idx, g, -0.1)
    np.testing.assert_allclose(p, p_ref, rtol=1e-12)
    np.testing.assert_allclose(m, m_ref, rtol=1e-12)


@FEW
@given(rows=st.integers(1, 5), k=st.integers(1, 8), seed=st.integers(0, 2**16))
def test_sparse_adagrad_torch_matches_torch_optim(rows, k, seed):
    """formula='torch': torch.optim.Adagrad's step on the (coalesced) sparse gradient."""
    rng = np.random.default_rng(seed)
    p0, idx, g = rand(seed, (rows, 2)), rng.integers(0, rows, k), rand(seed + 1, (k, 2))
    m0 = np.abs(rand(seed + 2, (rows, 2)))
    p, m = _sparse_adagrad(p0, m0, idx, g, 0.1, formula="torch")
    tp = torch.tensor(p0, requires_grad=True)
    opt = torch.optim.Adagrad([tp], lr=0.1, eps=1e-10)
    tp.grad = torch.sparse_coo_tensor(torch.tensor(idx)[None], torch.tensor(g), p0.shape, check_invariants=True)
    opt.state[tp]["sum"] = torch.tensor(m0)
    with torch.sparse.check_sparse_tensor_invariants():
        opt.step()
    np.testing.assert_allclose(p, tp.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(m, opt.state[tp]["sum"].numpy(), rtol=1e-12)


def _sparse_adagrad(p0, m0, idx, g, lr, **args):
    ws = an.Workspace()
    for n, v in dict(p=p0.copy(), m=m0.copy(), i=idx, g=g, lr=np.array(lr)).items():
        ws.feed(n, v)
    held = ws.fetch("p"), ws.fetch("m")
    net = an.Net("a")
    net.SparseAdagrad(["p", "m", "i", "g", "lr"], ["p", "m"], **args)
    ws.run_net_once(net)
    assert ws.fetch("p") is held[0] and ws.fetch("m") is held[1]  # written in place
    return held


@pytest.mark.parametrize("formula", ["caffe2", "torch"])
def test_dense_adagrad_matches_torch(formula):
    """torch.optim.Adagrad's step: formula torch with lr, or Caffe2's (the default) fed -lr."""
    p, g = rand(0, (3, 4)), rand(1, (3, 4))
    ws = an.Workspace()
    lr = 0.05 if formula == "torch" else -0.05
    ws.feed("p", p.copy())
    ws.feed("m", np.zeros((3, 4)))
    ws.feed("g", g)
    ws.feed("lr", np.array([lr]))
    held = ws.fetch("p")
    net = an.Net("a")
    net.Adagrad(
        ["p", "m", "g", "lr"], ["p", "m"], epsilon=1e-10, **({"formula": "torch"} if formula == "torch" else {})
    )
    ws.create_net(net)
    tp = torch.tensor(p, requires_grad=True)
    opt = torch.optim.Adagrad([tp], lr=0.05, eps=1e-10)
    for _ in range(3):
        ws.run_net("a")
        tp.grad = torch.tensor(g)
        opt.step()
    assert ws.fetch("p") is held
    np.testing.assert_allclose(held, tp.detach().numpy(), rtol=1e-9)
    np.testing.assert_allclose(ws.fetch("m"), 3 * g * g, rtol=1e-12)


def test_dense_adagrad_out_of_place_and_decay():
    p, m, g = rand(0, (2, 3)), np.abs(rand(1, (2, 3))), rand(2, (2, 3))
    new_p, new_m = run("Adagrad", [p, m, g, np.array([-0.1])], 2, decay=0.5)
    want_m = 0.5 * m + g * g
    np.testing.assert_allclose(new_m, want_m, rtol=1e-12)
    np.testing.assert_allclose(new_p, p - 0.1 * g / (np.sqrt(want_m) + 1e-5), rtol=1e-12)
    assert not np.shares_memory(new_p, p)


def test_sparse_sgd_is_scatter_weighted_sum_with_negative_lr():
    """Caffe2's sparse SGD: the autodiff GradientSlice fed to ScatterWeightedSum with -lr."""
    table = rand(0, (6, 2))
    ws = an.Workspace()
    ws.feed("t", table.copy())
    ws.feed("i", np.array([1, 5, 1]))
    ws.feed("l", np.array([3], np.int32))
    ws.feed("one", np.array([1.0]))
    ws.feed("lr", np.array([0.5]))
    net = an.Net("train")
    net.SparseLengthsSum(["t", "i", "l"], "y")
    net.AveragedLoss("y", "loss")
    g = add_gradient_ops(net, "loss", wrt=["t"], dtype="float64")["t"]
    net.Scale("lr", "neg_lr", scale=-1.0)
    net.ScatterWeightedSum(["t", "one", g.indices, g.values, "neg_lr"], "t")
    ws.run_net_once(net)
    want = table.copy()
    want[1] -= 0.5 * 2 * 0.5  # index 1 twice, dloss/dy = 1/2 per element
    want[5] -= 0.5 * 0.5
    np.testing.assert_allclose(ws.fetch("t"), want, rtol=1e-12)


@pytest.mark.parametrize("library", ["numpy", "torch"])
def test_hogwild_threads_share_one_table(library):
    """Four threads, each with its own net on one shared table (a numpy array, or a torch tensor
    wrapping one), apply sparse updates to disjoint rows concurrently: every update lands in the
    one array's memory (nothing rebinds a worker's blob)."""
    base = np.zeros((40, 4), np.float32)
    lib = torch.from_numpy if library == "torch" else (lambda a: a)
    table = lib(base)
    rounds, n = 50, 4
    start = threading.Barrier(n, timeout=30)
    errors: list[BaseException] = []

    def worker(w):
        try:
            ws = an.Workspace()
            ws.feed("t", table)
            ws.feed("i", lib(np.arange(w, 40, n)))
            ws.feed("v", lib(np.ones((10, 4), np.float32)))
            ws.feed("one", lib(np.array([1.0], np.float32)))
            ws.feed("lr", lib(np.array([1.0], np.float32)))
            net = an.Net(f"w{w}")
            net.ScatterWeightedSum(["t", "one", "i", "v", "lr"], "t")
            ws.create_net(net)
            start.wait()
            for _ in range(rounds):
                ws.run_net(f"w{w}")
            assert ws.fetch("t") is table
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors and not any(t.is_alive() for t in threads), errors
    np.testing.assert_array_equal(base, np.full((40, 4), rounds, np.float32))


@pytest.mark.parametrize("tensors", ["numpy", "torch"])
@pytest.mark.parametrize("row_shape", [(), (3,), (2, 2)])
@pytest.mark.parametrize("table_rows", [0, 5])
def test_lengths_sums_of_no_bags_are_empty(tensors, row_shape, table_rows):
    # no bags and no ids: an empty [0, *row_shape] result, also for a 1-D table (one number per row)
    ws = an.Workspace()
    feeds = {
        "d": np.ones((table_rows, *row_shape), np.float32),
        "w": np.zeros(0, np.float32),
        "i": np.zeros(0, np.int64),
        "l": np.zeros(0, np.int32),
    }
    for name, value in feeds.items():
        ws.feed(name, value if tensors == "numpy" else torch.from_numpy(value))
    net = an.Net("empty")
    net.SparseLengthsSum(["d", "i", "l"], "sum")
    net.SparseLengthsWeightedSum(["d", "w", "i", "l"], "wsum")
    ws.run_net_once(net)
    for out in ("sum", "wsum"):
        got = ws.fetch(out, host=True)
        assert tuple(got.shape) == (0, *row_shape)
