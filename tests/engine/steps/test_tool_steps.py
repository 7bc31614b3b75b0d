"""Tool steps: a step that is one call of its tool runs without a model, its arguments written by the planner."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from dagmagic import DagSession, DagSettings, ModelRegistry, errors
from dagmagic.engine.steps import tool_steps
from dagmagic.engine.tools.functions import Tool
from dagmagic.events import LLMCallRecorded, RunWarning, StepIteration, StepStarted
from dagmagic.models import PlanStep, ToolCallRecord
from dagmagic.testing import ScriptedLLM, ScriptedRequest
from tests.engine.conftest import verdict

WHOLE_PLANNER = ("tool_call", "json_mode")
"""A planner model that cannot stream: the plan is made whole."""


class Tools:
    """The tools of a test, each call noted."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

        def population(country: str) -> float:
            """The population of a country, in millions."""
            self.calls.append(("population", country))
            if country == "Atlantis":
                raise ValueError("no data for Atlantis")
            return {"France": 68.4, "Germany": 84.5}[country]

        def double(x: float) -> float:
            """Twice a number."""
            self.calls.append(("double", x))
            assert isinstance(x, float)
            return x * 2

        def shout(text: str) -> str:
            """The text in capitals."""
            self.calls.append(("shout", text))
            return text.upper()

        self.all = [Tool(population), Tool(double), Tool(shout)]


def tool_step(sid: str, tool: str, args: Any, deps: list[str] | None = None) -> dict[str, Any]:
    return {"id": sid, "task": f"{tool} for {sid}", "dependencies": deps or [], "tool_hint": tool, "tool_args": args}


TWICE_FRANCE = {
    "steps": [tool_step("s1", "population", {"country": "France"}), tool_step("s2", "double", {"x": "$s1"}, ["s1"])]
}


