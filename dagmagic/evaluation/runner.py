"""An experiment's life in a session (``Evaluation``): made, or read back from the store, or taken again with its
configs and scorers; its budget raised; its cells run as a task, each an ordinary run of the session (outside its
conversation: cells never see each other's answers), at most ``concurrency`` at once, scored as each ends, each
change recorded in the store so that ``resume_evaluation`` finds the experiment after an interrupt or in a new
session.

A cell whose run was cut mid-run (the evaluation cancelled, the kernel gone) is resumed like any run
(``session.start_resume``); one that never started is started; one whose run ended is kept as it is.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from dagmagic.errors import DagError
from dagmagic.evaluation._session import EvaluationSession
from dagmagic.evaluation.cases import as_cases
from dagmagic.evaluation.cell_runs import CellListener, CellRuns, check_budget
from dagmagic.evaluation.configs import Config, as_configs, describe
from dagmagic.evaluation.experiment import Cell, Experiment, ExperimentDefinition
from dagmagic.evaluation.judge import LLMJudge
from dagmagic.evaluation.remote import RemoteCells, follow_remote
from dagmagic.evaluation.scorers import ScoreFunction
from dagmagic.evaluation.scoring import checked_scorers, scorer_name

if TYPE_CHECKING:
    from dagmagic.store import RunStore

__all__ = ["CellListener", "Evaluation"]


class Evaluation:
    """An experiment being run by a session: its configs and scorers (not stored: a new session gives them again
    to resume it), and the task that runs its cells.
    """

    def __init__(
        self,
        session: EvaluationSession,
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
        self.cells = CellRuns(session, experiment, self.configs, self.scorers)
        """The cells' runs, and what they cost so far."""

    @classmethod
    def new(
        cls,
        session: EvaluationSession,
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
            check_budget(max_cost)
        made_cases = as_cases(cases, goal)
        made_configs = as_configs(configs, session)
        chosen = checked_scorers(scorers)
        scorer_names = [scorer_name(scorer) for scorer in chosen]
        cells = [
            Cell(index=index, case_id=case.id, config=config.name, repetition=repetition)
            for index, (case, config, repetition) in enumerate(
                (case, config, repetition)
                for case in made_cases
                for config in made_configs
                for repetition in range(1, repeat + 1)
            )
        ]
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
            config_descriptions={config.name: describe(config, session) for config in made_configs},
        )
        evaluation = cls(session, Experiment(definition, cells), made_configs, chosen)
        if (store := evaluation.store) is not None:  # a case's metadata may hold anything: stored as its text
            store.save_experiment(
                experiment_id, definition.name, definition.created_at, definition.model_dump_json(fallback=str)
            )
            for cell in cells:
                store.save_experiment_cell(experiment_id, cell.index, cell.model_dump_json(), cell.status, cell.cost)
        return evaluation

    @classmethod
    def stored(
        cls,
        session: EvaluationSession,
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
        session: EvaluationSession,
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
        chosen = previous.scorers if scorers is None and previous else checked_scorers(scorers or ())
        if sorted(map(scorer_name, chosen)) != sorted(definition.scorers):
            wanted = ", ".join(definition.scorers) or "none"
            raise DagError(
                f"experiment {definition.name!r} was scored by {wanted}: pass scorers= with those, as when it started"
            )
        _check_unchanged(definition, made_configs, session)
        return cls(session, experiment, made_configs, chosen)

    @property
    def store(self) -> RunStore | None:
        """Where the experiment is recorded: the session's run store (None when it is off)."""
        return self.session.store

    def raise_budget(self, max_cost: float) -> None:
        """Let the experiment spend up to ``max_cost`` USD in all from now on (its cells so far count)."""
        check_budget(max_cost)
        definition = self.experiment.definition.model_copy(update={"max_cost": max_cost})
        self.experiment.definition = definition
        if (store := self.store) is not None:
            store.save_experiment(
                definition.id, definition.name, definition.created_at, definition.model_dump_json(fallback=str)
            )

    def start(
        self, concurrency: int | None, on_cell: CellListener | None, remote: RemoteCells | None = None
    ) -> Experiment:
        """Run the cells not ended yet as a task of the running loop (on ``remote``'s workers when given, followed
        here through the store); the experiment, at once.
        """
        limit = concurrency if concurrency is not None else self.session.settings.max_concurrency
        if not isinstance(limit, int) or limit < 1:
            raise ValueError(f"concurrency must be a whole number of at least 1, got {concurrency!r}")
        experiment = self.experiment
        if not experiment.done():
            raise DagError(f"experiment {experiment.name!r} is running already")
        experiment.stopped_reason = None
        if remote is not None and self.store is None:
            raise DagError(
                "an experiment on other workers needs a run store they share (DAG_STORE: a PostgreSQL URL, or a "
                f"path every worker reaches); this session has none ({self.session.store_problem()})"
            )
        work = (
            self._run(asyncio.Semaphore(limit), on_cell)
            if remote is None
            else self._run_remote(remote, concurrency, on_cell)
        )
        task = asyncio.get_running_loop().create_task(work, name=f"dagmagic:evaluation:{experiment.id}")
        experiment._task = task
        experiment._read_back = self.cells.read_back
        return experiment

    async def _run_remote(self, remote: RemoteCells, concurrency: int | None, on_cell: CellListener | None) -> None:
        store = self.store
        assert store is not None
        await follow_remote(remote, self.cells, store, self.scorers, concurrency, on_cell)

    async def _run(self, cap: asyncio.Semaphore, on_cell: CellListener | None) -> None:
        cases = {case.id: case for case in self.experiment.cases}
        todo = [cell for cell in self.experiment.cells if not cell.ended]
        for cell in todo:
            if cell.status == "not_started":
                self.cells.change(cell, on_cell, status="pending", error=None)
        async with asyncio.TaskGroup() as group:
            for cell in todo:
                group.create_task(
                    self.cells.run(cell, cases[cell.case_id], cap, on_cell),
                    name=f"dagmagic:cell:{self.experiment.id}:{cell.index}",
                )
        self.cells.note_unstarted()


def _check_unchanged(definition: ExperimentDefinition, configs: Sequence[Config], session: EvaluationSession) -> None:
    """Refuse configs that differ from those the experiment ran with: its cells answered with those, and would be
    handed back as these configs' answers (its budget too would be the old one).
    """
    changed = [
        f"config {config.name!r}: {change}"
        for config in configs
        if (before := definition.config_descriptions.get(config.name)) is not None
        for change in before.changes(describe(config, session))
    ]
    if changed:
        shown = "; ".join(changed[:6]) + (f"; and {len(changed) - 6} more" if len(changed) > 6 else "")
        raise DagError(
            f"experiment {definition.name!r} ran with other configs than these ({shown}): its cells answered with "
            "those. To evaluate these, give the experiment a new name (name=, %%dag eval --name); to go on with "
            "it, give the configs it ran with."
        )
