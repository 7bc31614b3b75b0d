"""StepAgent (tools, guards, checks), citation extraction and verification, domain routing.

Almost everything runs a whole ``DagSession`` over one ``ScriptedLLM``: the step agent is only as good as
what the model is shown, so the tests assert on the requests the model received as much as on the results.
Timing assertions compare timestamps recorded inside the tools, never wall-clock limits.
"""

from __future__ import annotations

import asyncio
import os
import re
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

from dagmagic import DagRun, DagSession, DagSettings, ModelRegistry, errors
from dagmagic.engine.calls import prompts
from dagmagic.engine.calls.citations import extract_citations
from dagmagic.engine.steps.agent import COMPLETION_CHECK, FORCE_ANSWER, REPEAT_WARNING, SHORT_ANSWER_CHARS
from dagmagic.engine.tools.functions import Tool
from dagmagic.events import Event, RunWarning, StepIteration, Verification, Verifying
from dagmagic.testing import ScriptedLLM, ScriptedRequest, ToolCall
from tests.engine.conftest import plan_reply, verdict, with_a_reasoning_model
from tests.fake_provider import Provider
from tests.stored import step_statuses

ONE_STEP = plan_reply(("s1", [], "find how many people live in the capital of France"))
NO_TOOL_CALLING = ("json_mode", "stream")


def script(step: Any, **overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "plan": [ONE_STEP],
        "step": step,
        "analyze": [verdict(True, 0.9, "found it", "fallback")],
        "synthesize": [["Done."]],
        "citation_check": [{"valid": True}],
    }
    return {**base, **overrides}


def session(llm: ScriptedLLM, tools: Iterable[Any] = (), **settings: Any) -> DagSession:
    registry = ModelRegistry().register("scripted", llm)
    return DagSession(registry, DagSettings(store="none", **settings), tools=tools)


def routed_session(llm: ScriptedLLM, **settings: Any) -> DagSession:
    """A session whose roles lead to two models: the planner says the goal's domain, which routes steps."""
    return DagSession(with_a_reasoning_model(llm), DagSettings(store="none", **settings))


def events_of(run: DagRun, kind: type[Event], step_id: str = "s1") -> list[Any]:
    return [e for e in run.events if isinstance(e, kind) and getattr(e, "step_id", None) == step_id]


def tool_names(request: ScriptedRequest) -> list[str]:
    return [t["function"]["name"] for t in request.tools]


def last_line(request: ScriptedRequest) -> str:
    """The last line of the last message: the latest observation, in either format."""
    return str(request.messages[-1]["content"]).splitlines()[-1]


class Geo:
    """Two notebook functions whose calls are logged: the capital of a country, the population of a city."""

    def __init__(self) -> None:
        self.log: list[tuple[Any, ...]] = []

    def tools(self) -> list[Callable[..., Any]]:
        def capital(country: str) -> str:
            """The capital city of a country."""
            self.log.append(("capital", country))
            return {"France": "Paris", "Spain": "Madrid"}[country]

        def population(city: str, year: int = 2024) -> int:
            """How many people live in a city.

            Args:
                city: The city's name.
                year: The year of the census.
            """
            time.sleep(0.05)
            self.log.append(("population", city, year))
            return {"Paris": 2102650, "Madrid": 3332035}[city]

        return [capital, population]


def capital_then_population(request: ScriptedRequest) -> Any:
    """A model that looks up the capital, then the population of whatever the first tool returned."""
    if request.index == 0:
        return ToolCall("capital", {"country": "France"})
    if request.index == 1:
        return ToolCall("population", {"city": last_line(request)})
    return f"{last_line(request)} people live in the capital."


# --- tools in sequence ------------------------------------------------------------------------------


async def test_native_tool_calls_in_sequence_feed_each_other_and_the_answer() -> None:
    geo = Geo()
    llm = ScriptedLLM(script(capital_then_population))
    run = await session(llm, geo.tools()).run("How many people live in the capital of France?")

    step = run.steps["s1"]
    assert step.status == "completed" and step.result == "2102650 people live in the capital."
    assert geo.log == [("capital", "France"), ("population", "Paris", 2024)]
    records = [(c.name, c.arguments, c.observation, c.error) for c in step.tool_calls]
    assert records == [
        ("capital", {"country": "France"}, "Paris", None),
        ("population", {"city": "Paris"}, "2102650", None),
    ]
    assert step.tool_calls[1].duration is not None and step.tool_calls[1].duration >= 0.04

    iterations = events_of(run, StepIteration)
    assert [(e.iteration, e.tool, e.arguments, e.observation_preview) for e in iterations] == [
        (1, "capital", {"country": "France"}, "Paris"),
        (2, "population", {"city": "Paris"}, "2102650"),
    ]
    assert iterations[1].duration >= 0.04  # each iteration tells its own call's duration
    assert [e.duration for e in iterations] == [c.duration for c in step.tool_calls]

    requests = llm.requests_for("step", "s1")
    assert len(requests) == 3
    assert sorted(tool_names(requests[0])) == ["capital", "population"]
    assert requests[0].tool_choice == "auto"
    call, observation = requests[1].messages[-2:]
    assert call["role"] == "assistant" and call["tool_calls"][0]["function"]["name"] == "capital"
    assert observation == {"role": "tool", "tool_call_id": call["tool_calls"][0]["id"], "content": "Paris"}
    assert requests[2].messages[-1]["role"] == "tool" and requests[2].messages[-1]["content"] == "2102650"
    assert requests[2].messages[-2]["tool_calls"][0]["function"]["name"] == "population"


async def test_without_tool_calling_the_model_uses_json_actions_in_text() -> None:
    geo = Geo()
    llm = ScriptedLLM(script(capital_then_population), capabilities=NO_TOOL_CALLING)
    run = await session(llm, geo.tools()).run("How many people live in the capital of France?")

    step = run.steps["s1"]
    assert step.status == "completed" and step.result == "2102650 people live in the capital."
    assert geo.log == [("capital", "France"), ("population", "Paris", 2024)]
    assert [(c.name, c.arguments, c.observation) for c in step.tool_calls] == [
        ("capital", {"country": "France"}, "Paris"),
        ("population", {"city": "Paris"}, "2102650"),
    ]
    assert [e.tool for e in events_of(run, StepIteration)] == ["capital", "population"]

    requests = llm.requests_for("step", "s1")
    assert len(requests) == 3
    assert all(r.tools == [] and r.tool_choice is None for r in requests)
    system = requests[0].messages[0]
    assert system["role"] == "system" and system["content"].startswith(prompts.STEP_SYSTEM)
    assert "You can call these tools:" in system["content"]
    assert "- capital: The capital city of a country." in system["content"]
    assert "- population: How many people live in a city." in system["content"]
    assert '{"tool": "<name>", "arguments": {...}}' in system["content"]
    assert requests[1].messages[-2:] == [
        {"role": "assistant", "content": '{"tool": "capital", "arguments": {"country": "France"}}'},
        {"role": "user", "content": "Result of capital:\nParis"},
    ]
    assert requests[2].messages[-1] == {"role": "user", "content": "Result of population:\n2102650"}