def script(*plans: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    return {
        "route": [{"domain": None}],
        "plan": list(plans),
        "step": lambda r: f"agent result of {r.step_id}",
        "analyze": [verdict(True, 0.9, "ok", "final")],
        "synthesize": [["done"]],
        **overrides,
    }


def session(llm: ScriptedLLM, tools: Tools, **settings: Any) -> DagSession:
    registry = ModelRegistry().register("scripted", llm)
    return DagSession(registry, DagSettings(**{"store": "none", **settings}), tools=tools.all)


def warnings(run: Any, step_id: str | None = None) -> list[str]:
    return [e.message for e in run.events if isinstance(e, RunWarning) and (step_id is None or e.step_id == step_id)]


@pytest.mark.parametrize("capabilities", [WHOLE_PLANNER, ("tool_call", "json_mode", "stream")])
async def test_a_tool_step_runs_without_any_step_llm_call_and_its_result_is_the_observation(
    capabilities: tuple[str, ...],
) -> None:
    tools = Tools()
    plan = {"steps": [tool_step("s1", "population", {"country": "France"})]}
    llm = ScriptedLLM(script(plan), capabilities=capabilities)
    run = await session(llm, tools).run("How many people live in France?")
    step = run.steps["s1"]
    assert run.status == "done" and step.status == "completed" and step.result == "68.4"
    assert llm.requests_for("step") == [] and step.usage.requests == 0
    assert not [e for e in run.events if isinstance(e, LLMCallRecorded) and e.call.step_id == "s1"]
    assert tools.calls == [("population", "France")]
    (record,) = step.tool_calls
    assert (record.name, record.arguments, record.observation, record.turn) == (
        "population",
        {"country": "France"},
        "68.4",
        0,
    )
    (iteration,) = [e for e in run.events if isinstance(e, StepIteration)]
    assert (iteration.iteration, iteration.tool, iteration.arguments) == (0, "population", {"country": "France"})
    assert step.tool_args == {"country": "France"} and step.warnings == [] and warnings(run, "s1") == []


async def test_a_whole_value_reference_is_the_dependencys_result_coerced_by_the_tools_schema() -> None:
    tools = Tools()
    llm = ScriptedLLM(script(TWICE_FRANCE))
    run = await session(llm, tools).run("twice France's population")
    assert run.steps["s2"].result == "136.8" and tools.calls[-1] == ("double", 68.4)
    assert run.steps["s2"].tool_calls[0].arguments == {"x": "68.4"}  # as substituted, before the schema coerced it
    assert llm.requests_for("step") == []


async def test_a_reference_inside_a_string_is_substituted_as_text_in_nested_values_too() -> None:
    tools = Tools()
    plan = {
        "steps": [
            tool_step("s1", "population", {"country": "France"}),
            tool_step("s2", "shout", {"text": "France has $s1 million people"}, ["s1"]),
        ]
    }
    run = await session(ScriptedLLM(script(plan)), tools).run("goal")
    assert run.steps["s2"].result == "FRANCE HAS 68.4 MILLION PEOPLE"
    results = {"s1": "68.4", "r1.s2": "Paris"}
    nested = {"a": ["$s1", {"b": "in $r1.s2, $s1!"}], "c": 3, "d": "$5 and $$"}
    assert tool_steps.substitute(nested, results) == {"a": ["68.4", {"b": "in Paris, 68.4!"}], "c": 3, "d": "$5 and $$"}


@pytest.mark.parametrize("capabilities", [WHOLE_PLANNER, ("tool_call", "json_mode", "stream")])
async def test_a_referenced_step_missing_from_the_dependencies_is_added_with_a_warning(
    capabilities: tuple[str, ...],
) -> None:
    tools = Tools()
    plan = {"steps": [tool_step("s1", "population", {"country": "France"}), tool_step("s2", "double", {"x": "$s1"})]}
    llm = ScriptedLLM(script(json.dumps(plan)), capabilities=capabilities)  # JSON steps: plan lines imply them
    run = await session(llm, tools).run("goal")
    assert run.steps["s2"].dependencies == ["s1"] and run.steps["s2"].result == "136.8"
    assert run.steps["s2"].started_at >= run.steps["s1"].completed_at
    assert (
        "Step s2 now waits for s1: its call of double uses $s1, the result of s1 (the plan had not said so)."
        in run.rounds[0].warnings
    )


async def test_a_bad_argument_falls_back_to_the_agent_once_with_the_error_in_its_prompt() -> None:
    tools = Tools()
    plan = {"steps": [tool_step("s1", "double", {"x": "a lot"})]}
    llm = ScriptedLLM(script(plan))
    run = await session(llm, tools).run("goal")
    step = run.steps["s1"]
    assert step.status == "completed" and step.result == "agent result of s1"
    (request,) = llm.requests_for("step")
    assert 'A direct call of double with arguments {"x": "a lot"} failed' in request.prompt
    assert "valid number" in request.prompt and "Do the task yourself" in request.prompt
    assert tools.calls == []  # invalid arguments never reach the function
    assert len(step.warnings) == 1 and "double could not be called directly" in step.warnings[0]
    assert warnings(run, "s1") == step.warnings


async def test_a_reference_to_a_failed_step_of_an_earlier_round_falls_back_to_the_agent() -> None:
    tools = Tools()

    def step(request: ScriptedRequest) -> str:
        if request.round == 1 and request.step_id == "s1":
            raise RuntimeError("source down")
        return f"agent result of {request.step_id} in round {request.round}"

    first = {"steps": [{"id": "s1", "task": "find a number"}, {"id": "s2", "task": "find another"}]}
    second = {"steps": [tool_step("s1", "double", {"x": "$r1.s1"})]}
    llm = ScriptedLLM(script(first, second, step=step, analyze=[verdict(False, 0.3, "s1 failed"), verdict(True, 0.9)]))
    run = await session(llm, tools).run("goal")
    assert run.rounds[0].plan.step("s1").status == "failed"
    redo = run.steps["s1"]
    assert redo.dependencies == [] and redo.status == "completed" and redo.result == "agent result of s1 in round 2"
    (request,) = llm.requests_for("step", "s1")[1:]
    assert "r1.s1" in request.prompt and "Do the task yourself" in request.prompt
    assert tools.calls == [] and "double could not be called directly" in redo.warnings[0]


async def test_a_tool_error_falls_back_to_the_agent_whose_transcript_does_not_replay_the_direct_call() -> None:
    tools = Tools()
    plan = {"steps": [tool_step("s1", "population", {"country": "Atlantis"})]}
    llm = ScriptedLLM(script(plan))
    run = await session(llm, tools).run("goal")
    step = run.steps["s1"]
    assert step.result == "agent result of s1" and tools.calls == [("population", "Atlantis")]
    (request,) = llm.requests_for("step")
    assert "ValueError: no data for Atlantis" in request.prompt
    assert [m["role"] for m in request.messages] == ["system", "user"]  # the turn-0 record is no model turn
    (record,) = step.tool_calls
    assert record.turn == 0 and record.error == "ValueError: no data for Atlantis"
    assert len(warnings(run, "s1")) == 1


async def test_a_retried_fallback_does_not_call_the_tool_again_nor_warn_twice() -> None:
    tools = Tools()
    plan = {"steps": [tool_step("s1", "population", {"country": "Atlantis"})]}
    replies = [errors.RateLimitError("429", model="scripted"), "agent result"]
    llm = ScriptedLLM(script(plan, step=replies))
    run = await session(llm, tools, llm_retries=0).run("goal")
    step = run.steps["s1"]
    assert step.status == "completed" and step.result == "agent result" and step.attempts == 2
    assert tools.calls == [("population", "Atlantis")] and len(step.tool_calls) == 1
    prompts = [request.prompt for request in llm.requests_for("step")]
    assert len(prompts) == 2 and all("no data for Atlantis" in prompt for prompt in prompts)
    assert len(step.warnings) == 1


async def test_a_direct_call_recorded_as_done_is_not_made_again() -> None:
    tools = Tools()
    record = ToolCallRecord(name="population", arguments={"country": "France"}, observation="68.4", turn=0)
    step = PlanStep(id="s1", task="t", tool_hint="population", tool_args={"country": "France"}, tool_calls=[record])
    result = await tool_steps.call_tool_step(step, tools.all[0], {}, settings=DagSettings(store="none"), emit=[].append)
    assert result == "68.4" and tools.calls == [] and step.tool_calls == [record]


async def test_a_tool_step_starts_while_the_plan_is_still_streaming() -> None:
    tools = Tools()
    plan = {
        "steps": [
            tool_step("s1", "population", {"country": "France"}),
            {"id": "s2", "task": "read about France"},
            {"id": "s3", "task": "read about Germany"},
            {"id": "s4", "task": "compare", "dependencies": ["s1", "s2", "s3"]},
        ]
    }
    llm = ScriptedLLM(script(plan), chunk_delay=0.01)
    run = await session(llm, tools).run("goal")
    (call,) = [e.call for e in run.events if isinstance(e, LLMCallRecorded) and e.call.purpose == "plan"]
    s1 = run.steps["s1"]
    assert s1.completed_at is not None and s1.completed_at < call.started_at + call.latency
    assert s1.tool_args == {"country": "France"} and tools.calls == [("population", "France")]  # kept, not redone
    assert [e.step_id for e in run.events if isinstance(e, StepStarted)].count("s1") == 1


async def test_tool_args_on_an_unknown_tool_are_dropped_and_the_step_runs_as_an_agent() -> None:
    tools = Tools()
    plan = {"steps": [tool_step("s1", "teleport", {"where": "Mars"})]}
    llm = ScriptedLLM(script(plan))
    run = await session(llm, tools).run("goal")
    assert run.steps["s1"].tool_args is None and run.steps["s1"].result == "agent result of s1"
    assert (
        "Step s1: the planner wrote a call of 'teleport', which is not a tool of this session: a model does the "
        "step instead of a direct call of the tool."
    ) in run.rounds[0].warnings


async def test_tool_args_copied_from_the_prompts_example_are_dropped_not_called() -> None:
    """Qwen2.5-Coder 0.5B copied the planner's example, placeholder included: the tool was called with
    '<from the goal>' before the step fell back to a model.
    """
    tools = Tools()
    plan = {"steps": [tool_step("s1", "population", {"country": "<from the goal>"})]}
    llm = ScriptedLLM(script(plan))
    run = await session(llm, tools).run("goal")
    assert tools.calls == [] and run.steps["s1"].result == "agent result of s1"
    assert len(llm.requests_for("plan")) == 2  # asked once to correct it, with the reason
    reason = "step 1 calls population with '<from the goal>', which only holds the place of a value"
    assert reason in llm.requests_for("plan")[1].messages[-1]["content"]
    assert any(
        warning.startswith("Step s1: the planner's call")
        and reason in warning
        and "a model does the step instead" in warning
        for warning in run.rounds[0].warnings
    ), run.rounds[0].warnings


async def test_a_rerun_keeps_a_tool_steps_arguments_unless_its_task_is_edited() -> None:
    tools = Tools()
    llm = ScriptedLLM(script(TWICE_FRANCE))
    run = await session(llm, tools).run("goal")
    await run.rerun("s2")
    assert run.steps["s2"].tool_args == {"x": "$s1"} and run.steps["s2"].result == "136.8"
    assert llm.requests_for("step") == []
    await run.rerun("s2", task="triple it")
    assert run.steps["s2"].tool_args is None and run.steps["s2"].result == "agent result of s2"


async def test_a_resumed_tool_step_keeps_its_arguments_and_does_not_call_its_tool_again(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    tools = Tools()
    france, atlantis = (
        tool_step("s1", "population", {"country": "France"}),
        tool_step("s2", "population", {"country": "Atlantis"}),
    )
    plan = {"steps": [france, atlantis]}

    async def hang(request: ScriptedRequest) -> str:
        await asyncio.Event().wait()  # the run is interrupted while s2's agent works
        return "never"

    first = ScriptedLLM(script(plan, step=hang))
    started = session(first, tools, store=str(path)).start("goal")
    while not first.requests_for("step", "s2"):
        await asyncio.sleep(0.005)
    started.cancel()
    await started
    second = ScriptedLLM(script(plan))
    resumed = await session(second, tools, store=str(path)).resume(started.run_id)
    assert resumed.status == "done" and resumed.steps["s2"].result == "agent result of s2"
    assert [step.tool_args for step in resumed.steps.values()] == [{"country": "France"}, {"country": "Atlantis"}]
    assert sorted(tools.calls) == [("population", "Atlantis"), ("population", "France")]  # each call made once
    (request,) = second.requests_for("step")
    assert "ValueError: no data for Atlantis" in request.prompt and len(resumed.steps["s2"].warnings) == 1


async def test_a_task_edited_at_a_breakpoint_drops_the_arguments_written_for_the_old_one() -> None:
    tools = Tools()
    llm = ScriptedLLM(script(TWICE_FRANCE))
    run = session(llm, tools).start("goal")
    run.break_before("s2")
    while run.paused != ["s2"]:
        await asyncio.sleep(0.005)
    run.resume_step(task="triple it")
    await run
    assert run.steps["s2"].tool_args is None and run.steps["s2"].result == "agent result of s2"
    assert tools.calls == [("population", "France")]


async def test_a_result_that_is_a_json_list_fills_a_list_parameter() -> None:
    def total(values: list[float]) -> float:
        """The sum of the values."""
        return sum(values)

    s1 = PlanStep(id="s1", task="t", status="completed", result="[1.5, 2]")
    step = PlanStep(id="s2", task="t", tool_hint="total", tool_args={"values": "$s1"}, dependencies=["s1"])
    result = await tool_steps.call_tool_step(step, Tool(total), {"s1": s1}, settings=DagSettings(), emit=[].append)
    assert result == "3.5" and step.tool_calls[0].arguments == {"values": [1.5, 2]}
