"""Running an experiment's cells: each an ordinary run of the session (outside its conversation: cells never see
each other's answers), at most ``concurrency`` at once, scored as each ends, each change recorded in the store so
that ``resume_evaluation`` finds the experiment after an interrupt or in a new session.

A cell whose run was cut mid-run (the evaluation cancelled, the kernel gone) is resumed like any run
(``session.start_resume``); one that never started is started; one whose run ended is kept as it is.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
import logging
import math
import secrets
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from dagmagic._secrets import mask_secrets
from dagmagic.engine.run.dag_run import DagRun
from dagmagic.errors import DagError
from dagmagic.evaluation.cases import Case, as_cases
from dagmagic.evaluation.configs import Config, as_configs
from dagmagic.evaluation.experiment import FIXED_COLUMNS, Cell, Experiment, ExperimentDefinition
from dagmagic.evaluation.judge import LLMJudge
from dagmagic.evaluation.scorers import ScoreFunction
from dagmagic.store import lease

if TYPE_CHECKING:
    from dagmagic.session import DagSession
    from dagmagic.store import RunStore

__all__ = ["CellListener", "Evaluation", "load_experiment", "score", "scorer_name"]

log = logging.getLogger("dagmagic")

SHARED_POLL_SECONDS = 1.0
"""How often a worker of a shared experiment looks again at the cells other workers hold, until all ended."""

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
        self.shard: tuple[int, int] | None = None
        """``(i, n)``: this worker is one of ``n`` sharing the experiment through the store, its own part the cells
        whose index is ``i`` modulo ``n`` (it takes the others' too once its own are done: a dead worker's)."""
        self._token = secrets.token_hex(8)
        """This worker's claims on cells (a shared experiment's)."""

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
        shard: tuple[int, int] | None = None,
    ) -> Evaluation:
        """An experiment of ``cases`` × ``configs`` × ``repeat``, recorded in the session's store, not started.
        With ``shard``, the experiment of that name and definition in the store, made if no worker made it yet.
        """
        if shard is not None:
            _check_shard(shard, name, session)
        if not isinstance(repeat, int) or repeat < 1:
            raise ValueError(f"repeat must be a whole number of at least 1, got {repeat!r}")
        if max_cost is not None:
            _check_budget(max_cost)
        made_cases = as_cases(cases, goal)
        made_configs = as_configs(configs, session)
        chosen = _scorers(scorers)
        scorer_names = [scorer_name(scorer) for scorer in chosen]
        if shard is not None:
            experiment_id = _shared_id(
                name or "", made_cases, [config.name for config in made_configs], scorer_names, repeat
            )
            store = session.store
            if store is not None and store.experiment_id(experiment_id) is not None:
                joined = cls.stored(session, experiment_id, configs if configs is not None else None, chosen)
                joined.shard = shard
                return joined
        else:
            experiment_id = uuid.uuid4().hex[:12]
        definition = ExperimentDefinition(
            id=experiment_id,
            name=name or f"experiment-{experiment_id[:6]}",
            created_at=time.time(),
            cases=made_cases,
            configs=[config.name for config in made_configs],
            scorers=scorer_names,
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
        evaluation.shard = shard
        shared = shard is not None  # another worker may have recorded it meanwhile: what it wrote stays
        if (store := evaluation.store) is not None:  # a case's metadata may hold anything: stored as its text
            store.save_experiment(
                experiment_id,
                definition.name,
                definition.created_at,
                definition.model_dump_json(fallback=str),
                if_missing=shared,
            )
            for cell in cells:
                store.save_experiment_cell(
                    experiment_id, cell.index, cell.model_dump_json(), cell.status, cell.cost, if_missing=shared
                )
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
        if self.shard is not None:
            await self._run_shared(cap, on_cell)
            self._note_unstarted()
            return
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
        self._note_unstarted()

    def _note_unstarted(self) -> None:
        """Say why cells were left unstarted, when a budget left some."""
        unstarted = sum(cell.status == "not_started" for cell in self.experiment.cells)
        if unstarted and self.experiment.definition.max_cost is not None:
            self.experiment.stopped_reason = (
                f"max_cost ${self.experiment.definition.max_cost:g} was spent (${self._spent():.4g}): "
                f"{unstarted} cell{'s' if unstarted > 1 else ''} not started; "
                "resume_evaluation with a higher max_cost runs them"
            )

    async def _run_shared(self, cap: asyncio.Semaphore, on_cell: CellListener | None) -> None:
        """Run the cells with the other workers of a shared experiment: each cell claimed in the store before it
        runs (so each runs once); this worker's part first, and once it ran, any cell not ended that no live worker
        holds (a late worker's, or a dead one's, its cut run resumed); until every cell has ended. The cells read back
        from the store show what the others did.
        """
        assert self.shard is not None
        store = self.store
        if store is None:
            raise DagError("a shared experiment needs its run store")
        index, workers = self.shard
        cases = {case.id: case for case in self.experiment.cases}
        keeping = asyncio.get_running_loop().create_task(self._keep_in_touch(store, on_cell))
        self._read_cells(store)
        for cell in self.experiment.cells:  # left unstarted by a budget: this run's budget decides again
            if cell.status == "not_started":
                self._change(cell, on_cell, status="pending", error=None)
        own_part_tried = False
        try:
            while True:
                self._read_cells(store, on_cell)
                todo = [cell for cell in self.experiment.cells if not cell.ended and cell.status != "not_started"]
                if not todo:
                    return
                if not own_part_tried:  # another worker's part waits until this one's ran: it may be starting still
                    own_part_tried = True
                    todo = [cell for cell in todo if cell.index % workers == index] or todo
                async with asyncio.TaskGroup() as group:
                    for cell in todo:
                        claim = partial(self._claimed, store)
                        group.create_task(self._cell(cell, cases[cell.case_id], cap, on_cell, claim))
                if all(cell.ended or cell.status == "not_started" for cell in self.experiment.cells):
                    self._read_cells(store, on_cell)
                    return
                await asyncio.sleep(SHARED_POLL_SECONDS)  # the rest is held by live workers: see what they did
        finally:
            keeping.cancel()

    async def _claimed(self, store: RunStore, cell: Cell) -> bool:
        """Whether this worker took ``cell`` (under the cap, just before running it): refreshed as the last worker
        left it, so that its run is resumed rather than started again.
        """
        if not await store.claim_experiment_cell(self.experiment.id, cell.index, self._token):
            return False
        self._read_cell(store, cell)
        return not cell.ended

    async def _keep_in_touch(self, store: RunStore, on_cell: CellListener | None) -> None:
        """While this worker runs: its claims renewed, and what the other workers did read back (the listener told
        of each cell they changed), so that a view of the experiment here shows them all.
        """
        renewed = time.monotonic()
        while True:
            await asyncio.sleep(SHARED_POLL_SECONDS)
            if time.monotonic() - renewed >= lease.HEARTBEAT_SECONDS:
                store.renew_experiment_cells(self.experiment.id, self._token)
                renewed = time.monotonic()
            self._read_cells(store, on_cell)

    def _read_cells(self, store: RunStore, on_cell: CellListener | None = None) -> None:
        """The cells not running here, as the store holds them now (what the other workers did); the listener is
        told of each one that changed.
        """
        found = store.load_experiment(self.experiment.id)
        if found is None:
            return
        for cell, data in zip(self.experiment.cells, found[1], strict=False):
            if cell.index in self._running:
                continue
            stored = Cell.model_validate_json(data)
            if stored != cell:
                _update(cell, stored)
                self._tell(cell, on_cell)
        self._recorded_cost = sum(cell.cost or 0.0 for cell in self.experiment.cells)

    def _read_cell(self, store: RunStore, cell: Cell) -> None:
        data = store.read_experiment_cell(self.experiment.id, cell.index)
        if data is not None:
            before = cell.cost or 0.0
            _update(cell, Cell.model_validate_json(data))
            self._recorded_cost += (cell.cost or 0.0) - before

    async def _cell(
        self,
        cell: Cell,
        case: Case,
        cap: asyncio.Semaphore,
        on_cell: CellListener | None,
        claim: Callable[[Cell], Awaitable[bool]] | None = None,
    ) -> None:
        async with cap:
            if claim is not None and not await claim(cell):
                return  # another worker holds it, or it ended meanwhile
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
        """USD spent by the cells so far, those running here included (a resumed run's cost includes its past);
        for a shared experiment, every worker's cells as recorded.
        """
        cells = self.experiment.cells
        running = sum((run.cost or 0.0) - (cells[index].cost or 0.0) for index, run in self._running.items())
        store = self.store
        recorded = self._recorded_cost
        if self.shard is not None and store is not None:
            recorded = store.experiment_spent(self.experiment.id)
        return recorded + running

    def _change(self, cell: Cell, on_cell: CellListener | None, **changes: Any) -> None:
        """Change the cell, record it, and tell the listener."""
        if "cost" in changes:
            self._recorded_cost += (changes["cost"] or 0.0) - (cell.cost or 0.0)
        for field, value in changes.items():
            setattr(cell, field, value)
        if (store := self.store) is not None:
            store.save_experiment_cell(self.experiment.id, cell.index, cell.model_dump_json(), cell.status, cell.cost)
        self._tell(cell, on_cell)

    @staticmethod
    def _tell(cell: Cell, on_cell: CellListener | None) -> None:
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
    if taken := [name for name in names if name in FIXED_COLUMNS]:
        raise ValueError(
            f"a scorer is named {taken[0]!r}, as a column every experiment has: give it a `name` attribute of its "
            f"own (the fixed columns are {', '.join(FIXED_COLUMNS)})"
        )
    return chosen


def load_experiment(name_or_id: str, store: str | None = None) -> Experiment:
    """An experiment read back from the run store (``store``, default ``DAG_STORE``) as it is now, in any kernel:
    every worker's cells; ``run_of(cell)`` reads a cell's run back. To run the cells that did not end,
    ``session.resume_evaluation``. ``KeyError`` when there is no experiment of that name or id.
    """
    from dagmagic.errors import ConfigurationError
    from dagmagic.settings import DagSettings
    from dagmagic.store import RunStore

    path = store if store is not None else DagSettings().store_path
    if path is None:
        raise ConfigurationError("there is no run store: DAG_STORE is none; pass store= a path to read one")
    opened = RunStore.open(path)
    found = opened.load_experiment(name_or_id)
    if found is None:
        raise KeyError(f"no experiment named or numbered {name_or_id!r} in the run store {opened.path}")
    experiment = Experiment(
        ExperimentDefinition.model_validate_json(found[0]), [Cell.model_validate_json(data) for data in found[1]]
    )

    def read_back(run_id: str) -> DagRun:
        stored = opened.load(run_id)
        return DagRun(stored.state, events=stored.events, read_only=True)

    experiment._read_back = read_back
    return experiment


def _update(cell: Cell, stored: Cell) -> None:
    """``cell`` becomes ``stored`` in place (views and the experiment hold this object)."""
    for field in Cell.model_fields:
        setattr(cell, field, getattr(stored, field))


def _check_shard(shard: Any, name: str | None, session: DagSession) -> None:
    if (
        not isinstance(shard, tuple)
        or len(shard) != 2
        or not all(isinstance(part, int) and not isinstance(part, bool) for part in shard)
        or not 0 <= shard[0] < shard[1]
    ):
        raise ValueError(f"shard takes (i, n): this worker's number i from 0 to n - 1 of n workers; got {shard!r}")
    if not name:
        raise ValueError("shard= needs name=: the workers find the experiment they share by its name")
    if session.store is None:
        raise ValueError(
            f"shard= needs a run store the workers share (DAG_STORE); this session has none ({session.store_problem()})"
        )


def _shared_id(name: str, cases: Sequence[Case], configs: list[str], scorers: list[str], repeat: int) -> str:
    """The id every worker computes for the same experiment (its name and definition), so they find one another."""
    definition = [name, [case.model_dump(mode="json") for case in cases], configs, scorers, repeat]
    return hashlib.sha256(json.dumps(definition, sort_keys=True, default=str).encode()).hexdigest()[:12]


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
