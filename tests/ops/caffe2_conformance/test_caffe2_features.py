"""KeySplit, MergeIdLists, IndexHash, LengthsToShape, SinusoidPositionEncoding, BernoulliJSD and
SparseNormalize against plain-python/numpy references; BernoulliJSD's gradient against finite
differences."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest
from _c2run import run_op
from _gradcheck_helpers import autodiff_grads, numeric_grads

import asyncnet as an

pytestmark = pytest.mark.timeout(120)


def test_key_split_lists_positions_per_key():
    keys = np.random.default_rng(0).integers(0, 4, 30).astype(np.int64)
    got = run_op("KeySplit", {"k": keys}, [f"y{i}" for i in range(5)], categorical_limit=5)
    for v in range(5):
        np.testing.assert_array_equal(got[v], [i for i, k in enumerate(keys) if k == v])
        assert got[v].dtype == np.int32


def test_merge_id_lists_unions_each_row():
    got = run_op(
        "MergeIdLists",
        {
            "l0": np.array([3, 0, 4], np.int32),
            "v0": np.array([1, 5, 6, 2, 4, 5, 6], np.int64),
            "l1": np.array([3, 2, 1], np.int32),
            "v1": np.array([5, 8, 9, 14, 9, 5], np.int64),
        },
        ["l", "v"],
    )
    np.testing.assert_array_equal(got[0], [5, 2, 4])
    np.testing.assert_array_equal(got[1], [1, 5, 6, 8, 9, 9, 14, 2, 4, 5, 6])


def _hash(index: int, fmt: str, bits: int, seed: int, modulo: int) -> int:
    h = (0xDEADBEEF * seed) % (1 << bits)
    for b in struct.pack(fmt, index):
        h = (h * 65537 + (b - 256 if b > 127 else b)) % (1 << bits)
    if h >= 1 << (bits - 1):
        h -= 1 << bits
    truncated = abs(h) % modulo * (1 if h >= 0 else -1)
    return (modulo + truncated) % modulo


@pytest.mark.parametrize("dtype,fmt,bits", [(np.int32, "<i", 32), (np.int64, "<q", 64)])
def test_index_hash_matches_a_python_hash(dtype, fmt, bits):
    x = np.array([0, 1, -7, 123456, 2**30], dtype)
    (y,) = run_op("IndexHash", {"x": x}, seed=3, modulo=100003)
    assert y.dtype == dtype
    np.testing.assert_array_equal(y, [_hash(int(v), fmt, bits, 3, 100003) for v in x])


def test_lengths_to_shape():
    (s,) = run_op("LengthsToShape", {"l": np.array([5, 5, 5], np.int32)})
    np.testing.assert_array_equal(s, [3, 5])
    with pytest.raises(Exception, match="equal lengths"):
        run_op("LengthsToShape", {"l": np.array([5, 4], np.int32)})


def test_sinusoid_position_encoding():
    pos = np.array([[1, 4], [7, 2]], np.int32)
    (y,) = run_op("SinusoidPositionEncoding", {"p": pos}, embedding_size=5, alpha=100.0, amplitude=2.0)
    assert y.shape == (2, 2, 5) and y.dtype == np.float32
    for idx in np.ndindex(pos.shape):
        for k in range(5):
            x = pos[idx] / 100.0 ** (k / 5)
            assert y[idx][k] == pytest.approx(2 * (math.sin(x) if k % 2 == 0 else math.cos(x)), rel=1e-5)


def _h(p):
    return -p * np.log(p) - (1 - p) * np.log(1 - p)


def test_bernoulli_jsd_value_and_gradient():
    rng = np.random.default_rng(1)
    p, q = rng.uniform(0.05, 0.95, 6), rng.uniform(0.05, 0.95, 6)
    (loss,) = run_op("BernoulliJSD", {"p": p, "q": q})
    np.testing.assert_allclose(loss, _h((p + q) / 2) - (_h(p) + _h(q)) / 2, rtol=1e-12)
    feeds = {"p": p, "q": q, "r": rng.uniform(0.5, 1.5, 6)}

    def build(net: an.Net) -> str:
        net.BernoulliJSD(["p", "q"], "l")
        net.Mul(["l", "r"], "lr")
        return net.AveragedLoss("lr", "loss")

    _, ours = autodiff_grads(build, feeds, ["p"])
    np.testing.assert_allclose(ours["p"], numeric_grads(build, feeds, ["p"])["p"], rtol=1e-5, atol=1e-9)


@pytest.mark.parametrize("use_max_norm", [True, False])
def test_sparse_normalize_rescales_the_listed_rows(use_max_norm):
    w = np.random.default_rng(2).uniform(-2, 2, (5, 3)).astype(np.float32)
    w[3] *= 0.01  # a row below the norm
    idx = np.array([0, 3, 4], np.int64)
    (y,) = run_op("SparseNormalize", {"w": w, "i": idx}, use_max_norm=use_max_norm, norm=1.5)
    for r in range(5):
        n = np.linalg.norm(w[r]) + 1e-12
        want = w[r] * 1.5 / n if r in idx and (not use_max_norm or n > 1.5) else w[r]
        np.testing.assert_allclose(y[r], want, rtol=1e-6)


def test_module_docstring_example_runs():
    import doctest

    from asyncnet.ops import caffe2_features

    result = doctest.testmod(caffe2_features, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


def test_ngram_from_categorical_codes_vocabulary_positions():
    floats = np.array([[10.2, -1.0, 31.0], [99.0, 5.0, 30.4], [20.0, 0.0, 29.6]], np.float32)
    (y,) = run_op(
        "NGramFromCategorical",
        {"f": floats},
        col_ids=[0, 2],
        categorical_limits=[3, 2],
        vals=[30, 10, 20, 31, 30],
    )
    # row 0: 10 -> 1, 31 -> 0; row 1: 99 absent -> 0, 30 -> 1; row 2: 20 -> 2, 30 -> 1
    np.testing.assert_array_equal(y, [1 + 3 * 0, 0 + 3 * 1, 2 + 3 * 1])
    assert y.dtype == np.int32
