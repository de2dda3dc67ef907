"""Where, IsMemberOf, RowWiseArgMax, the one-hot ops, LengthsTile/LengthsSum, PackSegments/
UnpackSegments and Normalize/NormalizeL1 against numpy and torch, gradients against torch
autograd and finite differences.

Sources: Caffe2's operator tests (elementwise_logical_ops_test.py's mux and rowmux,
arg_max_test.py, one_hot_ops_test.py's references: BatchBucketOneHot buckets by
``np.digitize(right=True)``, lengths_tile_op_test.py, pack_ops_test.py's pack_segments_ref and
its out-of-bounds cases, normalize_op_test.py: X / (||X|| + tiny), NormalizeL1 = X / sum |X|).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _c2run import run_op
from _gradcheck_helpers import check_all, weighted_mean_head
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncnet as an

pytestmark = pytest.mark.timeout(120)
FEW = settings(max_examples=15, deadline=None)


@FEW
@given(seed=st.integers(0, 2**16), rows=st.booleans())
def test_where_matches_numpy(seed, rows):
    rng = np.random.default_rng(seed)
    x, y = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((3, 4)).astype(np.float32)
    c = rng.random(3 if rows else (3, 4)) < 0.5
    (z,) = run_op("Where", {"c": c, "x": x, "y": y}, ["z"], broadcast_on_rows=rows)
    np.testing.assert_array_equal(z, np.where(c[:, None] if rows else c, x, y))


def test_where_refuses_a_non_bool_condition():
    with pytest.raises(an.OperatorError, match="bool condition"):
        run_op("Where", {"c": np.ones(2), "x": np.ones(2), "y": np.ones(2)}, ["z"])


def test_is_member_of_and_row_wise_arg_max():
    x = np.array([[0, 3, 5], [6, 9, 4]], np.int64)
    (y,) = run_op("IsMemberOf", {"x": x}, ["y"], value=[0, 3, 4, 6, 8])
    np.testing.assert_array_equal(y, np.isin(x, [0, 3, 4, 6, 8]))
    (i,) = run_op("RowWiseArgMax", {"x": np.array([[2.0, 2.0, 1.0], [0.0, 1.0, 5.0]], np.float32)}, ["i"])
    np.testing.assert_array_equal(i, [[0], [2]])


def test_one_hot_family():
    (y,) = run_op("OneHot", {"i": np.array([2, 0, 2], np.int64), "n": np.array(4, np.int64)}, ["y"])
    np.testing.assert_array_equal(y, np.eye(4, dtype=np.float32)[[2, 0, 2]])
    feeds = {"l": np.array([2, 0, 1], np.int32), "i": np.array([1, 3, 0], np.int64), "n": np.array(4, np.int64)}
    (s,) = run_op("SegmentOneHot", feeds, ["s"])
    np.testing.assert_array_equal(s, [[0, 1, 0, 1], [0, 0, 0, 0], [1, 0, 0, 0]])
    x = np.array([[1, 5], [2, 7], [1, 9]], np.int32)
    (b,) = run_op("BatchOneHot", {"x": x, "l": np.array([2, 1], np.int32), "v": np.array([1, 2, 7], np.int32)}, ["b"])
    np.testing.assert_array_equal(b, [[1, 0, 0], [0, 1, 1], [1, 0, 0]])
    with pytest.raises(an.OperatorError, match="indices in"):
        run_op("OneHot", {"i": np.array([4], np.int64), "n": np.array(4, np.int64)}, ["y"])


@FEW
@given(seed=st.integers(0, 2**16))
def test_batch_bucket_one_hot_matches_digitize(seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(-3, 4, (5, 2)).astype(np.float32)  # values on the boundaries too
    lens = np.array([2, 3], np.int32)
    bounds = np.concatenate([np.sort(rng.integers(-3, 4, n)) for n in lens]).astype(np.float32)
    (y,) = run_op("BatchBucketOneHot", {"x": x, "l": lens, "b": bounds}, ["y"])
    expected = np.zeros((5, 7), np.float32)
    start = offset = 0
    for j, n in enumerate(lens):
        expected[np.arange(5), offset + np.digitize(x[:, j], bounds[start : start + n], right=True)] = 1
        start, offset = start + n, offset + n + 1
    np.testing.assert_array_equal(y, expected)


@FEW
@given(lengths=st.lists(st.integers(0, 4), min_size=1, max_size=5), seed=st.integers(0, 2**16))
def test_lengths_tile_and_sum_are_each_others_gradient(lengths, seed):
    rng = np.random.default_rng(seed)
    lens = np.array(lengths, np.int32)
    data = rng.standard_normal((lens.size, 2))
    (t,) = run_op("LengthsTile", {"d": data, "l": lens}, ["t"])
    np.testing.assert_array_equal(t, np.repeat(data, lens, axis=0))
    r = rng.standard_normal(t.shape)
    idx = torch.tensor(np.repeat(np.arange(lens.size), lens))

    def build(net):
        net.LengthsTile(["d", "l"], "t")
        return weighted_mean_head(net, "t")

    if t.size:
        check_all(build, lambda d, l, r: (d[idx] * r).mean(), {"d": data, "l": lens, "r": r}, ["d"])
    (s,) = run_op("LengthsSum", {"t": t, "l": lens}, ["s"])
    np.testing.assert_allclose(s, data * lens[:, None])


@FEW
@given(lengths=st.lists(st.integers(0, 4), min_size=1, max_size=5), seed=st.integers(0, 2**16))
def test_pack_segments_round_trip_and_gradient(lengths, seed):
    rng = np.random.default_rng(seed)
    lens = np.array(lengths, np.int32)
    data = rng.standard_normal((int(lens.sum()), 2))
    packed, mask = run_op("PackSegments", {"l": lens, "d": data}, ["p", "m"], return_presence_mask=True)
    longest = max(lengths)
    assert packed.shape == (lens.size, longest, 2) and mask.shape == (lens.size, longest)
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
    for i, (s, n) in enumerate(zip(starts, lens)):
        np.testing.assert_array_equal(packed[i, :n], data[s : s + n])
        assert not packed[i, n:].any() and mask[i].tolist() == [True] * n + [False] * (longest - n)
    (back,) = run_op("UnpackSegments", {"l": lens, "p": packed}, ["d"])
    np.testing.assert_array_equal(back, data)
    if data.size:
        r = rng.standard_normal(packed.shape)

        def build(net):
            net.PackSegments(["l", "d"], "p")
            return weighted_mean_head(net, "p")

        def torch_fn(l, d, r):
            out = torch.zeros(r.shape, dtype=d.dtype)
            for i, (s, n) in enumerate(zip(starts, lens)):
                out[i, :n] = d[s : s + n]
            return (out * r).mean()

        check_all(build, torch_fn, {"l": lens, "d": data, "r": r}, ["d"])


def test_pack_segments_pads_with_minus_infinity_and_checks_the_lengths():
    lens, data = np.array([1, 2], np.int32), np.ones((3, 2), np.float32)
    (p,) = run_op("PackSegments", {"l": lens, "d": data}, ["p"], pad_minf=True)
    assert p[0, 1, 0] == -np.inf
    for bad in ([1, 3], [1, 1]):
        with pytest.raises(an.OperatorError, match="lengths to sum"):
            run_op("PackSegments", {"l": np.array(bad, np.int32), "d": data}, ["p"])


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_normalize_and_its_gradient_match_torch(axis):
    rng = np.random.default_rng(axis + 5)
    x, r = rng.uniform(0.5, 1.0, (3, 4)), rng.standard_normal((3, 4))
    (y,) = run_op("Normalize", {"x": x}, ["y"], axis=axis)
    np.testing.assert_allclose(y, torch.nn.functional.normalize(torch.tensor(x), dim=axis).numpy(), rtol=1e-12)

    def build(net):
        net.Normalize("x", "y", axis=axis)
        return weighted_mean_head(net, "y")

    check_all(build, lambda x, r: (torch.nn.functional.normalize(x, dim=axis) * r).mean(), {"x": x, "r": r}, ["x"])
    (l1,) = run_op("NormalizeL1", {"x": x}, ["y"], axis=axis)
    np.testing.assert_allclose(l1, x / np.abs(x).sum(axis=axis, keepdims=True))


def test_string_ops_work_on_bytes_by_byte():
    s = np.array(["héllo".encode(), b"ab", b""], object)
    (p,) = run_op("StringPrefix", {"s": s}, ["p"], length=2)
    (q,) = run_op("StringSuffix", {"s": s}, ["q"], length=3)
    assert list(p) == [b"h\xc3", b"ab", b""] and list(q) == [b"llo", b"ab", b""]
    (a,) = run_op("StringStartsWith", {"s": s}, ["a"], prefix="a")
    (b,) = run_op("StringEndsWith", {"s": s}, ["b"], suffix="lo")
    assert a.tolist() == [False, True, False] and b.tolist() == [True, False, False]
    with pytest.raises(an.OperatorError, match="string tensor"):
        run_op("StringPrefix", {"s": np.ones(2)}, ["p"], length=1)
