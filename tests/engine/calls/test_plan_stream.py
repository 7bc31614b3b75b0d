"""The streaming planner: steps start while the plan is still being written."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest

from dagmagic.engine.calls import plan_drafts as planner_module
from dagmagic.engine.calls import plan_stream as plan_stream_module
from dagmagic.engine.calls import planner as planner_calls_module
from dagmagic.engine.calls import prompts
from dagmagic.engine.calls.plan_stream import PlanStream, StreamedPlan
from dagmagic.engine.calls.planner import Planner
from dagmagic.engine.steps.executor import DagExecutor
from dagmagic.events import LLMCallRecorded, PlanReady, RunWarning, StepPlanned, StepStarted
from dagmagic.llm import ChatModel, ModelRegistry, extraction
from dagmagic.llm.protocol import ChatResponse, StreamChunk, ToolCallDelta
from dagmagic.models import ExecutionPlan, PlanStep
from dagmagic.settings import DagSettings
from dagmagic.testing import ScriptedLLM
from tests.engine.conftest import session_for, verdict

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
    assert any("Step s1 was planned to wait for 's9'" in e.message for e in run.events if isinstance(e, RunWarning))


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


async def test_a_plan_rejected_after_its_re_ask_is_repaired_and_runs() -> None:
    cyclic = {
        "steps": [{"id": "s1", "task": "x", "dependencies": ["s2"]}, {"id": "s2", "task": "y", "dependencies": ["s1"]}]
    }
    llm = streaming_llm([cyclic])
    run = await session_for(llm).run("goal")
    assert run.status == "done" and run.error is None
    assert [(s.id, s.dependencies, s.status) for s in run.plan.steps] == [
        ("s1", [], "completed"),
        ("s2", ["s1"], "completed"),
    ]
    assert [r.stream for r in llm.requests_for("plan")] == [True, False]  # streamed, then one correction
    assert any("s1, s2 form a cycle" in w for w in run.rounds[0].warnings)
    assert len([e for e in run.events if isinstance(e, PlanReady)]) == 1


async def test_an_unreadable_stream_falls_back_to_the_normal_planner() -> None:
    llm = streaming_llm(["I would rather chat about the weather.", PARALLEL_QA])
    run = await session_for(llm).run("goal")
    assert run.status == "done" and len(run.plan.steps) == 5
    assert [r.stream for r in llm.requests_for("plan")] == [True, False]


async def test_plan_lines_stream_too_without_tool_calling() -> None:
    llm = streaming_llm([PARALLEL_QA], capabilities=("json_mode", "stream"))
    run = await session_for(llm).run("goal")
    assert run.status == "done" and llm.requests_for("plan")[0].level == "text"  # plan lines at every level
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


# --- the incremental parser: PlanStream.run on replies streamed in pieces of about one token


S1 = '{"id": "s1", "task": "search the first fact"}'
S2 = '{"id": "s2", "task": "search the second fact"}'
S3 = '{"id": "s3", "task": "add them", "dependencies": ["s1"]}'
DEEP_ARRAYS = "[" * 3000 + "]" * 3000
DEEP_OBJECTS = '{"a":' * 3000 + "1" + "}" * 3000


def chop(text: str, size: int = 4) -> list[str]:
    return [text[start : start + size] for start in range(0, len(text), size)]


def plan_stream(
    pieces: list[Any], *, capabilities: tuple[str, ...] = ("json_mode", "stream"), max_steps: int = 6
) -> tuple[PlanStream, list[PlanStep]]:
    llm = ScriptedLLM({"plan": [pieces]}, capabilities=capabilities)
    settings = DagSettings(store="none", plan_max_steps=max_steps)
    model = ChatModel(ModelRegistry().register("m", llm).get("m"), settings=settings)
    started: list[PlanStep] = []
    return PlanStream(Planner(model, settings), started.append), started


async def stream_text(text: str, **kwargs: Any) -> tuple[StreamedPlan, list[str]]:
    """The streamed plan and the ids handed over on the way, for ``text`` in pieces of 4 characters."""
    stream, started = plan_stream(chop(text), **kwargs)
    streamed = await stream.run("goal", round=1)
    assert [step.id for step in started] == list(streamed.started)
    return streamed, [step.id for step in started]


def outcome(streamed: StreamedPlan) -> list[str] | str:
    """What the final parse reports: the drafts' ids, or "unreadable"."""
    if not streamed.readable:
        assert streamed.drafts == []
        return "unreadable"
    drafts = {draft.id: draft for draft in streamed.drafts}
    for step in streamed.started.values():  # a started step is the step the whole plan has under its id
        if step.id in drafts:
            assert (step.task, step.dependencies) == (drafts[step.id].task, drafts[step.id].dependencies)
    return [draft.id for draft in streamed.drafts]


