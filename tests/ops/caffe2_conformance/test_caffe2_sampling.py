"""WeightedSample and WeightedMultiSampling: zero weights never drawn, frequencies near the
weights (seeded, wide margins), the seed making runs repeatable."""

from __future__ import annotations

import numpy as np
import pytest
from _c2run import run_op

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
