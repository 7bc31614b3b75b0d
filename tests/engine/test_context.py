"""Context: dependency context, the enriched query, and the context guard (compaction and truncation)."""

from __future__ import annotations

import pytest

from dagmagic.engine.context import (
    TRUNCATION_MARKER,
    ContextGuard,
    Exchange,
    dependency_context,
    enriched_query,
    format_history,
    has_structured_content,
    truncate_middle,
)
from dagmagic.events import Event, LLMCallRecorded
from dagmagic.llm import ChatModel, ModelRegistry
from dagmagic.models import PlanStep
from dagmagic.settings import DagSettings
from dagmagic.testing import ScriptedLLM

SETTINGS = DagSettings(max_message_chars=1000, structured_context_multiplier=3.0, llm_retries=0)


def done(sid: str, result: str, task: str = "do it", status: str = "completed") -> PlanStep:
    return PlanStep(id=sid, task=task, status=status, result=result)  # type: ignore[arg-type]


# --- dependency context


def test_dependency_context_formats_each_dependency() -> None:
    deps = {
        "s1": done("s1", "Paris has 2.1 million people", task="Find the population of Paris"),
        "r1.s2": done("s2", "Berlin has 3.7 million", task="Find the population of Berlin"),
    }
    text = dependency_context(deps, SETTINGS)

    assert text == (
        "[s1] (completed) Find the population of Paris\nResult: Paris has 2.1 million people"
        "\n\n[r1.s2] (completed) Find the population of Berlin\nResult: Berlin has 3.7 million"
    )
    assert TRUNCATION_MARKER not in text


def test_dependency_context_of_nothing_is_empty() -> None:
    assert dependency_context({}, SETTINGS) == ""


def test_dependency_context_is_cut_at_max_message_chars_with_a_marker() -> None:
    deps = {"s1": done("s1", "word " * 600)}  # 3000 characters of plain prose
    text = dependency_context(deps, SETTINGS)

    assert text.endswith(f"\n{TRUNCATION_MARKER}")
    assert len(text) == SETTINGS.max_message_chars + len(f"\n{TRUNCATION_MARKER}")
    assert text.startswith("[s1] (completed) do it\nResult: word word")


@pytest.mark.parametrize(
    "structured",
    [
        "| country | population |\n|---|---|\n| France | 68M |",
        "```python\nprint(42)\n```",
        "Processing is lawful under Art. 6 GDPR.",
    ],
    ids=["table", "code fence", "citation"],
)
def test_structured_dependencies_get_a_larger_allowance(structured: str) -> None:
    filler = "x" * 2000  # over 1000 plain, under 3000 structured
    plain = dependency_context({"s1": done("s1", f"intro\n{filler}")}, SETTINGS)
    rich = dependency_context({"s1": done("s1", f"{structured}\n{filler}")}, SETTINGS)

    assert plain.endswith(TRUNCATION_MARKER)
    assert TRUNCATION_MARKER not in rich
    assert filler in rich
    assert structured in rich


def test_structured_allowance_is_max_message_chars_times_the_multiplier() -> None:
    result = "See Art. 6 GDPR.\n" + "y" * 5000
    text = dependency_context({"s1": done("s1", result)}, SETTINGS)

    limit = int(SETTINGS.max_message_chars * SETTINGS.structured_context_multiplier)
    assert text.endswith(f"\n{TRUNCATION_MARKER}")
    assert len(text) == limit + len(f"\n{TRUNCATION_MARKER}")


def test_one_structured_dependency_raises_the_allowance_for_all() -> None:
    deps = {"s1": done("s1", "z" * 1500), "s2": done("s2", "| a | b |\n|---|---|\n| 1 | 2 |")}
    text = dependency_context(deps, SETTINGS)

    assert TRUNCATION_MARKER not in text
    assert "z" * 1500 in text


@pytest.mark.parametrize(
    "text",
    [
        "| a | b |",
        "  | col | val |  ",
        "```\ncode\n```",
        "Art. 6 GDPR",
        "Article 17 of the regulation",
        "§ 823 BGB",
        "see RFC 9110",
        "doi:10.1000/182",
        "https://doi.org/10.1038/nphys1170",
        "42 U.S.C. § 1983",
        "Brown v. Board of Education",
    ],
)
def test_structured_content_is_recognised(text: str) -> None:
    assert has_structured_content(text)


@pytest.mark.parametrize(
    "text",
    ["Paris is the capital of France.", "a | b in the middle of a line", "", "Version 2.1 shipped in 2024."],
)
def test_plain_text_is_not_structured(text: str) -> None:
    assert not has_structured_content(text)


# --- enriched query


