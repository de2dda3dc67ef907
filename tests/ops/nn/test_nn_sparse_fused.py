"""The fused embedding-bag kernels and the compact sparse updates: torch's embedding_bag path
against the numpy loop, repeats found by a scratch array or a sort alike, and
RowWiseSparseAdagrad against Caffe2's loop (formula caffe2) and facebookresearch/dlrm's
row-wise sparse Adagrad (formula torch, written out here as a torch reference)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _nn_helpers import run
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncnet as an
from asyncnet.ops import sparse

pytestmark = pytest.mark.timeout(120)
SOME = settings(max_examples=25, deadline=None)


def loop_bags(data, idx, lengths, w=None):
    out = np.zeros((len(lengths), *data.shape[1:]), data.dtype)
    k = 0
    for b, n in enumerate(lengths):
        for _ in range(n):
            out[b] = out[b] + (data[idx[k]] * w[k] if w is not None else data[idx[k]])
            k += 1
    return out


@SOME
@given(
    seed=st.integers(0, 2**31),
    rows=st.sampled_from([1, 5, 300]),
    row=st.sampled_from([(), (4,), (2, 3), (64,)]),
    even=st.booleans(),
    weighted=st.booleans(),
)
def test_torch_bags_match_the_loop(seed, rows, row, even, weighted):
    rng = np.random.default_rng(seed)
    b = int(rng.integers(1, 40))
    lengths = (np.full(b, rng.integers(0, 6)) if even else rng.integers(0, 6, b)).astype(np.int32)
    idx = rng.integers(0, rows, int(lengths.sum()))
    data = rng.normal(size=(rows, *row)).astype(np.float32)
    w = rng.normal(size=idx.shape).astype(np.float32)
    want = loop_bags(data.astype(np.float64), idx, lengths, w.astype(np.float64) if weighted else None)
    t = [torch.from_numpy(data), torch.from_numpy(w), torch.from_numpy(idx), torch.from_numpy(lengths)]
    got = run("SparseLengthsWeightedSum", t) if weighted else run("SparseLengthsSum", [t[0], t[2], t[3]])
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float32
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)
    got_np = (
        run("SparseLengthsWeightedSum", [data, w, idx, lengths])
        if weighted
        else run("SparseLengthsSum", [data, idx, lengths])
    )
    np.testing.assert_allclose(got_np, want, rtol=1e-5, atol=1e-5)


def test_torch_bags_of_an_int_table_and_of_empty_bags():
    table = torch.arange(12).reshape(6, 2)
    got = run("SparseLengthsSum", [table, torch.tensor([5, 0, 5]), torch.tensor([0, 3, 0], dtype=torch.int32)])
    assert got.tolist() == [[0, 0], [20, 23], [0, 0]]


@SOME
@given(seed=st.integers(0, 2**31), rows=st.sampled_from([1, 7, 1000]), k=st.integers(0, 60))
def test_first_occurrences_by_scratch_and_by_sort_agree(seed, rows, k):
    idx = np.random.default_rng(seed).integers(0, rows, k)
    first, slot = sparse.first_occurrences(idx, rows)
    seen: dict[int, int] = {}
    for j, i in enumerate(idx.tolist()):
        assert first[j] == (i not in seen)
        seen.setdefault(i, len(seen))
        assert slot[j] == seen[i]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sparse, "_SCRATCH_ROWS_PER_INDEX", -1)  # always the sort
        mp.setattr(sparse, "_SCRATCH_MIN_ROWS", -1)
        f2, s2 = sparse.first_occurrences(idx, rows)
    np.testing.assert_array_equal(first, f2)
    np.testing.assert_array_equal(slot, s2)


def test_scatter_reads_and_writes_each_row_once_with_the_loops_bits():
    """Many repeats on a large table: the compact path gives the sequential loop's bits."""
    rng = np.random.default_rng(1)
    table = rng.normal(size=(5000, 16)).astype(np.float32)
    idx = np.minimum(rng.zipf(1.3, 4000) - 1, 4999)
    vals = rng.normal(size=(4000, 16)).astype(np.float32)
    want = table.copy()
    for k, i in enumerate(idx):
        want[i] = want[i] + vals[k] * np.float32(-0.5)
    got = table.copy()
    sparse._add_rows(got, idx, vals, scale=np.float32(-0.5))
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def rowwise_caffe2_loop(param, moment, idx, grad, lr, eps, wd):
    """Caffe2's RowWiseSparseAdagradOp (plain loop): rows in k order."""
    p, m = param.copy(), moment.copy()
    for k, i in enumerate(idx):
        g = grad[k] + wd * p[i]
        m[i] = m[i] + np.mean(g * g)
        p[i] = p[i] + g * (lr / (np.sqrt(m[i]) + eps))
    return p, m