@pytest.mark.parametrize("capabilities", [("tool_call", "json_mode", "stream"), NO_TOOL_CALLING])
async def test_arguments_of_the_wrong_type_are_refused_and_the_model_corrects_them(
    capabilities: tuple[str, ...],
) -> None:
    geo = Geo()
    llm = ScriptedLLM(
        script(
            [
                ToolCall("population", {"city": "Paris", "year": "last year"}),
                ToolCall("population", {"city": "Paris", "year": 2020}),
                "About 2.1 million.",
            ]
        ),
        capabilities=capabilities,
    )
    run = await session(llm, geo.tools()).run("population of Paris")

    assert geo.log == [("population", "Paris", 2020)]  # never called with the bad arguments
    step = run.steps["s1"]
    assert step.status == "completed" and step.result == "About 2.1 million."
    first, second = step.tool_calls
    assert first.error is not None and first.error.startswith("ValidationError")
    assert "Invalid arguments for population" in first.observation and "year" in first.observation
    assert (second.arguments, second.observation, second.error) == ({"city": "Paris", "year": 2020}, "2102650", None)
    requests = llm.requests_for("step", "s1")
    assert len(requests) == 3
    seen = requests[1].messages[-1]
    assert seen["role"] == ("tool" if "tool_call" in capabilities else "user")
    assert "Invalid arguments for population" in seen["content"] and "'last year'" in seen["content"]
    assert "Invalid arguments" not in requests[0].prompt


# --- concurrency --------------------------------------------------------------------------------------


async def test_a_slow_sync_tool_does_not_block_an_async_tool_in_a_parallel_step() -> None:
    marks: dict[str, float] = {}
    ticks: list[float] = []
    blocking_done = threading.Event()

    async def ticker() -> str:
        """Ticks on the event loop until the blocking tool has finished."""
        marks["ticker_start"] = time.perf_counter()
        deadline = marks["ticker_start"] + 10
        while not blocking_done.is_set() and time.perf_counter() < deadline:
            await asyncio.sleep(0.01)
            ticks.append(time.perf_counter())
        marks["ticker_end"] = time.perf_counter()
        return f"{len(ticks)} ticks"

    def blocking() -> str:
        """Sleeps in a plain function."""
        marks["blocking_start"] = time.perf_counter()
        time.sleep(0.4)
        marks["blocking_end"] = time.perf_counter()
        blocking_done.set()
        return "slept"

    def uses(name: str) -> Callable[[ScriptedRequest], Any]:
        return lambda request: ToolCall(name) if request.index == 0 else f"{name}: {last_line(request)}"

    llm = ScriptedLLM(
        script(
            None,
            plan=[plan_reply(("s1", [], "tick"), ("s2", [], "block"))],
            **{"step:s1": uses("ticker"), "step:s2": uses("blocking")},
        )
    )
    run = await session(llm, [ticker, blocking]).run("tick and block")

    assert [run.steps[s].status for s in ("s1", "s2")] == ["completed", "completed"]
    assert run.steps["s2"].result == "blocking: slept"
    assert marks["ticker_start"] < marks["blocking_end"] and marks["blocking_start"] < marks["ticker_end"]
    # the event loop kept running while the sync tool slept: the async tool ticked inside that interval
    inside = [t for t in ticks if marks["blocking_start"] < t < marks["blocking_end"]]
    assert len(inside) >= 3, (len(inside), len(ticks))


# --- tool selection -----------------------------------------------------------------------------------


def numbered_tools(count: int, log: list[str] | None = None) -> list[Tool]:
    def make(index: int) -> Tool:
        def function(query: str) -> str:
            if log is not None:
                log.append(f"t{index:02d}")
            return f"t{index:02d} says {query}"

        return Tool(function, name=f"t{index:02d}", description=f"Looks things up in source number {index}.")

    return [make(i) for i in range(count)]


def hinted_plan(hint: str) -> dict[str, Any]:
    return {"steps": [{"id": "s1", "task": "look it up", "dependencies": [], "tool_hint": hint}]}


async def test_twelve_tools_are_all_offered_without_a_selection_call() -> None:
    llm = ScriptedLLM(script("answer", plan=[hinted_plan("t11")]))
    run = await session(llm, numbered_tools(12)).run("goal")
    assert run.steps["s1"].status == "completed"
    assert llm.requests_for("tool_selection") == []
    assert tool_names(llm.requests_for("step", "s1")[0]) == [f"t{i:02d}" for i in range(12)]


async def test_thirteen_tools_are_narrowed_to_six_keeping_the_planners_hint() -> None:
    picks = {"tools": ["t01", "t02", "t03", "t04", "t05", "t06", "t07", "t99"]}
    llm = ScriptedLLM(script("answer", plan=[hinted_plan("t12")], tool_selection=[picks]))
    run = await session(llm, numbered_tools(13)).run("goal")

    assert run.steps["s1"].status == "completed"
    selection = llm.requests_for("tool_selection", "s1")
    assert len(selection) == 1
    assert "at most 6" in selection[0].prompt and "look it up" in selection[0].prompt
    assert all(f"- t{i:02d}: Looks things up in source number {i}." in selection[0].prompt for i in range(13))
    offered = tool_names(llm.requests_for("step", "s1")[0])
    assert len(offered) <= 6 and "t12" in offered
    assert set(offered) <= {"t01", "t02", "t03", "t04", "t05", "t06", "t07", "t12"}
    assert offered[0] == "t01"  # the model's order is kept: its first picks survive


async def test_a_small_selection_is_kept_with_the_hint_added() -> None:
    llm = ScriptedLLM(script("answer", plan=[hinted_plan("t12")], tool_selection=[{"tools": ["t03", "t05"]}]))
    await session(llm, numbered_tools(13)).run("goal")
    assert tool_names(llm.requests_for("step", "s1")[0]) == ["t03", "t05", "t12"]


