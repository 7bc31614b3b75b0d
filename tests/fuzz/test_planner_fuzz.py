"""The planner on fuzzed replies, whole and streamed: always a valid plan, with warnings for what it changed."""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from dagmagic.engine.calls.plan_drafts import PlanDraft, recover_steps
from dagmagic.engine.calls.plan_stream import PlanStream
from dagmagic.engine.calls.planner import Planner
from dagmagic.events import RunWarning
from dagmagic.llm.protocol import StreamChunk, ToolCallDelta
from dagmagic.llm.structured import echoes_schema
from dagmagic.models import ExecutionPlan, PlanStep
from dagmagic.settings import DagSettings

from .harness import CAPABILITIES, FuzzLLM, assert_valid_plan, chat_model
from .strategies import deep_nesting, dump, json_ish_text, many_steps, plan_like, texts, well_typed_steps, wrapped

GOAL = "the goal"
MAX_STEPS = 6
SETTINGS = DagSettings(store="none", llm_retry_backoff=0.001, plan_max_steps=MAX_STEPS)


@st.composite
def plan_replies(draw: st.DrawFn) -> str:
    """A planner reply: a fuzzed plan as (maybe broken) JSON text, hundreds of steps, deep nesting or any text."""
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return draw(json_ish_text())
    if kind == 1:
        return draw(deep_nesting())
    if kind == 2:
        return draw(wrapped(dump({"steps": draw(many_steps())})))
    return draw(wrapped(dump(draw(plan_like()), ascii_only=draw(st.booleans()))))


class PlannerHarness:
    def __init__(self, script: list[Any], level: str) -> None:
        self.llm = FuzzLLM({"plan": script}, capabilities=CAPABILITIES[level])
        self.events: list[Any] = []
        self.planner = Planner(chat_model(self.llm, SETTINGS, self.events.append), SETTINGS, emit=self.events.append)

    @property
    def warnings(self) -> list[str]:
        return [event.message for event in self.events if isinstance(event, RunWarning)]


def usable_as_written(text: str) -> bool:
    """Whether the reply is a plan the validation accepts with no change (no warning is owed for it)."""
    try:
        drafts = recover_steps(text)
    except Exception:
        return False
    harness = PlannerHarness([text], "text")
    _, problem = harness.planner.validate(drafts, round=1)
    return problem is None and not echoes_schema(_raw(text), {}) and not harness.warnings


def _raw(text: str) -> Any:
    try:
        return json.loads(text)
    except Exception:
        return None


async def plan_whole(text: str, level: str, earlier: Collection[str] = ()) -> tuple[ExecutionPlan, list[str]]:
    harness = PlannerHarness([text], level)
    plan = await harness.planner.plan(GOAL, round=1, earlier=earlier)
    assert len(harness.llm.requests_for("plan")) <= 2 * 5  # two plan attempts, each at most five calls
    return plan, harness.warnings


def pieces_of(text: str, sizes: list[int], as_tool_call: bool, preamble: str = "") -> list[Any]:
    """``text`` cut in pieces of the given sizes (cycled), as text or as the first tool call's arguments (after
    ``preamble`` as text, which a model may write before its call).
    """
    pieces, start, n = [], 0, 0
    while start < len(text):
        size = sizes[n % len(sizes)]
        pieces.append(text[start : start + size])
        start, n = start + size, n + 1
    if not as_tool_call:
        return pieces
    first = StreamChunk(text=preamble, tool_calls=[ToolCallDelta(index=0, id="call_0", name="submit_plandraft")])
    return [first, *(StreamChunk(tool_calls=[ToolCallDelta(index=0, arguments=piece)]) for piece in pieces)]


