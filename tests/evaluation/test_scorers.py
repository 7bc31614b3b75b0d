"""The built-in scorers: against a case's ``expected``, and on how a run reached its answer."""

from __future__ import annotations

import re
from typing import Any

import pytest

from dagmagic import DagSession, DagSettings, ModelRegistry
from dagmagic.engine.run.dag_run import DagRun
from dagmagic.engine.tools.functions import Tool
from dagmagic.errors import ScorerError
from dagmagic.evaluation import (
    Case,
    contains,
    exact_match,
    matches,
    max_rounds,
    no_failed_steps,
    numeric,
    used_tool,
)
from dagmagic.evaluation.scorers import numbers_in, plain_text
from dagmagic.models import RunState
from dagmagic.testing import ScriptedLLM
from tests.engine.conftest import plan_reply, session_for, verdict


def answered(answer: str) -> DagRun:
    """A finished run whose answer is ``answer`` (the built-ins against ``expected`` read nothing else)."""
    return DagRun(RunState(run_id="run-1", goal="the goal", status="done", answer=answer), read_only=True)


def case(expected: Any) -> Case:
    return Case(id="c1", goal="the goal", expected=expected)


def column(scorer: Any) -> str:
    """The column an evaluation names after a scorer (the contract with ``session.evaluate``)."""
    return getattr(scorer, "name", None) or scorer.__name__


# --- what a scorer is called ------------------------------------------------------------------------


def test_each_built_in_has_a_readable_column_name_and_repr() -> None:
    scorers = [exact_match(), contains(ignore_case=False), matches(r"\d+"), matches(), numeric(0.5, relative=True),
               used_tool("search"), max_rounds(2), no_failed_steps()]  # fmt: skip
    assert [column(s) for s in scorers] == [
        "exact_match", "contains", "matches", "matches", "numeric", "used_tool(search)", "max_rounds(2)",
        "no_failed_steps",
    ]  # fmt: skip
    assert [repr(s) for s in scorers] == [
        "exact_match(ignore_case=True, strip=True)",
        "contains(ignore_case=False)",
        "matches('\\\\d+', ignore_case=True)",
        "matches(ignore_case=True)",
        "numeric(tolerance=0.5, relative=True)",
        "used_tool('search')",
        "max_rounds(2)",
        "no_failed_steps()",
    ]


@pytest.mark.parametrize("scorer", [exact_match(), contains(), matches(), numeric()])
def test_a_scorer_that_needs_expected_says_the_case_has_none(scorer: Any) -> None:
    with pytest.raises(ScorerError, match=r"case 'c1' has none: give each case an `expected`") as raised:
        scorer(case(None), answered("Paris"))
    assert column(scorer) in str(raised.value)


# --- the answer read as text ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("markdown", "text"),
    [
        ("**Paris** is _the_ capital", "Paris is the capital"),
        ("***both*** and **_nested_**", "both and nested"),
        ("`code` and ~~gone~~", "code and gone"),
        ("## Heading\n\nText   over\nlines", "Heading Text over lines"),
        ("snake_case_name and a * b * c", "snake_case_name and a * b * c"),  # not emphasis
    ],
)
def test_plain_text_drops_markdown_emphasis_and_collapses_whitespace(markdown: str, text: str) -> None:
    assert plain_text(markdown) == text


# --- exact_match --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "expected", "hit"),
    [
        ("Paris", "Paris", True),
        ("  **Paris**.\n", "Paris", True),  # Markdown, whitespace and a final period do not count
        ("paris", "PARIS", True),
        ("The capital is Paris.", "Paris", False),  # the whole answer: mentioning it is `contains`
        ("Paris, France", ["Paris", "Paris, France"], True),  # a list: any of them
        ("Lyon", ["Paris", "Paris, France"], False),
        ("42", 42, True),
        ("", "Paris", False),
    ],
)
def test_exact_match_compares_the_whole_answer_by_its_words(answer: str, expected: Any, hit: bool) -> None:
    assert exact_match()(case(expected), answered(answer)) is hit


def test_exact_match_can_be_strict_about_case_and_characters() -> None:
    assert exact_match(ignore_case=False)(case("Paris"), answered("paris")) is False
    assert exact_match(strip=False)(case("Paris"), answered("**Paris**")) is False
    assert exact_match(strip=False)(case("Paris"), answered("paris")) is True


