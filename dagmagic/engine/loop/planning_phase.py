"""The planning phase: a new round and its plan, made whole or streamed (steps start as they arrive).

A plan the user must approve is made whole, then waits (``AwaitingApproval``); otherwise, when the smart
model streams, steps start while the plan is still being written and the round goes on executing once it is
whole. A Stop or a follow-up drops the plan being made (steps it already started finish); what follows is
``Drive.plan_interrupted``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

from dagmagic.engine.calls.context import compose_query
from dagmagic.engine.calls.guard import PLANNER_RESERVE
from dagmagic.engine.calls.plan_stream import PlanStream, StreamedPlan
from dagmagic.engine.calls.synthesis import fallback_answer
from dagmagic.engine.loop.decisions import replan_context, reusable
from dagmagic.engine.loop.executing_phase import Execution
from dagmagic.engine.loop.phases import FINISHED, AwaitingApproval, Executing, Finished, Phase
from dagmagic.engine.run.inbox import Interrupted
from dagmagic.errors import DagError, PlanningError, TransientProviderError
from dagmagic.events import RoundStarted, RunWarning, StepPlanned
from dagmagic.messages import Message, RetryNow
from dagmagic.models import ExecutionPlan, PlanStep, RoundRecord

if TYPE_CHECKING:
    from dagmagic.engine.loop.drive import Drive
    from dagmagic.engine.loop.phases import Synthesizing

__all__ = ["Planning"]

Outcome = tuple[StreamedPlan, str | None] | ExecutionPlan | Interrupted
"""What a streamed planning gives: the stream (and the replan context it was given), a whole plan made after
the stream broke, or an interruption."""


class Planning(Phase):
    """A round begins: its plan is made (whole, or streamed into an execution that starts at once)."""

    name = "planning"

    def __init__(self, round: int) -> None:
        self.round = self.index = round
        self.execution: Execution | None = None
        """The steps started while the plan streams (None for a whole plan)."""

    async def run(self, drive: Drive) -> AwaitingApproval | Executing | Planning | Synthesizing | Finished:  # noqa: D102
        self._begin(drive, await drive.past())
        try:
            if (
                drive.services.streams and not drive.services.loop.approve_plans
            ):  # a plan to approve must not start steps
                return await self._stream(drive)
            plan = await drive.run.inbox.interruptible(self._whole(drive), name=f"dagmagic:plan:{self.index}")
        except PlanningError as exc:
            self.record.error = drive.run.state.error = str(exc)
            why = "No plan could be made, so no answer was written"
            drive.answer(drive.run, fallback_answer(drive.run.analysis, drive.state.completed(), why), fallback=True)
            return FINISHED
        if isinstance(plan, Interrupted):
            return drive.plan_interrupted(self.record)
        self._planned(drive)
        if drive.services.loop.approve_plans:
            return AwaitingApproval(self.record, plan, drive.services.planner, self.earlier)
        return Executing.of(drive, self.record, plan, self.earlier)

    def on(self, message: Message) -> bool:
        """Steps started by a streaming plan take their messages here too (a whole plan has none running)."""
        if self.execution is not None:
            return self.execution.on(message)
        if isinstance(message, RetryNow):
            return False
        raise DagError(f"no step is paused (the run is {self.name})")

    def _begin(self, drive: Drive, past: str | None) -> None:
        run = drive.run
        inbox = run.inbox
        inbox.new_round()
        run.emit(RoundStarted(round=self.index))
        goal, follow_ups = drive.services.guard.objective(
            run.goal, run.follow_ups_so_far, drive.services.planner.model, round=self.index
        )
        self.query = compose_query(past, goal, follow_ups)
        """What the planner is asked: the conversation so far, the goal and every follow-up (fitted to its window)."""
        self.objective = compose_query(None, goal, follow_ups)
        """The goal and follow-ups as the planner read them: the plan's goal, the task of a plan of one step."""
        plan = ExecutionPlan(goal=self.objective, query=self.query, steps=[], round=self.index)
        self.record = RoundRecord(index=self.index, plan=plan, free=drive.state.budget.next_free)
        self.earlier = reusable(run.rounds)
        """Completed results of earlier rounds, by ``rN.id``."""
        self.previous = list(run.rounds)
        self.follow_ups = len(inbox.pending)
        """How many pending follow-ups the plan sees (they are handled once it is made)."""
        run.rounds.append(self.record)

    def _planned(self, drive: Drive) -> None:
        """The follow-ups the round's plan saw are handled now (the round keeps those it was first to see)."""
        seen = drive.run.inbox.seen(self.follow_ups)
        drive.run.state.follow_ups.extend(seen)
        self.record.follow_ups.extend(seen)

    async def _replan_context(self, drive: Drive) -> str | None:
        """What earlier rounds taught, fitted into the planner's window beside its instructions and the query."""
        if not self.previous:
            return None
        planner, guard = drive.services.planner, drive.services.guard
        fixed = planner.messages(
            self.query,
            round=self.index,
            context=" ",
            earlier=self.earlier.keys(),
            domain=drive.state.domain,
            ask_domain=drive.asks_domain,
        )
        room = guard.room(planner.model, fixed, reserve=PLANNER_RESERVE)
        text = replan_context(self.previous, drive.services.settings)
        return await guard.fit(text, planner.model, budget=room, task="planning the next round", round=self.index)

    async def _whole(self, drive: Drive, context: str | None = None) -> ExecutionPlan:
        """A whole plan from the planner (``context``: what earlier rounds taught, when it was fitted already)."""
        context = context or await self._replan_context(drive)
        return await drive.services.planner.plan(
            self.query,
            round=self.index,
            context=context,
            earlier=self.earlier.keys(),
            domain=drive.state.domain,
            goal=self.objective,
            on_domain=drive.state.route if drive.asks_domain else None,
        )

    # --- a streamed plan

    async def _stream(self, drive: Drive) -> Executing | Planning | Synthesizing | Finished:
        """Plan while executing: steps start as they stream in. A plan the final validation rejects is
        dropped (its started steps cancelled) and re-asked once; an unreadable one is planned again whole, and
        so is one whose stream broke. An interruption ends the stream; steps already running finish, the others
        are skipped.
        """
        plan = self.record.plan
        execution = self.execution = Execution(drive, plan, self.earlier, open_ended=True)
        task = asyncio.get_running_loop().create_task(execution.run(), name=f"dagmagic:round:{self.index}")
        started: dict[str, PlanStep] = {}
        handed_over = False

        def start(step: PlanStep) -> None:
            step.model = drive.services.entry(step.model_hint).name
            drive.run.emit(StepPlanned(round=self.index, step=step))
            started[step.id] = step
            execution.executor.add(step)

        try:
            outcome = await self._streamed(drive, start)
            if isinstance(outcome, Interrupted):
                execution.executor.close()
                handed_over = bool(plan.steps)
                if handed_over:  # steps that started while the plan streamed finish
                    return Executing(self.record, execution, started=task, announce=False, then=self._interrupted)
                await task
                return drive.plan_interrupted(self.record)
            steps, problem = self._validated(drive, outcome)
            if problem is None:
                self._planned(drive)
                _adopt(execution, plan, steps, started, start)
                execution.executor.close()
                handed_over = True
                return Executing(self.record, execution, started=task)
        finally:
            if not handed_over and not task.done():
                task.cancel()
                await asyncio.wait([task])
        self.execution = None
        return await self._plan_again(drive, outcome)

    def _interrupted(self, drive: Drive) -> Planning | Synthesizing | Finished:
        return drive.plan_interrupted(self.record)

    async def _streamed(self, drive: Drive, start: Callable[[PlanStep], None]) -> Outcome:
        """The plan's stream, interruptible; a stream that broke mid-way is replaced by a whole plan."""
        inbox = drive.run.inbox

        async def stream() -> tuple[StreamedPlan, str | None]:
            context = await self._replan_context(drive)
            ask_domain = drive.asks_domain
            streamed = await PlanStream(drive.services.planner, start).run(
                self.query,
                round=self.index,
                context=context,
                earlier=self.earlier.keys(),
                domain=drive.state.domain,
                ask_domain=ask_domain,
            )
            if ask_domain and streamed.readable:  # the steps carry the hints the planner chose for that domain
                drive.state.route(streamed.domain)
            return streamed, context

        try:
            return await inbox.interruptible(stream(), name=f"dagmagic:plan:{self.index}")
        except TransientProviderError as broken:
            message = f"the plan's stream broke ({broken.kind}): planned again without streaming"
            drive.run.emit(RunWarning(message=message, round=self.index))
            return await inbox.interruptible(self._whole(drive), name=f"dagmagic:plan:{self.index}")

    def _validated(self, drive: Drive, outcome: Outcome) -> tuple[list[PlanStep], str | None]:
        """The whole plan's steps, or the problem that sinks it."""
        if isinstance(outcome, ExecutionPlan):
            return outcome.steps, None
        assert not isinstance(outcome, Interrupted)
        streamed, _ = outcome
        if not streamed.readable:
            return [], "unreadable"
        return drive.services.planner.validate(
            streamed.drafts, round=self.index, earlier=self.earlier.keys(), goal=self.query
        )

    async def _plan_again(self, drive: Drive, outcome: Outcome) -> Executing | Planning | Synthesizing | Finished:
        """A streamed plan the validation rejected: re-asked once (or planned anew when it was unreadable);
        what comes back runs as a whole plan.
        """
        assert isinstance(outcome, tuple)
        streamed, context = outcome
        planner = drive.services.planner
        if streamed.readable:
            again = planner.finish(
                streamed.messages,
                streamed.drafts,
                query=self.query,
                round=self.index,
                earlier=self.earlier.keys(),
                goal=self.objective,
            )
        else:
            again = self._whole(drive, context)
        replanned = await drive.run.inbox.interruptible(again, name=f"dagmagic:plan:{self.index}")
        if isinstance(replanned, Interrupted):
            return drive.plan_interrupted(self.record)
        self._planned(drive)
        return Executing.of(drive, self.record, replanned, self.earlier)


