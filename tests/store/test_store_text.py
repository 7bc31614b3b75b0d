"""Any text a model, a tool or the user gives is stored and read back, on both backends, and the run goes on: a
NUL (PostgreSQL's text refuses it) and a lone UTF-16 surrogate (an emoji cut in half, which UTF-8 cannot encode)
are made safe where they enter the run (``dagmagic.models.safe_text``).
"""

from __future__ import annotations

from typing import Any

import pytest

from dagmagic import DagSession, DagSettings, ModelRegistry
from dagmagic.models import safe_text
from dagmagic.store import RunStore
from dagmagic.testing import ScriptedLLM, ToolCall
from tests.engine.conftest import plan_reply, verdict

HALF_EMOJI = "\ud83d"


def half_an_emoji(text: str) -> str:
    """A tool whose result ends in half an emoji.

    Args:
        text: anything
    """
    return f"the tool saw {text} {HALF_EMOJI}"


def _llm(step: list[Any], answer: str = "the answer") -> ScriptedLLM:
    return ScriptedLLM(
        {"plan": [plan_reply(("s1", []))], "step": step, "analyze": [verdict(True, 0.9)], "synthesize": [[answer]]}
    )


def test_safe_text_keeps_what_can_be_encoded_and_marks_what_cannot() -> None:
    assert safe_text("a 😀 b") == "a 😀 b"
    assert safe_text("a \ud83d\ude00 b") == "a 😀 b"  # a pair is its character
    assert safe_text(f"cut {HALF_EMOJI}") == "cut \ufffd"
    assert safe_text("nul \x00 here") == "nul \u2400 here"


async def _run(store: Any, llm: ScriptedLLM, goal: str = "goal", **options: Any) -> Any:
    session = DagSession(ModelRegistry().register("m", llm), DagSettings(store=str(store)), **options)
    run = await session.run(goal)
    warnings = [event.message for event in run.events if event.type == "warning"]
    assert run.status == "done" and run.state.error is None, run.state.error
    assert run.durable == (store != "none") and not warnings, warnings
    return run


@pytest.mark.parametrize("where", ["model", "tool"])
async def test_a_lone_surrogate_from_a_model_or_a_tool_does_not_fail_a_run_without_a_store(where: str) -> None:
    step: list[Any] = [f"half an emoji {HALF_EMOJI}"]
    if where == "tool":
        step = [ToolCall(name="half_an_emoji", arguments={"text": "x"}), "done after the tool"]
    run = await _run("none", _llm(step, answer=f"answer {HALF_EMOJI}"), tools=[half_an_emoji])
    assert run.answer == "answer \ufffd"


async def test_a_nul_and_lone_surrogates_are_stored_and_read_back(store_path: Any) -> None:
    nul = await _run(store_path, _llm(["result \x00 with a NUL"], answer="answer \x00 too"), goal="goal \x00 NUL")
    model = await _run(store_path, _llm([f"half an emoji {HALF_EMOJI}"]))
    tool = await _run(
        store_path, _llm([ToolCall(name="half_an_emoji", arguments={"text": "x"}), "done"]), tools=[half_an_emoji]
    )
    store = RunStore.open(store_path)
    for run in (nul, model, tool):
        stored = store.load(run.run_id)
        assert stored.state.model_dump() == run.state.model_dump()
        assert len(stored.events) == len([e for e in run.events if e.type not in ("answer_delta", "call_progress")])
    stored = store.load(nul.run_id).state
    assert (stored.goal, stored.answer) == ("goal \u2400 NUL", "answer \u2400 too")
    assert stored.rounds[0].plan.steps[0].result == "result \u2400 with a NUL"
    assert store.load(model.run_id).state.rounds[0].plan.steps[0].result == "half an emoji \ufffd"
    (call,) = store.load(tool.run_id).state.rounds[0].plan.steps[0].tool_calls
    assert call.observation == "the tool saw x \ufffd"
    assert [summary.status for summary in store.runs()] == ["done"] * 3
