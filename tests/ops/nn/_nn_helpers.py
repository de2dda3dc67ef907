"""Running one op, and random float64 inputs, for the op-family tests."""

from __future__ import annotations

import numpy as np
from _op_run import run  # noqa: F401  (re-exported for the op-family tests)


def rand(seed: int, shape: tuple[int, ...]) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=shape)