def rowwise_dlrm_torch(param, moment, idx, grad, lr, eps):
    """What facebookresearch/dlrm's RWSAdagrad step computes on a sparse gradient: coalesce,
    moment += mean of squares per row, param -= lr * g / (sqrt(moment) + eps)."""
    p, m = torch.tensor(param), torch.tensor(moment)
    sp = torch.sparse_coo_tensor(
        torch.tensor(idx)[None], torch.tensor(grad), p.shape, check_invariants=False
    ).coalesce()
    rows, g = sp.indices()[0], sp.values()
    m.index_add_(0, rows, g.pow(2).mean(dim=1))
    std = m[rows].sqrt() + eps
    p.index_add_(0, rows, g / std[:, None], alpha=-lr)
    return p.numpy(), m.numpy()


def rowwise(inputs, **args):
    ws = an.Workspace()
    for n, v in zip(["p", "m", "i", "g", "lr"], inputs):
        ws.feed(n, v)
    net = an.Net("rw")
    net.RowWiseSparseAdagrad(["p", "m", "i", "g", "lr"], ["p", "m"], **args)
    ws.run_net_once(net)
    return ws.fetch("p"), ws.fetch("m")


@SOME
@given(
    seed=st.integers(0, 2**31),
    rows=st.sampled_from([3, 50]),
    k=st.integers(1, 40),
    wd=st.sampled_from([0.0, 0.1]),
    library=st.sampled_from(["numpy", "torch"]),
)
def test_rowwise_sparse_adagrad_caffe2_loop(seed, rows, k, wd, library):
    rng = np.random.default_rng(seed)
    param, moment = rng.normal(size=(rows, 6)), rng.random(rows)
    idx, grad = rng.integers(0, rows, k), rng.normal(size=(k, 6))
    want = rowwise_caffe2_loop(param, moment, idx, grad, -0.1, 1e-5, wd)
    conv = torch.from_numpy if library == "torch" else np.array
    got = rowwise(
        [conv(param.copy()), conv(moment.copy()), conv(idx), conv(grad), conv(np.array([-0.1]))], weight_decay=wd
    )
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-12, atol=1e-12)


@SOME
@given(seed=st.integers(0, 2**31), rows=st.sampled_from([3, 50]), k=st.integers(1, 40))
def test_rowwise_sparse_adagrad_torch_formula_is_dlrms(seed, rows, k):
    rng = np.random.default_rng(seed)
    param, moment = rng.normal(size=(rows, 4)).astype(np.float32), rng.random(rows).astype(np.float32)
    idx, grad = rng.integers(0, rows, k), rng.normal(size=(k, 4)).astype(np.float32)
    want = rowwise_dlrm_torch(param, moment, idx, grad, 0.05, 1e-10)
    got = rowwise([param.copy(), moment.copy(), idx, grad, np.array([0.05], np.float32)], formula="torch")
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


def test_rowwise_sparse_adagrad_errors():
    with pytest.raises(an.AsyncNetError, match="one per row"):
        rowwise([np.zeros((4, 2)), np.zeros((4, 2)), np.array([1]), np.ones((1, 2)), np.array([0.1])])
    with pytest.raises(an.AsyncNetError, match="weight_decay"):
        rowwise(
            [np.zeros((4, 2)), np.zeros(4), np.array([1]), np.ones((1, 2)), np.array([0.1])],
            formula="torch",
            weight_decay=0.1,
        )


@pytest.mark.parametrize("repeats", [0, 60, 1200])
@pytest.mark.parametrize("wd", [0.0, 0.1])
def test_rowwise_sparse_adagrad_on_a_large_table_is_the_loop(repeats, wd):
    """Many distinct rows over several chunks (few repeats: the chunked first occurrences, then
    the later ones in order; many: the compact rounds): Caffe2's loop, float32 bit for bit."""
    rng = np.random.default_rng(repeats)
    rows, k = 3000, 1500
    param, moment = rng.normal(size=(rows, 8)).astype(np.float32), rng.random(rows).astype(np.float32)
    idx = rng.permutation(rows)[:k]
    idx[rng.integers(0, k, repeats)] = rng.choice(idx[:40], repeats)  # some rows three times or more
    grad = rng.normal(size=(k, 8)).astype(np.float32)
    lr, eps, decay = np.float32(-0.1), np.float32(1e-5), np.float32(wd)
    want = rowwise_caffe2_loop(param, moment, idx, grad, lr, eps, decay)
    got = rowwise([param.copy(), moment.copy(), idx, grad, np.array([lr])], weight_decay=wd)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g).view(np.uint32), w.view(np.uint32))
