"""Hypothesis profiles for the fuzz suite.

``ci`` (the default) is deterministic and sized so the whole package takes about a minute on two cores;
``HYPOTHESIS_PROFILE=deep`` runs many more examples for hunting bugs locally (its tests may take minutes,
so pytest's per-test timeout is lifted under it). ``deep`` skips the explicit examples: the default profile runs
those regression cases on every run.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, Phase, settings

_QUIET = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example]

settings.register_profile(
    "ci", derandomize=True, database=None, deadline=None, max_examples=250, suppress_health_check=_QUIET
)
settings.register_profile(
    "deep",
    derandomize=False,
    database=None,
    deadline=None,
    max_examples=2000,
    phases=(Phase.generate, Phase.target, Phase.shrink, Phase.explain),
    suppress_health_check=_QUIET,
)
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
settings.load_profile(PROFILE)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if PROFILE != "ci":
        for item in items:
            if item.path.parent.name == "fuzz":
                item.add_marker(pytest.mark.timeout(0))
