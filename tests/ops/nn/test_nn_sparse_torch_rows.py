"""Sparse row updates of numpy tables run as torch calls on views of the arrays (``index_add_``,
one call that releases the GIL): the bits of the numpy path and of Caffe2's loop (repeats in
k order, each row scaled once before it is added), and PyTorch's own sparse SGD step within
float rounding. Special values, empty batches and float32/float64 included."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncnet as an
from asyncnet.ops import sparse

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:overflow:RuntimeWarning"),
]
SOME = settings(max_examples=30, deadline=None)
SPECIAL = np.array([-0.0, 0.0, np.inf, -np.inf, np.nan, 1e30, -1e-30])


def same_bits(got: np.ndarray, want: np.ndarray) -> None:
    """Equal bit for bit (-0.0 included); a NaN only has to be a NaN."""
    assert got.shape == want.shape and got.dtype == want.dtype
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(np.where(nan, 0, got).view(np.uint8), np.where(nan, 0, want).view(np.uint8))


def draw_values(rng: np.random.Generator, shape: tuple[int, ...], dtype: str, special: bool) -> np.ndarray:
    x = rng.normal(size=shape) * 10.0 ** rng.integers(-3, 4, size=shape)
    if special:
        where = rng.random(shape) < 0.1
        x[where] = rng.choice(SPECIAL, size=int(where.sum()))
    return x.astype(dtype)


def loop_add(table, idx, rows, scale=None):
    """Caffe2's loop: for each k in order, table[idx[k]] += scale * rows[k] (the product rounded first)."""
    out = table.copy()
    for k, i in enumerate(idx):
        out[i] = out[i] + (rows[k] if scale is None else rows[k] * scale)
    return out


@st.composite
def cases(draw):
    """(table [R, D], idx [K] with repeats or none, lengths [B] with empty bags, dtype, rng)."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    dtype = draw(st.sampled_from(["float32", "float64"]))
    rows = draw(st.sampled_from([1, 4, 50, 3000]))
    width = draw(st.sampled_from([1, 3, 16, 64]))
    lengths = rng.integers(0, draw(st.integers(0, 12)) + 1, size=draw(st.integers(0, 40))).astype(np.int32)
    idx = rng.integers(0, rows, size=int(lengths.sum()))
    table = draw_values(rng, (rows, width), dtype, draw(st.booleans()))
    return table, idx, lengths, dtype, rng


def run(op_type: str, inputs: list) -> np.ndarray:
    """One update op on ``inputs`` (in0, in1, ...) writing in place into in0; in0's array after it."""
    ws = an.Workspace()
    names = [f"in{i}" for i in range(len(inputs))]
    for n, v in zip(names, inputs):
        ws.feed(n, v)
    net = an.Net("t")
    net.add_op(op_type, names, ["in0"])
    ws.run_net_once(net)
    return np.asarray(ws.fetch("in0"))


class Spy:
    """Counts the updates that ran through torch."""

    def __init__(self, monkeypatch):
        self.taken = 0
        real = sparse._torch_add_rows

        def spy(*a):
            done = real(*a)
            self.taken += done
            return done

        monkeypatch.setattr(sparse, "_torch_add_rows", spy)


def both_paths(monkeypatch, fn, expect_torch=True):
    """``fn()`` through torch (forced at every size; ``expect_torch``: it must get there) and
    through the numpy rounds."""
    with monkeypatch.context() as m:
        m.setattr(sparse, "SMALL_SCATTER", 0)
        spy = Spy(m)
        through_torch = fn()
        assert bool(spy.taken) == expect_torch
    with monkeypatch.context() as m:
        m.setattr(sparse, "TORCH_ROWS", False)
        m.setattr(sparse, "SMALL_SCATTER", 0)
        through_numpy = fn()
    return through_torch, through_numpy


@SOME
@given(case=cases(), scaled=st.booleans(), special=st.booleans())
def test_add_rows_through_torch_is_the_loop(case, scaled, special):
    table, idx, _, dtype, rng = case
    vals = draw_values(rng, (idx.size, table.shape[1]), dtype, special)
    scale = np.dtype(dtype).type(-0.37) if scaled else None
    want = loop_add(table, idx, vals, scale)
    with pytest.MonkeyPatch.context() as mp:

        def update():
            got = table.copy()
            sparse._add_rows(got, idx, vals, scale=scale)
            return got

        for got in both_paths(mp, update):
            same_bits(got, want)


@SOME
@given(case=cases())
def test_fused_sgd_through_torch_is_the_unfused_step(case):
    """SparseSGDFused...: dY's rows scaled by lr, then added to each index's row in k order:
    the bits of SparseLengthsSumGradient followed by ScatterWeightedSum's loop."""
    table, idx, lengths, dtype, rng = case
    dy = draw_values(rng, (lengths.size, table.shape[1]), dtype, False)
    lr = np.array([-0.05], dtype)
    want = loop_add(table, idx, (dy * lr[0])[np.repeat(np.arange(lengths.size), lengths)])
    with pytest.MonkeyPatch.context() as mp:
        for got in both_paths(
            mp,
            lambda: run("SparseSGDFusedWithSparseLengthsSumGradient", [table.copy(), idx, dy, lr, lengths]),
            expect_torch=idx.size > 0,
        ):
            same_bits(got, want)


