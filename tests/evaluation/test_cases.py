"""Cases from what the user gives: goals, dicts, a DataFrame filling a goal template."""

from __future__ import annotations

import pandas as pd
import pytest

from dagmagic.evaluation.cases import Case, as_cases


def test_goals_and_dicts_become_cases_numbered_in_order() -> None:
    cases = as_cases(["What is 2+2?", {"goal": "Capital of France?", "expected": "Paris", "metadata": {"k": 1}}])
    assert cases == [
        Case(id="c1", goal="What is 2+2?"),
        Case(id="c2", goal="Capital of France?", expected="Paris", metadata={"k": 1}),
    ]


def test_a_dataframe_fills_the_goal_template_and_keeps_the_other_columns() -> None:
    frame = pd.DataFrame({"a": ["cats", "tea"], "b": ["dogs", "coffee"], "expected": ["dogs", "tea"]})
    cases = as_cases(frame, goal="Compare {a} and {b}")
    assert [(case.id, case.goal, case.expected) for case in cases] == [
        ("c1", "Compare cats and dogs", "dogs"),
        ("c2", "Compare tea and coffee", "tea"),
    ]
    assert cases[0].metadata == {"a": "cats", "b": "dogs"}


def test_a_template_naming_a_missing_column_names_it_and_the_columns() -> None:
    frame = pd.DataFrame({"a": ["x"], "b": ["y"]})
    with pytest.raises(ValueError, match=r"names the column c, which the DataFrame lacks; its columns: a, b"):
        as_cases(frame, goal="Compare {a} and {c}")


@pytest.mark.parametrize(
    ("cases", "message"),
    [
        ([{"expected": "x"}], "case c1 has no 'goal'"),
        ([{"goal": "g", "answer": "x"}], "keys a case does not take: answer"),
        ([], "no cases"),
        ("one goal", "must be a list of goals"),
        ([" "], "needs a goal with some text"),
    ],
)
def test_mistakes_are_told_plainly(cases: object, message: str) -> None:
    with pytest.raises((TypeError, ValueError), match=message):
        as_cases(cases)
