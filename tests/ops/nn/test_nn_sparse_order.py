"""The sparse kernels' order of additions, bit for bit, against Caffe2's loops written out:
each bag of SparseLengthsSum / SparseLengthsWeightedSum is its rows added one after another
from zero, and ScatterWeightedSum / SparseToDense add repeated indices one after another in
k order. Each kernel has a one-call np.add.at path (small inputs) and paths that release the
GIL (padded slots, rounds of distinct rows); every path must give the loops' bits, special
values (-0.0, inf, NaN) included."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from _nn_helpers import run
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncnet as an
from asyncnet.ops import sparse

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:overflow:RuntimeWarning"),
]
SOME = settings(max_examples=25, deadline=None)
SPECIAL = np.array([-0.0, 0.0, np.inf, -np.inf, np.nan, 1e30, -1e-30])


def same_bits(got: np.ndarray, want: np.ndarray) -> None:
    """Equal bit for bit, -0.0 included; a NaN only has to be a NaN (x86 picks the sign and
    payload of a NaN sum by operand order, which the compiler may swap)."""
    assert got.shape == want.shape and got.dtype == want.dtype
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(np.where(nan, 0, got).view(np.uint8), np.where(nan, 0, want).view(np.uint8))


def values(rng: np.random.Generator, shape: tuple[int, ...], dtype: str, special: bool) -> np.ndarray:
    x = rng.normal(size=shape) * 10.0 ** rng.integers(-3, 4, size=shape)
    if special:
        where = rng.random(shape) < 0.1
        x[where] = rng.choice(SPECIAL, size=int(where.sum()))
    return x.astype(dtype)


@st.composite
def bag_cases(draw):
    """(data [R, *row], idx [K], lengths [B]) with few rows (many repeats) or many."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    row = draw(st.sampled_from([(), (1,), (3,), (16,), (2, 3)]))
    num_rows = draw(st.sampled_from([1, 3, 200]))
    lengths = rng.integers(0, draw(st.integers(1, 25)) + 1, size=draw(st.integers(1, 30))).astype(np.int32)
    idx = rng.integers(0, num_rows, size=int(lengths.sum()))
    dtype = draw(st.sampled_from(["float32", "float64"]))
    return values(rng, (num_rows, *row), dtype, draw(st.booleans())), idx, lengths, rng


def loop_bags(data, idx, lengths, w=None):
    """Caffe2's SparseLengths(Weighted)Sum loop: out[b] = 0, then += (w_k *) data[idx_k]."""
    out = np.zeros((len(lengths), *data.shape[1:]), data.dtype)
    k = 0
    for b, n in enumerate(lengths):
        for _ in range(n):
            out[b] = out[b] + (data[idx[k]] * w[k] if w is not None else data[idx[k]])
            k += 1
    return out


def every_layout(monkeypatch, fn):
    """``fn()`` with the kernels' own choice, always padded slots, and always np.add.at."""
    results = [fn()]
    real = sparse._bag_slots
    for forced in ("padded", "add.at"):
        with monkeypatch.context() as m:
            m.setattr(sparse, "TORCH_BAGS", False)
            m.setattr(
                sparse,
                "_bag_slots",
                lambda lengths, k, row: (
                    None if forced == "add.at" or k == 0 else np.arange(int(lengths.max()))[:, None] < lengths
                ),
            )
            results.append(fn())
    assert sparse._bag_slots is real
    if _HAS_TORCH:
        with monkeypatch.context() as m:  # torch's embedding_bag for float32 numpy lookups of any size
            m.setattr(sparse, "TORCH_BAG_MIN", 0)
            results.append(fn())
    return results


_HAS_TORCH = importlib.util.find_spec("torch") is not None


@SOME
@given(case=bag_cases())
def test_sparse_lengths_sum_adds_each_bag_in_order(case):
    data, idx, lengths, _ = case
    want = loop_bags(data, idx, lengths)
    with pytest.MonkeyPatch.context() as mp:
        for got in every_layout(mp, lambda: run("SparseLengthsSum", [data, idx, lengths])):
            same_bits(got, want)


@SOME
@given(case=bag_cases())
def test_sparse_lengths_weighted_sum_adds_each_bag_in_order(case):
    data, idx, lengths, rng = case
    w = values(rng, idx.shape, data.dtype.name, False)
    want = loop_bags(data, idx, lengths, w)
    with pytest.MonkeyPatch.context() as mp:
        for got in every_layout(mp, lambda: run("SparseLengthsWeightedSum", [data, w, idx, lengths])):
            same_bits(got, want)


