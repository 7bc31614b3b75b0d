"""``Experiment``: an evaluation's cells (case × config × repetition, each an ordinary stored run) and what they
scored: one row per cell, a summary per config, and a comparison of two configs case by case.
"""

from __future__ import annotations

import asyncio
import importlib
import math
import statistics
import weakref
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from dagmagic.evaluation.cases import Case
from dagmagic.evaluation.configs import ConfigDescription

if TYPE_CHECKING:
    from dagmagic.engine.run.dag_run import DagRun

__all__ = ["CaseComparison", "Cell", "CellStatus", "Comparison", "ConfigSummary", "Experiment", "ScoreSummary"]

CellStatus = Literal["pending", "running", "done", "failed", "cancelled", "not_started"]
"""``pending``: not started yet (``error`` says why when its start was refused: its run driven elsewhere, say);
``running``; then its run's end (``done``, ``failed``, ``cancelled`` when the
evaluation was interrupted: ``resume_evaluation`` continues it); ``not_started``: ``max_cost`` was spent first."""

Score = float | bool
FIXED_COLUMNS = (
    "case_id",
    "goal",
    "config",
    "repetition",
    "status",
    "achieved",
    "confidence",
    "answer",
    "cost",
    "tokens",
    "latency",
    "rounds",
    "run_id",
    "error",
    "score_errors",
)
"""The columns of ``to_dataframe`` besides the scores: no scorer may be named like one."""


class Cell(BaseModel):
    """One cell of an experiment: a case run with a config, one repetition of it, and what it scored."""

    index: int
    """Its place in the grid (cases, then configs, then repetitions)."""
    case_id: str
    config: str
    """The configuration's name."""
    repetition: int
    """1 ... ``repeat``."""
    status: CellStatus = "pending"
    run_id: str | None = None
    """Its run (``dagmagic.load_run(run_id)``, ``session.reopen(run_id)``), once started."""
    achieved: bool | None = None
    """The run's last verdict."""
    confidence: float | None = None
    answer: str = ""
    cost: float | None = None
    """USD, None when no call's price is known."""
    tokens: int = 0
    latency: float | None = None
    """Seconds from the run's start to its end."""
    rounds: int = 0
    scores: dict[str, Score] = Field(default_factory=dict)
    """A column per scorer (``name``, or ``name.key`` for each key of a scorer's dict); a scorer that raised has
    none here and its error in ``score_errors``."""
    score_errors: dict[str, str] = Field(default_factory=dict)
    """Scorer name → what it raised on this cell."""
    error: str | None = None
    """Why the run failed, or why the cell was not started."""

    @property
    def ended(self) -> bool:
        """Whether its run ended (done or failed) and it was scored: an evaluation resumed leaves it as it is."""
        return self.status in ("done", "failed")


class ExperimentDefinition(BaseModel):
    """What the store keeps of an experiment besides its cells: enough to resume it in a new session."""

    model_config = ConfigDict(frozen=True)

    id: str
    name: str
    created_at: float
    cases: list[Case]
    configs: list[str]
    """The configurations' names, in order."""
    scorers: list[str]
    """The scorers' names, in order."""
    repeat: int
    max_cost: float | None = None
    config_descriptions: dict[str, ConfigDescription] = Field(default_factory=dict)
    """What each config ran with (empty in an experiment stored before they were kept): given again otherwise, under
    the same name, it is refused rather than answered with these cells."""


class ScoreSummary(BaseModel):
    """One score's mean over a config's scored cells, with a 95% confidence interval."""

    mean: float
    low: float | None
    """For numbers ``mean - 1.96 * stdev / sqrt(n)`` (a normal approximation; None with fewer than two values);
    for bools, Wilson's interval of the proportion (in [0, 1])."""
    high: float | None
    n: int
    """Cells with this score."""


class ConfigSummary(BaseModel):
    """One config's cells at a glance."""

    config: str
    cells: int
    finished: int
    """Cells whose run ended (done or failed)."""
    failures: int
    """Cells whose run failed."""
    score_errors: int
    """Scores that raised instead of scoring."""
    not_run: int
    """Cells pending, cancelled or not started."""
    scores: dict[str, ScoreSummary]
    cost: float | None
    """USD spent by its cells (None when no price is known)."""
    latency_p50: float | None
    """Median seconds per finished cell."""
    latency_p90: float | None


class CaseComparison(BaseModel):
    """One case under two configs: each one's mean score (over repetitions) and which is better."""

    case_id: str
    goal: str
    a: float | None
    b: float | None
    difference: float | None
    """``b - a``."""
    winner: str | None
    """The config with the higher mean; None on a tie or when one has no score."""


