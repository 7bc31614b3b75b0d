"""Scorers: what an evaluation asks of each cell's run, one column each.

A scorer is any callable ``(case, run) -> float | bool | dict[str, float | bool]``, sync or async; its column is
``getattr(scorer, "name", None) or scorer.__name__`` and a dict gives one column per key. A scorer that raises
scores that cell as an error; the evaluation goes on. The built-ins here are ``Scorer`` objects with a readable
``name`` and ``repr``:

- against the case's ``expected`` (a case without one is a ``ScorerError``): ``exact_match``, ``contains``,
  ``matches`` (a regex), ``numeric`` (a number within a tolerance);
- on how the answer was reached, read from the run's rounds: ``used_tool``, ``max_rounds``, ``no_failed_steps``.

The LLM-as-judge scorer is ``dagmagic.evaluation.judge.llm_judge``.

"The answer" is the whole of ``run.answer``: the Markdown the run wrote. Comparisons read it as text — Markdown
emphasis (``**``, ``__``, ``*``, ``_``, backticks, ``~~``) and heading marks dropped, whitespace collapsed —
so ``**Paris**`` matches ``Paris``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

from dagmagic.errors import ScorerError
from dagmagic.evaluation.cases import Case
from dagmagic.models import PlanStep, RunState

if TYPE_CHECKING:
    from dagmagic.engine.run.dag_run import DagRun

__all__ = [
    "Score",
    "ScoreFunction",
    "Scorer",
    "contains",
    "exact_match",
    "matches",
    "max_rounds",
    "no_failed_steps",
    "numbers_in",
    "numeric",
    "plain_text",
    "used_tool",
]

Score: TypeAlias = float | bool | dict[str, float | bool]
"""What a scorer gives a cell: a number, a pass/fail, or several named columns."""

ScoreFunction: TypeAlias = Callable[[Case, "DagRun"], Score | Awaitable[Score]]
"""Any scorer: a plain function (sync or async) or a ``Scorer``."""

_EMPHASIS = re.compile(r"(\*\*|__|~~|\*|`)(?=\S)(.{1,500}?)(?<=\S)\1|(?<!\w)_(?=\S)(.{1,500}?)(?<=\S)_(?!\w)")
"""Markdown emphasis around text: bold, italics, strike-through, code (``snake_case`` keeps its underscores).
Within a line and 500 characters, so that an answer full of lone asterisks costs no quadratic search."""
_HEADING_MARK = re.compile(r"^[ \t]{0,3}#{1,6}[ \t]+", re.MULTILINE)
_NUMBER = re.compile(r"(?<![\w.])([-−]?)((?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?)(?!\d)")
"""A plain number: an optional minus, digits with optional comma thousands separators, an optional decimal part.
Not digits inside a word (``s2``, ``H2O``); a hyphen between numbers (``10-20``, ``2026-01-02``) is no minus."""


class Scorer:
    """A named scorer: ``scorer(case, run)`` scores one cell; ``name`` is its column, ``repr`` says its settings."""

    def __init__(self, name: str, score: Callable[[Case, DagRun], Score], *, spec: str | None = None) -> None:
        self.name = name
        self._score = score
        self._spec = spec or name

    def __call__(self, case: Case, run: DagRun) -> Score:
        """The cell's score."""
        return self._score(case, run)

    def __repr__(self) -> str:
        return self._spec


def plain_text(answer: str) -> str:
    """An answer as its words: Markdown emphasis and heading marks dropped, whitespace runs made one space."""
    previous = None
    while previous != answer:  # emphasis nests (``***both***``, ``**_x_**``)
        previous, answer = answer, _EMPHASIS.sub(lambda m: m.group(2) or m.group(3), answer)
    return " ".join(_HEADING_MARK.sub("", answer).split())


def _expected(case: Case, scorer: str) -> Any:
    if case.expected is None:
        raise ScorerError(
            f"{scorer} compares the answer with the case's expected value, and case {case.id!r} has none: "
            "give each case an `expected` (a dict's 'expected' key, or an 'expected' column)"
        )
    return case.expected