def test_enriched_query_without_history_is_the_goal() -> None:
    assert enriched_query("Compare Paris and Berlin") == "Compare Paris and Berlin"


def test_enriched_query_holds_history_goal_and_follow_ups_in_order() -> None:
    history = [Exchange("What is the capital of France?", "Paris."), Exchange("And Germany?", "Berlin.")]
    query = enriched_query("Compare their populations", history, ["also cover Spain", "use 2023 figures"])

    assert query.startswith("Previous conversation:\n")
    assert "User: What is the capital of France?\nAssistant: Paris." in query
    assert "User: And Germany?\nAssistant: Berlin." in query
    assert "Current request: Compare their populations" in query
    lines = query.splitlines()
    assert "[User follow-up]: also cover Spain" in lines
    assert "[User follow-up]: use 2023 figures" in lines
    order = [
        query.index("Previous conversation:"),
        query.index("Current request:"),
        query.index("[User follow-up]: also cover Spain"),
        query.index("[User follow-up]: use 2023 figures"),
    ]
    assert order == sorted(order)


def test_enriched_query_with_follow_ups_only() -> None:
    query = enriched_query("Compare Paris and Berlin", (), ["also cover Spain"])
    assert query == "Compare Paris and Berlin\n\n[User follow-up]: also cover Spain"
    assert "Previous conversation:" not in query


# --- planner input


def long_history() -> list[Exchange]:
    """About 8000 characters (2000 estimated tokens): over a 1000-token planner input; the last exchange short."""
    long = [Exchange(f"question number {i}", f"answer {i}: " + "lorem ipsum " * 160) for i in range(4)]
    return [*long, Exchange("question number 4", "the short last answer")]


PLANNER_SETTINGS = DagSettings(planner_input_tokens=1000, history_fallback_chars=1000, llm_retries=0)


def registry(smart: ScriptedLLM, fast: ScriptedLLM | None = None) -> ModelRegistry:
    models = ModelRegistry().register("smart", smart, roles=["smart"])
    if fast is not None:
        models.register("fast", fast, roles=["fast"])
    return models


async def test_planner_input_under_budget_is_the_enriched_query() -> None:
    smart, fast = ScriptedLLM({}), ScriptedLLM({"history_summary": "unused"})
    guard = ContextGuard(registry(smart, fast), PLANNER_SETTINGS)
    history = [Exchange("short question", "short answer")]

    text = await guard.planner_input("the goal", history, ["a follow-up"], round=1)

    assert text == enriched_query("the goal", history, ["a follow-up"])
    assert fast.requests == [] and smart.requests == []


async def test_planner_input_over_budget_is_summarized_by_the_fast_model() -> None:
    smart = ScriptedLLM({})
    fast = ScriptedLLM({"history_summary": "SUMMARY: five questions about lorem ipsum"})
    events: list[Event] = []
    guard = ContextGuard(registry(smart, fast), PLANNER_SETTINGS, emit=events.append)

    text = await guard.planner_input("the goal", long_history(), ["also cover Spain"], round=2)

    calls = fast.requests_for("history_summary")
    assert len(calls) == 1
    assert len(fast.requests) == 1 and smart.requests == []
    assert "question number 0" in calls[0].prompt and "question number 4" in calls[0].prompt
    assert calls[0].round == 2
    assert "SUMMARY: five questions about lorem ipsum" in text
    assert "lorem ipsum lorem ipsum" not in text  # the long history itself is gone
    assert "Current request: the goal" in text
    assert text.endswith("[User follow-up]: also cover Spain")
    recorded = [e.call for e in events if isinstance(e, LLMCallRecorded)]
    assert [(c.purpose, c.model, c.error) for c in recorded] == [("history_summary", "fast", None)]


async def test_planner_input_without_a_fast_model_keeps_the_last_characters() -> None:
    smart = ScriptedLLM({})
    guard = ContextGuard(registry(smart), PLANNER_SETTINGS)
    history = long_history()

    text = await guard.planner_input("the goal", history, (), round=1)

    assert smart.requests == []  # no LLM call at all
    assert format_history(history)[-1000:] in text
    assert format_history(history)[-1001:] not in text
    assert "question number 0" not in text
    assert "question number 4" in text  # the last exchange survives
    assert text.endswith("Current request: the goal")
    assert len(text) < 1000 + 200


async def test_planner_input_falls_back_when_the_summary_fails() -> None:
    smart = ScriptedLLM({})
    fast = ScriptedLLM({"history_summary": RuntimeError("fast model is down")})
    guard = ContextGuard(registry(smart, fast), PLANNER_SETTINGS)
    history = long_history()

    text = await guard.planner_input("the goal", history, ["also cover Spain"], round=1)

    assert len(fast.requests_for("history_summary")) == 1
    assert format_history(history)[-1000:] in text
    assert "question number 0" not in text
    assert "fast model is down" not in text
    assert text.endswith("Current request: the goal\n\n[User follow-up]: also cover Spain")