@pytest.mark.parametrize(
    "selection",
    [["no idea what you mean"], [RuntimeError("selector down")], [{"tools": ["nothing", "known"]}]],
    ids=["garbage", "exception", "unknown-names"],
)
async def test_a_failing_selection_offers_every_tool(selection: list[Any]) -> None:
    llm = ScriptedLLM(script("answer", plan=[hinted_plan("t12")], tool_selection=selection))
    run = await session(llm, numbered_tools(13)).run("goal")
    assert run.status == "done" and run.steps["s1"].status == "completed"
    assert len(llm.requests_for("tool_selection", "s1")) >= 1
    assert tool_names(llm.requests_for("step", "s1")[0]) == [f"t{i:02d}" for i in range(13)]


# --- guards -------------------------------------------------------------------------------------------


def lookup_tool(log: list[str]) -> Callable[[str], str]:
    def lookup(q: str) -> str:
        """Looks something up."""
        log.append(q)
        return f"found {q}"

    return lookup


async def test_a_repeated_call_gets_a_warning_and_a_third_one_asks_for_the_answer_without_tools() -> None:
    log: list[str] = []
    same = ToolCall("lookup", {"q": "x"})
    llm = ScriptedLLM(script([same, same, same, "x is found: that is the answer", "never asked"]))
    run = await session(llm, [lookup_tool(log)]).run("goal")

    assert log == ["x"]  # executed once: the repeat got a warning, the third call nothing
    requests = llm.requests_for("step", "s1")
    assert len(requests) == 4
    warning = REPEAT_WARNING.format(name="lookup")
    assert requests[1].messages[-1] == {"role": "tool", "tool_call_id": "call_0", "content": "found x"}
    assert requests[2].messages[-1]["role"] == "tool" and requests[2].messages[-1]["content"] == warning
    last = requests[3]
    assert last.tools == [] and last.messages[-1]["content"] == FORCE_ANSWER.format(name="lookup")
    assert last.messages[-2] == requests[2].messages[-1]  # the turn with the third call is left out: none unanswered
    step = run.steps["s1"]
    assert (step.status, step.result, step.error) == ("completed", "x is found: that is the answer", None)
    assert [(c.observation, c.error) for c in step.tool_calls] == [("found x", None), (warning, "repeated call")]


FORCED_NO_ANSWER = pytest.mark.parametrize(
    "forced",
    ["", ToolCall("lookup", {"q": "x"}), '{"name": "lookup", "arguments": {"q": ["x"]}'],
    ids=["empty", "another call", "a call cut short"],
)


@FORCED_NO_ANSWER
async def test_a_stuck_step_that_still_gives_no_answer_keeps_what_its_tools_returned_as_its_result(forced: Any) -> None:
    """Qwen2.5-Coder 0.5B, told to answer, wrote another call, cut short: the step's result was that broken JSON
    while the tool had returned the answer ("The Nile is 6,650 km long."). What the tools returned is the result.
    """
    same = ToolCall("lookup", {"q": "x"})
    llm = ScriptedLLM(script([same, same, same, forced]))
    run = await session(llm, [lookup_tool([])]).run("goal")
    step = run.steps["s1"]
    assert (step.status, step.result, step.error) == ("completed", "lookup(q='x') -> found x", None)


@FORCED_NO_ANSWER
async def test_a_stuck_step_whose_tools_returned_nothing_fails_with_its_notes(forced: Any) -> None:
    def lookup(q: str) -> str:
        """Looks something up."""
        raise LookupError(f"nothing for {q}")

    same = ToolCall("lookup", {"q": "x"})
    llm = ScriptedLLM(script([same, same, same, forced], analyze=[verdict(False, 0.9, "stuck")]))
    run = await session(llm, [lookup]).run("goal")
    step = run.steps["s1"]
    assert step.status == "failed" and step.error is not None and "stuck: lookup was called three times" in step.error
    assert step.result is not None and step.result.startswith("Partial notes") and "nothing for x" in step.result


# --- tool calls written as text ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "written",
    [
        '{"name": "lookup", "arguments": {"q": "x"}}',
        '{"name": "lookup", "arguments": "{\\"q\\": \\"x\\"}"}',
        '{"tool": "lookup", "arguments": {"q": "x"}}',
        '```json\n{"function": {"name": "lookup", "arguments": {"q": "x"}}}\n```',
        'I will look it up.\n<tool_call>\n{"name": "lookup", "arguments": {"q": "x"}}\n</tool_call>',
        '[{"name": "lookup", "arguments": {"q": "x"}}]',
    ],
    ids=["openai", "arguments as text", "json action", "fenced function", "qwen tag", "list"],
)
async def test_a_tool_call_written_as_text_by_a_model_offered_native_tools_is_run(written: str) -> None:
    log: list[str] = []
    llm = ScriptedLLM(script([written, "x was found"]))  # native tool calling is offered
    run = await session(llm, [lookup_tool(log)]).run("goal")
    assert log == ["x"]
    step = run.steps["s1"]
    assert (step.status, step.result) == ("completed", "x was found")
    second = llm.requests_for("step", "s1")[1]
    calls = second.messages[-2]["tool_calls"]
    assert [c["function"]["name"] for c in calls] == ["lookup"]
    assert second.messages[-1] == {"role": "tool", "tool_call_id": calls[0]["id"], "content": "found x"}


INVENTED = " The population of Berlin is 3602177."
CALL = '{"name": "lookup", "arguments": {"q": "Berlin"}}'


@pytest.mark.parametrize(
    ("written", "kept"),
    [
        (f"<tool_call>{CALL}</tool_call>{INVENTED}", f"<tool_call>{CALL}</tool_call>"),
        (
            f"Looking it up.\n<tool_call>\n{CALL}\n</tool_call>{INVENTED}",
            f"Looking it up.\n<tool_call>\n{CALL}\n</tool_call>",
        ),
        (f"<tool_call>{CALL}{INVENTED}", f"<tool_call>{CALL}"),  # a tag never closed
        (f"{CALL}{INVENTED}", CALL),
        (f"[{CALL}]{INVENTED}", f"[{CALL}]"),
        (f"```json\n{CALL}\n```{INVENTED}", f"```json\n{CALL}\n```"),
    ],
    ids=["qwen tag", "text before the tag", "unclosed tag", "bare object", "list", "fenced"],
)
@pytest.mark.parametrize("capabilities", [("tool_call", "json_mode", "stream"), NO_TOOL_CALLING])
async def test_what_a_model_writes_after_a_call_written_as_text_is_no_observation(
    written: str, kept: str, capabilities: tuple[str, ...]
) -> None:
    log: list[str] = []
    llm = ScriptedLLM(script([written, "Berlin: found Berlin"]), capabilities=capabilities)
    run = await session(llm, [lookup_tool(log)]).run("goal")

    assert log == ["Berlin"]
    step = run.steps["s1"]
    assert (step.status, step.result) == ("completed", "Berlin: found Berlin")
    second = llm.requests_for("step", "s1")[1]
    assert not any("3602177" in str(message.get("content")) for message in second.messages)
    assert second.messages[-2]["role"] == "assistant" and second.messages[-2]["content"] == kept
    assert "found Berlin" in second.messages[-1]["content"]


