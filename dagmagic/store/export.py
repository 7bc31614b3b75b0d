"""A copy of a run store that is safe to move, share or back up: one consistent SQLite file, made with SQLite's
backup while runs may be written (copying ``runs.sqlite`` by hand can miss what is still in ``runs.sqlite-wal``);
a PostgreSQL store is copied into one too, table by table in one read-only snapshot.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING

from dagmagic.errors import StoreError

if TYPE_CHECKING:
    from dagmagic.store.backend import Connection

__all__ = ["copy_store"]


def copy_store(
    source: Connection, target: str | os.PathLike[str], errors: tuple[type[Exception], ...] = (sqlite3.Error,)
) -> Path:
    """``source``'s database copied to ``target``, a new file (owner-only, with no ``-wal`` beside it);
    ``StoreError`` when ``target`` exists already or cannot be written. The copy appears whole or not at all.
    """
    target = Path(target).expanduser()
    if target.exists():
        raise StoreError(_exists(target))
    part = target.with_name(f".{target.name}.{os.getpid()}.part")
    try:
        os.close(os.open(part, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))  # owner-only before a byte is in
        if isinstance(source, sqlite3.Connection):
            copy = sqlite3.connect(part)
            try:
                source.backup(copy)
            finally:
                copy.close()
        else:
            _copy_rows(source, part)
        copy = sqlite3.connect(part)
        try:
            copy.execute("PRAGMA journal_mode = DELETE")  # one file: nothing beside it to forget
        finally:
            copy.close()
        _place(part, target)
    except Exception as exc:
        if not isinstance(exc, (OSError, *errors)):
            raise
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise StoreError(f"the run store could not be copied to {target} ({reason}).") from None
    finally:
        part.unlink(missing_ok=True)
    return target


def _copy_rows(source: Connection, part: Path) -> None:
    """Every row of ``source``'s tables into a new SQLite store at ``part``, read in one snapshot."""
    from dagmagic.store import sqlite as schema

    copy = schema.connect(part)
    try:
        tables = [name for (name,) in copy.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        source.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        try:
            with copy:
                for table in tables:
                    rows = source.execute(f"SELECT * FROM {table}").fetchall()
                    if rows:
                        marks = ", ".join("?" * len(rows[0]))
                        copy.executemany(f"INSERT INTO {table} VALUES ({marks})", rows)
        finally:
            source.rollback()
    finally:
        copy.close()


def _place(part: Path, target: Path) -> None:
    """Give the finished copy its name, never over a file that appeared meanwhile."""
    try:
        os.link(part, target)
    except FileExistsError:
        raise StoreError(_exists(target)) from None
    except OSError:  # a file system without hard links
        if target.exists():
            raise StoreError(_exists(target)) from None
        os.replace(part, target)


def _exists(target: Path) -> str:
    return f"{target} exists already: export to a new path (it was left as it is)."
