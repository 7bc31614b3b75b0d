"""Running an experiment's cells: each an ordinary run of the session (outside its conversation: cells never see
each other's answers), at most ``concurrency`` at once, scored as each ends, each change recorded in the store so
that ``resume_evaluation`` finds the experiment after an interrupt or in a new session.

A cell whose run was cut mid-run (the evaluation cancelled, the kernel gone) is resumed like any run
(``session.start_resume``); one that never started is started; one whose run ended is kept as it is.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from dagmagic.engine.run import DagRun
from dagmagic.errors import DagError
from dagmagic.evaluation.cases import Case, as_cases
from dagmagic.evaluation.configs import Config, as_configs
from dagmagic.evaluation.experiment import Cell, Experiment, ExperimentDefinition
from dagmagic.evaluation.judge import LLMJudge
from dagmagic.evaluation.scorers import ScoreFunction
from dagmagic.llm.secrets import mask_secrets

if TYPE_CHECKING:
    from dagmagic.engine.session import DagSession
    from dagmagic.engine.store import RunStore

__all__ = ["CellListener", "Evaluation", "score", "scorer_name"]

log = logging.getLogger("dagmagic")

CellListener = Callable[[Cell], None]
"""Told of each change of a cell (started, ended, not started) with a copy of the cell as it is then, for a view
that follows the experiment."""


def scorer_name(scorer: ScoreFunction) -> str:
    """The column a scorer's result goes to: its ``name`` attribute, else its function's name."""
    return str(getattr(scorer, "name", None) or getattr(scorer, "__name__", None) or type(scorer).__name__)


class Evaluation:
    """An experiment being run by a session: its configs and scorers (not stored: a new session gives them again
    to resume it), and the task that runs its cells.
    """

    def __init__(
        self,
        session: DagSession,
        experiment: Experiment,
        configs: Sequence[Config],
        scorers: Sequence[ScoreFunction],
    ) -> None:
        self.session = session
        self.experiment = experiment
        self.configs = {config.name: config for config in configs}
        # a judge given no models grades with the session's: every config's answers by the same judge
        self.scorers = [
            scorer.bound_to(session.models, session.settings) if isinstance(scorer, LLMJudge) else scorer
            for scorer in scorers
        ]
        self._running: dict[int, DagRun] = {}
        self._recorded_cost = sum(cell.cost or 0.0 for cell in experiment.cells)
        """The cells' costs as recorded (kept as they change: checking the budget stays O(running cells))."""

    @classmethod
    def new(
        cls,
        session: DagSession,
        cases: Any,
        *,
        goal: str | None,
        configs: Mapping[str, Any] | None,
        scorers: Iterable[ScoreFunction],
        repeat: int,
        max_cost: float | None,
        name: str | None,
    ) -> Evaluation:
        """An experiment of ``cases`` × ``configs`` × ``repeat``, recorded in the session's store, not started."""
        if not isinstance(repeat, int) or repeat < 1:
            raise ValueError(f"repeat must be a whole number of at least 1, got {repeat!r}")
        if max_cost is not None:
            _check_budget(max_cost)
        made_cases = as_cases(cases, goal)
        made_configs = as_configs(configs, session)
        chosen = _scorers(scorers)
        experiment_id = uuid.uuid4().hex[:12]
        definition = ExperimentDefinition(
            id=experiment_id,
            name=name or f"experiment-{experiment_id[:6]}",
            created_at=time.time(),
            cases=made_cases,
            configs=[config.name for config in made_configs],
            scorers=[scorer_name(scorer) for scorer in chosen],
            repeat=repeat,
            max_cost=max_cost,
        )
        cells = [
            Cell(index=index, case_id=case.id, config=config.name, repetition=repetition)
            for index, (case, config, repetition) in enumerate(
                (case, config, repetition)
                for case in made_cases
                for config in made_configs
                for repetition in range(1, repeat + 1)
            )
        ]
        evaluation = cls(session, Experiment(definition, cells), made_configs, chosen)
        if (store := evaluation.store) is not None:  # a case's metadata may hold anything: stored as its text
            store.save_experiment(
                experiment_id, definition.name, definition.created_at, definition.model_dump_json(fallback=str)
            )
            for cell in cells:
                store.save_experiment_cell(experiment_id, cell.index, cell.model_dump_json())
        return evaluation

    @classmethod
    def stored(
        cls,
        session: DagSession,
        name_or_id: str,
        configs: Mapping[str, Any] | None,
        scorers: Iterable[ScoreFunction] | None,
    ) -> Evaluation:
        """The experiment ``name_or_id`` read back from the session's store, with the configs and scorers given
        again (their names must be the experiment's).
        """
        store = session.store
        found = store.load_experiment(name_or_id) if store is not None else None
        if found is None:
            where = f"the run store {store.path}" if store is not None else f"memory ({session.store_problem()})"
            raise DagError(f"no experiment named or numbered {name_or_id!r} in {where}")
        definition = ExperimentDefinition.model_validate_json(found[0])
        cells = [Cell.model_validate_json(data) for data in found[1]]
        return cls.again(session, Experiment(definition, cells), configs, scorers)

    @classmethod
    def again(
        cls,
        session: DagSession,
        experiment: Experiment,
        configs: Mapping[str, Any] | None,
        scorers: Iterable[ScoreFunction] | None,
        previous: Evaluation | None = None,
    ) -> Evaluation:
        """``experiment`` with the configs and scorers given (their names must be its own); those not given are
        ``previous``'s (an evaluation of this session), else the session's own config and no scorer.
        """
        definition = experiment.definition
        if not experiment.done():
            raise DagError(f"experiment {definition.name!r} is running already")
        made_configs = list(previous.configs.values()) if configs is None and previous else as_configs(configs, session)
        if sorted(config.name for config in made_configs) != sorted(definition.configs):
            wanted = ", ".join(definition.configs)
            hint = "" if configs is not None else ": pass configs= with those names, as when it started"
            raise DagError(f"experiment {definition.name!r} ran with the configs {wanted}{hint}")
        chosen = previous.scorers if scorers is None and previous else _scorers(scorers or ())
        if sorted(map(scorer_name, chosen)) != sorted(definition.scorers):
            wanted = ", ".join(definition.scorers) or "none"
            raise DagError(
                f"experiment {definition.name!r} was scored by {wanted}: pass scorers= with those, as when it started"
            )
        return cls(session, experiment, made_configs, chosen)

    @property
    def store(self) -> RunStore | None:
        """Where the experiment is recorded: the session's run store (None when it is off)."""
        return self.session.store

    def raise_budget(self, max_cost: float) -> None:
        """Let the experiment spend up to ``max_cost`` USD in all from now on (its cells so far count)."""
        _check_budget(max_cost)
        definition = self.experiment.definition.model_copy(update={"max_cost": max_cost})
        self.experiment.definition = definition
        if (store := self.store) is not None:
            store.save_experiment(
                definition.id, definition.name, definition.created_at, definition.model_dump_json(fallback=str)
            )

    def start(self, concurrency: int | None, on_cell: CellListener | None) -> Experiment:
        """Run the cells not ended yet as a task of the running loop; the experiment, at once."""
        limit = concurrency if concurrency is not None else self.session.settings.max_concurrency
        if not isinstance(limit, int) or limit < 1:
            raise ValueError(f"concurrency must be a whole number of at least 1, got {concurrency!r}")
        experiment = self.experiment
        if not experiment.done():
            raise DagError(f"experiment {experiment.name!r} is running already")
        experiment.stopped_reason = None
        task = asyncio.get_running_loop().create_task(
            self._run(asyncio.Semaphore(limit), on_cell), name=f"dagmagic:evaluation:{experiment.id}"
        )
        experiment._task = task
        experiment._read_back = self._read_back
        return experiment

    async def _run(self, cap: asyncio.Semaphore, on_cell: CellListener | None) -> None:
        cases = {case.id: case for case in self.experiment.cases}
        todo = [cell for cell in self.experiment.cells if not cell.ended]
        for cell in todo:
            if cell.status == "not_started":
                self._change(cell, on_cell, status="pending", error=None)
        async with asyncio.TaskGroup() as group:
            for cell in todo:
                group.create_task(
                    self._cell(cell, cases[cell.case_id], cap, on_cell),
                    name=f"dagmagic:cell:{self.experiment.id}:{cell.index}",
                )
        unstarted = sum(cell.status == "not_started" for cell in self.experiment.cells)
        if unstarted and self.experiment.definition.max_cost is not None:
            self.experiment.stopped_reason = (
                f"max_cost ${self.experiment.definition.max_cost:g} was spent (${self._spent():.4g}): "
                f"{unstarted} cell{'s' if unstarted > 1 else ''} not started; "
                "resume_evaluation with a higher max_cost runs them"
            )

    async def _cell(self, cell: Cell, case: Case, cap: asyncio.Semaphore, on_cell: CellListener | None) -> None:
        async with cap:
            max_cost = self.experiment.definition.max_cost
            if max_cost is not None and self._spent() >= max_cost:
                reason = f"not started: max_cost ${max_cost:g} was spent"
                self._change(cell, on_cell, status="not_started", error=reason)
                return
            try:
                run = self._start(cell, case)
            except (DagError, ValueError) as exc:  # its run is driven elsewhere, say: it stays to run later
                self._change(cell, on_cell, status="pending", error=f"not started: {mask_secrets(str(exc))}")
                return
            self._running[cell.index] = run
            self.experiment._runs[cell.index] = run
            try:
                self._change(cell, on_cell, status="running", run_id=run.run_id)
                await run.wait(cancel_with_waiter=True)
            finally:
                del self._running[cell.index]
                if run.status == "cancelled" or not run.done():
                    self._change(cell, on_cell, status="cancelled", **_measures(run))
            if run.status in ("done", "failed"):
                scores, errors = await score(self.scorers, case, run)
                self._change(cell, on_cell, status=run.status, scores=scores, score_errors=errors, **_measures(run))

    def _start(self, cell: Cell, case: Case) -> DagRun:
        """The cell's run: continued where it was cut, read back when it ended (its scoring was cut), else new."""
        options = self.configs[cell.config].options()
        store = self.store
        stored = store.summary(cell.run_id) if store is not None and cell.run_id is not None else None
        if stored is None:
            return self.session.start(case.goal, conversation=False, **options)
        if stored.status in ("done", "failed"):
            return self.session.reopen(stored.run_id, **options)
        return self.session.start_resume(stored.run_id, **options)

    def _read_back(self, run_id: str) -> DagRun:
        """A cell's run from the session's memory, else read back from its store (read-only)."""
        for run in reversed(self.session.runs):
            if run.run_id == run_id:
                return run
        store = self.store
        if store is None:
            raise KeyError(f"the run {run_id} is no longer in memory and there is no run store")
        stored = store.load(run_id)
        return DagRun(stored.state, events=stored.events, read_only=True)

    def _spent(self) -> float:
        """USD spent by the cells so far, those running included (a resumed run's cost includes its past)."""
        cells = self.experiment.cells
        running = sum((run.cost or 0.0) - (cells[index].cost or 0.0) for index, run in self._running.items())
        return self._recorded_cost + running

    def _change(self, cell: Cell, on_cell: CellListener | None, **changes: Any) -> None:
        """Change the cell, record it, and tell the listener."""
        if "cost" in changes:
            self._recorded_cost += (changes["cost"] or 0.0) - (cell.cost or 0.0)
        for field, value in changes.items():
            setattr(cell, field, value)
        if (store := self.store) is not None:
            store.save_experiment_cell(self.experiment.id, cell.index, cell.model_dump_json())
        if on_cell is not None:
            try:
                on_cell(cell.model_copy())  # the cell as it is now: a listener may keep it
            except Exception:  # a view's failure must not stop the experiment
                log.exception("[dagmagic] on_cell failed on cell %s", cell.index)


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


def _scorers(scorers: Iterable[ScoreFunction]) -> list[ScoreFunction]:
    if callable(scorers):
        scorers = [scorers]
    chosen = list(scorers)
    for scorer in chosen:
        if not callable(scorer):
            raise TypeError(f"a scorer is a callable (case, run) -> score; got {type(scorer).__name__}")
    names = [scorer_name(scorer) for scorer in chosen]
    if repeated := sorted({name for name in names if names.count(name) > 1}):
        raise ValueError(f"two scorers are named {', '.join(repeated)}: give one a `name` attribute of its own")
    return chosen


def _check_budget(max_cost: Any) -> None:
    if isinstance(max_cost, bool) or not isinstance(max_cost, int | float) or not max_cost > 0:
        raise ValueError(f"max_cost must be a positive number of USD, got {max_cost!r}")


def _measures(run: DagRun) -> dict[str, Any]:
    """What a cell shows of its run."""
    finished = run.state.finished_at
    return {
        "achieved": run.achieved,
        "confidence": run.confidence,
        "answer": run.answer,
        "cost": run.cost,
        "tokens": run.usage.total_tokens,
        "latency": finished - run.state.started_at if finished is not None else None,
        "rounds": len(run.rounds),
        "error": run.state.error,
    }
