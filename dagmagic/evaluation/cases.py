"""One case of an evaluation: a goal, what a good answer holds (``expected``), and the user's own labels."""

from __future__ import annotations

import string
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

__all__ = ["Case", "as_cases"]


class Case(BaseModel):
    """A goal to run, with what its answer should hold; scorers receive it with the cell's run."""

    model_config = ConfigDict(frozen=True)

    id: str
    """Stable within an experiment: ``c1``, ``c2``... in the order given, unless the case names its own."""
    goal: str
    """What the run is asked (a DataFrame row's goal is the template filled with the row)."""
    expected: Any = None
    """What a good answer holds (text, a number, a pattern...): the built-in scorers compare against it."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Anything else the user keeps with the case (a DataFrame row's other columns land here)."""


def as_cases(cases: Any, goal: str | None = None) -> list[Case]:
    """The cases of an evaluation from what the user gave: goals (strings), dicts with a ``goal`` (and optional
    ``id``, ``expected``, ``metadata``), ``Case`` objects, or a pandas DataFrame whose rows fill the template
    ``goal`` (``"Compare {a} and {b}"``; an ``expected`` column is the row's expected answer, the other columns its
    metadata). Ids are ``c1``, ``c2``... in order, unless a case names its own.
    """
    if _is_dataframe(cases):
        return _from_dataframe(cases, goal)
    if goal is not None:
        raise TypeError("goal= is a template for the rows of a DataFrame; with other cases, each case holds its goal")
    if isinstance(cases, str | Mapping) or not isinstance(cases, Iterable):
        raise TypeError(
            f"cases must be a list of goals, of dicts with a 'goal', or a pandas DataFrame; got {type(cases).__name__}"
        )
    made = [_case(item, f"c{number}") for number, item in enumerate(cases, start=1)]
    if not made:
        raise ValueError("there are no cases to evaluate: give at least one goal")
    if repeated := sorted({case.id for case in made if [other.id for other in made].count(case.id) > 1}):
        raise ValueError(f"case ids must differ; repeated: {', '.join(repeated)}")
    return made


def _case(item: Any, default_id: str) -> Case:
    if isinstance(item, Case):
        return item
    if isinstance(item, str):
        return Case(id=default_id, goal=_goal(item, default_id))
    if isinstance(item, Mapping):
        if "goal" not in item:
            raise ValueError(f"case {default_id} has no 'goal' (it has {', '.join(map(str, item)) or 'no keys'})")
        unknown = sorted(set(item) - {"id", "goal", "expected", "metadata"})
        if unknown:
            raise ValueError(
                f"case {default_id} has keys a case does not take: {', '.join(map(str, unknown))} "
                "(a case takes goal, expected, metadata and id; put the rest in metadata)"
            )
        try:
            return Case.model_validate({"id": default_id, **item, "goal": _goal(item["goal"], default_id)})
        except ValidationError as exc:
            raise ValueError(f"case {default_id} is not a valid case: {exc.errors()[0]['msg']}") from None
    raise TypeError(f"case {default_id} must be a goal (a string) or a dict with a 'goal'; got {type(item).__name__}")


def _goal(goal: Any, case_id: str) -> str:
    if not isinstance(goal, str) or not goal.strip():
        raise ValueError(f"case {case_id} needs a goal with some text")
    return goal.strip()


def _is_dataframe(value: Any) -> bool:
    """Whether ``value`` is a pandas DataFrame, without importing pandas when it is not loaded."""
    return type(value).__name__ == "DataFrame" and type(value).__module__.startswith("pandas")


def _from_dataframe(frame: Any, goal: str | None) -> list[Case]:
    columns = [str(column) for column in frame.columns]
    if goal is None:
        if "goal" not in columns:
            raise ValueError(
                "a DataFrame of cases needs goal= (a template such as \"Compare {a} and {b}\") or a 'goal' column; "
                f"its columns: {', '.join(columns)}"
            )
        goal = "{goal}"
    fields = [field for _, field, _, _ in string.Formatter().parse(goal) if field is not None]
    if any(not field or not field.isidentifier() for field in fields):
        raise ValueError(f"the goal template {goal!r} must name columns in braces, like {{a}}")
    if missing := [field for field in fields if field not in columns]:
        raise ValueError(
            f"the goal template names the column {', '.join(missing)}, which the DataFrame lacks; "
            f"its columns: {', '.join(columns)}"
        )
    cases = []
    for number, row in enumerate(frame.to_dict("records"), start=1):
        values = {str(key): value for key, value in row.items()}
        text = goal.format(**values)
        case_id = str(values.pop("id", f"c{number}"))
        expected = values.pop("expected", None)
        metadata = {key: value for key, value in values.items() if key != "goal" or goal != "{goal}"}
        cases.append(Case(id=case_id, goal=_goal(text, case_id), expected=expected, metadata=metadata))
    return as_cases(cases)