def _texts(expected: Any, scorer: str, case: Case) -> list[str]:
    """``expected`` as a list of strings: one string (or number), or a list of them."""
    if isinstance(expected, str | int | float) and not isinstance(expected, bool):
        return [str(expected)]
    if isinstance(expected, Sequence) and not isinstance(expected, str | bytes):
        if not expected:
            raise ScorerError(f"{scorer}: case {case.id!r} expects an empty list; give at least one string")
        return [str(item) for item in expected]
    raise ScorerError(
        f"{scorer}: case {case.id!r} expects a {type(expected).__name__}; give a string or a list of strings"
    )


def _flags(ignore_case: bool) -> str:
    return f"ignore_case={ignore_case}"


def exact_match(*, ignore_case: bool = True, strip: bool = True) -> Scorer:
    """Whether the whole answer is the expected text (or, for a list, one of them).

    ``strip``: compare words, not characters — Markdown emphasis, heading marks, surrounding and repeated
    whitespace and one final period do not count (``**Paris**.`` equals ``Paris``). ``ignore_case``: nor does
    case. An answer that only mentions the expected text is not a match: use ``contains`` for that.
    """

    def normal(text: str) -> str:
        if strip:
            text = plain_text(text).removesuffix(".").rstrip()
        return text.casefold() if ignore_case else text

    def score(case: Case, run: DagRun) -> bool:
        wanted = _texts(_expected(case, "exact_match"), "exact_match", case)
        answer = normal(run.answer)
        return any(answer == normal(text) for text in wanted)

    return Scorer("exact_match", score, spec=f"exact_match({_flags(ignore_case)}, strip={strip})")


def contains(*, ignore_case: bool = True) -> Scorer:
    """Whether the expected text appears in the answer (as a substring of its words: Markdown emphasis and
    line breaks aside); for a list of expected strings, the fraction of them that appear (a float 0..1).
    """

    def normal(text: str) -> str:
        text = plain_text(text)
        return text.casefold() if ignore_case else text

    def score(case: Case, run: DagRun) -> float | bool:
        expected = _expected(case, "contains")
        wanted = _texts(expected, "contains", case)
        answer = normal(run.answer)
        found = [normal(text) in answer for text in wanted]
        single = isinstance(expected, str | int | float)
        return found[0] if single else sum(found) / len(found)

    return Scorer("contains", score, spec=f"contains({_flags(ignore_case)})")


def _compiled(pattern: str | re.Pattern[str], ignore_case: bool, where: str) -> re.Pattern[str]:
    if isinstance(pattern, re.Pattern):
        return pattern
    if not isinstance(pattern, str):
        raise ScorerError(f"matches: {where} is a {type(pattern).__name__}, not a regular expression")
    try:
        return re.compile(pattern, re.IGNORECASE if ignore_case else 0)
    except re.error as exc:
        raise ScorerError(f"matches: {where} {pattern!r} is not a valid regular expression: {exc}") from None


def matches(pattern: str | re.Pattern[str] | None = None, *, ignore_case: bool = True) -> Scorer:
    """Whether the regular expression ``pattern`` (default: each case's ``expected``) is found in the answer —
    as written, or read as text (Markdown emphasis dropped, whitespace collapsed): either one matching is a match.
    A compiled pattern keeps its own flags.
    """
    given = None if pattern is None else _compiled(pattern, ignore_case, "the pattern")

    def score(case: Case, run: DagRun) -> bool:
        regex = given or _compiled(_expected(case, "matches"), ignore_case, f"case {case.id!r}'s expected")
        return bool(regex.search(run.answer) or regex.search(plain_text(run.answer)))

    shown = "" if given is None else f"{given.pattern!r}, "
    return Scorer("matches", score, spec=f"matches({shown}{_flags(ignore_case)})")


