"""Fixtures of the Temporal tests: a task queue of the test's own, and the worker processes it started."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.temporal.workers import Worker


@pytest.fixture
def queue() -> str:
    """A task queue of the test's own: no other test's worker takes its cells."""
    return f"test-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def workers() -> Iterator[list[Worker]]:
    """The workers the test started, stopped after it."""
    started: list[Worker] = []
    yield started
    for worker in started:
        worker.stop()
