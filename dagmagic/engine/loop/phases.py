"""The phases of a run. Each does its work in ``run`` and returns the phase that follows; ``on`` takes the
user's messages that the inbox's table delivers to it (``dagmagic.engine.run.inbox``).

::

    Starting ──> Planning ──> AwaitingApproval ──> Executing ──> Analyzing ─────────────────────────> FINISHED
                    ^  │  (streamed: Executing)      (rejected ─> Planning)   │ │  goal reached: the verdict
                    │  │                                                      │ │  wrote the answer (streamed)
                    │  │                                                      │ └─> Synthesizing ──> FINISHED
                    │  │                                                      │ replan    │ follow-up
                    │  └──────────────────────────────────────────────────────┴───────────┘
                    └── next round (``Drive.next_round``)

The verdict and the answer are one call: when the goal is reached, ``Analyzing`` has the answer already,
streamed while the verdict was written. ``Synthesizing`` writes an answer apart only where the verdict cannot:
a partial answer, a run that stops without reaching the goal, a re-run round not reached, no answer in the
verdict, a smart model that cannot stream.

Planning lives in ``dagmagic.engine.loop.planning_phase``; the transitions several phases share (another round, the
answer now, a decision carried out) in ``dagmagic.engine.loop.drive``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Final

from dagmagic.engine.calls.analyzer import Analyzer
from dagmagic.engine.calls.plan_drafts import recover_steps
from dagmagic.engine.calls.planner import Planner
from dagmagic.engine.calls.synthesis import synthesize
from dagmagic.engine.loop.decisions import (
    FOLLOW_UP_WHILE_ANSWERING,
    FOLLOW_UP_WHILE_JUDGING,
    answer_rerun,
    decide,
    rejected,
    visible_results,
)
from dagmagic.engine.loop.executing_phase import Execution
from dagmagic.engine.run.inbox import Interrupted
from dagmagic.engine.steps.executor import FOLLOWED_UP_REASON, STOPPED_REASON
from dagmagic.errors import DagError
from dagmagic.events import AnalysisReady, AnswerDelta, ApprovalRequested, PlanReady, Replanning
from dagmagic.messages import Approve, Message, Reject
from dagmagic.models import AnalysisResult, ExecutionPlan, PlanStep, RoundRecord, RunPhase

if TYPE_CHECKING:
    from dagmagic.engine.loop.drive import Drive
    from dagmagic.engine.loop.planning_phase import Planning

__all__ = ["FINISHED", "Analyzing", "AwaitingApproval", "Executing", "Finished", "Phase", "Starting", "Synthesizing"]


STOPPED_BEFORE_APPROVAL = "Skipped — you stopped the run before approving the plan"
DROPPED_FOR_FOLLOW_UP = "Skipped — the plan was dropped for your follow-up before it ran"
USERS_SKIPS = (STOPPED_REASON, FOLLOWED_UP_REASON)
"""What the steps a round's stop skipped say."""