# --- contains -----------------------------------------------------------------------------------------


def test_contains_finds_the_expected_text_in_markdown_and_across_line_breaks() -> None:
    assert contains()(case("Paris"), answered("The capital is **Paris**.")) is True
    assert contains()(case("new york"), answered("It is in New\nYork.")) is True
    assert contains()(case("Lyon"), answered("The capital is Paris.")) is False
    assert contains(ignore_case=False)(case("paris"), answered("Paris")) is False


def test_contains_with_a_list_gives_the_fraction_found() -> None:
    score = contains()(case(["Paris", "Seine", "Louvre"]), answered("Paris, on the **Seine**."))
    assert score == pytest.approx(2 / 3)
    assert contains()(case(("Paris",)), answered("Paris")) == 1.0  # a list of one is still a fraction


@pytest.mark.parametrize(("expected", "words"), [([], "expects an empty list"), ({"a": 1}, "expects a dict")])
def test_contains_rejects_an_expected_it_cannot_read(expected: Any, words: str) -> None:
    with pytest.raises(ScorerError, match=words):
        contains()(case(expected), answered("Paris"))


# --- matches ------------------------------------------------------------------------------------------


def test_matches_takes_the_pattern_from_expected_or_from_itself() -> None:
    assert matches()(case(r"\b1[0-9]{3}\b"), answered("It began in 1789.")) is True
    assert matches()(case(r"\b1[0-9]{3}\b"), answered("It began long ago.")) is False
    given = matches(r"began in \d+")
    assert given(case(None), answered("It BEGAN in 1789")) is True  # a given pattern needs no expected
    assert matches(r"began", ignore_case=False)(case(None), answered("BEGAN")) is False
    assert matches(re.compile("BEGAN"))(case(None), answered("began")) is False  # a compiled pattern's own flags


def test_matches_reads_the_answer_as_written_and_as_text() -> None:
    assert matches(r"in 1789")(case(None), answered("in **1789**")) is True  # the text has it
    assert matches(r"\*\*1789\*\*")(case(None), answered("in **1789**")) is True  # the Markdown has it


def test_an_invalid_pattern_is_a_clear_error() -> None:
    with pytest.raises(ScorerError, match=r"matches: the pattern '\(unclosed' is not a valid regular expression"):
        matches("(unclosed")
    with pytest.raises(ScorerError, match=r"case 'c1''s expected '\[a-' is not a valid regular expression"):
        matches()(case("[a-"), answered("a"))


# --- numeric ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "numbers"),
    [
        ("1,234.5 and -3 and $1,000", [1234.5, -3.0, 1000.0]),
        ("**42** people, 4.2 M, 50%", [42.0, 4.2, 50.0]),  # no units or scales
        ("between 10-20, on 2026-01-02", [10.0, 20.0, 2026.0, 1.0, 2.0]),  # a hyphen between numbers is no minus
        ("steps s2 and r1.s3, H2O, v1.2", []),  # digits inside words are not numbers
        ("1,2,3 and 1,2345", [1.0, 2.0, 3.0, 1.0, 2345.0]),  # commas that are not thousands separators
        ("−7.5 (a typographic minus)", [-7.5]),
    ],
)
def test_numbers_in_reads_plain_numbers_with_thousands_separators(text: str, numbers: list[float]) -> None:
    assert numbers_in(text) == numbers


@pytest.mark.parametrize(
    ("scorer", "answer", "expected", "hit"),
    [
        (numeric(), "Revenue was $1,234.5 million.", 1234.5, True),
        (numeric(), "Revenue was $1,234.5 million.", "1,234.5", True),  # expected as text
        (numeric(), "0.30000000000000004", 0.3, True),  # decimal fractions are not exact in binary
        (numeric(), "It was 1,235.", 1234.5, False),
        (numeric(0.5), "It was 1,235.", 1234.5, True),
        (numeric(0.5), "It was 1,236.", 1234.5, False),
        (numeric(0.01, relative=True), "about 99", 100, True),
        (numeric(0.01, relative=True), "about 98", 100, False),
        (numeric(0.01, relative=True), "about -99", -100, True),
        (numeric(), "no number here", 3, False),
    ],
)
def test_numeric_finds_a_number_near_the_expected_one(scorer: Any, answer: str, expected: Any, hit: bool) -> None:
    assert scorer(case(expected), answered(answer)) is hit


