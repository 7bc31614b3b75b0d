"""``Execution``: one round's plan being run, with what the user can do to its steps meanwhile.

It builds the executor (``dagmagic.engine.steps.executor``) for the plan, prepares each step's request (its
dependencies' results fitted into its model's window), pauses steps at the user's breakpoints (a paused step
holds no slot and no timeout), runs a step marked ``subplan`` as a subrun (``dagmagic.engine.loop.subrun``) and
a tool step as one direct call of its tool (``dagmagic.engine.steps.tool_steps``; its agent runs, told why, only
when that call fails), and takes the messages the inbox delivers about steps: continue, step or skip a
paused step, skip one not started yet, retry one waiting out a delay. Once the run's cost budget is reached
nothing more starts (``DagExecutor.halt``): steps running finish, the rest are skipped, saying why.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from dagmagic.engine.calls.context import dependency_context
from dagmagic.engine.loop.subrun import SUBPLAN, run_subrun
from dagmagic.engine.steps.executor import FOLLOWED_UP_REASON, STOPPED_REASON, DagExecutor
from dagmagic.engine.steps.retries import RetryPolicy
from dagmagic.engine.steps.runner import StepRequest, step_messages
from dagmagic.engine.steps.tool_steps import DirectCallFailed, call_tool_step, failure_note, warning
from dagmagic.errors import RUN_ENDING, BudgetExceeded, DagError, TransientProviderError
from dagmagic.events import RunWarning, StepPaused
from dagmagic.llm.breaker import CircuitBreaker
from dagmagic.llm.budget import CostBudget
from dagmagic.messages import Continue, Message, RetryNow, Skip, Step
from dagmagic.models import ExecutionPlan, PlanStep

if TYPE_CHECKING:
    from dagmagic.engine.loop.drive import Drive

__all__ = ["Execution"]

Release = tuple[str, str | None]
"""What the user said to a paused step: ``continue``, ``step`` or ``skip``, and perhaps an edited task."""


class Execution:
    """The execution of ``plan`` for ``drive``'s run (``open_ended``: steps still arrive, the plan streams)."""

    def __init__(
        self, drive: Drive, plan: ExecutionPlan, earlier: dict[str, PlanStep], *, open_ended: bool = False
    ) -> None:
        self.drive = drive
        self.plan = plan
        self.objective = (drive.run.goal, drive.run.follow_ups_so_far)
        """What the steps work towards: the goal and the follow-ups the plan was made for."""
        self._prepared: dict[str, StepRequest] = {}
        self._pauses: dict[str, asyncio.Future[Release]] = {}
        settings = drive.services.settings
        self.executor = DagExecutor(
            plan,
            self._run_step,
            max_concurrency=settings.max_concurrency,
            step_timeout=settings.step_timeout,
            emit=drive.run.emit,
            stop=drive.run.inbox.round_stop,
            earlier=earlier,
            open_ended=open_ended,
            fatal=RUN_ENDING,
            transient=(TransientProviderError,),
            retries=RetryPolicy(settings.step_immediate_retries, tuple(settings.step_retry_delays)),
            before_step=self._before_step,
            stop_reason=self._stop_reason,
            halting=(BudgetExceeded,),
        )

    def _stop_reason(self) -> str:
        """Why the steps the round's stop skips were skipped: the user's Stop, or a follow-up that changes the goal."""
        stopped_by = self.drive.run.inbox.round_stopped_by
        return FOLLOWED_UP_REASON if stopped_by == "follow_up" else STOPPED_REASON

    async def run(self) -> None:
        """Run every step that can run, until each has a final state."""
        unsubscribe = self.drive.services.breakers.subscribe(self._stopped_answering)
        budget = self.drive.services.cost_budget
        unsubscribe_budget = budget.subscribe(self._out_of_budget) if budget is not None else None
        try:
            if budget is not None and budget.reached:
                self._out_of_budget(budget)
            await self.executor.execute()
        finally:
            unsubscribe()
            if unsubscribe_budget is not None:
                unsubscribe_budget()

    def _out_of_budget(self, budget: CostBudget) -> None:
        """The run's budget is spent: nothing more starts, and paused steps are skipped."""
        self.executor.halt(budget.describe())
        for word in self._pauses.values():
            if not word.done():
                word.set_result(("skip", None))

    def _stopped_answering(self, breaker: CircuitBreaker) -> None:
        """A model stopped answering: its steps waiting out a delayed retry try now (and fail at once) rather
        than hold the round for the rest of their delay.
        """
        for step in self.plan.steps:
            if step.status == "retrying" and step.model == breaker.model:
                self.executor.retry_now(step.id)

    def on(self, message: Message) -> bool:
        """A message about this execution's steps."""
        match message:
            case Continue(step=step, task=task) | Step(step=step, task=task):
                self._release(self._paused_step(step), message.type, task)
            case Skip(step=step) if step in self._pauses:
                self._release(step, "skip", None)
            case Skip():
                pass  # not started: the inbox keeps it, and the step is skipped when it is ready
            case RetryNow(step=step):
                return self.executor.retry_now(step)
            case _:
                raise DagError(f"{message.type} cannot be taken while steps run")
        return True

    def _paused_step(self, step_id: str | None) -> str:
        paused = [sid for sid, word in self._pauses.items() if not word.done()]
        if step_id is None:
            if not paused:
                raise DagError(f"no step is paused (the run is {self.drive.run.phase})")
            return paused[0]
        if step_id not in paused:
            raise DagError(f"step {step_id!r} is not paused; paused now: {', '.join(paused) or 'none'}")
        return step_id

    def _release(self, step_id: str, word: str, task: str | None) -> None:
        self._pauses[step_id].set_result((word, task))
        step = self.executor.step(step_id)
        if step is not None:
            step.status = "queued"  # no longer paused, from now: it takes a slot next (or is skipped)

    async def _before_step(self, step: PlanStep, dependencies: dict[str, PlanStep]) -> bool:
        """Whether the step runs: the user may have skipped it, or it pauses at a breakpoint (slot free,
        showing what it is about to send) until the user's word or the round's end.
        """
        inbox = self.drive.run.inbox
        if inbox.skipped(step.id):
            return False
        if not inbox.breaks_before(step.id):
            return True
        request = self._prepared[step.id] = await self._prepare(step, dependencies)
        step.status = "paused"
        messages, tools = step_messages(request), list(self.drive.services.loop.tool_names)
        self.drive.run.emit(StepPaused(round=self.plan.round, step_id=step.id, messages=messages, tools=tools))
        word = self._pauses[step.id] = asyncio.get_running_loop().create_future()
        stop = asyncio.get_running_loop().create_task(inbox.round_stop.wait(), name=f"dagmagic:pause:{step.id}")
        try:
            await asyncio.wait([word, stop], return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._pauses.pop(step.id, None)
            stop.cancel()
            await asyncio.wait([stop])  # the pause ends with its watcher: no task of it is left pending
        how, task = word.result() if word.done() else ("skip", None)
        if task and task.strip() and task.strip() != step.task:
            step.task = task.strip()
            step.tool_args = None  # written for the old task: the edited one runs as an agent
        return how != "skip"

    async def _run_step(self, step: PlanStep, dependencies: dict[str, PlanStep]) -> str:
        loop = self.drive.services.loop
        prepared = self._prepared.pop(step.id, None)
        if step.tool_hint == SUBPLAN and loop.depth < loop.settings.max_depth:
            return await run_subrun(self.drive, step, prepared or await self._prepare(step, dependencies))
        tool = loop.tool(step.tool_hint) if step.tool_args is not None else None
        failed_call = None
        if tool is not None:  # a tool step: one call, no model (its agent runs only when the call fails)
            try:
                return await call_tool_step(
                    step,
                    tool,
                    dependencies,
                    settings=loop.settings,
                    emit=self.drive.run.emit,
                    round=self.plan.round,
                    run_ended=self.drive.run.done,
                )
            except DirectCallFailed as failure:
                failed_call = failure_note(failure)
                self._warn(step, warning(failure))
        request = prepared or await self._prepare(step, dependencies, failed_call=failed_call)
        request.failed_call = failed_call
        return await loop.step_runner(request)

    def _warn(self, step: PlanStep, message: str) -> None:
        """A warning on the step, once (a step tried again does not repeat it)."""
        if message not in step.warnings:
            step.warnings.append(message)
            self.drive.run.emit(RunWarning(message=message, round=self.plan.round, step_id=step.id))

    async def _prepare(
        self, step: PlanStep, dependencies: dict[str, PlanStep], *, failed_call: str | None = None
    ) -> StepRequest:
        """The step's request: the objective, its task, and its dependencies' results fitted into its window."""
        drive = self.drive
        model, guard = drive.services.model(step.model_hint), drive.services.guard
        request = StepRequest(
            goal=guard.objective_text(*self.objective, model, round=self.plan.round),
            step=step,
            context="",
            model=model,
            round=self.plan.round,
            settings=drive.services.settings,
            emit=drive.run.emit,
            smart=drive.services.model("smart"),
            guard=guard,
            run_ended=drive.run.done,
            failed_call=failed_call,
        )
        if dependencies:
            # the step's instructions, and a third of the window for its tool turns, come first
            reserve = guard.budget(model) // 3 if drive.services.loop.tool_names else 0
            room = guard.room(model, step_messages(request), reserve=reserve)
            request.context = await guard.fit(
                dependency_context(dependencies, drive.services.settings),
                model,
                budget=room,
                task=step.task,
                round=self.plan.round,
                step_id=step.id,
            )
        return request
