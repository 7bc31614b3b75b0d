"""The answer checked against the results: figures no source holds, comparisons and rankings their figures
contradict (``engine/calls/verdict_check.py``); precision first, so most cases here are answers that must pass.
"""

from __future__ import annotations

import pytest

from dagmagic.engine.calls.verdict_check import check_answer, order_mismatches, unsupported_figures

RESULTS = [
    "France: 68,401,997 inhabitants (INSEE, 2024).",
    "Germany has 84482267 people; Italy 58.85 million.",
    "Paris: 3,878,100. Unemployment 7.3%. Share of Paris: 0.057",
]


def messages(answer: str, sources: list[str] = RESULTS) -> list[str]:
    return [mismatch.message for mismatch in check_answer(answer, sources)]


# --- figures ---------------------------------------------------------------------------------------------------


def test_a_figure_no_result_holds_is_named() -> None:
    answer = "Together they have 12,480,000 three times: 37,440,000 people."
    assert messages(answer, ["Each has 12,480,000 people."]) == [
        "the answer says 37,440,000, which no step result holds and no tool computed"
    ]


@pytest.mark.parametrize(
    "answer",
    [
        "France has 68,401,997 inhabitants and Germany 84,482,267.",  # separators the result does not write
        "Germany: 84 482 267; France: 68.401.997",  # other thousands separators
        "Paris has about 3.9 million people.",  # rounded
        "Italy has 58,850,000 people, France 68.4 million.",  # trailing zeros, scale words
        "Germany has 84.48M people.",  # an attached scale
        "Unemployment is 7.3 %, and Paris holds 5.7% of France.",  # percentages, from a percent or a fraction
        "1. France\n2. Germany\n3. Italy: 3 steps looked them up.",  # list numbering, small integers
        "In 2024 and 1999, on 2024-03-12 at 10:30, see s1, CO2, version 1.2.3, the 21st.",
        "Read https://example.org/2023/report-123456 or `x = 987654`.",
        "Nothing with a figure.",
    ],
)
def test_figures_from_the_results_or_no_figures_pass(answer: str) -> None:
    assert messages(answer) == []


def test_figures_from_the_goal_pass_when_the_goal_is_a_source() -> None:
    goal = "Is 1,000,000 more than the population of Paris?"
    assert messages("Paris (3,878,100) has less than 1,000,000? No: it has more.", [goal, *RESULTS]) == []


def test_an_answer_more_precise_than_the_results_is_named() -> None:
    assert messages("Italy has 58,850,717 people.") == [
        "the answer says 58,850,717, which no step result holds and no tool computed"
    ]


def test_a_figure_a_tool_computed_passes() -> None:
    assert unsupported_figures("The sum is 152,884,264.", [*RESULTS, "152884264"]) == []


# --- order -----------------------------------------------------------------------------------------------------


def test_a_comparison_its_figures_contradict_is_named() -> None:
    answer = "France has more people than Germany, with 68,401,997 compared to Germany's 84,482,267."
    assert order_mismatches(answer, RESULTS)[0].message == (
        "it says France has more people than Germany, but the results give France 68,401,997 and Germany 84,482,267"
    )


@pytest.mark.parametrize(
    "answer",
    [
        "Germany has more people than France: 84,482,267 against 68,401,997.",
        "Germany has more people than France: France 68,401,997, Germany 84,482,267.",
        "France has fewer people than Germany (68,401,997 vs 84,482,267).",
        "France has more than 60 million people, and Germany 84 million.",  # a bound, not a comparison
        "France does not have more people than Germany: 68,401,997 and 84,482,267.",
        "France has 68,401,997 people, 16,080,270 fewer than Germany's 84,482,267.",
    ],
)
def test_comparisons_the_figures_bear_out_or_that_cannot_be_read_pass(answer: str) -> None:
    assert order_mismatches(answer) == []


def test_a_superlative_its_figures_contradict_is_named() -> None:
    answer = "France is the most populous country, with 68,401,997 people, ahead of Germany (84,482,267)."
    (mismatch,) = order_mismatches(answer)
    assert "France is the most populous" in mismatch.message and "Germany 84,482,267" in mismatch.message


@pytest.mark.parametrize(
    "answer",
    [
        "Germany is the most populous country, with 84,482,267 people, ahead of France (68,401,997).",
        "France is one of the largest countries, with 68,401,997 people; Germany (84,482,267).",
        "Germany is the largest economy, with 84,482,267 people and Italy 58,850,000 kg.",
        "France's most recent census, with 68,401,997 people, follows Germany (84,482,267).",
    ],
)
def test_superlatives_the_figures_bear_out_pass(answer: str) -> None:
    assert order_mismatches(answer) == []


def test_a_ranked_list_out_of_order_is_named() -> None:
    answer = "The most populous countries:\n1. France: 68,401,997\n2. Germany: 84,482,267\n3. Italy: 58.85 million"
    (mismatch,) = order_mismatches(answer)
    assert mismatch.message == "its ranked list puts France before Germany, but 68,401,997 is less than 84,482,267"


@pytest.mark.parametrize(
    "answer",
    [
        "The most populous countries:\n1. Germany: 84,482,267\n2. France: 68,401,997\n3. Italy: 58.85 million",
        "The least populous first:\n1. Italy: 58.85 million\n2. France: 68,401,997\n3. Germany: 84,482,267",
        "Their populations:\n1. France: 68,401,997\n2. Germany: 84,482,267\n3. Italy: 58.85 million",  # no ranking
        "The largest ones:\n- France: 68,401,997\n- Germany: 84,482,267",  # bullets, not said to be ordered
        "Top countries:\n1. France: 68,401,997 (2024: 68,100,000)\n2. Germany: 84,482,267",  # two figures in one
        "Most recent first:\n1. 2024: 68,401,997\n2. 2023: 84,482,267",  # ranked by time, not by the figure
    ],
)
def test_rankings_in_order_or_not_rankings_pass(answer: str) -> None:
    assert order_mismatches(answer) == []


# --- arithmetic shown in the open ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer",
    [
        "Germany has 84,482,267 people against France's 68.4 million, a gap of about 16.1 million.",
        "Germany (84,482,267) and France (68,401,997) have 152,884,264 people together.",
        "Germany has 84,482,267 inhabitants, 23.5% more than France's 68,401,997.",
    ],
)
def test_a_sum_difference_or_ratio_of_two_figures_the_answer_states_and_the_results_hold_passes(answer: str) -> None:
    assert messages(answer) == []


@pytest.mark.parametrize(
    ("answer", "figure"),
    [
        ("Germany has 84,482,267 people against France's 68.4 million, a gap of 18 million.", "18 million"),
        ("12,480,000 three times is 37,440,000.", "37,440,000"),  # a product, not a sum of two
        ("Germany (84,482,267), France (68,401,997), Italy (58.85 million): 211,734,264 in all.", "211,734,264"),
    ],
)
def test_wrong_arithmetic_or_more_than_two_operands_is_named(answer: str, figure: str) -> None:
    assert f"the answer says {figure}, which no step result holds and no tool computed" in messages(
        answer, [*RESULTS, "12,480,000"]
    )