def test_the_cost_model_pads_even_bags_and_adds_one_long_bag_row_by_row():
    """Both paths are taken by real shapes: the large and the zoo DLRM's bags (1-20 rows of 64,
    1-3 rows of 8) are padded; one bag of 1,000 rows among 511 of one row goes through np.add.at."""
    for top, row in ((20, 64), (3, 8)):
        even = np.random.default_rng(0).integers(1, top + 1, 512)
        assert sparse._bag_slots(even, int(even.sum()), row) is not None
    one_long = np.r_[1000, np.ones(511, np.int64)]
    assert sparse._bag_slots(one_long, int(one_long.sum()), 64) is None


def scatter(inputs):
    """ScatterWeightedSum on ``inputs`` (X_0 first), in place as the op demands; X_0 after it."""
    ws = an.Workspace()
    names = [f"in{i}" for i in range(len(inputs))]
    for n, v in zip(names, inputs):
        ws.feed(n, v)
    net = an.Net("s")
    net.ScatterWeightedSum(names, "in0")
    ws.run_net_once(net)
    return ws.fetch("in0")


def loop_scatter(x0, idx, terms):
    """Caffe2's ScatterWeightedSum with weight 1 on X_0 (utility_ops.h's loops): for each pair i,
    then for each k in order, X_0[idx_k] += w_i X_i[k]."""
    out = x0.copy()
    for x, w in terms:
        for k, i in enumerate(idx):
            out[i] = out[i] + x[k] * w
    return out


@SOME
@given(case=bag_cases(), rounds=st.integers(0, 3), pairs=st.integers(1, 2))
def test_scatter_adds_repeated_rows_in_order(case, rounds, pairs):
    table, idx, _, rng = case
    dtype = table.dtype.type
    xs = [values(rng, (idx.size, *table.shape[1:]), table.dtype.name, bool(j)) for j in range(pairs)]
    ws = [dtype(-0.1), dtype(2.5)][:pairs]
    want = loop_scatter(table, idx, list(zip(xs, ws)))
    inputs = [table.copy(), np.array([1.0], table.dtype), idx]
    for x, w in zip(xs, ws):
        inputs += [x, np.array([w])]
    same_bits(scatter(inputs), want)  # the kernel's own choice
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sparse, "SMALL_SCATTER", 0)  # rounds of distinct rows even on small inputs
        got = table.copy()
        for x, w in zip(xs, ws):  # as the op computes it: each pair's rows scaled, then added row by row
            sparse._add_rows(got, idx, x, rounds, scale=w)
        same_bits(got, want)
        inputs[0] = table.copy()
        same_bits(scatter(inputs), want)


@SOME
@given(case=bag_cases())
def test_sparse_to_dense_adds_repeats_in_order(case):
    table, idx, _, rng = case
    vals = values(rng, (idx.size, *table.shape[1:]), table.dtype.name, True)
    want = loop_scatter(np.zeros_like(table), idx, [(vals, table.dtype.type(1))])
    same_bits(run("SparseToDense", [idx, vals, table]), want)


def test_scatter_on_a_strided_table_writes_the_table():
    """A table that is a strided view (not C-contiguous) is updated in its own memory."""
    base = np.zeros((10, 8), np.float32)
    view = base[:, ::2]
    sparse._add_rows(view, np.array([1, 1, 3]), np.ones((3, 4), np.float32))
    assert base[1, ::2].tolist() == [2.0] * 4 and base[3, ::2].tolist() == [1.0] * 4 and base[:, 1::2].sum() == 0


def test_zipf_ids_take_few_rounds():
    """Heavily repeated ids (zipf): the rounds stop after SCATTER_ROUNDS and np.add.at takes the
    rest, in order (the result is still the loop's)."""
    rng = np.random.default_rng(3)
    idx = np.minimum(rng.zipf(1.2, 3000) - 1, 499)
    table, vals = values(rng, (500, 16), "float32", False), values(rng, (3000, 16), "float32", False)
    want = loop_scatter(table, idx, [(vals, np.float32(1))])
    got = table.copy()
    sparse._add_rows(got, idx, vals)
    same_bits(got, want)


