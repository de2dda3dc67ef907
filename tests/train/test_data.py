"""The embedded digits data set: contents, split, standardization, batches, shards."""

from __future__ import annotations

import gzip
from importlib import resources

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncnet.train.data import epoch_batches, load_digits, num_batches, shard, worker_samples

# class sizes of the UCI optical-digits test set (as documented with sklearn.datasets.load_digits)
CLASS_COUNTS = [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]


def test_file_is_shipped_with_its_license() -> None:
    files = resources.files("asyncnet.data")
    raw = gzip.decompress(files.joinpath("digits.csv.gz").read_bytes()).decode()
    assert len(raw.splitlines()) == 1797
    notice = files.joinpath("LICENSE-digits.txt").read_text()
    assert "CC BY 4.0" in notice and "BSD 3-Clause" in notice


def test_split_sizes_classes_and_dtypes() -> None:
    ds = load_digits()
    assert ds.x_train.shape == (1438, 64) and ds.x_test.shape == (359, 64)
    assert ds.x_train.dtype == np.float32 and ds.y_train.dtype == np.int32
    counts = np.bincount(np.concatenate([ds.y_train, ds.y_test]), minlength=10)
    assert counts.tolist() == CLASS_COUNTS
    test_counts = np.bincount(ds.y_test, minlength=10)
    assert np.all(np.abs(test_counts - np.array(CLASS_COUNTS) * 0.2) <= 1)  # stratified


def test_deterministic_and_standardized() -> None:
    a, b = load_digits(seed=3), load_digits(seed=3)
    assert np.array_equal(a.x_train, b.x_train) and np.array_equal(a.y_test, b.y_test)
    assert not np.array_equal(load_digits(seed=4).y_train, a.y_train)
    m, s = a.x_train.mean(axis=0), a.x_train.std(axis=0)
    varying = s > 0
    np.testing.assert_allclose(m, 0, atol=1e-5)
    np.testing.assert_allclose(s[varying], 1, atol=1e-4)


def test_unstandardized_pixels_are_counts() -> None:
    ds = load_digits(standardize=False)
    x = np.concatenate([ds.x_train, ds.x_test])
    assert x.min() == 0 and x.max() == 16 and np.array_equal(x, np.round(x))


@pytest.mark.parametrize("bad", [0.0, 1.0, -0.1])
def test_bad_test_fraction(bad: float) -> None:
    with pytest.raises(ValueError, match="test_fraction"):
        load_digits(test_fraction=bad)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 200), batch=st.integers(1, 64), workers=st.integers(1, 4), epoch=st.integers(0, 3))
def test_batches_cover_each_sample_at_most_once(n: int, batch: int, workers: int, epoch: int) -> None:
    if batch < workers:
        with pytest.raises(ValueError):
            next(epoch_batches(np.arange(n), np.arange(n), batch, epoch, multiple_of=workers))
        return
    x = np.arange(n)
    batches = list(epoch_batches(x, x, batch, epoch, seed=1, multiple_of=workers))
    assert len(batches) == num_batches(n, batch, workers)
    seen = np.concatenate([b for b, _ in batches]) if batches else np.array([], int)
    assert len(set(seen.tolist())) == len(seen)
    assert all(len(b) % workers == 0 and len(b) <= batch for b, _ in batches)
    assert n - len(seen) < workers * 2 + batch  # only a remainder is dropped
    # shards of a batch are disjoint, equal and make up the batch, in order
    for b, _ in batches:
        parts = [shard(b, b, workers, r)[0] for r in range(workers)]
        assert len({len(p) for p in parts}) == 1
        assert np.array_equal(np.concatenate(parts), b)


def test_batches_are_a_function_of_seed_and_epoch() -> None:
    x = np.arange(100)
    first = [b.tolist() for b, _ in epoch_batches(x, x, 10, epoch=1, seed=0)]
    assert first == [b.tolist() for b, _ in epoch_batches(x, x, 10, epoch=1, seed=0)]
    assert first != [b.tolist() for b, _ in epoch_batches(x, x, 10, epoch=2, seed=0)]


def test_worker_samples_partition_the_epoch() -> None:
    x = np.arange(101)
    parts = [worker_samples(x, x, epoch=2, seed=0, world_size=3, rank=r)[0] for r in range(3)]
    assert sorted(np.concatenate(parts).tolist()) == list(range(101))


def test_shard_rejects_bad_rank() -> None:
    with pytest.raises(ValueError, match="rank"):
        shard(np.arange(4), np.arange(4), 2, 2)
