"""The goal loop: plan, execute, analyze, then answer or replan (DESIGN §3), as a run of phases.

``GoalLoop.drive`` takes a ``DagRun`` from a starting phase to its end: each phase
(``dagmagic.engine.phases``) does its work and returns the next one. A new run starts by routing its goal
and planning; a resumed one where it was; a re-run at the round that re-runs a step. What the user says on
the way arrives in the run's inbox (``dagmagic.engine.inbox``), which the phases read where they decide.

``decide`` is the decision after a round; the other decisions are the named constructors below it.
``replan_context`` is what the planner learns from earlier rounds; ``visible_results`` is what the analyzer
and the answer see.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from dagmagic.engine.context import Exchange, truncate
from dagmagic.engine.guard import HistoryDigests
from dagmagic.engine.steps import StepRunner
from dagmagic.engine.synthesis import fallback_answer
from dagmagic.errors import ConfigurationError
from dagmagic.events import RunFinished, RunStarted
from dagmagic.llm import ModelEntry, ModelRegistry
from dagmagic.llm.secrets import mask_secrets, scrub_exception
from dagmagic.messages import Rerun
from dagmagic.models import AnalysisResult, Decision, PlanStep, RoundRecord
from dagmagic.settings import DagSettings

if TYPE_CHECKING:
    from dagmagic.engine.run import DagRun

__all__ = [
    "FOLLOW_UP_WHILE_ANSWERING",
    "FOLLOW_UP_WHILE_PLANNING",
    "INTERRUPTED_WHILE_PLANNING",
    "GoalLoop",
    "Origin",
    "decide",
    "replan_context",
    "visible_results",
]

Origin = Literal["new", "resume"] | Rerun
"""Where a drive starts: a new run, a resumed one, or the re-run of a step."""

STOPPED_WHILE_PLANNING = "Stopped by the user before the round's plan was ready."
STOPPED_BEFORE_ROUND = "Stopped by the user before the round began."
FOLLOW_UP_WHILE_PLANNING = "A follow-up arrived while planning: this plan was dropped for one that includes it."
FOLLOW_UP_WHILE_ANSWERING = "A follow-up arrived while the answer was being written: it gets its own round."
INTERRUPTED_WHILE_PLANNING = "Interrupted while planning: planned again, keeping what completed."
REJECTED = "The user rejected this plan: {feedback}"
RERUN = "{step} is re-run: the answer is written again from the new results."


@dataclass
class GoalLoop:
    """Everything a run needs besides its own state, and the driver that takes it through its phases."""

    registry: ModelRegistry
    settings: DagSettings
    step_runner: StepRunner
    history: Sequence[Exchange] = ()
    tool_names: Sequence[str] = field(default_factory=list)
    digests: HistoryDigests | None = None
    """The session's history summaries, so a history is summarized once however many runs read it."""
    approve_plans: bool = False
    """Every plan waits for the user's approval before it runs."""
    depth: int = 0
    """0 for a run; 1 for the subrun of a step marked ``subplan``, and so on (``DAG_MAX_DEPTH`` bounds it)."""

    async def drive(self, run: DagRun, origin: Origin = "new") -> None:
        """Take ``run`` from ``origin`` through its phases to its end. Cancellation ends it ``cancelled``
        and propagates; any other failure ends it ``failed``, keeping what completed and answering from it.
        """
        from dagmagic.engine.phases import FINISHED  # the phases build on this module
        from dagmagic.engine.pursuit import Pursuit

        if not isinstance(origin, Rerun):
            run.emit(RunStarted(run_id=run.run_id, goal=run.goal))
        try:
            await self.registry.warm_up()  # e.g. litellm's import, seconds of CPU, in a thread: not on the loop
            self._check_credentials()
            pursuit = Pursuit(self, run)
            phase = pursuit.first_phase(origin)
            while phase is not FINISHED:
                run.inbox.enter(phase)
                phase = await phase.run(pursuit)
            run.state.status = "failed" if run.state.error else "done"
        except asyncio.CancelledError:
            run.state.status = "cancelled"
            raise
        except Exception as exc:  # a failure: keep what was done, say what happened (never a key)
            run.exception = scrub_exception(exc)
            run.state.error = mask_secrets(f"{type(exc).__name__}: {exc}")
            run.state.status = "failed"
            if not run.state.answer:
                Pursuit.answer(run, fallback_answer(run.analysis, completed(run.rounds)), fallback=True)
        finally:
            run.state.finished_at = time.time()
            run.inbox.finish()
            run.emit(
                RunFinished(
                    status=run.state.status, achieved=run.achieved, confidence=run.confidence, error=run.state.error
                )
            )

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


# --- decisions: what follows a round ----------------------------------------------------------------


