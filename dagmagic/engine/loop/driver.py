"""The goal loop: plan, execute, analyze, then answer or replan (DESIGN §3), as a run of phases.

``GoalLoop.drive`` takes a ``DagRun`` from a starting phase to its end: each phase
(``dagmagic.engine.loop.phases``) does its work and returns the next one. A new run starts by planning (the plan
call also says the goal's domain); a resumed one where it was; a re-run at the round that re-runs a step.
What the user says on the way arrives in the run's inbox (``dagmagic.engine.run.inbox``), which the phases read
where they decide. Under a cost budget (``DAG_MAX_COST``) the drive holds the run's ``CostBudget``: once it is
reached no phase begins, and a call refused for it ends the phase it was in; either way the run answers from
what completed (``Drive.out_of_budget``).

What a round decides, and what earlier rounds tell later ones, is in ``dagmagic.engine.loop.decisions``; what a
drive uses and what it changes, and the transitions phases share, in ``dagmagic.engine.loop.drive``.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dagmagic._secrets import mask_secrets, scrub_exception
from dagmagic.engine.calls.guard import ModelWindows
from dagmagic.engine.calls.history import ConversationSummary
from dagmagic.engine.calls.synthesis import fallback_answer
from dagmagic.engine.loop.decisions import completed
from dagmagic.engine.loop.drive import Drive
from dagmagic.engine.loop.phases import Finished, Phase
from dagmagic.engine.steps.runner import StepRunner
from dagmagic.engine.tools.functions import Tool
from dagmagic.errors import BudgetExceeded, ConfigurationError, ReplayMismatch
from dagmagic.events import ModelsReady, RunFinished, RunStarted
from dagmagic.llm import ModelEntry, ModelRegistry
from dagmagic.llm.breaker import CircuitBreakers
from dagmagic.llm.budget import CURRENT_BUDGET, CostBudget
from dagmagic.llm.client import CURRENT_RUN
from dagmagic.llm.replay import model_cards
from dagmagic.messages import Origin, Rerun
from dagmagic.models import Exchange
from dagmagic.settings import DagSettings

if TYPE_CHECKING:
    from dagmagic.engine.run.dag_run import DagRun

__all__ = ["GoalLoop"]


@dataclass
class GoalLoop:
    """Everything a run needs besides its own state, and the driver that takes it through its phases."""

    registry: ModelRegistry
    settings: DagSettings
    step_runner: StepRunner
    history: Sequence[Exchange] = ()
    tool_names: Sequence[str] = field(default_factory=list)
    """The names of the tools steps may use (the names of ``tools`` when it is given and this is not)."""
    tools: Sequence[Tool] = field(default_factory=list)
    """The tools themselves: the planner describes their arguments, and tool steps call them directly."""
    summary: ConversationSummary | None = None
    """The session's summary of its conversation, kept up to date after each answer (None: the run's own)."""
    windows: ModelWindows | None = None
    """What the session learned of its models' windows: an unknown one is told once, a refusal's is kept (None:
    the run's own)."""
    history_read: str | None = None
    """A replay's: the conversation as the run it replays read it, not fitted again (its summary was made
    outside that run, from a conversation the replay does not have)."""
    approve_plans: bool = False
    """Every plan waits for the user's approval before it runs."""
    depth: int = 0
    """0 for a run; 1 for the subrun of a step marked ``subplan``, and so on (``DAG_MAX_DEPTH`` bounds it)."""
    breakers: CircuitBreakers | None = None
    """A subrun's: its run's breakers (a model silent there is silent here). None: each drive has its own."""
    connect: Callable[[GoalLoop], Awaitable[None]] | None = None
    """Readies the tools that come from servers (a session's MCP servers) before the first phase: they join
    ``tools``, ``tool_names`` and the step runner's. A failure there fails the run, saying which server."""

    def __post_init__(self) -> None:
        if not self.tool_names and self.tools:
            self.tool_names = [tool.name for tool in self.tools]

    def tool(self, name: str | None) -> Tool | None:
        """The tool named ``name``, None when there is none (a tool step's agent runs instead)."""
        return next((tool for tool in self.tools if tool.name == name), None)

    async def drive(self, run: DagRun, origin: Origin = "new") -> None:
        """Take ``run`` from ``origin`` through its phases to its end. Cancellation ends it ``cancelled``
        and propagates; any other failure ends it ``failed``, keeping what completed and answering from it.
        """
        if not isinstance(origin, Rerun):
            notebook = os.environ.get("JPY_SESSION_NAME") or None  # set by Jupyter for a notebook's kernel
            state = run.state
            run.emit(
                RunStarted(
                    run_id=run.run_id, goal=run.goal, replay_of=state.replay_of, forked_from=state.forked_from,
                    forked_at=state.forked_at, detached_on=state.detached_on, notebook=notebook,
                    settings=self.settings.non_defaults(),
                )
            )  # fmt: skip
        # litellm's callbacks group a run's calls by it (a subrun's calls count in its run's)
        current = CURRENT_RUN.set(run.run_id) if not self.depth else None
        budget = None
        if not self.depth and self.settings.max_cost is not None:  # a subrun spends its run's budget
            budget = CURRENT_BUDGET.set(CostBudget(self.settings.max_cost, spent=run.usage.cost or 0.0, emit=run.emit))
        try:
            await self._prepare(run)
            await self._pursue(run, origin)
            run.state.status = "failed" if run.state.error else "done"
        except asyncio.CancelledError:
            run.state.status = "cancelled"
            raise
        except Exception as exc:  # a failure: keep what was done, say what happened (never a key)
            run.exception = scrub_exception(exc)
            run.state.error = mask_secrets(f"{type(exc).__name__}: {exc}")
            run.state.status = "failed"
            if not run.state.answer and not isinstance(exc, ReplayMismatch):  # a replay shows where it diverged
                why = "The run failed before its answer was written"
                Drive.answer(run, fallback_answer(run.analysis, completed(run.rounds), why), fallback=True)
        finally:
            if current is not None:
                CURRENT_RUN.reset(current)
            if budget is not None:
                CURRENT_BUDGET.reset(budget)
            run.state.finished_at = time.time()
            run.inbox.finish()
            run.emit(
                RunFinished(
                    status=run.state.status,
                    achieved=run.achieved,
                    confidence=run.confidence,
                    error=run.state.error,
                    stopped_by_user=run.state.status == "done" and run.inbox.stopped,
                )
            )

    async def _prepare(self, run: DagRun) -> None:
        """What a run needs before its first phase: the models warmed up, the MCP servers joined, the keys there."""
        await self.registry.warm_up()  # e.g. litellm's import, seconds of CPU, in a thread: not on the loop
        if self.connect is not None and not self.depth:
            await self.connect(self)
            self.connect = None  # a re-run of a step finds them joined already
        self._check_credentials()
        if not self.depth:
            run.emit(ModelsReady(models=model_cards(self.registry)))

    async def _pursue(self, run: DagRun, origin: Origin) -> None:
        """The run's phases, one after the other, from ``origin`` until it is finished."""
        drive = Drive.of(self, run)
        phase: Phase = drive.first_phase(origin)
        while not isinstance(phase, Finished):
            if drive.services.out_of_money:
                phase = drive.out_of_budget()
                continue
            run.inbox.enter(phase)
            try:
                phase = await phase.run(drive)
            except BudgetExceeded:  # a call of the phase was refused: the phase cannot go on
                phase = drive.out_of_budget()

    def _check_credentials(self) -> None:
        """A model whose provider key is not set fails the run before its first call, naming the variable."""
        missing = self.registry.missing_credentials()
        if missing:
            needs = "; ".join(f"{name!r} needs {' or '.join(variables)}" for name, variables in sorted(missing.items()))
            raise ConfigurationError(
                f"{needs}, which the kernel's environment does not have. Set it where Jupyter starts (or "
                "os.environ[...] in a cell) and run again, or pass api_key=... to ModelRegistry.register(). "
                "No call was made."
            )

    def entry(self, hint: str | None) -> ModelEntry:
        """The model a step's ``model_hint`` names: a role (with its fallbacks), or a registered model's name."""
        if hint and hint in self.registry and not self.registry.has_role(hint):
            return self.registry.get(hint)
        return self.registry.for_role(hint)