class Phase:
    """A phase of the goal loop."""

    name: ClassVar[RunPhase]
    round: int | None = None
    """The round it works for (None before the first)."""

    async def run(self, drive: Drive) -> Phase:
        """Do this phase's work; the phase that follows (``FINISHED`` when the run is answered)."""
        raise NotImplementedError

    def on(self, message: Message) -> bool:
        """A message the inbox's table delivers to this phase, acted on at once; False when there was nothing
        to act on. It is recorded after this returns, so this says nothing itself.
        """
        raise DagError(f"{message.type} cannot be taken while the run is {self.name}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(round={self.round})"


class Finished(Phase):
    """The phase after the last: the run is answered (or failed, or was cancelled)."""

    name = "finished"


FINISHED: Final = Finished()
"""The one ``Finished`` phase."""


class Starting(Phase):
    """Before the first round: the conversation the planner will see (the goal's domain comes with the plan)."""

    name = "starting"

    def __init__(
        self, then: Callable[[Drive], Planning | AwaitingApproval | Executing | Synthesizing | Finished] | None = None
    ) -> None:
        self.then = then
        """Where to go on from (a resumed run's round); a new round when None."""

    async def run(self, drive: Drive) -> Planning | AwaitingApproval | Executing | Synthesizing | Finished:  # noqa: D102
        if self.then is not None:
            return self.then(drive)
        await drive.past()
        return drive.next_round()


class AwaitingApproval(Phase):
    """The round's plan waits for the user's word: run it (as it is, or edited), or plan again."""

    name = "awaiting_approval"

    def __init__(self, record: RoundRecord, plan: ExecutionPlan, planner: Planner, earlier: dict[str, PlanStep]):
        self.record, self.plan, self.planner, self.earlier = record, plan, planner, earlier
        self.round = record.index
        self._verdict: asyncio.Future[tuple[str, Any]] | None = None

    async def run(self, drive: Drive) -> Planning | Executing | Synthesizing | Finished:  # noqa: D102
        record, plan, run = self.record, self.plan, drive.run
        drive.services.assign_models(plan)
        record.plan, record.approval = plan, "pending"
        run.emit(PlanReady(round=record.index, plan=plan))
        run.emit(ApprovalRequested(round=record.index))
        self._verdict = asyncio.get_running_loop().create_future()
        verdict = await run.inbox.interruptible(_awaited(self._verdict), name=f"dagmagic:approval:{record.index}")
        if isinstance(verdict, Interrupted):
            record.approval = None
            _skip_all(plan, STOPPED_BEFORE_APPROVAL if run.inbox.stopped else DROPPED_FOR_FOLLOW_UP)
            return drive.plan_interrupted(record, awaiting_approval=True)
        word, detail = verdict
        if word == "reject":
            record.approval = "rejected"
            _skip_all(plan, "Skipped — the user rejected the plan")
            record.decision = rejected(detail)
            run.emit(Replanning(round=record.index, reason=record.decision.reason))
            drive.state.budget.next_free = True
            return drive.next_round()
        record.approval = "approved"
        approved = plan if detail is None else plan.model_copy(update={"steps": detail})
        return Executing.of(drive, record, approved, self.earlier)

    def on(self, message: Message) -> bool:  # noqa: D102
        if self._verdict is None:
            raise DagError("no plan of this run is waiting for approval yet (it is about to)")
        if self._verdict.done():
            raise DagError("this plan has the user's word already: the run goes on with it")
        if isinstance(message, Reject):
            self._verdict.set_result(("reject", message.describe()))
        elif isinstance(message, Approve):
            edited = self._validated(message.steps) if message.steps is not None else None
            self._verdict.set_result(("approve", edited))
        else:
            return super().on(message)
        return True

    def _validated(self, drafts: list[dict[str, Any]]) -> list[PlanStep]:
        """An edited plan, checked like a model's (``ValueError`` says what is wrong with it)."""
        steps, problem = self.planner.validate(recover_steps(drafts), round=self.record.index, earlier=self.earlier)
        if problem is not None:
            raise ValueError(f"the edited plan cannot run: {problem}")
        return steps


async def _awaited(future: asyncio.Future[tuple[str, Any]]) -> tuple[str, Any]:
    return await future


def _cut_short(record: RoundRecord) -> bool:
    """Whether the user's word skipped steps of the round (a Stop's, or a follow-up's before a later Stop)."""
    return any(step.status == "skipped" and step.error in USERS_SKIPS for step in record.plan.steps)


def _skip_all(plan: ExecutionPlan, why: str) -> None:
    for step in plan.steps:
        step.status, step.error = "skipped", why


class Executing(Phase):
    """The round's steps run; what follows is its verdict (or, for a plan that never became whole, what the
    interruption asked for).
    """

    name = "executing"

    def __init__(
        self,
        record: RoundRecord,
        execution: Execution,
        *,
        started: asyncio.Task[None] | None = None,
        announce: bool = True,
        then: Callable[[Drive], Planning | Synthesizing | Finished] | None = None,
    ) -> None:
        self.record, self.execution, self.round = record, execution, record.index
        self.started = started
        """The execution's task when its steps began while the plan streamed."""
        self.announce = announce
        """Whether the plan is whole (``PlanReady`` says so when the phase begins)."""
        self.then = then

    @classmethod
    def of(
        cls,
        drive: Drive,
        record: RoundRecord,
        plan: ExecutionPlan,
        earlier: dict[str, PlanStep],
        *,
        then: Callable[[Drive], Planning | Synthesizing | Finished] | None = None,
    ) -> Executing:
        """A whole plan, to run as the round's."""
        drive.services.assign_models(plan)
        record.plan = plan
        return cls(record, Execution(drive, plan, earlier), then=then)

    async def run(self, drive: Drive) -> Analyzing | Planning | Synthesizing | Finished:  # noqa: D102
        if self.announce:
            drive.run.emit(PlanReady(round=self.record.index, plan=self.record.plan))
        task = self.started or asyncio.get_running_loop().create_task(
            self.execution.run(), name=f"dagmagic:round:{self.record.index}"
        )
        try:
            await task
        finally:
            if not task.done():
                task.cancel()
                await asyncio.wait([task])
        return self.then(drive) if self.then is not None else Analyzing(self.record)

    def on(self, message: Message) -> bool:  # noqa: D102
        return self.execution.on(message)


class Analyzing(Phase):
    """The round's verdict, and the decision it leads to. When the goal is reached the verdict's
    ``final_answer`` is the answer: streamed while the verdict is written, it ends the run (``Drive.act``);
    otherwise what it wrote is dropped.
    """

    name = "analyzing"

    def __init__(self, record: RoundRecord) -> None:
        self.record, self.round = record, record.index

    async def run(self, drive: Drive) -> Planning | Synthesizing | Finished:  # noqa: D102
        record, inbox, budget = self.record, drive.run.inbox, drive.state.budget
        if not record.free:
            budget.used += 1
        analysis = await self._judge(drive)
        if record.rerun_of is not None:
            decision = answer_rerun(record, stopped=inbox.stopped)
        else:
            decision = decide(
                analysis,
                follow_up=bool(inbox.pending),
                stopped=inbox.stopped,
                cut_short=_cut_short(record),
                autonomous_rounds=budget.used,
                settings=drive.services.settings,
                unanswered=drive.services.unanswered(record),
            )
        record.analysis, record.decision = analysis, decision
        drive.run.emit(AnalysisReady(round=record.index, analysis=analysis, decision=decision))
        drive.settle_draft(record, decision)  # a verdict's answer that is not the run's goes before a new round
        if decision.action == "replan":
            drive.run.emit(
                Replanning(round=record.index, reason=decision.reason, follow_up=drive.state.latest_follow_up)
            )
        return drive.act(record, decision)

    async def _judge(self, drive: Drive) -> AnalysisResult:
        """The verdict against the goal and every follow-up so far, its answer shown as it is written; judged
        again (what it wrote dropped) when a follow-up arrives meanwhile.
        """
        run, index = drive.run, self.record.index
        inbox = run.inbox
        analyzer = Analyzer(
            drive.services.model("smart"), drive.services.settings, emit=run.emit, guard=drive.services.guard
        )

        def on_delta(text: str) -> None:
            if inbox.interrupted:  # outdated: the cancellation lands at the stream's next pause
                return
            run.state.answer += text
            run.emit(AnswerDelta(text=text))

        def on_discard(why: str) -> None:
            drive.clear_answer(run, why)

        while True:
            waiting = len(inbox.pending)
            verdict = await inbox.interruptible(
                analyzer.analyze(
                    drive.objective(analyzer.model, round=index),
                    visible_results(run.rounds),
                    round=index,
                    on_delta=on_delta,
                    on_discard=on_discard,
                ),
                name=f"dagmagic:analyze:{index}",
                on_interrupt=lambda: drive.clear_answer(run, FOLLOW_UP_WHILE_JUDGING),
            )
            if not isinstance(verdict, Interrupted) and len(inbox.pending) == waiting:
                return verdict
            drive.clear_answer(run, FOLLOW_UP_WHILE_JUDGING)  # a follow-up came as the verdict ended


class Synthesizing(Phase):
    """An answer written apart from the verdict, streamed as it is written: a partial one (a Stop, models that
    stopped answering), one for a run that stops without reaching the goal, the answer of a re-run round not
    reached, one after a Stop with no new verdict, or when the verdict could not write it (a smart model that
    cannot stream, an achieved verdict with no answer). A follow-up meanwhile drops it for a new round.
    """

    name = "synthesizing"

    def __init__(self, analysis: AnalysisResult, round: int, *, partial: bool = False, unreached: bool = False):
        self.analysis, self.round, self.partial = analysis, round, partial
        self.unreached = unreached
        """The run stops without reaching the goal: the answer says what is missing."""

    async def run(self, drive: Drive) -> Planning | Synthesizing | Finished:  # noqa: D102
        run = drive.run
        inbox = run.inbox
        waiting = len(inbox.pending)

        def on_delta(text: str) -> None:
            if inbox.interrupted:  # outdated: the cancellation lands at the stream's next pause
                return
            run.state.answer += text
            run.emit(AnswerDelta(text=text))

        writer = drive.services.model("smart")
        outcome = await inbox.interruptible(
            synthesize(
                writer,
                drive.objective(writer, round=self.round),
                visible_results(run.rounds),
                self.analysis,
                drive.services.settings,
                round=self.round or 1,
                on_delta=on_delta,
                guard=drive.services.guard,
                partial=self.partial,
                unreached=self.unreached,
            ),
            name=f"dagmagic:synthesize:{self.round}",
            on_interrupt=lambda: drive.clear_answer(run),
        )
        if isinstance(outcome, Interrupted) or len(inbox.pending) > waiting:
            drive.clear_answer(run)
            return drive.users_round(FOLLOW_UP_WHILE_ANSWERING)
        drive.answered(waiting)
        answer, fallback = outcome
        drive.answer(run, answer, fallback=fallback, partial=self.partial)
        return FINISHED
