"""Scoring a cell: every scorer run on its case and run, each result a column (a dict's keys its own columns), a
scorer's failure that cell's error rather than the experiment's; and the checks a list of scorers passes.

A scorer is user code run inside the experiment's task: whatever it raises (``KeyboardInterrupt``, ``SystemExit``,
a ``CancelledError`` of its own) is its cell's score error, only the cancellation of the experiment's task (the
user interrupting ``evaluate``) goes on; it has ``scorer_timeout`` seconds; a sync one runs in a thread of its own,
so that the event loop (the kernel's, the other cells') goes on while it works.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from dagmagic._secrets import mask_secrets
from dagmagic.engine.tools.threads import ToolThreads, ToolTimeout
from dagmagic.evaluation.cases import Case
from dagmagic.evaluation.experiment import FIXED_COLUMNS
from dagmagic.evaluation.scorers import ScoreFunction
from dagmagic.settings import DagSettings

if TYPE_CHECKING:
    from dagmagic.engine.run.dag_run import DagRun

__all__ = ["checked_scorers", "score", "scorer_name"]

_THREADS = ToolThreads()
"""The threads sync scorers run in: daemon threads of their own, as sync tools' (a hung one never holds up the
kernel's exit), apart from the tools' (hung scorers never starve a run's tools)."""


def scorer_name(scorer: ScoreFunction) -> str:
    """The column a scorer's result goes to: its ``name`` attribute, else its function's name."""
    return str(getattr(scorer, "name", None) or getattr(scorer, "__name__", None) or type(scorer).__name__)


async def score(
    scorers: Sequence[ScoreFunction], case: Case, run: DagRun, settings: DagSettings
) -> tuple[dict[str, float | bool], dict[str, str]]:
    """Every scorer's result on one cell, and what those that raised, timed out (``settings.scorer_timeout``) or
    returned something else said. Only a cancellation of the calling task (the experiment interrupted) is raised.
    """
    scores: dict[str, float | bool] = {}
    errors: dict[str, str] = {}
    for scorer in scorers:
        name = scorer_name(scorer)
        try:
            scores.update(_columns(name, await _result(scorer, name, case, run, settings)))
        except BaseException as exc:  # SystemExit, KeyboardInterrupt too: a scorer's, never the process's end
            if _interrupted():  # the experiment was cancelled meanwhile: that wins over whatever the scorer did
                if isinstance(exc, asyncio.CancelledError):
                    raise
                raise asyncio.CancelledError from exc
            errors[name] = mask_secrets(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
    return scores, errors


async def _result(scorer: ScoreFunction, name: str, case: Case, run: DagRun, settings: DagSettings) -> Any:
    """What ``scorer`` gave for the cell, within ``scorer_timeout``: an async one awaited here, a sync one called
    in a thread (what it returns awaited here when it is awaitable).
    """
    timeout = settings.scorer_timeout
    if _is_async(scorer):
        result = scorer(case, run)
    else:
        try:
            result, raised = await _THREADS.run(
                f"scorer {name}",
                functools.partial(scorer, case, run),
                {},
                threads=settings.tool_threads,
                timeout=timeout,
            )
        except ToolTimeout as exc:
            raise TimeoutError(f"{exc} (scorer_timeout, DAG_SCORER_TIMEOUT)") from None
        if raised is not None:
            raise raised
    if not inspect.isawaitable(result):
        return result
    deadline = asyncio.timeout(timeout)
    try:
        async with deadline:
            return await result
    except TimeoutError:
        if not deadline.expired():
            raise  # the scorer's own
        raise TimeoutError(
            f"scorer {name} did not finish within {timeout:g}s (scorer_timeout, DAG_SCORER_TIMEOUT)"
        ) from None


def _is_async(scorer: ScoreFunction) -> bool:
    """An ``async def`` scorer (or object with an ``async def __call__``): it runs on the event loop."""
    return inspect.iscoroutinefunction(scorer) or inspect.iscoroutinefunction(type(scorer).__call__)


def _interrupted() -> bool:
    """Whether the task scoring was asked to stop (by ``cancel()``), rather than a scorer raising a cancellation."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


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
