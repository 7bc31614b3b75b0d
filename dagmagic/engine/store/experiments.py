"""What the store keeps of an experiment (``session.evaluate``): its definition as one JSON document, and each cell
as a row of its own (the run it is, its scores), so that recording a cell's change writes that cell only and the
file grows linearly with the cells.
"""

from __future__ import annotations

import sqlite3

from dagmagic.engine.store.writer import Statements

__all__ = ["find", "put_cell", "put_definition"]


def put_definition(statements: Statements, experiment_id: str, name: str, created_at: float, data: str) -> None:
    """Record the experiment's definition (its cases, configs' names, scorers' names, repetitions)."""
    statements.execute(
        "INSERT OR REPLACE INTO experiments (experiment_id, name, created_at, data) VALUES (?, ?, ?, ?)",
        (experiment_id, name, created_at, data),
    )


def put_cell(statements: Statements, experiment_id: str, index: int, data: str) -> None:
    """Record one cell as it is now."""
    statements.execute(
        "INSERT OR REPLACE INTO experiment_cells (experiment_id, idx, data) VALUES (?, ?, ?)",
        (experiment_id, index, data),
    )


def find(db: sqlite3.Connection, name_or_id: str) -> tuple[str, list[str]] | None:
    """The experiment with id ``name_or_id``, else the latest one named so: its definition and its cells (in
    order); None when there is none.
    """
    row = db.execute("SELECT experiment_id, data FROM experiments WHERE experiment_id = ?", (name_or_id,)).fetchone()
    if row is None:
        row = db.execute(
            "SELECT experiment_id, data FROM experiments WHERE name = ? ORDER BY created_at DESC LIMIT 1",
            (name_or_id,),
        ).fetchone()
    if row is None:
        return None
    cells = db.execute("SELECT data FROM experiment_cells WHERE experiment_id = ? ORDER BY idx", (row[0],))
    return row[1], [data for (data,) in cells]