@SOME
@given(case=cases(), w0=st.sampled_from([1.0, 0.5]))
def test_scatter_weighted_sum_through_torch_is_the_numpy_path(case, w0):
    table, idx, _, dtype, rng = case
    xs = [draw_values(rng, (idx.size, table.shape[1]), dtype, True) for _ in range(2)]
    inputs = [None, np.array([w0], dtype), idx, xs[0], np.array([-0.1], dtype), xs[1], np.array([2.5], dtype)]

    def update():
        inputs[0] = table.copy()
        return run("ScatterWeightedSum", inputs)

    with pytest.MonkeyPatch.context() as mp:
        got, numpy_path = both_paths(mp, update)
    same_bits(got, numpy_path)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_fused_sgd_matches_pytorch_embedding_bag_sgd(dtype):
    """The step PyTorch takes: EmbeddingBag(mode='sum', sparse=True), backward, SGD.step (its
    sparse gradient summed per row before the step, so equal within rounding)."""
    rng = np.random.default_rng(7)
    table = rng.normal(size=(500, 32)).astype(dtype)
    lengths = rng.integers(0, 30, 256).astype(np.int32)
    lengths[:5] = 0
    idx = rng.integers(0, 500, int(lengths.sum()))
    dy = rng.normal(size=(256, 32)).astype(dtype)
    lr = 0.05
    emb = torch.nn.EmbeddingBag(500, 32, mode="sum", sparse=True, dtype=getattr(torch, dtype))
    emb.weight.data = torch.tensor(table)
    offsets = torch.from_numpy(np.r_[0, np.cumsum(lengths)[:-1]].astype(np.int64))
    opt = torch.optim.SGD(emb.parameters(), lr=lr)
    emb(torch.from_numpy(idx), offsets).backward(torch.from_numpy(dy))
    opt.step()
    with pytest.MonkeyPatch.context() as mp:
        spy = Spy(mp)
        got = run(
            "SparseSGDFusedWithSparseLengthsSumGradient", [table.copy(), idx, dy, np.array([-lr], dtype), lengths]
        )
        assert spy.taken == 1
    tol = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(got, emb.weight.detach().numpy(), rtol=tol, atol=tol)


def test_two_threads_update_their_tables_at_once():
    """Two threads running the fused update on their own tables at the same time (a barrier
    lines them up each step; each has its own scratch rows) give the sequential results."""
    rng = np.random.default_rng(3)
    tables = [rng.normal(size=(2000, 64)).astype(np.float32) for _ in range(2)]
    lengths = np.full(256, 20, np.int32)
    ids = [rng.integers(0, 2000, 256 * 20) for _ in range(2)]
    dys = [[rng.normal(size=(256, 64)).astype(np.float32) for _ in range(5)] for _ in range(2)]
    lr = np.array([-0.01], np.float32)
    want = [t.copy() for t in tables]
    for t in range(2):
        for dy in dys[t]:
            want[t] = run("SparseSGDFusedWithSparseLengthsSumGradient", [want[t], ids[t], dy, lr, lengths])
    got = [t.copy() for t in tables]
    barrier = threading.Barrier(2, timeout=30)

    def worker(t):
        for dy in dys[t]:
            barrier.wait()
            run("SparseSGDFusedWithSparseLengthsSumGradient", [got[t], ids[t], dy, lr, lengths])

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    for t in range(2):
        same_bits(got[t], want[t])


def test_scratch_rows_shrink_and_grow_between_updates():
    """A large update, then a small one, then a large one again on the same thread."""
    rng = np.random.default_rng(5)
    table = rng.normal(size=(1000, 64)).astype(np.float32)
    for k in (5000, 300, 8000):
        idx = rng.integers(0, 1000, k)
        vals = rng.normal(size=(k, 64)).astype(np.float32)
        want = loop_add(table, idx, vals, np.float32(-0.5))
        got = table.copy()
        assert sparse._torch_add_rows(got, idx, vals, np.float32(-0.5), None)
        same_bits(got, want)


def test_rows_of_another_dtype_stay_on_numpy():
    """float64 rows into a float32 table: numpy's casting add, not torch's (which refuses)."""
    table = np.zeros((4000, 8), np.float32)
    idx = np.arange(4000)
    vals = np.full((4000, 8), 0.1, np.float64)
    assert not sparse._torch_add_rows(table, idx, vals, None, None)
    sparse._add_rows(table, idx, vals)
    np.testing.assert_array_equal(table, np.float32(0.1))