@pytest.mark.parametrize("repeats", [0, 40, 400, 3000])
@pytest.mark.parametrize("scale", [None, -0.01])
def test_mostly_distinct_ids_scatter_in_order(repeats, scale):
    """A large table and few repeats (the one-gather path, its repeats redone on a compact copy,
    chains of three and more included) or many (the compact rounds): the loop's bits."""
    rng = np.random.default_rng(repeats)
    table = values(rng, (5000, 8), "float32", True)
    idx = rng.permutation(5000)[:3000]
    idx[rng.integers(0, 3000, repeats)] = rng.choice(idx[:50], repeats)  # some ids four times or more
    vals = values(rng, (3000, 8), "float32", True)
    w = np.float32(1 if scale is None else scale)
    want = loop_scatter(table, idx, [(vals, w)])
    got = table.copy()
    sparse._add_rows(got, idx, vals, scale=None if scale is None else w)
    same_bits(got, want)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_one_bag_of_one_element_rows_adds_in_order(dtype):
    """One bag of scalar rows: the padded slots are then contiguous, which numpy's reduce would
    sum pairwise; the kernel still gives the loop's bits."""
    rng = np.random.default_rng(0)
    data, idx, lengths = values(rng, (40,), dtype, False), rng.integers(0, 40, 64), np.array([64], np.int32)
    w = values(rng, (64,), dtype, False)
    pairwise = np.add.reduce((data[idx] * w)[:, None], axis=0)
    assert not np.array_equal(pairwise, loop_bags(data, idx, lengths, w))  # the case tells the orders apart
    with pytest.MonkeyPatch.context() as mp:
        for got in every_layout(mp, lambda: run("SparseLengthsWeightedSum", [data, w, idx, lengths])):
            same_bits(got, loop_bags(data, idx, lengths, w))


@pytest.mark.skipif(not _HAS_TORCH, reason="torch is not installed")
@pytest.mark.parametrize("special", [False, True])
def test_a_large_float32_lookup_runs_embedding_bag_with_the_loop_bits(monkeypatch, special):
    rng = np.random.default_rng(7)
    data = values(rng, (5000, 64), "float32", special)
    lengths = rng.integers(0, 40, size=300).astype(np.int32)
    idx = rng.integers(0, 5000, size=int(lengths.sum()))
    assert idx.size * 64 >= sparse.TORCH_BAG_MIN
    calls = []
    real = sparse._host_bags
    monkeypatch.setattr(sparse, "_host_bags", lambda *a: calls.append(1) or real(*a))
    got = run("SparseLengthsSum", [data, idx, lengths])
    assert calls and isinstance(got, np.ndarray)
    same_bits(got, loop_bags(data, idx, lengths))


@pytest.mark.skipif(not _HAS_TORCH, reason="torch is not installed")
@pytest.mark.parametrize(
    ("idx", "lengths", "match"),
    [
        ([0, 1, 7, 2], [2, 2], r"indices in \[0, 5\)"),  # bags of one length
        ([0, 1, 2, 7], [1, 3], r"indices in \[0, 5\)"),
        ([-1, 1, 2, 0], [2, 2], r"indices in \[0, 5\)"),
        ([0, 1, 2, 3], [2, 1], "summing to 4"),
        ([0, 1, 2, 3], [2, 2, 1], "summing to 4"),
        ([0, 1, 2, 3], [5, -1], "non-negative lengths"),
        ([0, 1, 2, 3], [-2, -2], "summing to 4"),
        ([0, 1, 2, 3], [4, 0, 0, 0], None),  # long, then empty, bags: fine
    ],
)
def test_the_embedding_bag_path_keeps_every_check(monkeypatch, idx, lengths, match):
    monkeypatch.setattr(sparse, "TORCH_BAG_MIN", 0)
    calls = []
    real = sparse._host_bags
    monkeypatch.setattr(sparse, "_host_bags", lambda *a: calls.append(1) or real(*a))
    data = np.arange(10, dtype=np.float32).reshape(5, 2)
    args = [data, np.array(idx, np.int64), np.array(lengths, np.int32)]
    if match is None:
        same_bits(run("SparseLengthsSum", args), loop_bags(data, args[1], args[2]))
    else:
        with pytest.raises(an.OperatorError, match=match):
            run("SparseLengthsSum", args)
    assert calls


@pytest.mark.skipif(not _HAS_TORCH, reason="torch is not installed")
@pytest.mark.parametrize("n", [1, 3])
def test_bags_of_one_length_reuse_their_offsets_and_keep_the_loop_bits(monkeypatch, n):
    monkeypatch.setattr(sparse, "TORCH_BAG_MIN", 0)
    rng = np.random.default_rng(n)
    data = values(rng, (50, 8), "float32", False)
    for b in (4, 4, 7):  # the second call finds the first call's offsets
        idx, lengths = rng.integers(0, 50, b * n), np.full(b, n, np.int32)
        same_bits(run("SparseLengthsSum", [data, idx, lengths]), loop_bags(data, idx, lengths))
    assert sparse._EVEN_OFFSETS[4, n].tolist() == list(range(0, 5 * n, n))
