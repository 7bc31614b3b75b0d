"""Subruns: a step the planner marks ``subplan`` is planned and executed as a DAG of its own.

The subrun is a ``DagRun`` one level deeper (same models, tools and guard settings; no domain routing, no
history, no plan approval), driven inside the step; its answer is the step's result. Its events reach the
parent run tagged with their depth and the step's path (``s2``, ``s2/s1`` deeper); its LLM calls count in the
parent under that path. A Stop of the parent reaches it: its steps not started are skipped and it answers.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import TYPE_CHECKING, Any, Final

from dagmagic.engine.calls import prompts
from dagmagic.engine.run.dag_run import DagRun
from dagmagic.engine.steps.executor import StepFailure
from dagmagic.engine.steps.runner import StepRequest
from dagmagic.events import Event, LLMCallRecorded
from dagmagic.models import PlanStep, RunState

if TYPE_CHECKING:
    from dagmagic.engine.loop.drive import Drive

__all__ = ["SUBPLAN", "run_subrun"]

SUBPLAN: Final = "subplan"
"""The ``tool_hint`` with which the planner marks a step to run as a subrun."""


async def run_subrun(drive: Drive, step: PlanStep, request: StepRequest) -> str:
    """Run ``step`` as a subrun; its answer (``StepFailure`` when it failed or gave none)."""
    run = drive.run
    goal = prompts.SUBRUN_GOAL.format(task=step.task, goal=request.goal)
    if request.context:
        goal += f"\n\nResults it may use:\n{request.context}"
    child = DagRun(RunState(run_id=f"{run.run_id}/{step.id}", goal=goal, started_at=time.time()))
    step.attach_subrun(child)
    index = request.round

    def forward(event: Event) -> None:
        scope = f"{step.id}/{event.scope}" if event.scope else step.id
        update: dict[str, Any] = {"depth": event.depth + 1, "scope": scope}
        if isinstance(event, LLMCallRecorded):
            path = f"{step.id}/{event.call.step_id}" if event.call.step_id else step.id
            update["call"] = event.call.model_copy(update={"step_id": path, "round": index})
        run.emit(event.model_copy(update=update))

    async def stop_with_parent() -> None:
        """The parent's round stops (a Stop or a follow-up); only the user's Stop stops the subrun too."""
        await run.inbox.round_stop.wait()
        if run.inbox.stopped and not child.done():
            child.stop()

    child.subscribe(forward)
    watcher = asyncio.get_running_loop().create_task(stop_with_parent(), name=f"dagmagic:subrun-stop:{step.id}")
    loop = drive.services.loop
    nested = dataclasses.replace(
        loop,
        settings=loop.settings.model_copy(update={"domain_routing": False}),
        history=(),
        depth=loop.depth + 1,
        approve_plans=False,
        breakers=drive.services.breakers,
    )
    try:
        await nested.drive(child)
    finally:
        watcher.cancel()
        await asyncio.wait([watcher])  # the subrun ends with its watcher: no task of it is left pending
    if child.status == "failed" or not child.answer:
        raise StepFailure(f"its subrun ended {child.status}: {child.error or 'no answer'}", child.answer or None)
    return child.answer