class Comparison(BaseModel):
    """Two configs case by case on one score (``experiment.compare(a, b)``)."""

    a: str
    b: str
    score: str
    cases: list[CaseComparison]
    wins: dict[str, int]
    """Cases each config won, and ``tie``."""

    def to_dataframe(self) -> Any:
        """One row per case (needs pandas)."""
        return _pandas().DataFrame([case.model_dump() for case in self.cases])


class Experiment:
    """An evaluation: its cases, configs and scorers, and its cells as they run (``results``). ``await`` it for
    the end (``session.start_evaluation`` returns it at once); ``cancel()`` interrupts it, keeping the cells that
    finished (``session.resume_evaluation(experiment.id)`` runs the rest).
    """

    def __init__(self, definition: ExperimentDefinition, cells: list[Cell]) -> None:
        self.definition = definition
        self.cells = cells
        self.stopped_reason: str | None = None
        """Why cells were left unstarted (``max_cost`` spent), None when none was."""
        self._task: asyncio.Task[None] | None = None
        self._runs: weakref.WeakValueDictionary[int, DagRun] = weakref.WeakValueDictionary()
        """The cells' runs still in memory (a running one, or one the session keeps), by cell index."""
        self._read_back: Callable[[str], DagRun] | None = None
        """Reads a run back from the store the experiment is recorded in (None: there is none)."""

    @property
    def id(self) -> str:
        """Unique id (``resume_evaluation`` takes it, or the name)."""
        return self.definition.id

    @property
    def name(self) -> str:
        """As given, else ``experiment-`` and the id's start."""
        return self.definition.name

    @property
    def cases(self) -> list[Case]:
        """The cases, with their ids."""
        return self.definition.cases

    @property
    def results(self) -> list[Cell]:
        """One row per cell, in grid order."""
        return list(self.cells)

    def run_of(self, cell: Cell | int) -> DagRun:
        """The run of ``cell`` (a ``Cell`` or its index): the live one while it runs or the session keeps it,
        else read back from the run store (read-only). ``KeyError`` when the cell has no run (not started yet),
        or its run is neither in memory nor stored.
        """
        index = cell.index if isinstance(cell, Cell) else cell
        if not 0 <= index < len(self.cells):
            raise KeyError(f"experiment {self.name!r} has no cell {index} (it has {len(self.cells)})")
        found = self._runs.get(index)
        if found is not None:
            return found
        run_id = self.cells[index].run_id
        if run_id is None:
            raise KeyError(f"cell {index} of experiment {self.name!r} has not started: it has no run yet")
        if self._read_back is None:
            raise KeyError(f"the run {run_id} of cell {index} is no longer in memory and there is no run store")
        return self._read_back(run_id)

    def done(self) -> bool:
        """Whether it is not running (it ended, was interrupted, or never started)."""
        return self._task is None or self._task.done()

    def cancel(self) -> bool:
        """Interrupt it: running cells' runs are cancelled (resumable), finished ones kept."""
        return self._task.cancel() if self._task is not None else False

    async def wait(self) -> Experiment:
        """The experiment once it stopped (ended, or interrupted by ``cancel()``); cancelling the waiter interrupts
        it too, and waits until its running cells were cut, before the cancellation goes on.
        """
        task = self._task
        if task is None:
            return self
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            waiter = asyncio.current_task()
            if waiter is None or not waiter.cancelling():  # cancel() interrupted it, not the waiter's own cancel
                return self
            task.cancel()
            await asyncio.wait([task])
            raise
        return self

    def __await__(self) -> Generator[Any, None, Experiment]:
        return self.wait().__await__()

    # --- reading the results

    def score_columns(self) -> list[str]:
        """Every score column, in the order the scorers were given (a dict scorer's keys as first seen)."""
        columns: list[str] = []
        for name in self.definition.scorers:
            found = {key for cell in self.cells for key in cell.scores if key == name or key.startswith(f"{name}.")}
            seen = [key for cell in self.cells for key in cell.scores if key in found]
            columns.extend(dict.fromkeys(seen) or [name])
        return columns

    def to_dataframe(self) -> Any:
        """One row per cell: case, config, repetition, status, achieved, confidence, a column per score, answer,
        cost, tokens, latency, rounds, run_id, error and score errors (needs pandas).
        """
        columns = self.score_columns()
        goals = {case.id: case.goal for case in self.cases}
        rows = [
            {
                "case_id": cell.case_id,
                "goal": goals.get(cell.case_id, ""),
                "config": cell.config,
                "repetition": cell.repetition,
                "status": cell.status,
                "achieved": cell.achieved,
                "confidence": cell.confidence,
                **{column: cell.scores.get(column) for column in columns},
                "answer": cell.answer,
                "cost": cell.cost,
                "tokens": cell.tokens,
                "latency": cell.latency,
                "rounds": cell.rounds,
                "run_id": cell.run_id,
                "error": cell.error,
                "score_errors": "; ".join(f"{name}: {text}" for name, text in cell.score_errors.items()) or None,
            }
            for cell in self.cells
        ]
        return _pandas().DataFrame(rows)

    def summary(self) -> dict[str, ConfigSummary]:
        """Per config: each score's mean with a 95% confidence interval, cost, latency percentiles, failures.
        A number's interval is mean ± 1.96·stdev/√n (a normal approximation: with few cells it is narrower than a
        t-interval); a bool score is a proportion (1.0 or 0.0 each), its interval Wilson's, which stays in [0, 1].
        """
        summaries = {}
        columns = self.score_columns()
        for config in self.definition.configs:
            cells = [cell for cell in self.cells if cell.config == config]
            finished = [cell for cell in cells if cell.ended]
            costs = [cell.cost for cell in cells if cell.cost is not None]
            latencies = sorted(cell.latency for cell in finished if cell.latency is not None)
            summaries[config] = ConfigSummary(
                config=config,
                cells=len(cells),
                finished=len(finished),
                failures=sum(cell.status == "failed" for cell in cells),
                score_errors=sum(len(cell.score_errors) for cell in cells),
                not_run=len(cells) - len(finished),
                scores={
                    column: _score_summary(values)
                    for column in columns
                    if (values := [cell.scores[column] for cell in finished if column in cell.scores])
                },
                cost=sum(costs) if costs else None,
                latency_p50=_percentile(latencies, 0.5),
                latency_p90=_percentile(latencies, 0.9),
            )
        return summaries

    def compare(self, a: str, b: str, *, score: str | None = None) -> Comparison:
        """Configs ``a`` and ``b`` case by case on ``score`` (default: the first score column): each one's mean
        over the case's repetitions, the difference ``b - a``, and which config wins each case.
        """
        for config in (a, b):
            if config not in self.definition.configs:
                raise ValueError(
                    f"no config {config!r} in this experiment; it has {', '.join(self.definition.configs)}"
                )
        columns = self.score_columns()
        if score is None:
            if not columns:
                raise ValueError("this experiment has no scores to compare: give it scorers=")
            score = columns[0]
        elif score not in columns:
            raise ValueError(f"no score {score!r} in this experiment; it has {', '.join(columns) or 'none'}")
        cases, wins = [], {a: 0, b: 0, "tie": 0}
        for case in self.cases:
            means = [self._mean(case.id, config, score) for config in (a, b)]
            difference = means[1] - means[0] if means[0] is not None and means[1] is not None else None
            winner = None if not difference else (b if difference > 0 else a)
            if difference is not None:
                wins[winner or "tie"] += 1
            cases.append(
                CaseComparison(
                    case_id=case.id, goal=case.goal, a=means[0], b=means[1], difference=difference, winner=winner
                )
            )
        return Comparison(a=a, b=b, score=score, cases=cases, wins=wins)

    def _mean(self, case_id: str, config: str, score: str) -> float | None:
        values = [
            float(cell.scores[score])
            for cell in self.cells
            if cell.case_id == case_id and cell.config == config and score in cell.scores
        ]
        return statistics.fmean(values) if values else None

    def __repr__(self) -> str:
        counts: dict[str, int] = {}
        for cell in self.cells:
            counts[cell.status] = counts.get(cell.status, 0) + 1
        state = ", ".join(f"{count} {status}" for status, count in counts.items())
        stopped = f"; {self.stopped_reason}" if self.stopped_reason else ""
        return f"Experiment({self.name!r}, {len(self.cells)} cells: {state}{stopped})"  # no id: nbval compares it


