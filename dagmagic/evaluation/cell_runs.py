"""Running an experiment's cells as runs of the session, under the budget: a cell's run started, or resumed where it
was cut, or taken back when it ended (its scoring was cut); scored as it ends; each change of a cell recorded in the
store and told to the listener.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from dagmagic._secrets import mask_secrets
from dagmagic.engine.run.dag_run import DagRun
from dagmagic.errors import DagError
from dagmagic.evaluation._session import EvaluationSession
from dagmagic.evaluation.cases import Case
from dagmagic.evaluation.configs import Config
from dagmagic.evaluation.experiment import Cell, Experiment
from dagmagic.evaluation.scorers import ScoreFunction
from dagmagic.evaluation.scoring import score

if TYPE_CHECKING:
    from dagmagic.store import RunStore

__all__ = ["CellListener", "CellRuns", "check_budget"]

log = logging.getLogger("dagmagic")

CellListener = Callable[[Cell], None]
"""Told of each change of a cell (started, ended, not started) with a copy of the cell as it is then, for a view
that follows the experiment."""


class CellRuns:
    """The cells of one experiment as runs of a session: the runs going on here, and what the cells cost so far."""

    def __init__(
        self,
        session: EvaluationSession,
        experiment: Experiment,
        configs: Mapping[str, Config],
        scorers: Sequence[ScoreFunction],
    ) -> None:
        self.session = session
        self.experiment = experiment
        self.configs = configs
        self.scorers = scorers
        self.running: dict[int, DagRun] = {}
        """The cells' runs going on here, by cell index."""
        self.recorded_cost = sum(cell.cost or 0.0 for cell in experiment.cells)
        """The cells' costs as recorded (kept as they change: checking the budget stays O(running cells))."""

    @property
    def store(self) -> RunStore | None:
        """Where the experiment is recorded: the session's run store (None when it is off)."""
        return self.session.store

    async def run(
        self,
        cell: Cell,
        case: Case,
        cap: asyncio.Semaphore,
        on_cell: CellListener | None,
    ) -> None:
        """Run ``cell`` once the cap lets it, unless the budget is spent."""
        async with cap:
            max_cost = self.experiment.definition.max_cost
            if max_cost is not None and self.spent() >= max_cost:
                reason = f"not started: max_cost ${max_cost:g} was spent"
                self.change(cell, on_cell, status="not_started", error=reason)
                return
            try:
                run = self._start(cell, case)
            except (DagError, ValueError) as exc:  # its run is driven elsewhere, say: it stays to run later
                self.change(cell, on_cell, status="pending", error=f"not started: {mask_secrets(str(exc))}")
                return
            self.running[cell.index] = run
            self.experiment._runs[cell.index] = run
            try:
                self.change(cell, on_cell, status="running", run_id=run.run_id)
                await run.wait(cancel_with_waiter=True)
            finally:
                del self.running[cell.index]
                if run.status == "cancelled" or not run.done():
                    self.change(cell, on_cell, status="cancelled", **_measures(run))
            if run.status in ("done", "failed"):
                settings = self.configs[cell.config].settings or self.session.settings
                scores, errors = await score(self.scorers, case, run, settings)
                self.change(cell, on_cell, status=run.status, scores=scores, score_errors=errors, **_measures(run))

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

    def read_back(self, run_id: str) -> DagRun:
        """A cell's run from the session's memory, else read back from its store (read-only)."""
        for run in reversed(self.session.runs):
            if run.run_id == run_id:
                return run
        store = self.store
        if store is None:
            raise KeyError(f"the run {run_id} is no longer in memory and there is no run store")
        stored = store.load(run_id)
        return DagRun(stored.state, events=stored.events, read_only=True)

    def spent(self) -> float:
        """USD spent by the cells so far, those running here included (a resumed run's cost includes its past)."""
        cells = self.experiment.cells
        running = sum((run.cost or 0.0) - (cells[index].cost or 0.0) for index, run in self.running.items())
        return self.recorded_cost + running

    def note_unstarted(self) -> None:
        """Say why cells were left unstarted, when a budget left some."""
        unstarted = sum(cell.status == "not_started" for cell in self.experiment.cells)
        if unstarted and self.experiment.definition.max_cost is not None:
            self.experiment.stopped_reason = (
                f"spent ${self.spent():.4g} of max_cost ${self.experiment.definition.max_cost:g}: "
                f"{unstarted} cell{'s' if unstarted > 1 else ''} not started; "
                "resume_evaluation with a higher max_cost runs them"
            )

    def change(self, cell: Cell, on_cell: CellListener | None, **changes: Any) -> None:
        """Change the cell, record it, and tell the listener."""
        if "cost" in changes:
            self.recorded_cost += (changes["cost"] or 0.0) - (cell.cost or 0.0)
        for field, value in changes.items():
            setattr(cell, field, value)
        if (store := self.store) is not None:
            store.save_experiment_cell(self.experiment.id, cell.index, cell.model_dump_json(), cell.status, cell.cost)
        self.tell(cell, on_cell)

    @staticmethod
    def tell(cell: Cell, on_cell: CellListener | None) -> None:
        """Tell the listener of the cell as it is now."""
        if on_cell is not None:
            try:
                on_cell(cell.model_copy())  # the cell as it is now: a listener may keep it
            except Exception:  # a view's failure must not stop the experiment
                log.exception("[dagmagic] on_cell failed on cell %s", cell.index)


def check_budget(max_cost: Any) -> None:
    """Refuse a ``max_cost`` that is not a positive number of USD."""
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