@pytest.mark.parametrize(
    "text",
    [
        f'{{"steps": [{S1}, {S2}, {S3}]}}',
        f"[{S1},{S2},{S3}]",
        "Here is the plan:\n```json\n"
        + json.dumps({"steps": [json.loads(s) for s in (S1, S2, S3)]}, indent=2)
        + "\n```",
        f'{{"plan": {{"goal": "g", "steps": [{S1}, {S2}, {S3}]}}}}',
        f'I split it [in three] parts, "quoted {{x}}": {{"steps": [{S1}, {S2}, {S3}]}} Done.',
        '{"reasoning": "not \\"steps\\": [{\\"id\\": \\"x\\"}]", '
        f'"meta": {{"steps": [{{"id": "x", "task": "no"}}]}}, "steps": [{S1}, {S2}, {S3}]}}',
        f'{{"steps": [], "steps": [{S1}, {S2}, {S3}]}}',
    ],
    ids=["object", "bare array", "fence", "plan.steps", "prose brackets", "decoys", "empty then full"],
)
async def test_every_shape_streams_its_steps(text: str) -> None:
    streamed, started = await stream_text(text)
    assert started == ["s1", "s2", "s3"]
    assert outcome(streamed) == ["s1", "s2", "s3"]


@pytest.mark.parametrize("where", ["first", "last"])
async def test_the_domain_is_read_from_the_whole_streamed_reply(where: str) -> None:
    steps = ", ".join((S1, S2, S3))
    first, last = f'{{"domain": "legal", "steps": [{steps}]}}', f'{{"steps": [{steps}], "domain": "legal"}}'
    text = first if where == "first" else last
    stream, started = plan_stream(chop(text))
    streamed = await stream.run("goal", round=1, ask_domain=True)
    assert streamed.domain == "legal" and [step.id for step in started] == ["s1", "s2", "s3"]
    assert prompts.PLANNER_DOMAIN_ASK in streamed.messages[0]["content"]
    assert streamed.messages[-1]["content"] == "goal"  # plan lines: no schema is sent


async def test_a_streamed_plan_not_asked_for_the_domain_says_none() -> None:
    steps = ", ".join((S1, S2, S3))
    stream, started = plan_stream(chop(f'{{"domain": "legal", "steps": [{steps}]}}'))
    streamed = await stream.run("goal", round=1)
    assert streamed.domain is None and len(started) == 3
    assert all("domain" not in str(message["content"]) for message in streamed.messages)


async def test_a_step_is_handed_over_when_its_closing_brace_arrives() -> None:
    text = f'{{"steps": [{S1}, {S2}'
    stream, started = plan_stream([*chop(text), RuntimeError("the connection dropped")])
    with pytest.raises(RuntimeError):
        await stream.run("goal", round=1)
    assert [step.id for step in started] == ["s1", "s2"]  # s2 is whole, though nothing followed it


async def test_tool_call_argument_deltas_stream_and_text_before_them_is_not_the_plan() -> None:
    arguments = json.dumps({"steps": [json.loads(s) for s in (S1, S2, S3)]})
    pieces: list[Any] = [StreamChunk(text="Let me plan [carefully]. ")]
    pieces += [StreamChunk(tool_calls=[ToolCallDelta(index=0, id="c0", name="PlanDraft")])]
    for piece in chop(arguments, 3):
        pieces.append(
            StreamChunk(tool_calls=[ToolCallDelta(index=0, arguments=piece), ToolCallDelta(index=1, arguments="[")])
        )
    stream, started = plan_stream(pieces, capabilities=("tool_call", "json_mode", "stream"))
    streamed = await stream.run("goal", round=1)
    assert [step.id for step in started] == ["s1", "s2", "s3"]
    assert outcome(streamed) == ["s1", "s2", "s3"]