def decide(
    analysis: AnalysisResult,
    *,
    follow_up: bool,
    stopped: bool,
    autonomous_rounds: int,
    settings: DagSettings,
) -> Decision:
    """What follows a judged round: achieved, then the user's latest word (a Stop answers now from what
    completed; a follow-up not yet planned for gets a round outside the budget), then the budget, then
    confidence.
    """
    if analysis.achieved:
        return Decision(action="synthesize", reason="The goal was achieved.")
    if stopped:  # a follow-up after the Stop would have cleared it: the Stop is the latest word
        return Decision(action="synthesize", reason="Stopped by the user: answering from what completed.", partial=True)
    if follow_up:
        return Decision(action="replan", reason="A follow-up changed the goal.", counts_against_budget=False)
    if autonomous_rounds >= settings.max_replan_rounds:
        return Decision(action="stop", reason=f"No rounds left ({autonomous_rounds} of {settings.max_replan_rounds}).")
    if analysis.confidence >= settings.replan_stop_confidence:
        return Decision(
            action="stop",
            reason=f"Confident enough ({analysis.confidence:.2f} >= {settings.replan_stop_confidence:.2f}) "
            "that replanning would not help.",
        )
    return Decision(action="replan", reason=analysis.reasoning or "The goal was not achieved.")


def users_round(reason: str) -> Decision:
    """Another round at the user's word (a follow-up, a rejected plan): it uses none of the budget."""
    return Decision(action="replan", reason=reason, counts_against_budget=False)


def rejected(feedback: str) -> Decision:
    """The plan waiting for approval was rejected: plan again, told why."""
    return users_round(REJECTED.format(feedback=feedback))


def stopped_while_planning() -> Decision:
    """A Stop dropped the round's plan: answer from what earlier rounds completed."""
    return Decision(action="synthesize", reason=STOPPED_WHILE_PLANNING, partial=True)


def planned_again(free: bool) -> Decision:
    """A resumed round whose plan never became whole: plan again (free if the round was)."""
    return Decision(action="replan", reason=INTERRUPTED_WHILE_PLANNING, counts_against_budget=not free)


def answer_rerun(record: RoundRecord, *, stopped: bool) -> Decision:
    """A round that re-ran a step: answer again from its new results, whatever the verdict."""
    reason = (
        f"Re-ran {record.rerun_step} of round {record.rerun_of} and what depends on it: answering from the new results."
    )
    return Decision(action="synthesize", reason=reason, counts_against_budget=False, partial=stopped)


# --- what earlier rounds tell later ones -----------------------------------------------------------------


def replan_context(rounds: Sequence[RoundRecord], settings: DagSettings) -> str:
    """Every round so far: verdict, reasoning, and each step's status with a preview of its result."""
    parts = []
    for record in rounds:
        latest = record is rounds[-1]
        limit = settings.replan_preview_chars if latest else settings.replan_older_preview_chars
        analysis = record.analysis or AnalysisResult()
        lines = [
            f"--- Round {record.index} ---",
            f"Analysis: {analysis.reasoning or '(none)'}",
            f"Achieved: {analysis.achieved}, confidence: {analysis.confidence:.2f}",
        ]
        if record.decision is not None and record.analysis is None:
            lines.append(f"Interrupted: {record.decision.reason}")
        if record.error:
            lines.append(f"Error: {record.error}")
        for step in record.plan.steps:
            lines.append(f"- r{record.index}.{step.id} ({step.status}): {step.task}")
            if step.result:
                lines.append(f"  Result: {truncate(step.result, limit)}")
            if step.error:
                lines.append(f"  Error: {step.error}")
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def visible_results(rounds: Sequence[RoundRecord]) -> list[tuple[str, PlanStep]]:
    """What the analyzer and the answer see: every completed result of earlier rounds that no later round
    redid (same task, completed again), as ``rN.id``, then each step of the latest round by its id.
    """
    if not rounds:
        return []
    *earlier, latest = rounds
    replaced = {record.rerun_of for record in rounds if record.rerun_of is not None}  # its steps were copied
    visible: list[tuple[str, PlanStep]] = []
    for position, record in enumerate(earlier):
        if record.index in replaced:
            continue
        redone = {
            _task_key(step.task)
            for later in rounds[position + 1 :]
            for step in later.plan.steps
            if step.status == "completed"
        }
        visible += [
            (f"r{record.index}.{step.id}", step)
            for step in record.plan.steps
            if step.status == "completed" and _task_key(step.task) not in redone
        ]
    return [*visible, *((step.id, step) for step in latest.plan.steps)]


def reusable(rounds: Sequence[RoundRecord]) -> dict[str, PlanStep]:
    """Completed steps of these rounds by their ``rN.id`` reference."""
    return {
        f"r{record.index}.{step.id}": step
        for record in rounds
        for step in record.plan.steps
        if step.status == "completed"
    }


def completed(rounds: Sequence[RoundRecord]) -> list[tuple[str, PlanStep]]:
    """Every completed step of every round; steps of earlier rounds are named ``rN.id``."""
    last = rounds[-1].index if rounds else 0
    return [
        (step.id if record.index == last else f"r{record.index}.{step.id}", step)
        for record in rounds
        for step in record.plan.steps
        if step.status == "completed"
    ]


def _task_key(task: str) -> str:
    return " ".join(task.lower().split())
