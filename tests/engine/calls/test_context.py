"""Context: dependency context, the enriched query, and the context guard (compaction and truncation)."""

from __future__ import annotations

import pytest

from dagmagic.engine.calls.context import (
    TRUNCATION_MARKER,
    dependency_context,
    enriched_query,
    format_results,
    has_structured_content,
    result_blocks,
    truncate_middle,
)
from dagmagic.models import Exchange, PlanStep
from dagmagic.settings import DagSettings

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


# --- result blocks


def test_result_blocks_keep_partial_notes_of_a_failed_step_and_say_when_nothing_ran() -> None:
    step = PlanStep(id="s1", task="t", status="failed", result="notes so far", error="ValueError: bad")
    assert result_blocks([("s1", step)], 100) == ["[s1] (failed) t\nResult: notes so far\nError: ValueError: bad"]
    assert format_results([]) == "(no step ran)"


def test_result_blocks_cut_each_result_at_the_limit() -> None:
    step = PlanStep(id="s1", task="t", status="completed", result="x" * 50)
    assert result_blocks([("r1.s1", step)], 10) == ["[r1.s1] (completed) t\nResult: " + "x" * 10 + "... (truncated)"]