def _adopt(
    execution: Execution,
    plan: ExecutionPlan,
    steps: list[PlanStep],
    started: dict[str, PlanStep],
    start: Callable[[PlanStep], None],
) -> None:
    """Make the plan being executed the whole plan ``steps``: a started step the whole plan holds unchanged
    (id, task, dependencies, tool arguments, and its dependencies kept too) goes on; the others are withdrawn,
    and the whole plan's other steps start, layer by layer.
    """
    whole = {step.id: step for step in steps}
    order = [sid for layer in ExecutionPlan(goal=plan.goal, steps=steps, round=plan.round).layers() for sid in layer]
    kept: set[str] = set()
    for sid in order:
        old, new = started.get(sid), whole[sid]
        if (
            old is not None
            and (old.task, set(old.dependencies), old.tool_args) == (new.task, set(new.dependencies), new.tool_args)
            and all(dep in kept or dep not in started for dep in old.dependencies)
        ):
            kept.add(sid)
    for sid in reversed(list(started)):  # dependents were started after their dependencies: they go first
        if sid not in kept:
            execution.executor.withdraw(sid)
    for sid in order:
        if sid not in kept:
            start(whole[sid])
    position = {sid: index for index, sid in enumerate(whole)}
    plan.steps.sort(key=lambda step: position[step.id])
