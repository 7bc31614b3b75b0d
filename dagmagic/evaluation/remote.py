"""An experiment whose cells run elsewhere (on Temporal's workers, ``on=``): this process hands them over, follows
them through the run store they share (the listener told of each change, as for cells run here), and scores each
cell once its run ended, with the scorers given here (they are this notebook's Python).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from dagmagic.engine.run.dag_run import DagRun
from dagmagic.evaluation.cell_runs import CellListener, CellRuns
from dagmagic.evaluation.configs import Config
from dagmagic.evaluation.experiment import Cell, Experiment
from dagmagic.evaluation.scorers import ScoreFunction
from dagmagic.evaluation.scoring import score, scorer_name

if TYPE_CHECKING:
    from dagmagic.store import RunStore

__all__ = ["CUT_SECONDS", "FOLLOW_SECONDS", "RemoteCells", "follow_remote"]

FOLLOW_SECONDS = 0.5
"""How often the cells are read back from the store while workers run them."""
CUT_SECONDS = 60.0
"""How long an interrupted experiment waits for its workers to record their cells cut (a worker hears of the cancel
with its next heartbeat's answer, within seconds)."""


class RemoteCells(Protocol):
    """Where an experiment's cells run when not here: ``run`` returns once every cell handed over has ended there."""

    async def run(
        self, experiment: Experiment, cells: Sequence[Cell], configs: Mapping[str, Config], concurrency: int | None
    ) -> None:
        """Run ``cells`` of ``experiment`` with ``configs``, at most ``concurrency`` at once; return when all ended."""
        ...


async def follow_remote(
    remote: RemoteCells,
    cells: CellRuns,
    store: RunStore,
    scorers: Sequence[ScoreFunction],
    concurrency: int | None,
    on_cell: CellListener | None,
) -> None:
    """Hand the cells not ended to ``remote`` and follow them in ``store`` until it says they all ended."""
    experiment = cells.experiment
    todo = [cell for cell in experiment.cells if not cell.ended]
    for cell in todo:
        if cell.status == "not_started":  # left unstarted by a budget: this run's budget decides again
            cells.change(cell, on_cell, status="pending", error=None)
    follower = _Follower(cells, store, scorers, on_cell)
    following = asyncio.get_running_loop().create_task(follower.follow())
    try:
        await remote.run(experiment, todo, cells.configs, concurrency)
    except asyncio.CancelledError:  # interrupted: returns once the workers have cut the cells' runs
        following.cancel()
        await follower.until_cut([cell.index for cell in todo])
        raise
    finally:
        following.cancel()
        await follower.read()
    cells.note_unstarted()


class _Follower:
    def __init__(
        self, cells: CellRuns, store: RunStore, scorers: Sequence[ScoreFunction], on_cell: CellListener | None
    ) -> None:
        self.cells = cells
        self.store = store
        self.scorers = scorers
        self.wanted = [scorer_name(scorer) for scorer in scorers]
        self.on_cell = on_cell

    async def follow(self) -> None:
        while True:
            await asyncio.sleep(FOLLOW_SECONDS)
            await self.read()

    async def read(self) -> None:
        """The cells as the store holds them now; those whose run ended and are not scored yet, scored here."""
        experiment = self.cells.experiment
        found = self.store.load_experiment(experiment.id)
        if found is None:
            return
        for cell, data in zip(experiment.cells, found[1], strict=False):
            stored = Cell.model_validate_json(data)
            if stored != cell:
                for field in Cell.model_fields:  # in place: views and the experiment hold this object
                    setattr(cell, field, getattr(stored, field))
                self.cells.tell(cell, self.on_cell)
        self.cells.recorded_cost = sum(cell.cost or 0.0 for cell in experiment.cells)
        for cell in experiment.cells:
            if cell.ended and cell.run_id is not None and self._unscored(cell):
                await self._score(cell)

    async def until_cut(self, indexes: Sequence[int]) -> None:
        """Read the cells until none of ``indexes`` runs on a worker any more (each cut, or ended), at most
        ``CUT_SECONDS``: an interrupted experiment hands back what its workers left.
        """
        cells = self.cells.experiment.cells
        for _ in range(int(CUT_SECONDS / FOLLOW_SECONDS)):
            await self.read()
            if all(cells[index].status != "running" for index in indexes):
                return
            await asyncio.sleep(FOLLOW_SECONDS)

    def _unscored(self, cell: Cell) -> bool:
        return any(
            name not in cell.score_errors and not any(key.split(".")[0] == name for key in cell.scores)
            for name in self.wanted
        )

    async def _score(self, cell: Cell) -> None:
        assert cell.run_id is not None
        stored = self.store.load(cell.run_id)
        run = DagRun(stored.state, events=stored.events, read_only=True)
        case = next(case for case in self.cells.experiment.cases if case.id == cell.case_id)
        config = self.cells.configs.get(cell.config)
        settings = (config.settings if config is not None else None) or self.cells.session.settings
        scores, errors = await score(self.scorers, case, run, settings)
        self.cells.change(cell, self.on_cell, scores=scores, score_errors=errors)