def numbers_in(text: str) -> list[float]:
    """The plain numbers in ``text``: ``1,234.5``, ``-3``, ``0.25``, ``$1,000`` (1000). Only comma thousands
    separators and a decimal point; no units or scales (``4.2 M`` is 4.2, ``50%`` is 50), no exponents.
    """
    return [
        float(("-" if sign else "") + digits.replace(",", "")) for sign, digits in _NUMBER.findall(plain_text(text))
    ]


def _expected_numbers(case: Case) -> tuple[list[float], bool]:
    """The numbers a case expects, and whether it expects one (not a list)."""
    expected = _expected(case, "numeric")
    single = not (isinstance(expected, Sequence) and not isinstance(expected, str))
    numbers: list[float] = []
    for item in [expected] if single else expected:
        if isinstance(item, int | float) and not isinstance(item, bool):
            numbers.append(float(item))
            continue
        found = numbers_in(item) if isinstance(item, str) else []
        if len(found) != 1:
            raise ScorerError(f"numeric: case {case.id!r} expects {item!r}, which is not one number")
        numbers.append(found[0])
    if not numbers:
        raise ScorerError(f"numeric: case {case.id!r} expects an empty list; give at least one number")
    return numbers, single


def numeric(tolerance: float = 0.0, *, relative: bool = False) -> Scorer:
    """Whether a number in the answer is within ``tolerance`` of the expected number (absolute, or with
    ``relative`` a fraction of it: ``numeric(0.01, relative=True)`` is within 1%); for a list of expected
    numbers, the fraction of them the answer holds. Numbers are read as ``numbers_in`` reads them.
    """
    if not (isinstance(tolerance, int | float) and math.isfinite(tolerance) and tolerance >= 0):
        raise ValueError(f"numeric(tolerance=...) must be a number of at least 0, got {tolerance!r}")

    def near(found: float, wanted: float) -> bool:
        allowed = tolerance * abs(wanted) if relative else tolerance
        return abs(found - wanted) <= allowed + 1e-12 * max(1.0, abs(wanted))  # decimal fractions aren't exact

    def score(case: Case, run: DagRun) -> float | bool:
        wanted, single = _expected_numbers(case)
        found = numbers_in(run.answer)
        hits = [any(near(number, target) for number in found) for target in wanted]
        return hits[0] if single else sum(hits) / len(hits)

    return Scorer("numeric", score, spec=f"numeric(tolerance={tolerance!r}, relative={relative})")


def _steps(state: RunState) -> Iterator[PlanStep]:
    """Every step of every round, and of every subrun under them."""
    for record in state.rounds:
        for step in record.plan.steps:
            yield step
            if step.subrun_state is not None:
                yield from _steps(step.subrun_state)


def used_tool(name: str) -> Scorer:
    """Whether some step (of any round, or of a subrun) called the tool ``name`` and got an answer from it (a call
    that raised, or whose arguments were invalid, does not count); a tool step's own call counts.
    """

    def score(case: Case, run: DagRun) -> bool:
        return any(call.name == name and call.error is None for step in _steps(run.state) for call in step.tool_calls)

    return Scorer(f"used_tool({name})", score, spec=f"used_tool({name!r})")


def max_rounds(n: int) -> Scorer:
    """Whether the run took at most ``n`` rounds (plan, execute, analyze): 1 means it needed no replan."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"max_rounds(n) needs a whole number of rounds, at least 1; got {n!r}")

    def score(case: Case, run: DagRun) -> bool:
        return len(run.rounds) <= n

    return Scorer(f"max_rounds({n})", score)


def no_failed_steps() -> Scorer:
    """Whether no step failed on the way, in any round or subrun (a step that failed in round 1 counts even
    when a replan then reached the goal); skipped and cancelled steps are not failures.
    """

    def score(case: Case, run: DagRun) -> bool:
        return not any(step.status == "failed" for step in _steps(run.state))

    return Scorer("no_failed_steps", score, spec="no_failed_steps()")
