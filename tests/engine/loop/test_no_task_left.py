"""Owned work: the watcher tasks a run starts are awaited once cancelled, so none is left pending.

Each watcher is looked for at the very moment its owner has ended (no sleeping, no timing): the executor's stop
watcher when ``execute()`` returns, a paused step's when the step starts, a subrun's stop watcher when its step
completes; and after a whole run, no task it started is pending.
"""

from __future__ import annotations

import asyncio
from typing import Any

from dagmagic import DagSession, DagSettings, ModelRegistry
from dagmagic.engine.steps.executor import DagExecutor
from dagmagic.events import Event, StepCompleted, StepPaused, StepStarted
from dagmagic.models import ExecutionPlan, PlanStep
from dagmagic.testing import ScriptedLLM, ScriptedRequest
from tests.engine.conftest import plan_reply, verdict

NESTED = "This is one step of a larger goal"


def pending(prefix: str) -> list[str]:
    """The names of the tasks not done yet whose name starts with ``prefix``."""
    return [task.get_name() for task in asyncio.all_tasks() if not task.done() and task.get_name().startswith(prefix)]


def session(plan: Any) -> DagSession:
    llm = ScriptedLLM(
        {
            "plan": plan,
            "step": lambda request: f"result of {request.step_id}",
            "analyze": verdict(True, 0.9, "fine"),
            "synthesize": ["the answer"],
        }
    )
    return DagSession(ModelRegistry().register("m", llm), DagSettings(store="none"))


async def test_the_executors_stop_watcher_has_ended_when_execute_returns() -> None:
    plan = ExecutionPlan(goal="g", steps=[PlanStep(id="s1", task="t")], round=1)

    async def run_step(step: PlanStep, dependencies: dict[str, PlanStep]) -> str:
        return "done"

    await DagExecutor(plan, run_step, max_concurrency=2, step_timeout=30.0).execute()
    assert plan.steps[0].status == "completed"
    assert pending("dagmagic:stop-watcher") == []


async def test_a_paused_steps_watcher_has_ended_when_the_step_starts() -> None:
    run = session([plan_reply(("s1", []))]).start("goal")
    run.break_before("s1")
    paused = asyncio.Event()
    left_at_start: list[list[str]] = []

    def watch(event: Event) -> None:
        if isinstance(event, StepPaused):
            paused.set()
        elif isinstance(event, StepStarted) and event.step_id == "s1" and not event.depth:
            left_at_start.append(pending("dagmagic:pause:"))

    run.subscribe(watch)
    await paused.wait()
    run.resume_step("s1")
    await run
    assert run.status == "done" and left_at_start == [[]]


async def test_a_subruns_stop_watcher_has_ended_when_its_step_completes() -> None:
    def plan(request: ScriptedRequest) -> dict[str, Any]:
        if NESTED in request.prompt:
            return plan_reply(("s1", []))
        return {"steps": [{"id": "s1", "task": "compare three markets", "tool_hint": "subplan"}]}

    run = session(plan).start("goal")
    left_at_end: list[list[str]] = []

    def watch(event: Event) -> None:
        if isinstance(event, StepCompleted) and event.step_id == "s1" and not event.depth:
            left_at_end.append(pending("dagmagic:subrun-stop:"))

    run.subscribe(watch)
    await run
    assert run.status == "done" and run.steps["s1"].subrun is not None
    assert left_at_end == [[]]


async def test_no_task_of_a_run_is_left_pending_once_it_has_ended() -> None:
    before = asyncio.all_tasks()
    run = await session([plan_reply(("s1", []), ("s2", ["s1"]))]).run("goal")
    assert run.status == "done"
    assert [task.get_name() for task in asyncio.all_tasks() - before if not task.done()] == []