async def test_waiting_steps_start_in_plan_order_once_what_they_need_is_known() -> None:
    text = json.dumps(
        {
            "steps": [
                {"id": "a", "task": "needs c", "dependencies": ["c"]},
                {"id": "b", "task": "needs a", "dependencies": ["a"]},
                {"id": "d", "task": "needs c too", "dependencies": ["c"]},
                {"id": "e", "task": "needs itself", "dependencies": ["e"]},
                {"id": "c", "task": "the base"},
            ]
        }
    )
    streamed, started = await stream_text(text)
    assert started == ["c", "a", "b", "d"]  # e waits for itself: the final validation names the cycle
    assert outcome(streamed) == ["a", "b", "d", "e", "c"]


async def test_no_more_steps_start_than_a_plan_may_have() -> None:
    text = json.dumps({"steps": [{"id": f"s{i}", "task": f"t{i}"} for i in range(1, 6)]})
    streamed, started = await stream_text(text, max_steps=2)
    assert started == ["s1", "s2"] and len(outcome(streamed)) == 5  # the validation rejects the plan


MALFORMED: dict[str, tuple[str, list[str], list[str] | str]] = {
    # name: (reply, steps handed over while streaming, what the final parse reports)
    "null id": (f'{{"steps": [{S1}, {{"id": null, "task": "b"}}, {S3}]}}', ["s1", "s2", "s3"], ["s1", "s2", "s3"]),
    "list id": (
        f'{{"steps": [{S1}, {{"id": ["x", 1], "task": "b"}}, {S3}]}}',
        ["s1", "['x', 1]", "s3"],
        ["s1", "['x', 1]", "s3"],
    ),
    "number task": (f'{{"steps": [{S1}, {{"id": "s2", "task": 42}}, {S3}]}}', ["s1", "s2", "s3"], ["s1", "s2", "s3"]),
    "object task": (f'{{"steps": [{S1}, {{"id": "s2", "task": {{"text": "b"}}}}, {S3}]}}', ["s1", "s3"], "unreadable"),
    "steps not objects": (f'{{"steps": [{S1}, 7, "s2", null, true, [{S2}], {S3}]}}', ["s1", "s3"], "unreadable"),
    # the whole reply is too deep to parse: as for the normal planner, extract_json falls back to the first
    # part that parses, the first step (the loop withdraws s3, which started)
    "nested arrays as a step": (f'{{"steps": [{S1}, {DEEP_ARRAYS}, {S3}]}}', ["s1", "s3"], ["s1"]),
    "nested objects as a step": (f'{{"steps": [{S1}, {DEEP_OBJECTS}, {S3}]}}', ["s1", "s3"], ["s1"]),
    "nested arrays": (DEEP_ARRAYS, [], "unreadable"),
    "nested objects": (DEEP_OBJECTS, [], "unreadable"),
    "nested plan objects": ('{"plan": ' * 3000 + f'{{"steps": [{S1}]}}' + "}" * 3000, [], "unreadable"),
    "unclosed arrays": ("[" * 100_000, [], "unreadable"),
    "unclosed objects": ('{"steps": [{"a": ' * 10_000, [], "unreadable"),
    "steps a string": ('{"steps": "first search, then add"}', [], "unreadable"),
    "steps a JSON string": ('{"steps": "[{\\"id\\": \\"s1\\", \\"task\\": \\"a\\"}]"}', [], ["s1"]),
    "steps a number": ('{"steps": 3}', [], "unreadable"),
    "cut off in a step": (f'{{"steps": [{S1}, {{"id": "s2", "ta', ["s1"], ["s1"]),
    "repeated id": (f'{{"steps": [{S1}, {S1}, {S3}]}}', ["s1", "s3"], ["s1", "s1", "s3"]),
    "list of numbers as dependencies": (
        f'{{"steps": [{S1}, {{"id": "2", "task": "b", "dependencies": [1, null, 1]}}]}}',
        ["s1"],  # "1" is not known while streaming: it waits; the validation drops it
        ["s1", "2"],
    ),
}


@pytest.mark.parametrize(("text", "handed_over", "reported"), MALFORMED.values(), ids=MALFORMED.keys())
async def test_a_malformed_plan_is_skipped_or_reported_never_raised(
    text: str, handed_over: list[str], reported: list[str] | str
) -> None:
    streamed, started = await stream_text(text)
    assert started == handed_over
    assert outcome(streamed) == reported


