"""``DriveServices``: what one drive of a run uses and does not change (pydantic-ai's ``GraphAgentDeps``).

The goal loop's configuration (models, settings, the step runner, tools, depth), and what a drive builds on it
once: the context guard, the circuit breakers (shared with its subruns), the run's cost budget, the planner.
What a drive changes is ``dagmagic.engine.loop.drive_state``; the two meet in ``dagmagic.engine.loop.drive``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dagmagic.engine.calls.guard import ContextGuard
from dagmagic.engine.calls.history import ConversationSummary, PlannerHistory
from dagmagic.engine.calls.planner import Planner
from dagmagic.events import Event
from dagmagic.llm import ChatModel, ModelEntry
from dagmagic.llm.breaker import CircuitBreakers
from dagmagic.llm.budget import CURRENT_BUDGET, CostBudget
from dagmagic.llm.registry import STANDARD_ROLES
from dagmagic.models import ExecutionPlan, RoundRecord
from dagmagic.settings import DagSettings

if TYPE_CHECKING:
    from dagmagic.engine.loop.driver import GoalLoop

__all__ = ["DriveServices"]


@dataclass
class DriveServices:
    """The services of one drive by ``loop``; what they report goes to ``emit`` (the run's)."""

    loop: GoalLoop
    """The goal loop's configuration: models, settings, step runner, tools, depth."""
    emit: Callable[[Event], object]
    guard: ContextGuard = field(init=False)
    history: PlannerHistory = field(init=False)
    """The conversation before the run, as the planner reads it (from the session's summary, else its own)."""
    breakers: CircuitBreakers = field(init=False)
    """Which models stopped answering in this drive (shared with its subruns): they are not called again."""
    cost_budget: CostBudget | None = field(init=False)
    """The run's cost budget (``DAG_MAX_COST``; shared with its subruns), None when it has none."""
    _planner: Planner | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        loop = self.loop
        self.cost_budget = CURRENT_BUDGET.get()
        self.breakers = (
            loop.breakers if loop.breakers is not None else CircuitBreakers(loop.settings.llm_unanswered_limit)
        )
        self.guard = ContextGuard(
            loop.registry, loop.settings, emit=self.emit, windows=loop.windows, breakers=self.breakers
        )
        summary = loop.summary if loop.summary is not None else ConversationSummary()
        self.history = PlannerHistory(self.guard, summary)

    @property
    def settings(self) -> DagSettings:
        """The run's settings."""
        return self.loop.settings

    def entry(self, hint: str | None) -> ModelEntry:
        """The model a role (or a registered model's name) names."""
        return self.loop.entry(hint)

    def model(self, role: str | None) -> ChatModel:
        """The model a role (or a registered model's name) resolves to, reporting to this run."""
        entry = self.loop.entry(role)
        return ChatModel(entry, settings=self.loop.settings, emit=self.emit, breaker=self.breakers.of(entry.name))

    @property
    def planner(self) -> Planner:
        """The smart model's planner for this run (subruns are offered only below the depth limit)."""
        if self._planner is None:
            loop = self.loop
            self._planner = Planner(
                self.model("smart"),
                loop.settings,
                emit=self.emit,
                tool_names=loop.tool_names,
                tools=loop.tools,
                roles=loop.registry.roles.keys(),
                subruns=loop.depth < loop.settings.max_depth,
                model_choice=self.model_choice,
            )
        return self._planner

    @property
    def model_choice(self) -> bool:
        """Whether the roles a step may name lead to more than one model (else naming one changes nothing)."""
        roles = {*STANDARD_ROLES, *self.loop.registry.roles}
        return len({self.loop.entry(role).name for role in roles}) > 1

    @property
    def streams(self) -> bool:
        """Whether plans stream (steps starting before the plan is whole)."""
        return self.loop.settings.streaming_planner and self.planner.model.entry.capabilities.stream

    def assign_models(self, plan: ExecutionPlan) -> None:
        """Name the model each step of ``plan`` will run on (one that ended keeps the model it ran on: a re-run's or
        a fork's kept steps).
        """
        for step in plan.steps:
            if step.status not in ("completed", "failed", "skipped"):
                step.model = self.loop.entry(step.model_hint).name

    def unanswered(self, record: RoundRecord) -> list[str]:
        """The models the round's steps ran on that stopped answering: another round would meet them again."""
        return sorted({step.model for step in record.plan.steps if step.model and self.breakers.is_open(step.model)})

    @property
    def out_of_money(self) -> bool:
        """Whether the run's cost budget is spent: no call may start."""
        return self.cost_budget is not None and self.cost_budget.reached
