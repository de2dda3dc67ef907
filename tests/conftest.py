"""Shared test settings: hypothesis profiles sized for a 2-core CI machine.

``ci`` (the default) draws the same examples on every run, so a CI result depends on the code
alone; ``explore`` draws new ones each run, to hunt for bugs the fixed examples miss."""

import os
import sys

import pytest
from hypothesis import HealthCheck, settings

_COMMON = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}
settings.register_profile("ci", max_examples=60, derandomize=True, **_COMMON)
settings.register_profile("explore", max_examples=300, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(autouse=True)
def _close_onnx_reps():
    """Close the ONNX backend reps a test left open: each holds a thread-budget claim until closed
    or collected, and a later test must find the budget as the process had it."""
    yield
    backend = sys.modules.get("asyncnet.interop.onnx.backend")
    if backend is not None:
        backend.close_live_reps()
