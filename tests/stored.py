"""Reading a run store (a SQLite file, or a PostgreSQL database's URL) from outside the process that writes it,
as a test watching a run does.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def connect(store: Path | str) -> Iterator[Any]:
    """Another connection to ``store`` (SQL with ``?`` placeholders), committed when the block ends."""
    if isinstance(store, str) and store.startswith("postgres"):
        import psycopg

        from dagmagic.store.postgres import _Connection

        with psycopg.connect(store, autocommit=True) as raw:
            db = _Connection(raw)
            db.execute("BEGIN")
            try:
                yield db
            except BaseException:
                db.rollback()
                raise
            db.commit()
        return
    with sqlite3.connect(store, timeout=5) as db:
        yield db


def table_rows(store: Path | str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table of ``store``."""
    with connect(store) as db:
        if isinstance(db, sqlite3.Connection):
            names = [name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        else:
            names = [n for (n,) in db.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")]
        return {name: db.execute(f"SELECT * FROM {name}").fetchall() for name in names}


def step_statuses(store: Path | str) -> dict[str, str]:
    """Step id -> status as the store holds them now ({} before the store has its tables)."""
    if isinstance(store, Path) and not store.exists():
        return {}
    try:
        with connect(store) as db:
            return dict(db.execute("SELECT step_id, status FROM steps").fetchall())
    except Exception as exc:  # the tables are not there yet
        if "steps" in str(exc) or isinstance(exc, sqlite3.OperationalError):
            return {}
        raise
