"""caffe2.python.tt_core.init_tt_cores: sizes, orthonormal cores (QR), scale, seeding."""

from __future__ import annotations

import numpy as np
import pytest

from caffe2.python import tt_core

pytestmark = pytest.mark.timeout(60)


def test_cores_are_orthonormal_scaled_and_seeded():
    inp, out, ranks = [2, 3, 2], [2, 2, 3], [1, 3, 4, 1]
    cores = tt_core.init_tt_cores(inp, out, ranks)
    sizes = [ranks[k] * inp[k] * out[k] * ranks[k + 1] for k in range(3)]
    assert cores.dtype == np.float32 and cores.shape == (sum(sizes),)
    scale = 0.1 / (np.prod(inp) * np.prod(ranks)) ** (1 / 3)
    start = 0
    for k in range(2):  # every core but the last is a Q factor: orthonormal columns
        q = cores[start : start + sizes[k]].reshape(-1, ranks[k + 1]).astype(np.float64) / scale
        np.testing.assert_allclose(q.T @ q, np.eye(ranks[k + 1]), atol=1e-5)
        start += sizes[k]
    np.testing.assert_array_equal(cores, tt_core.init_tt_cores(inp, out, ranks))
    assert not np.array_equal(cores, tt_core.init_tt_cores(inp, out, ranks, seed=7))


def test_the_cores_multiply_to_a_matrix_of_the_drawn_norm():
    """With one core, the vector is the N(0, 1) draw itself times the scale."""
    cores = tt_core.init_tt_cores([2], [3], [1, 1], seed=5)
    np.random.seed(5)
    np.testing.assert_allclose(cores, (0.1 / 2.0) * np.random.normal(0, 1, 6).astype(np.float32), rtol=1e-6)


def test_mismatched_sizes_are_refused():
    with pytest.raises(ValueError, match="expected 2 out_sizes and 3 tt_ranks"):
        tt_core.init_tt_cores([2, 2], [2], [1, 2, 1])
