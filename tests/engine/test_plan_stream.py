"""The streaming planner: steps start while the plan is still being written."""

from __future__ import annotations

import asyncio
from typing import Any

from dagmagic.engine.executor import DagExecutor
from dagmagic.events import LLMCallRecorded, PlanReady, RunWarning, StepPlanned, StepStarted
from dagmagic.models import ExecutionPlan, PlanStep
from dagmagic.testing import ScriptedLLM

from .conftest import session_for, verdict

PARALLEL_QA = {
    "steps": [
        {"id": "s1", "task": "search the first fact"},
        {"id": "s2", "task": "search the second fact"},
        {"id": "s3", "task": "search the third fact"},
        {"id": "s4", "task": "add the first two", "dependencies": ["s1", "s2"]},
        {"id": "s5", "task": "compare the sum with the third", "dependencies": ["s4", "s3"]},
    ]
}


def script(plan: Any, **overrides: Any) -> dict[str, Any]:
    return {
        "route": [{"domain": None}],
        "plan": plan,
        "step": lambda r: f"result of {r.step_id}",
        "analyze": [verdict(True, 0.9, "ok", "final")],
        "synthesize": [["done"]],
        **overrides,
    }


def streaming_llm(plan: Any, capabilities: tuple[str, ...] = ("tool_call", "json_mode", "stream"), **kw: Any):
    return ScriptedLLM(script(plan, **kw), capabilities=capabilities, chunk_delay=0.01)


def plan_call_end(run: Any) -> float:
    (call,) = [e.call for e in run.events if isinstance(e, LLMCallRecorded) and e.call.purpose == "plan"]
    return call.started_at + call.latency


async def test_the_first_step_starts_before_the_plan_is_finished() -> None:
    llm = streaming_llm([PARALLEL_QA])
    run = await session_for(llm).run("goal")
    assert run.status == "done" and [s.status for s in run.steps.values()] == ["completed"] * 5
    first_start = min(e.at for e in run.events if isinstance(e, StepStarted))
    assert first_start < plan_call_end(run)
    types = [e.type for e in run.events]
    assert types.index("step_started") < types.index("plan_ready")
    assert [s.id for s in run.plan.steps] == ["s1", "s2", "s3", "s4", "s5"]  # the plan's own order
    assert len(llm.requests_for("plan")) == 1 and llm.requests_for("plan")[0].stream


async def test_streamed_steps_get_their_dependencies_results_and_usage() -> None:
    llm = streaming_llm([PARALLEL_QA])
    run = await session_for(llm).run("goal")
    s5 = llm.requests_for("step", "s5")[0].prompt
    assert "[s4] (completed) add the first two\nResult: result of s4" in s5 and "[s3] (completed)" in s5
    assert all(step.usage.requests == 1 for step in run.steps.values())


async def test_a_step_naming_a_later_step_waits_for_the_end() -> None:
    forward = {
        "steps": [
            {"id": "s1", "task": "needs s2 first", "dependencies": ["s2"]},
            {"id": "s2", "task": "the base fact"},
            {"id": "s3", "task": "independent"},
        ]
    }
    llm = streaming_llm([forward])
    run = await session_for(llm).run("goal")
    planned = [e.step.id for e in run.events if isinstance(e, StepPlanned)]
    assert planned.index("s2") < planned.index("s1")
    assert run.steps["s1"].started_at >= run.steps["s2"].completed_at
    assert run.status == "done"


async def test_a_dangling_reference_is_dropped_with_a_warning_when_the_plan_ends() -> None:
    dangling = {"steps": [{"id": "s1", "task": "a", "dependencies": ["s9"]}, {"id": "s2", "task": "b"}]}
    run = await session_for(streaming_llm([dangling])).run("goal")
    assert run.steps["s1"].dependencies == [] and run.steps["s1"].status == "completed"
    assert any("s1 -> s9" in e.message for e in run.events if isinstance(e, RunWarning))