async def test_text_between_calls_written_in_tags_is_left_out_and_both_calls_run() -> None:
    log: list[str] = []
    a, b = (f'<tool_call>{{"name": "lookup", "arguments": {{"q": "{q}"}}}}</tool_call>' for q in "ab")
    llm = ScriptedLLM(script([f"{a}\nResult: 5\n{b}\nResult: 7. The total is 12.", "12 in all"]))
    run = await session(llm, [lookup_tool(log)]).run("goal")
    assert log == ["a", "b"] and run.steps["s1"].result == "12 in all"
    second = llm.requests_for("step", "s1")[1]
    assert second.messages[-3]["content"] == f"{a}\n{b}"


async def test_json_that_names_no_offered_tool_is_an_answer() -> None:
    answer = '{"name": "Paris", "population": 2102650}'
    llm = ScriptedLLM(script([answer]))
    run = await session(llm, [lookup_tool([])]).run("goal")
    assert run.steps["s1"].result == answer


async def test_the_iteration_limit_fails_the_step_and_keeps_its_notes_for_the_analyzer() -> None:
    log: list[str] = []
    llm = ScriptedLLM(
        script(
            lambda request: ToolCall("lookup", {"q": f"q{request.index}"}),
            analyze=[verdict(False, 0.9, "step failed")],
        )
    )
    run = await session(llm, [lookup_tool(log)], step_max_iterations=3).run("goal")

    step = run.steps["s1"]
    assert step.status == "failed" and step.error is not None and "iteration limit" in step.error
    assert log == ["q0", "q1", "q2"] and len(llm.requests_for("step", "s1")) == 3
    assert step.result is not None and step.result.startswith("Partial notes")
    notes = ["- lookup(q='q0') -> found q0", "- lookup(q='q1') -> found q1", "- lookup(q='q2') -> found q2"]
    assert all(note in step.result for note in notes)
    analyzer = llm.requests_for("analyze")[0].prompt
    assert all(note in analyzer for note in notes) and "iteration limit" in analyzer


async def test_an_overlong_observation_is_cut_with_a_note() -> None:
    def dump() -> str:
        """Returns a lot of text."""
        return "x" * 500

    llm = ScriptedLLM(script([ToolCall("dump"), "done"]))
    run = await session(llm, [dump], observation_max_chars=100).run("goal")
    seen = llm.requests_for("step", "s1")[1].messages[-1]["content"]
    assert seen == "x" * 100 + "\n[Observation truncated: 400 more characters]"
    assert run.steps["s1"].tool_calls[0].observation == seen


# --- tools that raise what is not an Exception ----------------------------------------------------------


class Abort(BaseException):
    """A library's own BaseException, as some use for control flow."""


def raising(kind: type[BaseException], is_async: bool) -> Callable[..., Any]:
    def charge(amount: int) -> str:
        """Charges the card."""
        raise kind(f"charging {amount} was interrupted")

    async def charge_async(amount: int) -> str:
        """Charges the card."""
        await asyncio.sleep(0)
        raise kind(f"charging {amount} was interrupted")

    return Tool(charge_async if is_async else charge, name="charge")


@pytest.mark.parametrize(
    ("kind", "is_async"),
    [
        (KeyboardInterrupt, False),
        (KeyboardInterrupt, True),
        (Abort, False),
        (Abort, True),
        (GeneratorExit, False),
        (GeneratorExit, True),
        (asyncio.CancelledError, True),
    ],
    ids=[
        "KeyboardInterrupt_sync",
        "KeyboardInterrupt_async",
        "custom_sync",
        "custom_async",
        "GeneratorExit_sync",
        "GeneratorExit_async",
        "own_CancelledError",
    ],
)
async def test_a_tool_raising_what_is_not_an_exception_fails_its_step_and_the_run_goes_on(
    kind: type[BaseException], is_async: bool, tmp_path: Path
) -> None:
    llm = ScriptedLLM(script([ToolCall("charge", {"amount": 100}), "never asked"]))
    store = tmp_path / "runs.sqlite"
    registry = ModelRegistry().register("scripted", llm)
    chosen = DagSession(registry, DagSettings(store=str(store)), tools=[raising(kind, is_async)])
    run = await chosen.run("pay the invoice")

    assert run.status == "done" and run.answer
    step = run.steps["s1"]
    assert step.status == "failed"
    assert step.error == (
        f"the tool charge raised {kind.__name__} (charging 100 was interrupted), which is not an Exception: the "
        "step stopped there. A tool reports a failure by raising an Exception."
    )
    assert len(llm.requests_for("step", "s1")) == 1
    assert step_statuses(store) == {"s1": "failed"}


async def test_the_steps_deadline_still_ends_a_step_whose_tool_is_running() -> None:
    async def wait_forever() -> str:
        """Waits."""
        await asyncio.Event().wait()
        return "never"

    llm = ScriptedLLM(script([ToolCall("wait_forever"), "never asked"]))
    run = await session(llm, [wait_forever], step_timeout=0.2, tool_timeout=30).run("goal")
    assert (run.status, run.steps["s1"].status, run.steps["s1"].error) == ("done", "failed", "timed out after 0.2s")


class Unprintable:
    """A result whose text cannot be made (a half-initialised object, a broken __repr__)."""

    def __repr__(self) -> str:
        raise RuntimeError("the connection is closed")

    __str__ = __repr__


