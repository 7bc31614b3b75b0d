"""The step agent on fuzzed replies: it ends completed or failed with a message, within its iteration limit."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from dagmagic.engine.steps.agent import StepAgent
from dagmagic.engine.steps.executor import StepFailure
from dagmagic.engine.steps.runner import StepRequest
from dagmagic.engine.tools.functions import tool
from dagmagic.models import PlanStep
from dagmagic.settings import DagSettings

from .harness import CAPABILITIES, FuzzLLM, RawToolCalls, chat_model
from .strategies import deep_nesting, dump, json_ish_text, json_values, texts

MAX_ITERATIONS = 4
SETTINGS = DagSettings(store="none", llm_retry_backoff=0.001, step_max_iterations=MAX_ITERATIONS, tool_timeout=5)


@tool
def lookup(query: str) -> str:
    """Look something up.

    Args:
        query: what to look up.
    """
    return f"found {query[:20]}"


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


TOOLS = [lookup, add]
NAMES = st.sampled_from(["lookup", "add", "missing", "", "lookup ", "<img src=x onerror=alert(1)>"])
ARGUMENT_VALUES = st.one_of(
    json_values(10),
    st.fixed_dictionaries({"query": json_values(3)}),
    st.fixed_dictionaries({"a": json_values(2), "b": json_values(2)}),
)
ARGUMENT_TEXTS = st.one_of(
    ARGUMENT_VALUES.map(dump), json_ish_text(), deep_nesting(), st.sampled_from(["", "{}", "1" * 5000, "{" * 5000])
)


@st.composite
def text_calls(draw: st.DrawFn) -> str:
    """A tool call written as text: the JSON action, an OpenAI-style call, a list, or Qwen's tags."""
    name, arguments = draw(NAMES), draw(st.one_of(ARGUMENT_VALUES, ARGUMENT_TEXTS))
    key = draw(st.sampled_from(["tool", "name"]))
    call: Any = {key: name, draw(st.sampled_from(["arguments", "parameters"])): arguments}
    if draw(st.booleans()):
        call = {"function": call}
    if draw(st.booleans()):
        call = [call, call]
    text = dump(call)
    if draw(st.booleans()):
        text = f"<tool_call>{text}" + draw(st.sampled_from(["</tool_call>", ""]))
    if draw(st.booleans()):
        text = text[: draw(st.integers(0, len(text)))]
    return draw(texts(20)) + text


step_replies = st.one_of(
    texts(200),
    text_calls(),
    json_ish_text(),
    st.builds(RawToolCalls, st.lists(st.tuples(NAMES, ARGUMENT_TEXTS), min_size=1, max_size=3), texts(20)),
)


@given(st.lists(step_replies, min_size=1, max_size=MAX_ITERATIONS + 2), st.sampled_from(["tool_call", "json_mode"]))
@example([RawToolCalls([("lookup", "[" * 5000)])], "tool_call")
@example([RawToolCalls([("add", '{"a": ' + "1" * 5000 + ', "b": 1}')])], "tool_call")
@example(['{"tool": "lookup", "arguments": "' + "[" * 5000 + '"}'], "json_mode")
@example(['{"tool": "add", "arguments": "{\\"a\\": ' + "1" * 5000 + '}"}'], "json_mode")
async def test_the_step_completes_or_fails_with_a_message(replies: list[Any], level: str) -> None:
    llm = FuzzLLM({"step": replies}, capabilities=CAPABILITIES[level])
    step = PlanStep(id="s1", task="find it")
    request = StepRequest(
        goal="the goal", step=step, context="", model=chat_model(llm), round=1, settings=SETTINGS, emit=lambda e: None
    )
    try:
        answer = await StepAgent(TOOLS)(request)
    except StepFailure as failure:
        assert failure.reason.strip()
    else:
        assert isinstance(answer, str) and answer.strip()
    # the loop's turns, plus one completion check or one forced answer
    assert len(llm.requests_for("step")) <= MAX_ITERATIONS + 1
    for call in step.tool_calls:
        assert isinstance(call.observation, str)


async def run_step(replies: list[Any], level: str) -> tuple[str, PlanStep]:
    llm = FuzzLLM({"step": replies}, capabilities=CAPABILITIES[level])
    step = PlanStep(id="s1", task="find it")
    request = StepRequest(
        goal="the goal", step=step, context="", model=chat_model(llm), round=1, settings=SETTINGS, emit=lambda e: None
    )
    return await StepAgent(TOOLS)(request), step


# found by the fuzzer: json.loads raised RecursionError (nested arguments) or ValueError (an integer of more than
# 4,300 digits), which only JSONDecodeError was expected to be: the step crashed instead of observing the error
@pytest.mark.parametrize(
    ("reply", "level", "error"),
    [
        (RawToolCalls([("lookup", "[" * 5000)]), "tool_call", "nested too deeply"),
        (RawToolCalls([("add", '{"a": ' + "1" * 5000 + ', "b": 1}')]), "tool_call", "4300 digits"),
        ('{"tool": "lookup", "arguments": "' + "[" * 5000 + '"}', "json_mode", "nested too deeply"),
        ('{"tool": "add", "arguments": "{\\"a\\": ' + "1" * 5000 + '}"}', "json_mode", "4300 digits"),
    ],
    ids=["native deep", "native long integer", "text deep", "text long integer"],
)
async def test_unparsable_tool_arguments_are_an_observation(reply: Any, level: str, error: str) -> None:
    answer, step = await run_step([reply, "the answer"], level)
    assert answer == "the answer"
    (call,) = step.tool_calls
    assert call.error is not None and error in call.error
    assert call.observation.startswith("Invalid arguments for")
