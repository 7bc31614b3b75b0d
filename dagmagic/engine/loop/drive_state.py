"""``DriveState``: what one drive of a run changes (pydantic-ai's ``GraphAgentState``).

The run itself (its state, events and inbox), the autonomous rounds it has used, and the conversation before it
once fitted for the planner. What a drive uses without changing it is ``dagmagic.engine.loop.services``.
"""

from __future__ import annotations

from dataclasses import dataclass

from dagmagic.engine.loop.decisions import completed
from dagmagic.engine.run.dag_run import DagRun
from dagmagic.models import PlanStep, RoundRecord

__all__ = ["DriveState", "RoundBudget"]


@dataclass
class RoundBudget:
    """The autonomous rounds a run has used, and whether the coming round is the user's (free)."""

    used: int = 0
    next_free: bool = False

    @classmethod
    def of(cls, rounds: list[RoundRecord]) -> RoundBudget:
        """The budget a run has used so far: rounds judged that were not the user's."""
        used = sum(1 for record in rounds if record.analysis is not None and not record.free)
        last = rounds[-1].decision if rounds else None
        return cls(used=used, next_free=last is not None and not last.counts_against_budget)


@dataclass
class DriveState:
    """What a drive of ``run`` changes."""

    run: DagRun
    budget: RoundBudget
    past: str | None = None
    """The conversation before the run, fitted for the planner (``past_known`` once it is)."""
    past_known: bool = False

    @classmethod
    def of(cls, run: DagRun) -> DriveState:
        """The state a drive of ``run`` starts from (a resumed run's budget counts its rounds so far)."""
        return cls(run, RoundBudget.of(run.rounds))

    @property
    def domain(self) -> str | None:
        """The goal's domain, when a plan said one."""
        return self.run.state.domain

    def route(self, domain: str | None) -> None:
        """The goal's domain, as the first plan said it: later rounds' plans are steered by it."""
        self.run.state.domain, self.run.state.routed = domain, True

    def completed(self) -> list[tuple[str, PlanStep]]:
        """Every completed step of the run so far."""
        return completed(self.run.rounds)

    @property
    def latest_follow_up(self) -> str | None:
        """The newest follow-up no plan has seen yet."""
        pending = self.run.inbox.pending
        return pending[-1] if pending else None
