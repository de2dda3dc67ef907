"""AddPadding, RemovePadding, GatherPadding, GatherRanges, BatchBoxCox, ReversePackedSegs,
RemoveDataBlocks and FindDuplicateElements against the references of Caffe2's tests
(sequence_ops_test.py's _add_padding_ref, _remove_padding_ref and _gather_padding_ref,
gather_ranges_op_test.py's gather_ranges, batch_box_cox_test.py's ref), AddPadding's and
ReversePackedSegs' gradients against finite differences."""

from __future__ import annotations

import numpy as np
import pytest
from _c2run import run_op
from _gradcheck_helpers import autodiff_grads, numeric_grads, weighted_mean_head
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncnet as an

pytestmark = pytest.mark.timeout(120)
FEW = settings(max_examples=15, deadline=None)


def _add_padding_ref(start, end, data, lengths, head, tail):
    out, at = [], 0
    for n in lengths:
        out += [head] * start + list(data[at : at + n]) + [tail] * end
        at += n
    return np.array(out).reshape((-1,) + data.shape[1:]), lengths + start + end


@FEW
@given(
    lengths=st.lists(st.integers(0, 4), min_size=0, max_size=4),
    start=st.integers(0, 2),
    end=st.integers(0, 2),
    seed=st.integers(0, 2**16),
)
def test_add_remove_gather_padding_match_the_references(lengths, start, end, seed):
    rng = np.random.default_rng(seed)
    lens = np.array(lengths, np.int32)
    data = rng.standard_normal((int(lens.sum()), 2))
    head, tail = rng.standard_normal(2), rng.standard_normal(2)
    feeds = {"d": data, "l": lens, "h": head, "t": tail}
    out, out_lens = run_op("AddPadding", feeds, ["o", "ol"], padding_width=start, end_padding_width=end)
    ref, ref_lens = _add_padding_ref(start, end, data, lens, head, tail)
    np.testing.assert_array_equal(out, ref)
    np.testing.assert_array_equal(out_lens, ref_lens)
    back, back_lens = run_op(
        "RemovePadding", {"o": out, "ol": out_lens}, ["b", "bl"], padding_width=start, end_padding_width=end
    )
    np.testing.assert_array_equal(back, data)
    np.testing.assert_array_equal(back_lens, lens)
    hs, ts = run_op(
        "GatherPadding", {"o": out, "ol": out_lens}, ["hs", "ts"], padding_width=start, end_padding_width=end
    )
    np.testing.assert_allclose(hs, head * start * lens.size)
    np.testing.assert_allclose(ts, tail * end * lens.size)


def test_add_padding_without_lengths_pads_one_sequence_with_zeros():
    data = np.arange(6, dtype=np.float32).reshape(3, 2)
    out, lens = run_op("AddPadding", {"d": data}, ["o", "ol"], padding_width=1)
    np.testing.assert_array_equal(out, np.concatenate([np.zeros((1, 2)), data, np.zeros((1, 2))]))
    np.testing.assert_array_equal(lens, [5])


@pytest.mark.parametrize("n_pads", [0, 1, 2])
def test_add_padding_gradient_matches_finite_differences(n_pads):
    rng = np.random.default_rng(n_pads)
    feeds = {"d": rng.standard_normal((5, 2)), "l": np.array([2, 0, 3], np.int32)}
    names = ["d", "l"] + ["h", "t"][:n_pads]
    for n in names[2:]:
        feeds[n] = rng.standard_normal(2)
    feeds["r"] = rng.standard_normal((5 + 3 * 3, 2))

    def build(net):
        net.AddPadding(names, ["o", "ol"], padding_width=1, end_padding_width=2)
        return weighted_mean_head(net, "o")

    wrt = ["d"] + names[2:]
    _, ours = autodiff_grads(build, feeds, wrt)
    fd = numeric_grads(build, feeds, wrt)
    for w in wrt:
        np.testing.assert_allclose(ours[w], fd[w], rtol=1e-5, atol=1e-8, err_msg=w)


def test_gather_ranges_concatenates_the_ranges():
    data = np.arange(10, dtype=np.float32)
    ranges = np.array([[[0, 2], [5, 1]], [[3, 0], [7, 3]]], np.int32)
    out, lens = run_op("GatherRanges", {"d": data, "r": ranges}, ["o", "l"])
    np.testing.assert_array_equal(out, [0, 1, 5, 7, 8, 9])
    np.testing.assert_array_equal(lens, [3, 3])
    with pytest.raises(an.OperatorError, match="outside"):
        run_op("GatherRanges", {"d": data, "r": np.array([[[8, 3]]], np.int32)}, ["o", "l"])


@FEW
@given(seed=st.integers(0, 2**16))
def test_batch_box_cox_matches_the_reference(seed):
    rng = np.random.default_rng(seed)
    data = rng.uniform(-2, 5, (4, 3)).astype(np.float32)
    l1 = np.array([0.0, 0.5, -1.0], np.float32)
    l2 = rng.uniform(-1, 1, 3).astype(np.float32)
    (y,) = run_op("BatchBoxCox", {"d": data, "a": l1, "b": l2}, ["y"])
    base = np.maximum(data + l2, 1e-6)
    ref = np.stack([np.log(base[:, 0]), (base[:, 1] ** 0.5 - 1) / 0.5, (base[:, 2] ** -1.0 - 1) / -1.0], axis=1)
    np.testing.assert_allclose(y, ref, rtol=1e-5)


def test_reverse_packed_segs_remove_data_blocks_find_duplicates():
    data = np.arange(12, dtype=np.float64).reshape(3, 2, 2)
    (rev,) = run_op("ReversePackedSegs", {"d": data, "l": np.array([3, 1], np.int32)}, ["r"])
    np.testing.assert_array_equal(rev[:, 0], data[::-1, 0])
    np.testing.assert_array_equal(rev[:, 1], data[:, 1])
    feeds = {"d": data, "l": np.array([2, 3], np.int32), "r": np.random.default_rng(0).standard_normal(data.shape)}

    def build(net):
        net.ReversePackedSegs(["d", "l"], "o")
        return weighted_mean_head(net, "o")

    np.testing.assert_allclose(
        autodiff_grads(build, feeds, ["d"])[1]["d"], numeric_grads(build, feeds, ["d"])["d"], atol=1e-8
    )
    (kept,) = run_op("RemoveDataBlocks", {"d": np.arange(5.0), "i": np.array([3, 0, 3], np.int64)}, ["k"])
    np.testing.assert_array_equal(kept, [1.0, 2.0, 4.0])
    (dups,) = run_op("FindDuplicateElements", {"d": np.array([b"a", b"b", b"a", b"a", b"c"], object)}, ["i"])
    np.testing.assert_array_equal(dups, [2, 3])
