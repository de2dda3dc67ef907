"""RowWiseSparseAdam against the update written out row by row in float64."""

from __future__ import annotations

import numpy as np
import pytest
from _c2run import run_op

pytestmark = pytest.mark.timeout(60)


def test_row_wise_sparse_adam_updates_only_the_listed_rows():
    rng = np.random.default_rng(0)
    w, m1 = rng.uniform(-1, 1, (5, 3)).astype(np.float32), rng.uniform(-1, 1, (5, 3)).astype(np.float32)
    m2 = rng.uniform(0, 1, 5).astype(np.float32)
    idx, g = np.array([3, 0], np.int64), rng.uniform(-1, 1, (2, 3)).astype(np.float32)
    lr, it = np.array([0.05], np.float32), np.array([7], np.int64)
    b1, b2, eps = 0.8, 0.95, 1e-3
    inputs = {"w": w, "m1": m1, "m2": m2, "i": idx, "g": g, "lr": lr, "it": it}
    nw, nm1, nm2 = run_op("RowWiseSparseAdam", inputs, ["w", "m1", "m2"], beta1=b1, beta2=b2, epsilon=eps)
    ew, em1, em2 = w.astype(np.float64), m1.astype(np.float64), m2.astype(np.float64)
    rate = 0.05 * np.sqrt(1 - b2**8) / (1 - b1**8)
    for i, r in enumerate(idx):
        em1[r] = b1 * em1[r] + (1 - b1) * g[i]
        em2[r] = b2 * em2[r] + (1 - b2) * np.mean(g[i].astype(np.float64) ** 2)
        ew[r] = ew[r] + rate * em1[r] / (np.sqrt(em2[r]) + eps)
    np.testing.assert_allclose(nw, ew, rtol=1e-5)
    np.testing.assert_allclose(nm1, em1, rtol=1e-5)
    np.testing.assert_allclose(nm2, em2, rtol=1e-5)
    np.testing.assert_array_equal(nw[[1, 2, 4]], w[[1, 2, 4]])


def test_row_wise_sparse_adam_checks_the_moment_shapes():
    with pytest.raises(Exception, match="MOMENT_2"):
        run_op(
            "RowWiseSparseAdam",
            {
                "w": np.zeros((2, 2), np.float32),
                "m1": np.zeros((2, 2), np.float32),
                "m2": np.zeros((2, 2), np.float32),
                "i": np.array([0]),
                "g": np.zeros((1, 2), np.float32),
                "lr": np.ones(1, np.float32),
                "it": np.zeros(1, np.int64),
            },
            ["w", "m1", "m2"],
        )


def test_module_docstring_example_runs():
    import doctest

    from asyncnet.ops import caffe2_rowwise_adam

    result = doctest.testmod(caffe2_rowwise_adam, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
