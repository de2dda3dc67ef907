"""Partition / LengthsPartition / GatherByKey against a numpy sharding by key mod partitions."""

from __future__ import annotations

import numpy as np
import pytest
from _c2run import run_op

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("pack", [0, 1])
@pytest.mark.parametrize("parts", [1, 3])
def test_partition_shards_keys_and_rows(pack, parts):
    rng = np.random.default_rng(parts + 10 * pack)
    keys = rng.integers(-20, 20, (4, 3)).astype(np.int64)
    x = rng.uniform(size=(4, 3, 2)).astype(np.float32)
    outs = [f"{n}_p{p}" for p in range(parts) for n in ("k", "x")]
    got = run_op("Partition", {"k": keys, "x": x}, outs, pack_first_input=pack)
    flat_k, flat_x = keys.reshape(-1), x.reshape(-1, 2)
    for p in range(parts):
        pick = [i for i in range(flat_k.size) if flat_k[i] % parts == p]  # python's % is non-negative
        expected_k = np.array([flat_k[i] // parts if pack else flat_k[i] for i in pick], np.int64).reshape(-1)
        np.testing.assert_array_equal(got[2 * p], expected_k)
        np.testing.assert_array_equal(got[2 * p + 1], flat_x[pick].reshape(-1, 2))


def test_gather_by_key_inverts_partition():
    keys = np.array([5, -2, 7, 0, 3, 4, -9], np.int32)
    v = np.arange(14, dtype=np.float64).reshape(7, 2)
    parts = run_op("Partition", {"k": keys, "v": v}, ["k0", "v0", "k1", "v1", "k2", "v2"])
    (back,) = run_op("GatherByKey", {"k": keys, "a": parts[1], "b": parts[3], "c": parts[5]})
    np.testing.assert_array_equal(back, v)


def test_lengths_partition_counts_each_segments_keys():
    lens, keys = np.array([3, 0, 2], np.int32), np.array([1, 2, 4, 7, 6], np.int64)
    got = run_op("LengthsPartition", {"l": lens, "k": keys}, ["l0", "k0", "l1", "k1"])
    np.testing.assert_array_equal(got[0], [2, 0, 1])
    np.testing.assert_array_equal(got[1], [2, 4, 6])
    np.testing.assert_array_equal(got[2], [1, 0, 1])
    np.testing.assert_array_equal(got[3], [1, 7])
    assert got[0].dtype == np.int32


def test_errors():
    with pytest.raises(Exception, match="multiple of the 2 inputs"):
        run_op("Partition", {"k": np.zeros(2, np.int32), "x": np.zeros(2)}, ["a", "b", "c"])
    with pytest.raises(Exception, match="start with the keys' shape"):
        run_op("Partition", {"k": np.zeros(2, np.int32), "x": np.zeros(3)}, ["a", "b"])
    with pytest.raises(Exception, match="int32 or int64 keys"):
        run_op("Partition", {"k": np.zeros(2)}, ["a"])


def test_module_docstring_example_runs():
    import doctest

    from asyncnet.ops import caffe2_partition

    result = doctest.testmod(caffe2_partition, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