async def test_a_result_whose_text_cannot_be_made_is_an_observation_saying_why() -> None:
    def fetch(url: str) -> Unprintable:
        """Fetches a page."""
        return Unprintable()

    llm = ScriptedLLM(script([ToolCall("fetch", {"url": "https://example.org"}), "the page could not be read"]))
    run = await session(llm, [fetch]).run("goal")

    step = run.steps["s1"]
    assert (step.status, step.result) == ("completed", "the page could not be read")
    observation = llm.requests_for("step", "s1")[1].messages[-1]["content"]
    assert observation == (
        "fetch ran, but its result cannot be shown: making text of its Unprintable raised "
        "RuntimeError: the connection is closed."
    )
    assert [(c.observation, c.error) for c in step.tool_calls] == [(observation, None)]


async def test_the_runs_own_cancellation_still_cancels_a_step_whose_tool_is_running() -> None:
    entered = asyncio.Event()

    async def wait_forever() -> str:
        """Waits."""
        entered.set()
        await asyncio.Event().wait()
        return "never"

    llm = ScriptedLLM(script([ToolCall("wait_forever"), "never asked"]))
    run = session(llm, [wait_forever]).start("goal")
    await entered.wait()
    run.cancel()
    await run.wait()
    assert (run.status, run.steps["s1"].status) == ("cancelled", "cancelled")


# --- tools that hang ---------------------------------------------------------------------------------------


async def test_hung_sync_tools_never_starve_model_calls_and_the_exhausted_threads_are_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    release = threading.Event()  # set before the test ends: the hung tools' threads end with it
    hung = min(32, (os.cpu_count() or 1) + 4)  # as many as the loop's default executor (litellm's) has threads
    monkeypatch.setenv("DAG_TOOL_THREADS", str(hung))

    def fetch(n: int) -> str:
        """Fetches a page, without a timeout."""
        release.wait()
        return f"page {n}"

    def ping() -> str:
        """Answers at once."""
        return "pong"

    def step(request: ScriptedRequest) -> Any:
        turns = sum(1 for message in request.messages if message["role"] == "assistant")
        if turns == 0:
            return [ToolCall("fetch", {"n": n}) for n in range(hung)]
        return ToolCall("ping") if turns == 1 else "the pages did not load"

    plan = {
        "steps": [
            {"id": "s1", "task": "fetch the pages"},
            {"id": "s2", "task": "summarise", "dependencies": ["s1"], "model_hint": "remote"},
        ]
    }
    llm = ScriptedLLM(script(step, plan=[plan]))
    provider = Provider()
    provider.reply = "a summary from the remote model"
    try:
        registry = ModelRegistry().register("scripted", llm, roles=["smart", "general"])
        registry.register("remote", "openai/gpt-4.1-mini", roles=["remote"], api_base=provider.base, api_key="sk-x")
        settings = DagSettings(
            store="none", tool_timeout=0.05, llm_timeout=5, llm_retries=0, step_immediate_retries=0,
            step_retry_delays=(),
        )  # fmt: skip
        run = await DagSession(registry, settings, tools=[fetch, ping]).run("summarise the pages")
    finally:
        provider.close()
        release.set()

    s1, s2 = run.steps["s1"], run.steps["s2"]
    assert (s2.status, s2.result) == ("completed", "a summary from the remote model"), s2.error
    assert [c.error for c in s1.tool_calls[:hung]] == ["TimeoutError: fetch did not finish within 0.05s"] * hung
    pinged = s1.tool_calls[hung]
    assert pinged.name == "ping" and pinged.error is not None
    assert pinged.error.startswith(
        f"ToolThreadsExhausted: {hung} tool threads are still running past their timeout: fetch ({hung}×)"
    ), pinged.error


async def until(condition: Callable[[], bool]) -> None:
    """Wait (boundedly: never a hang) for something a tool thread hands to the event loop."""
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("it never happened")


async def test_a_result_that_comes_after_its_timeout_is_ignored_and_said_so() -> None:
    go = threading.Event()

    def transfer(amount: int) -> str:
        """Transfers money."""
        go.wait(30)
        return f"transferred {amount}"

    started: list[DagRun] = []

    async def step(request: ScriptedRequest) -> Any:
        if not any(message["role"] == "tool" for message in request.messages):
            return ToolCall("transfer", {"amount": 100})
        go.set()  # the transfer goes through after all, while the step still runs
        await until(lambda: any(isinstance(e, RunWarning) for e in started[0].events))
        return "the transfer timed out"

    llm = ScriptedLLM(script(step))
    started.append(session(llm, [transfer], tool_timeout=0.05).start("goal"))
    run = await started[0].wait()

    step_record = run.steps["s1"]
    assert step_record.tool_calls[0].error == "TimeoutError: transfer did not finish within 0.05s"
    (warning,) = [e for e in run.events if isinstance(e, RunWarning)]
    assert (warning.round, warning.step_id) == (1, "s1")
    assert re.fullmatch(
        r"The tool transfer returned \d+\.\ds after it started, past its 0\.05s timeout: that result was ignored\.",
        warning.message,
    ), warning.message
    assert all("transferred" not in str(request.messages) for request in llm.requests_for("step"))


async def test_a_result_that_comes_after_its_run_ended_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    go = threading.Event()

    def transfer(amount: int) -> str:
        """Transfers money."""
        go.wait(30)
        raise ConnectionError("the bank hung up")

    llm = ScriptedLLM(script([ToolCall("transfer", {"amount": 100}), "the transfer timed out"]))
    run = await session(llm, [transfer], tool_timeout=0.05).run("goal")
    go.set()
    await until(lambda: any("transfer failed" in record.message for record in caplog.records))

    assert not [e for e in run.events if isinstance(e, RunWarning)]  # nothing is added to a run that has ended
    (record,) = [r for r in caplog.records if "transfer failed" in r.message]
    assert record.levelname == "WARNING" and record.message.startswith(
        "[dagmagic] The tool transfer failed (ConnectionError: the bank hung up) "
    )
    assert record.message.endswith("past its 0.05s timeout: that result was ignored.")


# --- tool calls run once ------------------------------------------------------------------------------------


