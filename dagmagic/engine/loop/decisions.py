"""What a round decides, and what earlier rounds tell later ones.

``decide`` is the decision after a judged round; the other decisions the loop makes are the named
constructors below it. ``replan_context`` is what the planner learns from earlier rounds; ``visible_results``
what the analyzer and the answer see; ``reusable`` the results a new plan may depend on (``rN.id``).
"""

from __future__ import annotations

from collections.abc import Sequence

from dagmagic.engine.calls.context import truncate
from dagmagic.models import AnalysisResult, Decision, PlanStep, RoundRecord
from dagmagic.settings import DagSettings

__all__ = [
    "FOLLOW_UP_WHILE_ANSWERING",
    "FOLLOW_UP_WHILE_JUDGING",
    "FOLLOW_UP_WHILE_PLANNING",
    "INTERRUPTED_WHILE_PLANNING",
    "NOT_REACHED",
    "OUT_OF_BUDGET",
    "RERUN",
    "STOPPED",
    "STOPPED_AWAITING_APPROVAL",
    "STOPPED_BEFORE_ROUND",
    "STOPPED_WHILE_PLANNING",
    "UNANSWERED",
    "WHAT_IF",
    "answer_rerun",
    "completed",
    "decide",
    "out_of_budget",
    "planned_again",
    "rejected",
    "replan_context",
    "reusable",
    "stopped_while_planning",
    "users_round",
    "visible_results",
]

# A Stop's words, one vocabulary everywhere: the user stopped the run ("stopped by you" in the views)
STOPPED = "You stopped the run: answering from what completed."
STOPPED_WHILE_PLANNING = "You stopped the run before this round's plan was ready."
STOPPED_AWAITING_APPROVAL = "You stopped the run before approving this round's plan: it did not run."
STOPPED_BEFORE_ROUND = "You stopped the run before the next round began."
FOLLOW_UP_WHILE_PLANNING = "A follow-up arrived while planning: this plan was dropped for one that includes it."
FOLLOW_UP_WHILE_ANSWERING = "A follow-up arrived while the answer was being written: it gets its own round."
FOLLOW_UP_WHILE_JUDGING = "A follow-up arrived while the round was judged: it is judged again with the follow-up."
NOT_REACHED = "The verdict found the goal not reached: the answer it began to write is not the run's."
INTERRUPTED_WHILE_PLANNING = "Interrupted while planning: planned again, keeping what completed."
REJECTED = "The user rejected this plan: {feedback}"
RERUN = "{step} is re-run: the answer is written again from the new results."
WHAT_IF = "{step}'s result was edited by you: the answer is written again from what follows from it."
UNANSWERED = "{models} did not answer: no new round would fare better; answering from what completed."
OUT_OF_BUDGET = "Stopped: {budget}: answering from what completed."


def decide(
    analysis: AnalysisResult,
    *,
    follow_up: bool,
    stopped: bool,
    cut_short: bool = False,
    autonomous_rounds: int,
    settings: DagSettings,
    unanswered: Sequence[str] = (),
) -> Decision:
    """What follows a judged round: achieved (unless a Stop skipped steps of it, ``cut_short``: what completed
    may meet the goal, but the answer covers only that, so it is partial), then the user's latest word (a Stop
    answers now from what completed), then models of the round that stopped answering (``unanswered``: another
    round would meet them again, so the answer is written from what completed, and sees any follow-up), then a
    follow-up not yet planned for (a round outside the budget), then the budget, then confidence.
    """
    if analysis.achieved and not (stopped and cut_short):
        return Decision(action="synthesize", reason="The goal was achieved.")
    if stopped:  # a follow-up after the Stop would have cleared it: the Stop is the latest word
        return Decision(action="synthesize", reason=STOPPED, partial=True)
    if unanswered:
        names = ", ".join(repr(name) for name in unanswered)
        reason = UNANSWERED.format(models=f"Model {names}" if len(unanswered) == 1 else f"Models {names}")
        return Decision(action="synthesize", reason=reason, partial=True)
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


def stopped_while_planning(*, awaiting_approval: bool = False) -> Decision:
    """A Stop dropped the round's plan (being made, or made and waiting for approval): answer from what earlier
    rounds completed.
    """
    reason = STOPPED_AWAITING_APPROVAL if awaiting_approval else STOPPED_WHILE_PLANNING
    return Decision(action="synthesize", reason=reason, partial=True)


def out_of_budget(budget: str) -> Decision:
    """The run's cost budget is spent (``budget`` says it: ``the cost budget of 0.05 USD was reached (0.052 USD
    spent)``): no call starts, so the answer is made from what completed, partial.
    """
    return Decision(action="synthesize", reason=OUT_OF_BUDGET.format(budget=budget), partial=True)


def planned_again(free: bool) -> Decision:
    """A resumed round whose plan never became whole: plan again (free if the round was)."""
    return Decision(action="replan", reason=INTERRUPTED_WHILE_PLANNING, counts_against_budget=not free)


def answer_rerun(record: RoundRecord, *, stopped: bool) -> Decision:
    """A round that re-ran a step: answer again from its new results, whatever the verdict."""
    reason = (
        f"Continued from round {record.rerun_of} with {record.rerun_step}'s result edited by you, re-running what "
        "depends on it: answering from the new results."
        if record.what_if
        else f"Re-ran {record.rerun_step} of round {record.rerun_of} and what depends on it: answering from the new "
        "results."
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