async def plan_streamed(
    text: str, level: str, sizes: list[int], preamble: str = "", earlier: Collection[str] = ()
) -> tuple[ExecutionPlan, list[PlanStep], list[str]]:
    """The plan the streaming path ends with, as the loop decides it (``GoalLoop._stream_round``): the
    validated stream, else one correction of its drafts, else a normal plan.
    """
    as_tool_call = level == "tool_call"
    harness = PlannerHarness([pieces_of(text, sizes, as_tool_call, preamble) or [""], text], level)
    started: list[PlanStep] = []
    streamed = await PlanStream(harness.planner, started.append).run(GOAL, round=1, earlier=earlier)
    assert len(started) <= MAX_STEPS
    handed: set[str] = set()
    for step in started:  # a step is handed over only after every step it depends on
        assert step.id not in handed and set(step.dependencies) <= handed | set(earlier), (step, handed)
        handed.add(step.id)
    assert set(streamed.started) == handed
    if streamed.readable:
        steps, problem = harness.planner.validate(streamed.drafts, round=1, earlier=earlier)
        if problem is None:
            return ExecutionPlan(goal=GOAL, steps=steps), started, harness.warnings
        plan = await harness.planner.finish(streamed.messages, streamed.drafts, query=GOAL, round=1, earlier=earlier)
    else:
        plan = await harness.planner.plan(GOAL, round=1, earlier=earlier)
    return plan, started, harness.warnings


LEVELS = st.sampled_from(sorted(CAPABILITIES))
CHUNK_SIZES = st.lists(st.integers(1, 64), min_size=1, max_size=5)


@given(plan_replies(), LEVELS)
@example('{"steps": [{"id": "s1", "task": "a", "dependencies": ["s1"]}]}', "text")
@example("[" * 1000 + "]" * 1000, "text")
async def test_the_whole_reply_path_always_plans_validly(text: str, level: str) -> None:
    plan, warnings = await plan_whole(text, level)
    assert_valid_plan(plan, MAX_STEPS)
    if not usable_as_written(text):
        assert warnings, "a plan that was repaired or replaced must say so"


@given(plan_replies(), LEVELS, CHUNK_SIZES, st.one_of(st.just(""), json_ish_text()))
@example(
    '{"steps": [{"id": "s1", "task": "a", "dependencies": ["s2"]}, {"id": "s2", "task": "b", "dependencies": ["s1"]}]}',
    "tool_call",
    [3],
    "Let me think [a] {b}",
)
async def test_the_streaming_path_always_plans_validly(text: str, level: str, sizes: list[int], preamble: str) -> None:
    plan, _, warnings = await plan_streamed(text, level, sizes, preamble)
    assert_valid_plan(plan, MAX_STEPS)
    if not usable_as_written(text):
        assert warnings, "a plan that was repaired or replaced must say so"


@given(plan_replies(), LEVELS, CHUNK_SIZES, st.sets(st.sampled_from(["r1.s1", "r1.s2", "r2.s7"])))
async def test_a_replan_reusing_earlier_results_plans_validly_on_both_paths(
    text: str, level: str, sizes: list[int], earlier: set[str]
) -> None:
    whole, _ = await plan_whole(text, level, earlier)
    assert_valid_plan(whole, MAX_STEPS, earlier)
    streamed, _, _ = await plan_streamed(text, level, sizes, earlier=earlier)
    assert_valid_plan(streamed, MAX_STEPS, earlier)


def _shape(plan: ExecutionPlan) -> list[tuple[str, str, list[str], str | None, str | None]]:
    return [(s.id, s.task, s.dependencies, s.tool_hint, s.model_hint) for s in plan.steps]


