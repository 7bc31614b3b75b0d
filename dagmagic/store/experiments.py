"""What the store keeps of an experiment (``session.evaluate``): its definition as one JSON document, and each cell
as a row of its own (the run it is, its scores), so that recording a cell's change writes that cell only and the
file grows linearly with the cells.
"""

from __future__ import annotations

from dataclasses import dataclass

from dagmagic.store.backend import Connection, Dialect
from dagmagic.store.writer import Statements

__all__ = [
    "ExperimentSummary",
    "find",
    "find_id",
    "latest",
    "put_cell",
    "put_definition",
    "read_cell",
    "spent",
]


@dataclass(frozen=True)
class ExperimentSummary:
    """One stored experiment, as ``%dag history`` lists it."""

    experiment_id: str
    name: str
    created_at: float
    statuses: dict[str, int]
    """How many of its cells are in each status (``done``, ``failed``, ``cancelled``, ``pending``, ...)."""
    cost: float | None
    """USD its cells spent, None when no cell's price is known."""

    @property
    def cells(self) -> int:
        """Its cells in all."""
        return sum(self.statuses.values())

    @property
    def finished(self) -> int:
        """Cells whose run ended (done or failed): resuming it runs the others."""
        return self.statuses.get("done", 0) + self.statuses.get("failed", 0)


def put_definition(
    statements: Statements, experiment_id: str, name: str, created_at: float, data: str, *, if_missing: bool = False
) -> None:
    """Record the experiment's definition (its cases, configs' names, scorers' names, repetitions); ``if_missing``:
    only when it is not there yet (a worker joining an experiment another one made).
    """
    update = "NOTHING" if if_missing else "UPDATE SET name = excluded.name, data = excluded.data"
    statements.execute(
        "INSERT INTO experiments (experiment_id, name, created_at, data) VALUES (?, ?, ?, ?) "
        f"ON CONFLICT (experiment_id) DO {update}",
        (experiment_id, name, created_at, data),
    )


def put_cell(
    statements: Statements,
    experiment_id: str,
    index: int,
    data: str,
    status: str,
    cost: float | None,
    *,
    if_missing: bool = False,
) -> None:
    """Record one cell as it is now; ``if_missing``: only when it is not there yet."""
    update = (
        "NOTHING" if if_missing else "UPDATE SET data = excluded.data, status = excluded.status, cost = excluded.cost"
    )
    statements.execute(
        "INSERT INTO experiment_cells (experiment_id, idx, data, status, cost) VALUES (?, ?, ?, ?, ?) "
        f"ON CONFLICT (experiment_id, idx) DO {update}",
        (experiment_id, index, data, status, cost),
    )


def spent(db: Connection, experiment_id: str) -> float:
    """USD the experiment's cells spent as recorded, whichever worker ran them."""
    (total,) = db.execute("SELECT SUM(cost) FROM experiment_cells WHERE experiment_id = ?", (experiment_id,)).fetchone()
    return float(total or 0.0)


def read_cell(db: Connection, experiment_id: str, index: int) -> str | None:
    """One cell as stored (JSON), None when there is no such cell."""
    row = db.execute(
        "SELECT data FROM experiment_cells WHERE experiment_id = ? AND idx = ?", (experiment_id, index)
    ).fetchone()
    return None if row is None else str(row[0])


def find_id(db: Connection, name_or_id: str) -> str | None:
    """The id of the experiment with id ``name_or_id``, else of the latest one named so; None when there is none."""
    row = db.execute("SELECT experiment_id FROM experiments WHERE experiment_id = ?", (name_or_id,)).fetchone()
    if row is None:
        row = db.execute(
            "SELECT experiment_id FROM experiments WHERE name = ? ORDER BY created_at DESC LIMIT 1", (name_or_id,)
        ).fetchone()
    return None if row is None else str(row[0])


def find(db: Connection, name_or_id: str) -> tuple[str, list[str]] | None:
    """The experiment with id ``name_or_id``, else the latest one named so: its definition and its cells (in
    order); None when there is none.
    """
    experiment_id = find_id(db, name_or_id)
    if experiment_id is None:
        return None
    (definition,) = db.execute("SELECT data FROM experiments WHERE experiment_id = ?", (experiment_id,)).fetchone()
    cells = db.execute("SELECT data FROM experiment_cells WHERE experiment_id = ? ORDER BY idx", (experiment_id,))
    return definition, [data for (data,) in cells]


def latest(db: Connection, limit: int, dialect: Dialect) -> list[ExperimentSummary]:
    """The latest ``limit`` experiments, newest first, each with its cells counted by status (read in SQL: the
    cells' JSON is not parsed in Python).
    """
    found = db.execute(
        "SELECT experiment_id, name, created_at FROM experiments ORDER BY created_at DESC LIMIT ?", (limit,)
    ).fetchall()
    summaries = []
    for experiment_id, name, created_at in found:
        counted = db.execute(
            f"SELECT {dialect.json_text('data', 'status')}, count(*), sum({dialect.json_number('data', 'cost')}) "
            "FROM experiment_cells WHERE experiment_id = ? GROUP BY 1",
            (experiment_id,),
        ).fetchall()
        costs = [cost for _, _, cost in counted if cost is not None]
        summaries.append(
            ExperimentSummary(
                experiment_id=experiment_id,
                name=name,
                created_at=created_at,
                statuses={str(status): count for status, count, _ in counted},
                cost=sum(costs) if costs else None,
            )
        )
    return summaries