async def test_a_step_retried_after_its_tool_call_continues_from_its_transcript_without_calling_again() -> None:
    ledger: list[str] = []

    def pay(amount: int) -> str:
        """Pays an invoice."""
        ledger.append(f"paid {amount}")
        return f"paid {amount}, receipt 7"

    failed: list[str] = []

    def step(request: ScriptedRequest) -> Any:
        if not any(message["role"] == "tool" for message in request.messages):
            return ToolCall("pay", {"amount": 100})
        if not failed:  # the call after the payment meets a rate limit: the step is tried again
            failed.append("429")
            return errors.RateLimitError("429 slow down", model="scripted")
        return "Paid 100 (receipt 7)."

    llm = ScriptedLLM(script(step))
    run = await session(llm, [pay], llm_retries=0, step_immediate_retries=1).run("pay the invoice")

    s1 = run.steps["s1"]
    assert (s1.status, s1.result, s1.attempts) == ("completed", "Paid 100 (receipt 7).", 2)
    assert ledger == ["paid 100"]  # once: the retry went on from the payment's result
    retried = llm.requests_for("step", "s1")[-1]
    assert retried.messages[-1] == {"role": "tool", "tool_call_id": "call_1_0", "content": "paid 100, receipt 7"}
    assert retried.messages[-2]["tool_calls"][0]["function"] == {"name": "pay", "arguments": '{"amount": 100}'}
    assert [(c.name, c.observation) for c in s1.tool_calls] == [("pay", "paid 100, receipt 7")]


async def test_a_retried_step_without_native_tool_calling_continues_from_its_json_actions() -> None:
    ledger: list[str] = []

    def pay(amount: int) -> str:
        """Pays an invoice."""
        ledger.append(f"paid {amount}")
        return f"paid {amount}"

    failed: list[str] = []

    def step(request: ScriptedRequest) -> Any:
        if not any("Result of pay" in str(message["content"]) for message in request.messages):
            return ToolCall("pay", {"amount": 100})
        if not failed:
            failed.append("500")
            return errors.ServerError("503 overloaded", model="scripted")
        return "Paid."

    llm = ScriptedLLM(script(step), capabilities=NO_TOOL_CALLING)
    run = await session(llm, [pay], llm_retries=0, step_immediate_retries=1).run("pay the invoice")

    assert (run.steps["s1"].status, ledger) == ("completed", ["paid 100"])
    retried = llm.requests_for("step", "s1")[-1].messages
    assert retried[-2] == {"role": "assistant", "content": '{"tool": "pay", "arguments": {"amount": 100}}'}
    assert retried[-1] == {"role": "user", "content": "Result of pay:\npaid 100"}


# --- completion check ---------------------------------------------------------------------------------

THREE_AT_ONCE = [ToolCall("lookup", {"q": "a"}), ToolCall("lookup", {"q": "b"}), ToolCall("lookup", {"q": "c"})]
LONG_ANSWER = "The complete answer, with every detail the task asked for. " * 6


async def test_three_tools_and_a_short_answer_get_exactly_one_completion_check() -> None:
    log: list[str] = []
    complete = "a, b and c together give 42, as the three lookups show."
    llm = ScriptedLLM(script([THREE_AT_ONCE, "42", complete, "never asked"]))
    run = await session(llm, [lookup_tool(log)]).run("goal")

    assert log == ["a", "b", "c"]
    requests = llm.requests_for("step", "s1")
    assert len(requests) == 3
    check = COMPLETION_CHECK.format(count=3)
    assert [check in r.prompt for r in requests] == [False, False, True]
    assert requests[2].messages[-2:] == [{"role": "assistant", "content": "42"}, {"role": "user", "content": check}]
    assert [m["content"] for m in requests[2].messages if m["role"] == "tool"] == ["found a", "found b", "found c"]
    assert run.steps["s1"].result == complete


@pytest.mark.parametrize(
    ("replies", "answer"),
    [
        ([ToolCall("lookup", {"q": "a"}), ToolCall("lookup", {"q": "b"}), "42"], "42"),
        ([THREE_AT_ONCE, LONG_ANSWER], LONG_ANSWER.strip()),
    ],
    ids=["two-tools", "long-answer"],
)
async def test_no_completion_check_with_fewer_tools_or_a_long_answer(replies: list[Any], answer: str) -> None:
    assert len(answer) >= SHORT_ANSWER_CHARS or answer == "42"
    llm = ScriptedLLM(script([*replies, "never asked"]))
    run = await session(llm, [lookup_tool([])]).run("goal")
    requests = llm.requests_for("step", "s1")
    assert len(requests) == len(replies)
    assert not any("your answer is short" in r.prompt for r in requests)
    assert run.steps["s1"].result == answer


# --- citation verification ----------------------------------------------------------------------------

CITING = "Processing personal data is lawful only with a legal basis under Art. 6 GDPR."


async def test_a_result_with_a_citation_is_checked_once_by_the_smart_model() -> None:
    llm = ScriptedLLM(script(CITING))
    run = await session(llm).run("When is processing personal data lawful?")

    checks = llm.requests_for("citation_check", "s1")
    assert len(checks) == 1
    assert "- Art. 6 GDPR" in checks[0].prompt and CITING in checks[0].prompt
    assert "find how many people" in checks[0].prompt  # the task the citations must serve
    assert checks[0].temperature == 0.0
    assert len(events_of(run, Verifying)) == 1
    assert [(e.passed, e.round) for e in events_of(run, Verification)] == [(True, 1)]
    names = [type(e).__name__ for e in run.events if getattr(e, "step_id", None) == "s1"]
    assert names.index("Verifying") < names.index("Verification") < names.index("StepCompleted")
    assert run.steps["s1"].result == CITING and len(llm.requests_for("step")) == 1


async def test_a_result_without_citations_is_not_checked() -> None:
    llm = ScriptedLLM(script("Paris has about 2.1 million inhabitants (2024 census, INSEE)."))
    run = await session(llm).run("goal")
    assert llm.requests_for("citation_check") == []
    assert events_of(run, Verifying) == [] and events_of(run, Verification) == []


async def test_a_failed_check_reruns_the_step_once_with_the_feedback() -> None:
    feedback = "Art. 99 GDPR is about entry into force; the legal bases are in Art. 6 GDPR."
    failed = {"valid": False, "problems": ["Art. 99 GDPR does not list legal bases"], "feedback": feedback}
    corrected = "Processing needs a legal basis under Art. 6 GDPR."
    llm = ScriptedLLM(
        script(
            ["Processing needs a legal basis under Art. 99 GDPR.", corrected, "never asked"], citation_check=[failed]
        )
    )
    run = await session(llm).run("When is processing personal data lawful?")

    requests = llm.requests_for("step", "s1")
    assert len(requests) == 2
    assert feedback not in requests[0].prompt
    rerun = requests[1].messages[-1]
    assert rerun["role"] == "user" and "A reviewer checked the citations" in rerun["content"]
    assert feedback in rerun["content"]
    assert run.steps["s1"].result == corrected and run.steps["s1"].status == "completed"
    assert len(llm.requests_for("citation_check")) == 1  # one re-run, not a loop
    assert [(e.passed, e.feedback) for e in events_of(run, Verification)] == [(False, feedback)]