@given(
    st.one_of(well_typed_steps(), st.lists(texts(3), max_size=0).flatmap(lambda _: well_typed_steps(12))),
    st.sampled_from(["json_mode", "text"]),
    CHUNK_SIZES,
    st.booleans(),
)
async def test_streaming_and_whole_paths_agree_on_complete_json(
    steps: list[dict[str, Any]], level: str, sizes: list[int], bare: bool
) -> None:
    text = json.dumps(steps if bare else {"steps": steps}, ensure_ascii=False)
    whole, _ = await plan_whole(text, level)
    streamed, started, _ = await plan_streamed(text, level, sizes)
    assert _shape(streamed) == _shape(whole)
    final = {step.id: step for step in streamed.steps}
    for step in started:  # a step started early is the whole plan's step, or was replaced by the final one
        if step.id in final and (step.task, step.dependencies) != (final[step.id].task, final[step.id].dependencies):
            assert not usable_as_written(text)


SCHEMA = PlanDraft.model_json_schema()
SCHEMA_ECHOES = [SCHEMA, {"steps": SCHEMA["properties"]["steps"]}, SCHEMA["$defs"]["StepDraft"]]


@given(
    st.one_of(plan_like(), st.sampled_from(SCHEMA_ECHOES)),
    LEVELS,
    CHUNK_SIZES,
    st.sampled_from(["{}", "Here it is:\n```json\n{}\n```", "{} Done."]),
)
async def test_streaming_and_whole_paths_agree_on_any_complete_reply(
    value: Any, level: str, sizes: list[int], frame: str
) -> None:
    text = frame.replace("{}", json.dumps(value, ensure_ascii=False), 1)
    whole, _ = await plan_whole(text, level)
    streamed, _, _ = await plan_streamed(text, level, sizes)
    assert _shape(streamed) == _shape(whole)


@pytest.mark.parametrize("echo", SCHEMA_ECHOES, ids=["whole schema", "steps property", "step definition"])
async def test_a_streamed_schema_echo_is_no_plan(echo: dict[str, Any]) -> None:
    # found by comparing the paths: the stream took the schema for a bare step, a one-step plan whose task was
    # the schema's description ("The planner's output."), with no warning; the whole reply path refuses it
    plan, started, warnings = await plan_streamed(json.dumps(echo), "json_mode", [7])
    assert _shape(plan) == [("s1", GOAL, [], None, None)] and not started
    assert any("no usable plan" in warning for warning in warnings)


@settings(max_examples=settings().max_examples // 6 or 1)
@given(many_steps(), LEVELS, st.integers(1, 4096))
async def test_hundreds_of_steps_are_cut_to_the_maximum(steps: list[dict[str, Any]], level: str, size: int) -> None:
    text = json.dumps({"steps": steps})
    whole, warnings = await plan_whole(text, level)
    assert_valid_plan(whole, MAX_STEPS)
    assert any(f"The plan had {len(steps)} steps" in warning for warning in warnings)
    streamed, started, _ = await plan_streamed(text, level, [size])
    assert_valid_plan(streamed, MAX_STEPS)
    assert len(started) <= MAX_STEPS


async def test_a_step_named_like_an_earlier_result_cannot_shadow_it() -> None:
    # s1 depends on "r1.s2", a reusable result of round 1, and the plan then names a step of its own r1.s2: the
    # stream started s1 on round 1's result before that step arrived, and the whole plan read the dependency as
    # the new step. The plan's own step is renamed r1_s2, so both paths read r1.s2 as round 1's result.
    text = json.dumps({"steps": [{"id": "s1", "task": "a", "dependencies": ["r1.s2"]}, {"id": "r1.s2", "task": "b"}]})
    plan, started, _ = await plan_streamed(text, "json_mode", [5], earlier={"r1.s2"})
    assert [(step.id, step.dependencies) for step in plan.steps] == [("s1", ["r1.s2"]), ("r1_s2", [])]
    assert [sorted(layer) for layer in plan.layers()] == [["r1_s2", "s1"]]
    assert [step.id for step in started] == ["s1", "r1_s2"]
    whole, _ = await plan_whole(text, "json_mode", earlier={"r1.s2"})
    assert [(step.id, step.dependencies) for step in whole.steps] == [("s1", ["r1.s2"]), ("r1_s2", [])]