def _score_summary(scores: list[Score]) -> ScoreSummary:
    values = [float(score) for score in scores]
    mean = statistics.fmean(values)
    n = len(values)
    if all(isinstance(score, bool) for score in scores):
        low, high = _wilson(mean, n)
        return ScoreSummary(mean=mean, low=low, high=high, n=n)
    if n < 2:
        return ScoreSummary(mean=mean, low=None, high=None, n=n)
    half = 1.96 * statistics.stdev(values) / math.sqrt(n)
    return ScoreSummary(mean=mean, low=mean - half, high=mean + half, n=n)


def _wilson(proportion: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson's 95% interval of a proportion seen in ``n`` trials: in [0, 1], and not empty at 0 or 1."""
    centre = (proportion + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(proportion * (1 - proportion) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(centre - half, 0.0), min(centre + half, 1.0)


def _percentile(ordered: list[float], fraction: float) -> float | None:
    """Linear interpolation between the closest ranks (numpy's default), of values sorted already."""
    if not ordered:
        return None
    place = fraction * (len(ordered) - 1)
    below = math.floor(place)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (place - below)


def _pandas() -> Any:
    try:
        return importlib.import_module("pandas")
    except ImportError:
        raise ImportError("to_dataframe() needs pandas: pip install pandas (results holds the same rows)") from None
