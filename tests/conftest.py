"""Hypothesis profiles.  Pick one with HYPOTHESIS_PROFILE (default ``ci``).

* ``ci`` — fast and derandomized, so a CI run is repeatable and stays inside its time budget;
* ``dev`` — a little more than ci, random seeds, for local work;
* ``thorough`` — the nightly profile: many more examples and longer stateful runs.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    max_examples=60,
    stateful_step_count=30,
    deadline=None,
    derandomize=True,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "dev", max_examples=150, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "thorough",
    max_examples=2000,
    stateful_step_count=100,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