async def test_an_unreadable_verdict_keeps_the_result_marked_not_verified() -> None:
    llm = ScriptedLLM(script([CITING, "never asked"], citation_check=["I cannot tell."]))
    run = await session(llm).run("goal")
    step = run.steps["s1"]
    assert step.result == CITING and len(llm.requests_for("step")) == 1
    assert [e.passed for e in events_of(run, Verification)] == [False]
    assert len(step.warnings) == 1 and "gave no usable CitationVerdict" in step.warnings[0]


@pytest.mark.parametrize(
    "failure",
    [
        errors.AuthenticationError("invalid key", model="m"),
        errors.BadRequestError("prompt too long", model="m"),
        RuntimeError("the checker crashed"),
    ],
    ids=["authentication", "bad request", "unexpected"],
)
async def test_a_check_that_cannot_run_leaves_the_result_standing_flagged(failure: Exception) -> None:
    llm = ScriptedLLM(script([CITING, "never asked"], citation_check=[failure]))
    run = await session(llm, llm_retries=0).run("goal")
    step = run.steps["s1"]
    assert (step.status, step.result) == ("completed", CITING)
    assert len(step.warnings) == 1 and step.warnings[0].startswith("citations not verified: the check failed")
    assert type(failure).__name__ in step.warnings[0]
    assert [e.passed for e in events_of(run, Verification)] == [False]
    assert run.status == "done"


async def test_citation_verification_can_be_turned_off() -> None:
    llm = ScriptedLLM(script(CITING))
    run = await session(llm, citation_verification=False).run("goal")
    assert llm.requests_for("citation_check") == [] and events_of(run, Verifying) == []
    assert run.steps["s1"].result == CITING


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Liability for damages follows from § 823 BGB.", ["§ 823 BGB"]),
        ("Claims under 42 U.S.C. § 1983 require state action.", ["42 U.S.C. § 1983"]),
        ("The ruling in Brown v. Board of Education ended school segregation.", ["Brown v. Board"]),
        (
            "See Regulation (EU) 2016/679 and Directive (EU) 2019/790.",
            ["Regulation (EU) 2016/679", "Directive (EU) 2019/790"],
        ),
        ("Deep learning (doi: 10.1038/nature14539) changed the field.", ["10.1038/nature14539"]),
        ("See https://doi.org/10.1016/S0140-6736(20)30183-5 for the report.", ["10.1016/S0140-6736(20)30183-5"]),
        ("HTTP semantics are defined in RFC 9110, caching in RFC 9111.", ["RFC 9110", "RFC 9111"]),
        ("Consent is covered by Article 7(3) GDPR.", ["Article 7(3) GDPR"]),
        ("Art. 6 GDPR lists the legal bases.", ["Art. 6 GDPR"]),
        ("As Section 230 shows, and Sec. 12(b) confirms.", ["Section 230", "Sec. 12(b)"]),
    ],
)
def test_extract_citations_finds_each_kind(text: str, expected: list[str]) -> None:
    assert extract_citations(text) == expected


def test_extract_citations_keeps_order_and_drops_repeats() -> None:
    text = "RFC 9110 and § 823 BGB; again RFC 9110, then Roe v. Wade and Art. 6 GDPR."
    assert extract_citations(text) == ["RFC 9110", "§ 823 BGB", "Roe v. Wade", "Art. 6 GDPR"]


@pytest.mark.parametrize(
    "prose",
    [
        "Paris has 2.1 million inhabitants; the population grew 3% since 2010.",
        "Version 2 of the report, step 3 and figure 4 cover COVID-19 in 2020/21.",
        "At 10.30 we met Art and Sam; tickets cost 1,000 EUR vs. 900 USD.",
        "Python 3.12 was released in October 2023, see chapter 5 of the manual.",
        "The Eiffel Tower is 330 m tall and was finished in 1889 by Gustave Eiffel.",
    ],
)
def test_extract_citations_ignores_ordinary_prose(prose: str) -> None:
    assert extract_citations(prose) == []


# --- domain routing: the plan call says the goal's domain ---------------------------------------------


def planner_system(llm: ScriptedLLM, index: int = 0) -> str:
    return str(llm.requests_for("plan")[index].messages[0]["content"])


LEGAL_PLAN = {"domain": "legal", **ONE_STEP}
STREAMED = pytest.mark.parametrize("streaming", [False, True], ids=["whole-plan", "streamed-plan"])


@STREAMED
async def test_the_plan_call_says_the_domain_and_no_route_call_is_made(streaming: bool) -> None:
    llm = ScriptedLLM(script("answer", plan=[LEGAL_PLAN]))
    run = await routed_session(llm, streaming_planner=streaming).run("May my landlord keep the deposit?")
    assert run.status == "done" and run.state.domain == "legal" and run.state.routed
    assert [r.purpose for r in llm.requests if r.purpose not in ("plan", "step", "analyze", "synthesize")] == []
    assert prompts.PLANNER_DOMAIN_ASK in planner_system(llm) and "precision matters" not in planner_system(llm)
    assert 'first write "domain: "' in planner_system(llm)  # before the steps: a streaming model says it first
    assert llm.requests_for("plan")[0].stream is streaming


@STREAMED
async def test_a_domain_the_first_plan_said_steers_the_later_rounds(streaming: bool) -> None:
    llm = ScriptedLLM(
        script(
            "answer",
            plan=[LEGAL_PLAN, {"domain": "medical", **ONE_STEP}],
            analyze=[verdict(False, 0.2, "the statute is missing"), verdict(True, 0.9, "found it", "fallback")],
        )
    )
    run = await routed_session(llm, streaming_planner=streaming).run("May my landlord keep the deposit?")
    assert run.status == "done" and len(run.rounds) == 2 and run.state.domain == "legal"
    later = planner_system(llm, 1)
    assert prompts.PLANNER_DOMAIN.format(domain="legal") in later and "Hint reasoning for every step" in later
    assert prompts.PLANNER_DOMAIN_ASK not in later and 'write "domain' not in later


