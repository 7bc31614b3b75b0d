"""An experiment shared by workers through the run store (``shard=(i, n)``): each cell claimed in the store before
it runs, so that each runs once; the claims renewed while this worker lives; what the other workers did read back.
Every worker finds the experiment by the id its name and definition give.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from dagmagic.evaluation._session import EvaluationSession
from dagmagic.evaluation.cases import Case
from dagmagic.evaluation.cell_runs import CellListener, CellRuns
from dagmagic.evaluation.experiment import Cell
from dagmagic.store import lease

if TYPE_CHECKING:
    from dagmagic.store import RunStore

__all__ = ["SHARED_POLL_SECONDS", "SharedRun", "check_shard", "shared_id"]

SHARED_POLL_SECONDS = 1.0
"""How often a worker of a shared experiment looks again at the cells other workers hold, until all ended."""


class SharedRun:
    """A worker's run of a shared experiment's cells, its claims on them made with ``token``."""

    def __init__(self, cells: CellRuns, store: RunStore, token: str) -> None:
        assert cells.shard is not None
        self.cells = cells
        self.experiment = cells.experiment
        self.store = store
        self.shard = cells.shard
        self.token = token

    async def run(self, cap: asyncio.Semaphore, on_cell: CellListener | None) -> None:
        """Run the cells with the other workers of a shared experiment: each cell claimed in the store before it
        runs (so each runs once); this worker's part first, and once it ran, any cell not ended that no live worker
        holds (a late worker's, or a dead one's, its cut run resumed); until every cell has ended. The cells read back
        from the store show what the others did.
        """
        index, workers = self.shard
        cases = {case.id: case for case in self.experiment.cases}
        keeping = asyncio.get_running_loop().create_task(self._keep_in_touch(on_cell))
        self._read_cells()
        for cell in self.experiment.cells:  # left unstarted by a budget: this run's budget decides again
            if cell.status == "not_started":
                self.cells.change(cell, on_cell, status="pending", error=None)
        own_part_tried = False
        try:
            while True:
                self._read_cells(on_cell)
                todo = [cell for cell in self.experiment.cells if not cell.ended and cell.status != "not_started"]
                if not todo:
                    return
                if not own_part_tried:  # another worker's part waits until this one's ran: it may be starting still
                    own_part_tried = True
                    todo = [cell for cell in todo if cell.index % workers == index] or todo
                async with asyncio.TaskGroup() as group:
                    for cell in todo:
                        group.create_task(self.cells.run(cell, cases[cell.case_id], cap, on_cell, self._claimed))
                if all(cell.ended or cell.status == "not_started" for cell in self.experiment.cells):
                    self._read_cells(on_cell)
                    return
                await asyncio.sleep(SHARED_POLL_SECONDS)  # the rest is held by live workers: see what they did
        finally:
            keeping.cancel()
            self.store.release_experiment_cells(self.experiment.id, self.token)

    async def _claimed(self, cell: Cell) -> bool:
        """Whether this worker took ``cell`` (under the cap, just before running it): refreshed as the last worker
        left it, so that its run is resumed rather than started again.
        """
        if not await self.store.claim_experiment_cell(self.experiment.id, cell.index, self.token):
            return False
        self._read_cell(cell)
        return not cell.ended

    async def _keep_in_touch(self, on_cell: CellListener | None) -> None:
        """While this worker runs: its claims renewed, and what the other workers did read back (the listener told
        of each cell they changed), so that a view of the experiment here shows them all.
        """
        renewed = time.monotonic()
        while True:
            await asyncio.sleep(SHARED_POLL_SECONDS)
            if time.monotonic() - renewed >= lease.HEARTBEAT_SECONDS:
                self.store.renew_experiment_cells(self.experiment.id, self.token)
                renewed = time.monotonic()
            self._read_cells(on_cell)

    def _read_cells(self, on_cell: CellListener | None = None) -> None:
        """The cells not running here, as the store holds them now (what the other workers did); the listener is
        told of each one that changed.
        """
        found = self.store.load_experiment(self.experiment.id)
        if found is None:
            return
        for cell, data in zip(self.experiment.cells, found[1], strict=False):
            if cell.index in self.cells.running:
                continue
            stored = Cell.model_validate_json(data)
            if stored != cell:
                _update(cell, stored)
                self.cells.tell(cell, on_cell)
        self.cells.recorded_cost = sum(cell.cost or 0.0 for cell in self.experiment.cells)

    def _read_cell(self, cell: Cell) -> None:
        data = self.store.read_experiment_cell(self.experiment.id, cell.index)
        if data is not None:
            before = cell.cost or 0.0
            _update(cell, Cell.model_validate_json(data))
            self.cells.recorded_cost += (cell.cost or 0.0) - before


def _update(cell: Cell, stored: Cell) -> None:
    """``cell`` becomes ``stored`` in place (views and the experiment hold this object)."""
    for field in Cell.model_fields:
        setattr(cell, field, getattr(stored, field))


def check_shard(shard: Any, name: str | None, session: EvaluationSession) -> None:
    """Refuse a ``shard`` that is not ``(i, n)``, or one without the name or the store the workers share."""
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


def shared_id(name: str, cases: Sequence[Case], configs: list[str], scorers: list[str], repeat: int) -> str:
    """The id every worker computes for the same experiment (its name and definition), so they find one another."""
    definition = [name, [case.model_dump(mode="json") for case in cases], configs, scorers, repeat]
    return hashlib.sha256(json.dumps(definition, sort_keys=True, default=str).encode()).hexdigest()[:12]