async def test_a_plan_the_final_validation_rejects_is_dropped_and_re_asked_once() -> None:
    # s1 starts while streaming; then s2 and s3 turn out to form a cycle
    cyclic = {
        "steps": [
            {"id": "s1", "task": "fine on its own"},
            {"id": "s2", "task": "x", "dependencies": ["s3"]},
            {"id": "s3", "task": "y", "dependencies": ["s2"]},
        ]
    }
    fixed = {"steps": [{"id": "s1", "task": "fine on its own"}, {"id": "s2", "task": "x", "dependencies": ["s1"]}]}

    async def slow_step(request: Any) -> str:
        await asyncio.sleep(0.5 if request.index == 0 else 0)
        return f"result of {request.step_id}"

    llm = streaming_llm([cyclic, fixed], step=slow_step)
    run = await session_for(llm).run("goal")
    plans = llm.requests_for("plan")
    assert len(plans) == 2 and plans[0].stream and not plans[1].stream
    assert "s2, s3 form a cycle" in plans[1].messages[-1]["content"]
    assert [s.id for s in run.plan.steps] == ["s1", "s2"] and run.status == "done"
    assert all(s.status == "completed" for s in run.plan.steps)
    cancelled = [e for e in run.events if e.type == "step_completed" and e.status == "cancelled"]
    assert [e.step_id for e in cancelled] == ["s1"]  # the started step of the rejected plan was dropped


async def test_a_rejected_plan_after_its_re_ask_fails_the_round() -> None:
    cyclic = {
        "steps": [{"id": "s1", "task": "x", "dependencies": ["s2"]}, {"id": "s2", "task": "y", "dependencies": ["s1"]}]
    }
    run = await session_for(streaming_llm([cyclic])).run("goal")
    assert run.status == "failed" and run.error is not None and "s1, s2 form a cycle" in run.error
    assert len([e for e in run.events if isinstance(e, PlanReady)]) == 0


async def test_an_unreadable_stream_falls_back_to_the_normal_planner() -> None:
    llm = streaming_llm(["I would rather chat about the weather.", PARALLEL_QA])
    run = await session_for(llm).run("goal")
    assert run.status == "done" and len(run.plan.steps) == 5
    assert [r.stream for r in llm.requests_for("plan")] == [True, False]


async def test_json_text_streams_too_without_tool_calling() -> None:
    llm = streaming_llm([PARALLEL_QA], capabilities=("json_mode", "stream"))
    run = await session_for(llm).run("goal")
    assert run.status == "done" and llm.requests_for("plan")[0].level == "json_mode"
    assert min(e.at for e in run.events if isinstance(e, StepStarted)) < plan_call_end(run)


async def test_a_model_that_cannot_stream_uses_the_normal_planner() -> None:
    llm = streaming_llm([PARALLEL_QA], capabilities=("tool_call", "json_mode"))
    run = await session_for(llm).run("goal")
    assert run.status == "done" and not llm.requests_for("plan")[0].stream
    types = [e.type for e in run.events]
    assert types.index("plan_ready") < types.index("step_started")


async def test_the_setting_turns_it_off() -> None:
    llm = streaming_llm([PARALLEL_QA])
    run = await session_for(llm, streaming_planner=False).run("goal")
    assert run.status == "done" and not llm.requests_for("plan")[0].stream


async def test_an_open_ended_executor_counts_steps_added_before_it_began() -> None:
    plan = ExecutionPlan(goal="g", steps=[])
    finished: list[str] = []

    async def run_step(step: PlanStep, deps: dict[str, PlanStep]) -> str:
        finished.append(step.id)
        if step.id == "b":
            raise RuntimeError("b fails")
        return "ok"

    executor = DagExecutor(plan, run_step, max_concurrency=4, step_timeout=5, open_ended=True)
    executor.add(PlanStep(id="a", task="t"))
    executor.add(PlanStep(id="b", task="t"))
    executor.add(PlanStep(id="c", task="t", dependencies=["a", "b"]))
    task = asyncio.create_task(executor.execute())
    executor.close()
    await task
    assert plan.step("c").status == "skipped" and "c" not in finished