async def test_a_plan_with_no_domain_leaves_the_later_rounds_unsteered() -> None:
    llm = ScriptedLLM(
        script(
            "answer",
            plan=[{"domain": None, **ONE_STEP}, LEGAL_PLAN],
            analyze=[verdict(False, 0.2, "not yet"), verdict(True, 0.9, "found it", "fallback")],
        )
    )
    run = await routed_session(llm).run("What is the capital of France?")
    assert run.status == "done" and run.state.domain is None and run.state.routed
    later = planner_system(llm, 1)
    assert "precision matters" not in later and prompts.PLANNER_DOMAIN_ASK not in later  # asked once, answered


@pytest.mark.parametrize("said", ["astrology", 42, ["legal"], "", "null"])
async def test_a_domain_the_plan_cannot_mean_is_no_domain(said: Any) -> None:
    llm = ScriptedLLM(script("answer", plan=[{"domain": said, **ONE_STEP}]))
    run = await routed_session(llm).run("goal")
    assert run.status == "done" and run.error is None and run.steps["s1"].status == "completed"
    assert run.state.domain is None and not [e for e in run.events if isinstance(e, RunWarning)]


async def test_a_domain_written_in_capitals_is_still_that_domain() -> None:
    llm = ScriptedLLM(script("answer", plan=[{"domain": " Medical ", **ONE_STEP}]))
    assert (await routed_session(llm).run("Is ibuprofen safe with aspirin?")).state.domain == "medical"


@STREAMED
async def test_domain_routing_can_be_turned_off(streaming: bool) -> None:
    llm = ScriptedLLM(script("answer", plan=[LEGAL_PLAN]))
    run = await routed_session(llm, domain_routing=False, streaming_planner=streaming).run("May my landlord keep it?")
    assert run.status == "done" and run.state.domain is None
    system = planner_system(llm)
    assert prompts.PLANNER_DOMAIN_ASK not in system and "precision matters" not in system and "domain" not in system


# --- the tools a step is offered ----------------------------------------------------------------------------


def _lookup(country: str) -> int:
    """The population of a country."""
    return {"dorvania": 12_480_000, "kelmar": 7_310_000}[country.lower()]


def _calculate(expression: str) -> str:
    """Evaluate an arithmetic expression."""
    return str(eval(expression, {"__builtins__": {}}))  # the script's expressions only


LOOKUP_AND_CALCULATOR = [Tool(_lookup, name="population"), Tool(_calculate, name="calculate")]


@pytest.mark.parametrize(
    ("task", "offered"),
    [
        ("Which of $s1 and $s2 is the larger country?", ["calculate"]),
        ("Rank $s1 and $s2 from the largest to the smallest", ["calculate"]),
        ("Say which is larger, $s1 or $s2, using population", ["population", "calculate"]),
        ("Find the capital of the country in $s1", ["population", "calculate"]),
        ("Look up again which is larger: $s1 or $s2", ["population", "calculate"]),
    ],
)
async def test_a_step_that_only_compares_its_inputs_is_offered_the_computing_tools(
    task: str, offered: list[str]
) -> None:
    """Given every tool, a small model's comparing step looked up again what it had and looped on the calculator
    (four such steps took 26 calls): a step that compares, ranks or combines the results it waits for gets only
    the computing tools, and a tool its task names; a step that looks something up keeps them all.
    """
    plan = {
        "steps": [
            {
                "id": "s1",
                "task": "population of Dorvania",
                "tool_hint": "population",
                "tool_args": {"country": "Dorvania"},
            },
            {"id": "s2", "task": "population of Kelmar", "tool_hint": "population", "tool_args": {"country": "Kelmar"}},
            {"id": "s3", "task": task, "dependencies": ["s1", "s2"]},
        ]
    }
    llm = ScriptedLLM(script(["Dorvania has more people."], plan=[plan]))
    run = await session(llm, LOOKUP_AND_CALCULATOR).run("Which has more people, Dorvania or Kelmar?")
    assert run.status == "done" and run.steps["s1"].result == "12480000"
    (request,) = llm.requests_for("step", "s3")
    assert sorted(tool_names(request)) == sorted(offered)


async def test_a_comparing_step_without_a_computing_tool_is_one_call_with_no_tools() -> None:
    plan = {
        "steps": [
            {"id": "s1", "task": "Dorvania", "tool_hint": "population", "tool_args": {"country": "Dorvania"}},
            {"id": "s2", "task": "Which is larger, $s1 or the world average?", "dependencies": ["s1"]},
        ]
    }
    llm = ScriptedLLM(script(["It is above it."], plan=[plan]))
    run = await session(llm, [LOOKUP_AND_CALCULATOR[0]]).run("Is Dorvania above the world average?")
    (request,) = llm.requests_for("step", "s2")
    assert run.status == "done" and not request.tools and run.steps["s2"].tool_calls == []


REPORT = (
    '```json\n{\n  "name": "population",\n  "arguments": "{\\"country\\": \\"Dorvania\\"}",\n'
    '  "result": {\n    "value": "12480000"\n  }\n}\n```'
)
"""What Qwen2.5-Coder 1.5B writes after an observation: the call it made, with its result, as its answer."""


async def test_a_call_written_back_with_its_result_after_it_was_made_is_the_answer_not_a_new_call() -> None:
    """The 1.5B answered a lookup by writing the call back with a "result": read as a call, the step called
    population again, was warned, then forced, and failed "stuck" with the figure in hand.
    """
    call = '<tool_call>{"name": "population", "arguments": {"country": "Dorvania"}}</tool_call>'
    llm = ScriptedLLM(script([call, REPORT]))
    run = await session(llm, [LOOKUP_AND_CALCULATOR[0]]).run("How many people live in Dorvania?")
    s1 = run.steps["s1"]
    assert run.status == "done" and s1.status == "completed"
    assert [c.arguments for c in s1.tool_calls] == [{"country": "Dorvania"}]  # made once
    assert s1.result == "population(country='Dorvania') -> 12480000"  # the tool's result, not the model's
    assert len(llm.requests_for("step", "s1")) == 2


async def test_a_call_written_with_a_result_it_never_made_is_made_and_its_invented_result_ignored() -> None:
    invented = REPORT.replace("12480000", "99")
    llm = ScriptedLLM(script([invented, "Dorvania has 12480000 people."]))
    run = await session(llm, [LOOKUP_AND_CALCULATOR[0]]).run("How many people live in Dorvania?")
    s1 = run.steps["s1"]
    assert [c.observation for c in s1.tool_calls] == ["12480000"] and s1.result == "Dorvania has 12480000 people."
    assert "99" not in str(llm.requests_for("step", "s1")[1].messages[1:])