def test_numeric_with_a_list_gives_the_fraction_found() -> None:
    assert numeric()(case([68.4, 84.5, 11.7]), answered("France 68.4, Germany 84.5.")) == pytest.approx(2 / 3)


def test_numeric_says_what_is_wrong_with_the_expected_value_or_the_tolerance() -> None:
    with pytest.raises(ScorerError, match=r"case 'c1' expects 'about ten', which is not one number"):
        numeric()(case("about ten"), answered("10"))
    with pytest.raises(ScorerError, match=r"case 'c1' expects '1 or 2', which is not one number"):
        numeric()(case("1 or 2"), answered("1"))
    with pytest.raises(ValueError, match=r"tolerance=...\) must be a number of at least 0, got -1"):
        numeric(-1)


# --- on how the answer was reached: runs made with ScriptedLLM --------------------------------------


def population(country: str) -> float:
    """The population of a country, in millions."""
    if country == "Atlantis":
        raise ValueError("no data for Atlantis")
    return {"France": 68.4}[country]


def tool_plan(country: str) -> dict[str, Any]:
    return {"steps": [{"id": "s1", "task": f"population of {country}", "tool_hint": "population",
                       "tool_args": {"country": country}}]}  # fmt: skip


async def tool_run(country: str) -> DagRun:
    llm = ScriptedLLM({
        "plan": [tool_plan(country)],
        "step": ["I could not find it."],  # a failed tool step runs once as an agent
        "analyze": [verdict(True, 0.9, "ok", "68.4 million")],
        "synthesize": [["68.4 million"]],
    })  # fmt: skip
    registry = ModelRegistry().register("scripted", llm)
    return await DagSession(registry, DagSettings(store="none"), tools=[Tool(population)]).run("How many?")


async def test_used_tool_is_true_when_a_step_called_the_tool_and_got_an_answer() -> None:
    run = await tool_run("France")
    assert run.steps["s1"].tool_calls[0].name == "population"
    assert used_tool("population")(case(None), run) is True
    assert used_tool("weather")(case(None), run) is False


async def test_a_tool_call_that_raised_does_not_count_as_the_tool_used() -> None:
    run = await tool_run("Atlantis")
    (call,) = run.steps["s1"].tool_calls
    assert call.name == "population" and call.error is not None
    assert used_tool("population")(case(None), run) is False


async def test_max_rounds_counts_the_rounds_the_run_took() -> None:
    llm = ScriptedLLM({
        "plan": [plan_reply(("s1", []))],
        "step": ["a result"],
        "analyze": [verdict(False, 0.3, "not yet"), verdict(True, 0.9, "now", "The answer.")],
        "synthesize": [["The answer."]],
    })  # fmt: skip
    run = await session_for(llm).run("goal")
    assert len(run.rounds) == 2
    assert max_rounds(1)(case(None), run) is False
    assert max_rounds(2)(case(None), run) is True
    with pytest.raises(ValueError, match=r"at least 1; got 0"):
        max_rounds(0)


async def test_no_failed_steps_counts_a_step_that_failed_in_any_round() -> None:
    llm = ScriptedLLM({
        "plan": [plan_reply(("s1", []), ("s2", []))],
        "step:s1": ["fine"],
        "step:s2": [RuntimeError("the step broke"), "fine the second time"],
        "analyze": [verdict(False, 0.3, "s2 is missing"), verdict(True, 0.9, "done", "The answer.")],
        "synthesize": [["The answer."]],
    })  # fmt: skip
    run = await session_for(llm).run("goal")
    assert run.rounds[0].plan.step("s2").status == "failed"
    assert all(step.status == "completed" for step in run.rounds[-1].plan.steps)
    assert no_failed_steps()(case(None), run) is False

    clean = ScriptedLLM({
        "plan": [plan_reply(("s1", []))],
        "step": ["fine"],
        "analyze": [verdict(True, 0.9, "done", "The answer.")],
        "synthesize": [["The answer."]],
    })  # fmt: skip
    assert no_failed_steps()(case(None), await session_for(clean).run("goal")) is True
