"""What the store reads of a live run and what it tells it: the store never imports the engine's run.

Any object with these members is saved: the engine's ``DagRun`` is one (structurally, no import between them).
"""

from __future__ import annotations

from typing import Protocol

from dagmagic.events import Event
from dagmagic.models import PlanStep, RunState

__all__ = ["LiveRun"]


class LiveRun(Protocol):
    """A run being saved: its id, state and event log as they are now, and the two things the store tells it."""

    state: RunState
    events: list[Event]

    @property
    def run_id(self) -> str:
        """The run's id (its row's key)."""
        ...

    @property
    def durable(self) -> bool:
        """Whether the run is still being saved."""
        ...

    def done(self) -> bool:
        """Whether the run has ended."""
        ...

    def step_of(self, round: int, step_id: str) -> PlanStep | None:
        """Step ``step_id`` of round ``round`` as it is now."""
        ...

    def emit(self, event: Event) -> None:
        """Record an event in the run (a warning the store gives it)."""
        ...

    def _unsaved(self, reason: str) -> None:
        """The store can no longer write this run: it goes on unsaved, and says so."""
        ...
