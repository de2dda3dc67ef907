"""Shared test settings: a hypothesis profile sized for a 2-core CI machine."""

import os

from hypothesis import HealthCheck, settings

settings.register_profile("ci", deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