async def test_planner_input_falls_back_when_the_summary_is_empty() -> None:
    fast = ScriptedLLM({"history_summary": "   "})
    guard = ContextGuard(registry(ScriptedLLM({}), fast), PLANNER_SETTINGS)
    history = long_history()

    text = await guard.planner_input("the goal", history, (), round=1)

    assert format_history(history)[-1000:] in text
    assert "question number 0" not in text


# --- context guard: fit

BIG = "HEAD-MARK " + "filler text " * 4000 + " TAIL-MARK"  # ~48000 characters, ~12000 estimated tokens


def guarded(window: int | None, fast: ScriptedLLM | None) -> tuple[ContextGuard, ChatModel, ScriptedLLM]:
    smart = ScriptedLLM({}, context_window=window)
    models = registry(smart, fast)
    return ContextGuard(models, SETTINGS), ChatModel(models.get("smart"), settings=SETTINGS), smart


def test_budget_is_a_share_of_the_window_with_a_floor() -> None:
    guard, model, _ = guarded(100_000, None)
    assert guard.budget(model) == 75_000
    guard, model, _ = guarded(2_000, None)
    assert guard.budget(model) == SETTINGS.context_floor_tokens == 4000
    guard, model, _ = guarded(None, None)
    assert guard.budget(model) is None


async def test_fit_returns_text_that_fits_unchanged() -> None:
    fast = ScriptedLLM({"compaction": "unused"})
    guard, model, smart = guarded(5000, fast)

    assert await guard.fit("a short input", model, task="t", round=1) == "a short input"
    assert fast.requests == [] and smart.requests == []


async def test_fit_over_budget_is_compacted_by_the_fast_model() -> None:
    fast = ScriptedLLM({"compaction": "the compacted facts"})
    guard, model, smart = guarded(5000, fast)

    text = await guard.fit(BIG, model, task="Summarize the filler", round=3, step_id="s2")

    assert text == "the compacted facts"
    calls = fast.requests_for("compaction")
    assert len(calls) == 1 and len(fast.requests) == 1
    assert smart.requests == []
    assert calls[0].step_id == "s2" and calls[0].round == 3
    assert "Summarize the filler" in calls[0].prompt
    assert "HEAD-MARK" in calls[0].prompt and "TAIL-MARK" in calls[0].prompt


async def test_fit_truncates_head_and_tail_when_compaction_fails() -> None:
    fast = ScriptedLLM({"compaction": RuntimeError("fast model is down")})
    guard, model, _ = guarded(5000, fast)

    text = await guard.fit(BIG, model, task="t", round=1)

    assert len(fast.requests_for("compaction")) == 1
    assert "characters omitted" in text
    assert text.startswith("HEAD-MARK") and text.endswith("TAIL-MARK")
    assert text == truncate_middle(BIG, 4000 * 3)
    assert len(text) < len(BIG) / 3


async def test_fit_truncates_when_the_compacted_text_is_still_too_long() -> None:
    fast = ScriptedLLM({"compaction": "still long " * 3000})
    guard, model, _ = guarded(5000, fast)

    text = await guard.fit(BIG, model, task="t", round=1)

    assert "characters omitted" in text
    assert text.startswith("HEAD-MARK")


async def test_fit_truncates_without_a_fast_model() -> None:
    guard, model, smart = guarded(5000, None)

    text = await guard.fit(BIG, model, task="t", round=1)

    assert smart.requests == []
    assert "characters omitted" in text
    assert text.startswith("HEAD-MARK") and text.endswith("TAIL-MARK")


async def test_fit_leaves_text_alone_when_the_window_is_unknown() -> None:
    fast = ScriptedLLM({"compaction": "unused"})
    guard, model, smart = guarded(None, fast)

    assert await guard.fit(BIG, model, task="t", round=1) == BIG
    assert fast.requests == [] and smart.requests == []


# --- truncate_middle


def test_truncate_middle_keeps_short_text() -> None:
    assert truncate_middle("short", 100) == "short"
    assert truncate_middle("x" * 100, 100) == "x" * 100


def test_truncate_middle_keeps_two_thirds_head_and_one_third_tail() -> None:
    text = "".join(f"{i:05d}" for i in range(1000))  # 5000 distinct characters
    cut = truncate_middle(text, 300)

    head, marker, tail = cut.split("\n")
    assert head == text[:200]
    assert tail == text[-100:]
    assert marker == "[... 4700 characters omitted ...]"
