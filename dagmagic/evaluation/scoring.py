"""Scoring a cell: every scorer run on its case and run, each result a column (a dict's keys its own columns), a
scorer's failure that cell's error rather than the experiment's; and the checks a list of scorers passes.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from dagmagic._secrets import mask_secrets
from dagmagic.evaluation.cases import Case
from dagmagic.evaluation.experiment import FIXED_COLUMNS
from dagmagic.evaluation.scorers import ScoreFunction

if TYPE_CHECKING:
    from dagmagic.engine.run.dag_run import DagRun

__all__ = ["checked_scorers", "score", "scorer_name"]


def scorer_name(scorer: ScoreFunction) -> str:
    """The column a scorer's result goes to: its ``name`` attribute, else its function's name."""
    return str(getattr(scorer, "name", None) or getattr(scorer, "__name__", None) or type(scorer).__name__)


async def score(
    scorers: Sequence[ScoreFunction], case: Case, run: DagRun
) -> tuple[dict[str, float | bool], dict[str, str]]:
    """Every scorer's result on one cell, and what those that raised (or returned something else) said."""
    scores: dict[str, float | bool] = {}
    errors: dict[str, str] = {}
    for scorer in scorers:
        name = scorer_name(scorer)
        try:
            result = scorer(case, run)
            if inspect.isawaitable(result):
                result = await result
            scores.update(_columns(name, result))
        except Exception as exc:  # a scorer's failure scores this cell as an error, never the experiment
            errors[name] = mask_secrets(f"{type(exc).__name__}: {exc}")
    return scores, errors


def _columns(name: str, result: Any) -> dict[str, float | bool]:
    if isinstance(result, Mapping):
        return {f"{name}.{key}": _value(f"{name}.{key}", value) for key, value in result.items()}
    return {name: _value(name, result)}


def _value(column: str, value: Any) -> float | bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float) and math.isfinite(value):
        return float(value)
    raise TypeError(f"the scorer {column} returned {value!r}: a scorer returns a number, a bool, or a dict of them")


def checked_scorers(scorers: Iterable[ScoreFunction]) -> list[ScoreFunction]:
    """``scorers`` (or the one scorer given) as a list, once each is callable and their columns are their own."""
    if callable(scorers):
        scorers = [scorers]
    chosen = list(scorers)
    for scorer in chosen:
        if not callable(scorer):
            raise TypeError(f"a scorer is a callable (case, run) -> score; got {type(scorer).__name__}")
    names = [scorer_name(scorer) for scorer in chosen]
    if repeated := sorted({name for name in names if names.count(name) > 1}):
        raise ValueError(f"two scorers are named {', '.join(repeated)}: give one a `name` attribute of its own")
    if taken := [name for name in names if name in FIXED_COLUMNS]:
        raise ValueError(
            f"a scorer is named {taken[0]!r}, as a column every experiment has: give it a `name` attribute of its "
            f"own (the fixed columns are {', '.join(FIXED_COLUMNS)})"
        )
    return chosen
