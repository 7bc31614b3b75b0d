"""``Drive``: one drive of a run as its phases get it, the services it uses and the state it changes (as
pydantic_graph's ``GraphRunContext`` has ``deps`` and ``state``), and the transitions several phases make.

A drive starts at the phase its origin chooses (``first_phase``): a new run plans; a resumed one goes on from the
round it was in; a re-run starts at the round that re-runs a step. From any phase the run may need another round
(``next_round``, ``users_round``), an answer now (``answer_now``; ``out_of_budget`` when the run's cost budget is
spent, with no model), or a round's decision carried out (``act``): the answer its verdict wrote, another round, the
best answer so far, or an answer written apart (``Synthesizing``), what the verdict wrote of an answer dropped first
when it is not the run's. Each transition's return type is the list of phases it may lead to.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from dagmagic.engine.calls.synthesis import fallback_answer
from dagmagic.engine.loop.decisions import (
    FOLLOW_UP_WHILE_ANSWERING,
    FOLLOW_UP_WHILE_PLANNING,
    NOT_REACHED,
    RERUN,
    STOPPED_BEFORE_ROUND,
    WHAT_IF,
    out_of_budget,
    planned_again,
    reusable,
    stopped_while_planning,
    users_round,
    visible_results,
)
from dagmagic.engine.loop.drive_state import DriveState
from dagmagic.engine.loop.phases import FINISHED, AwaitingApproval, Executing, Finished, Starting, Synthesizing
from dagmagic.engine.loop.planning_phase import Planning
from dagmagic.engine.loop.services import DriveServices
from dagmagic.engine.run.dag_run import DagRun
from dagmagic.events import (
    AnswerCleared,
    AnswerReady,
    PlanReady,
    Replanning,
    ResultEdited,
    RoundStarted,
    RunWarning,
    StepCompleted,
)
from dagmagic.llm import ChatModel
from dagmagic.messages import Rerun
from dagmagic.models import AnalysisResult, Decision, ExecutionPlan, RoundRecord

if TYPE_CHECKING:
    from dagmagic.engine.loop.driver import GoalLoop
    from dagmagic.messages import Origin

__all__ = ["Drive"]

UNFINISHED_PLAN = "Cancelled — the run stopped before the plan was whole; the plan was made again"


@dataclass
class Drive:
    """One drive of a run: ``services`` it uses, ``state`` it changes."""

    services: DriveServices
    state: DriveState

    @classmethod
    def of(cls, loop: GoalLoop, run: DagRun) -> Drive:
        """A drive of ``run`` by ``loop``."""
        return cls(DriveServices(loop, run.emit), DriveState.of(run))

    @property
    def run(self) -> DagRun:
        """The run being driven (the state's)."""
        return self.state.run

    def objective(self, model: ChatModel, *, round: int | None) -> str:
        """The goal with every follow-up so far, as ``model`` reads it: cut to fit when too long (a warning says)."""
        run = self.run
        return self.services.guard.objective_text(run.goal, run.follow_ups_so_far, model, round=round)

    @property
    def asks_domain(self) -> bool:
        """Whether the next plan call must say the goal's domain: routing is on, there is a model to route to (the
        roles lead to more than one), and no plan has said it yet (a resumed run keeps what its first plan said).
        """
        services = self.services
        return services.settings.domain_routing and services.planner.model_choice and not self.run.state.routed

    async def past(self) -> str | None:
        """The conversation before this run, fitted for the planner (from its summary, when it is long; a
        replay's as its original read it).
        """
        state = self.state
        if not state.past_known and self.services.loop.history_read is not None:
            state.past, state.past_known = self.services.loop.history_read, True
        if not state.past_known:
            reader, history = self.services.history, self.services.loop.history
            limit, round = self.services.guard.history_limit(), len(self.run.rounds) + 1
            state.past, state.past_known = await reader.read(history, limit=limit, round=round), True
        return state.past

    # --- where a drive starts

    def first_phase(self, origin: Origin) -> Starting | Executing:
        """The phase a drive from ``origin`` starts in."""
        if isinstance(origin, Rerun):
            return self.rerun(origin)
        if origin == "resume" and self.run.rounds:
            return Starting(then=Drive.resumed)
        if origin == "fork":
            return Starting(then=Drive.forked)
        return Starting()

    def resumed(self) -> Planning | AwaitingApproval | Executing | Synthesizing | Finished:
        """Where a resumed run goes on: its last round, from where it was."""
        record, inbox = self.run.rounds[-1], self.run.inbox
        inbox.new_round()
        if record.decision is not None:
            return self.act(record, record.decision)
        if not _plan_whole(self.run, record):  # it was being planned (streaming, some steps may have run)
            if not record.plan.steps:
                self.run.rounds.pop()
                return self.next_round()
            return self._plan_again(record)
        earlier = reusable(self.run.rounds[:-1])
        if record.approval == "pending":  # it waited for the user's word: it waits again
            return AwaitingApproval(record, record.plan, self.services.planner, earlier)
        for step in record.plan.steps:  # what had not completed runs again; a retry keeps its tier and time
            if step.status in ("pending", "queued", "paused", "running", "cancelled"):
                step.status = "retrying" if step.retry_at is not None else "pending"
                step.error = None
        return Executing.of(self, record, record.plan, earlier)

    def forked(self) -> Executing:
        """Where a fork goes on: its last round (the original's, up to the step it was forked at) runs what it has
        not completed, then is judged; its earlier rounds' results are reusable as they were.
        """
        record = self.run.rounds[-1]
        self.run.inbox.new_round()
        self.run.emit(RoundStarted(round=record.index))
        return Executing.of(self, record, record.plan, reusable(self.run.rounds[:-1]))

    def _plan_again(self, record: RoundRecord) -> Planning | Synthesizing | Finished:
        """A round whose plan was still streaming when the run stopped: it ends here, what completed stays
        reusable (``rN.id``) and what did not is cancelled, and the next round plans the goal again in its place
        (free if it was: no verdict was reached, so no budget was used).
        """
        for step in record.plan.steps:
            if step.status in ("pending", "queued", "paused", "running", "retrying"):
                step.status, step.error, step.retry_at = "cancelled", UNFINISHED_PLAN, None
                self.run.emit(
                    StepCompleted(round=record.index, step_id=step.id, status="cancelled", error=UNFINISHED_PLAN)
                )
        record.decision = planned_again(record.free)
        self.run.emit(
            Replanning(round=record.index, reason=record.decision.reason, follow_up=self.state.latest_follow_up)
        )
        self.state.budget.next_free = record.free
        return self.next_round()

    def rerun(self, message: Rerun) -> Executing:
        """A new round that re-runs ``message.step`` of the latest one (with its new task or model) and every
        step downstream of it, keeping the other results; then it is judged and answered again.
        """
        run = self.run
        source = run.rounds[-1]
        again = source.plan.downstream(message.step)
        task = message.task.strip() if message.task else None
        if message.result is not None:  # what if it had said this: it does not run, what depends on it does
            again.discard(message.step)
        steps = [
            step.said(message.result)
            if step.id == message.step and message.result is not None
            else step.model_copy(deep=True)
            if step.id not in again
            else source.plan.again(step.id, task=task, model=message.model)
            if step.id == message.step
            else source.plan.again(step.id)
            for step in source.plan.steps
        ]
        index = len(run.rounds) + 1
        plan = ExecutionPlan(goal=source.plan.goal, query=source.plan.query, steps=steps, round=index)
        what_if = message.result is not None
        record = RoundRecord(
            index=index, plan=plan, free=True, rerun_of=source.index, rerun_step=message.step, what_if=what_if
        )
        run.inbox.new_round()
        run.emit(RoundStarted(round=index))
        run.rounds.append(record)
        if what_if:
            run.emit(ResultEdited(round=index, step_id=message.step, result=plan.step(message.step).result or ""))
        self.clear_answer(run, (WHAT_IF if what_if else RERUN).format(step=message.step))
        return Executing.of(self, record, plan, reusable(run.rounds[:-2]))

    # --- transitions

    def next_round(self) -> Planning | Synthesizing | Finished:
        """Another round; after a Stop, the answer instead."""
        if self.run.inbox.stopped:
            return self.answer_now(STOPPED_BEFORE_ROUND)
        return Planning(len(self.run.rounds) + 1)

    def users_round(self, reason: str) -> Planning | Synthesizing | Finished:
        """A follow-up asks for another round, outside the budget: the last round's decision says so."""
        decision = users_round(reason)
        if self.run.rounds:
            self.run.rounds[-1].decision = decision
        self.run.emit(Replanning(round=len(self.run.rounds), reason=reason, follow_up=self.state.latest_follow_up))
        self.state.budget.next_free = True
        return self.next_round()

    def plan_interrupted(
        self, record: RoundRecord, *, awaiting_approval: bool = False
    ) -> Planning | Synthesizing | Finished:
        """What follows a round whose plan a Stop or a follow-up dropped (no verdict, no budget used), while it
        was made or while it waited for approval.
        """
        if self.run.inbox.stopped:
            record.decision = stopped_while_planning(awaiting_approval=awaiting_approval)
            return self.answer_now(record.decision.reason)
        return self.users_round(FOLLOW_UP_WHILE_PLANNING)

    def answered_by_verdict(self, record: RoundRecord, decision: Decision) -> bool:
        """Whether the round's verdict wrote the run's answer: the goal was reached, the answer is a whole one
        (not partial), the verdict has it, and the smart model streams (one that cannot has its answer written
        apart, streamed as synthesis streams it).
        """
        verdict = record.analysis
        return (
            decision.action == "synthesize"
            and not decision.partial
            and verdict is not None
            and verdict.achieved
            and bool(verdict.final_answer and verdict.final_answer.strip())
            and self.services.entry("smart").capabilities.stream
        )

    def settle_draft(self, record: RoundRecord, decision: Decision) -> None:
        """Drop what the round's verdict wrote of an answer unless it is the run's answer, saying why."""
        if not self.answered_by_verdict(record, decision):
            achieved = record.analysis is not None and record.analysis.achieved
            self.clear_answer(self.run, decision.reason if achieved else NOT_REACHED)

    def act(self, record: RoundRecord, decision: Decision) -> Planning | Synthesizing | Finished:
        """Carry out a round's decision: the answer the verdict wrote, another round, or an answer written
        apart (from what completed, saying what is missing, when the run stops without reaching the goal).
        """
        run = self.run
        if self.answered_by_verdict(record, decision):
            assert record.analysis is not None and record.analysis.final_answer is not None
            self.answered(len(run.inbox.pending))  # the verdict judged them
            self.answer(run, record.analysis.final_answer, fallback=False)
            return FINISHED
        self.settle_draft(record, decision)
        if decision.action == "replan":
            self.state.budget.next_free = not decision.counts_against_budget
            return self.next_round()
        analysis = record.analysis or AnalysisResult()
        if decision.action == "stop" and not self.state.completed():  # nothing to write an answer from
            self.answer(self.run, fallback_answer(analysis, ()), fallback=True)
            return FINISHED
        # no more rounds (or a re-run round) short of the goal: the answer says what is missing
        unreached = record.analysis is not None and not record.analysis.achieved
        return Synthesizing(analysis, record.index, partial=decision.partial, unreached=unreached)

    def answer_now(self, reason: str) -> Synthesizing | Finished:
        """After a Stop with no new verdict to go on: an answer written from whatever completed, if anything
        did (a follow-up while it is written overrides the Stop: the run goes on).
        """
        run = self.run
        if not self.state.completed():
            self.answer(run, fallback_answer(AnalysisResult(reasoning=reason), ()), fallback=True, partial=True)
            return FINISHED
        analysis = run.analysis or AnalysisResult(reasoning=reason)
        return Synthesizing(analysis, max(len(run.rounds), 1), partial=True)

    def out_of_budget(self) -> Finished:
        """The run's cost budget is spent: no call starts, so the answer is the completed results as they are
        (the fallback answer's listing, written with no model), marked partial and saying why. The last round's
        decision says it too (whatever it was: its replan, say, will not happen). A verdict that reached the goal
        and wrote its answer, which was only to be written again apart (a smart model that cannot stream), gives
        that answer instead.
        """
        run, budget = self.run, self.services.cost_budget
        assert budget is not None
        verdict = run.rounds[-1].analysis if run.rounds else None
        if verdict is not None and verdict.achieved and verdict.final_answer and verdict.final_answer.strip():
            said = f"{budget.describe().capitalize()}: the answer is the verdict's, as it wrote it."
            run.emit(RunWarning(message=said, round=len(run.rounds)))
            self.answer(run, verdict.final_answer, fallback=True)
            return FINISHED
        decision = out_of_budget(budget.describe())
        if run.rounds:
            run.rounds[-1].decision = decision
        self.clear_answer(run, decision.reason)
        run.emit(RunWarning(message=decision.reason, round=len(run.rounds) or None))
        steps = visible_results(run.rounds)
        done = any(step.status == "completed" and step.result for _, step in steps)
        analysis = run.analysis if done else AnalysisResult(reasoning=decision.reason)
        why = f"Stopped: {budget.describe()}"
        self.answer(run, fallback_answer(analysis, steps, why), fallback=True, partial=True)
        return FINISHED

    def answered(self, count: int) -> None:
        """The first ``count`` pending follow-ups are in the answer (no new plan saw them): the last round keeps
        them, the round they shaped.
        """
        run = self.run
        seen = run.inbox.seen(count)
        run.state.follow_ups.extend(seen)
        if run.rounds:
            run.rounds[-1].answered_follow_ups.extend(seen)

    @staticmethod
    def clear_answer(run: DagRun, reason: str = FOLLOW_UP_WHILE_ANSWERING) -> None:
        """Drop the answer being written: a follow-up (or a re-run) made it outdated."""
        if run.state.answer:
            run.state.answer = ""
            run.emit(AnswerCleared(reason=reason))

    @staticmethod
    def answer(run: DagRun, answer: str, *, fallback: bool, partial: bool = False) -> None:
        """The run's answer."""
        run.state.answer = answer
        round = run.rounds[-1].index if run.rounds else None  # its row keeps the follow-ups the answer saw
        run.emit(AnswerReady(answer=answer, fallback=fallback, partial=partial, round=round))


def _plan_whole(run: DagRun, record: RoundRecord) -> bool:
    """Whether the round's plan was whole: ``PlanReady`` marks it (a streaming plan's steps come before it)."""
    return any(isinstance(event, PlanReady) and event.round == record.index and not event.depth for event in run.events)
