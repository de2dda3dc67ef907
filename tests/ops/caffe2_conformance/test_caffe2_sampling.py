"""WeightedSample and WeightedMultiSampling: zero weights never drawn, frequencies near the
weights (seeded, wide margins), the seed making runs repeatable."""

from __future__ import annotations

import numpy as np
import pytest
from _c2run import run_op
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncnet as an

pytestmark = pytest.mark.timeout(60)


def _multi(weights: np.ndarray, n: int, seed: int) -> np.ndarray:
    ws = an.Workspace()
    ws.feed("w", weights)
    net = an.Net("m", device_option=an.DeviceOption(random_seed=seed))
    net.WeightedMultiSampling("w", "i", num_samples=n)
    ws.run_net_once(net)
    return ws.fetch("i")


def test_multi_sampling_frequencies_follow_the_weights():
    w = np.array([1.0, 0.0, 3.0, 4.0], np.float32)
    idx = _multi(w, 8000, seed=3)
    assert idx.dtype == np.int32 and idx.shape == (8000,)
    freq = np.bincount(idx, minlength=4) / 8000
    assert freq[1] == 0
    np.testing.assert_allclose(freq, w / w.sum(), atol=0.03)  # ~6 standard deviations
    np.testing.assert_array_equal(_multi(w, 50, seed=3), _multi(w, 50, seed=3))


def test_multi_sampling_takes_the_shape_input_and_empty_weights():
    (idx,) = run_op("WeightedMultiSampling", {"w": np.array([0, 2.0], np.float32), "s": np.zeros((2, 3))})
    np.testing.assert_array_equal(idx, np.ones((2, 3)))
    (empty,) = run_op("WeightedMultiSampling", {"w": np.zeros(0, np.float32)}, num_samples=4)
    assert empty.shape == (0,)


def test_weighted_sample_rows_and_values():
    w = np.array([[0, 0, 1], [0, 5, 0]], np.float32)
    v = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
    idx, vals = run_op("WeightedSample", {"w": w, "v": v}, ["i", "v2"])
    np.testing.assert_array_equal(idx, [2, 1])
    np.testing.assert_array_equal(vals, [3, 5])


def test_negative_weights_are_refused():
    with pytest.raises(Exception, match="non-negative weights"):
        run_op("WeightedMultiSampling", {"w": np.array([1.0, -1.0], np.float32)}, num_samples=1)


def test_module_docstring_example_runs():
    import doctest

    from asyncnet.ops import caffe2_sampling

    result = doctest.testmod(caffe2_sampling, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


# -- UniqueUniformFill -----------------------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(
    low=st.integers(-5, 5),
    span=st.integers(0, 40),
    avoid=st.lists(st.integers(-10, 50), max_size=10),
    n=st.integers(0, 20),
    dtype=st.sampled_from([np.int32, np.int64]),
)
def test_unique_uniform_fill_draws_distinct_values_in_range_outside_avoid(low, span, avoid, n, dtype):
    high = low + span
    free = len(set(range(low, high + 1)) - set(avoid))
    ws = an.Workspace()
    ws.feed("shape", np.array([n], np.int64))
    ws.feed("avoid", np.array(avoid, np.int64))
    op = an.OperatorDef(
        "UniqueUniformFill", ["shape", "avoid"], ["y"],
        {"min": low, "max": high, "input_as_shape": True, "dtype": "int32" if dtype == np.int32 else 10},
    )  # fmt: skip
    if n > free:
        with pytest.raises(an.OperatorError, match=f"{free} left"):
            ws.run_operator_once(op)
        return
    ws.run_operator_once(op)
    y = ws.fetch("y")
    assert y.dtype == dtype and y.shape == (n,) and len(set(y.tolist())) == n
    assert all(low <= v <= high and v not in avoid for v in y.tolist())


@pytest.mark.parametrize("high", [9, 2**40])  # a listed range, and one drawn by rejection
def test_unique_draw_is_uniform_over_the_values_left(high):
    from asyncnet.ops.caffe2_sampling import unique_draw

    rng = np.random.default_rng(1234)
    if high == 9:
        counts = np.zeros(10)
        for _ in range(4000):
            counts[unique_draw(rng, 0, 9, np.array([3, 7]), 2)] += 1
        assert counts[3] == counts[7] == 0
        kept = np.delete(counts, [3, 7])
        assert np.abs(kept / kept.sum() - 1 / 8).max() < 0.02  # 8000 draws: sd about 0.004
    else:
        draws = np.concatenate([unique_draw(rng, 0, high, np.array([5]), 50) for _ in range(200)])
        assert len(np.unique(draws[:50])) == 50 and draws.min() >= 0 and draws.max() <= high
        assert abs(draws.mean() / high - 0.5) < 0.03  # 10000 uniform draws: sd of the mean about 0.003