async def test_a_plan_too_deep_to_parse_whole_does_not_end_the_run() -> None:
    text = f'{{"steps": [{S1}, {DEEP_ARRAYS}, {S3}]}}'
    llm = streaming_llm([chop(text, 64)], capabilities=("json_mode", "stream"))
    run = await session_for(llm).run("goal")
    assert run.status == "done" and run.error is None
    assert [step.id for step in run.plan.steps] == ["s1"] and run.steps["s1"].status == "completed"


@pytest.mark.parametrize("dependencies", ["1.5", "NaN"])
async def test_a_float_for_dependencies_names_no_step(dependencies: str) -> None:
    text = f'{{"steps": [{S1}, {{"id": "s2", "task": "b", "dependencies": {dependencies}}}, {S3}]}}'
    streamed, started = await stream_text(text)
    assert started == ["s1", "s2", "s3"]
    assert outcome(streamed) == ["s1", "s2", "s3"]
    assert streamed.drafts[1].dependencies == []


class CountingPattern:
    """A compiled pattern that counts the characters its ``search`` looked at."""

    def __init__(self, pattern: re.Pattern[str]) -> None:
        self.pattern = pattern
        self.scanned = 0

    def search(self, string: str, pos: int = 0) -> re.Match[str] | None:
        match = self.pattern.search(string, pos)
        self.scanned += (match.end() if match else len(string)) - pos
        return match


async def test_the_work_per_piece_is_bounded_each_step_parsed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    task = 'a "quoted" {brace} [bracket] \\ and a backslash'
    steps = [
        {"id": f"s{i}", "task": f"step {i}: {task}", "dependencies": [f"s{i - 1}"][: i - 1]} for i in range(1, 801)
    ]
    text = "Plan:\n```json\n" + json.dumps({"steps": steps}) + "\n```"
    parsed: list[str] = []
    whole: list[str] = []

    def parse_json(candidate: str) -> Any:
        parsed.append(candidate)
        return extraction.parse_json(candidate)

    def recover_plan(raw: Any) -> Any:
        whole.append(raw)
        return planner_module.recover_plan(raw)

    structure = CountingPattern(plan_stream_module._STRUCTURE)
    string = CountingPattern(plan_stream_module._STRING_STOP)
    monkeypatch.setattr(plan_stream_module, "parse_json", parse_json)
    monkeypatch.setattr(planner_calls_module, "recover_plan", recover_plan)
    monkeypatch.setattr(plan_stream_module, "_STRUCTURE", structure)
    monkeypatch.setattr(plan_stream_module, "_STRING_STOP", string)
    streamed, started = await stream_text(text, max_steps=1000)
    assert len(started) == 800 and outcome(streamed) == [f"s{i}" for i in range(1, 801)]
    # every character is looked at once, each step object parsed once, the whole reply parsed once at the end
    assert structure.scanned + string.scanned <= len(text)
    assert len(parsed) == 800 and sum(len(candidate) for candidate in parsed) < len(text)
    assert whole == [{"steps": steps}]  # the whole reply, parsed once (then checked for a schema echo)


async def test_a_streamed_step_whose_task_is_the_plans_own_name_does_not_start() -> None:
    text = '{"steps": [{"id": "s1", "task": "submit_plandraft"}, {"id": "s2", "task": "Find the population"}]}'
    streamed, handed_over = await stream_text(text)
    assert handed_over == ["s2"] and [draft.id for draft in streamed.drafts] == ["s1", "s2"]


@pytest.mark.parametrize("cut", [True, False])
async def test_a_streamed_plan_cut_at_its_token_limit_does_not_run_its_last_half_line(cut: bool) -> None:
    # a provider that stops a reply at max_tokens says so in its last chunk (finish_reason "length"): the line
    # it stopped in is a fragment (Qwen2.5-Coder-0.5B's "24. $N stands for"), not a step
    text = "1. find the population of France\n2. find the population of Ger"
    llm = ScriptedLLM({"plan": [ChatResponse(content=text, finish_reason="length" if cut else "stop")]})
    settings = DagSettings(store="none")
    model = ChatModel(ModelRegistry().register("m", llm).get("m"), settings=settings)
    started: list[PlanStep] = []
    streamed = await PlanStream(Planner(model, settings), started.append).run("goal", round=1)
    whole = ["find the population of France", "find the population of Ger"]
    assert [step.task for step in started] == (whole[:1] if cut else whole)
    assert [draft.task for draft in streamed.drafts] == (whole[:1] if cut else whole)
