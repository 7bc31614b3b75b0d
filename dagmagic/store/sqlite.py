"""The run store's file: marked as dagmagic's (``application_id``) and versioned (``user_version``), opened in WAL
with its schema brought up to date; a file that is another program's, damaged, or from a newer dagmagic is refused
with a ``StoreError`` naming it, never overwritten, and one that cannot be written is ``StoreUnavailable``.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dagmagic.errors import StoreError, StoreUnavailable
from dagmagic.store import lease
from dagmagic.store.backend import Connection, Dialect, Watch
from dagmagic.store.writer import OpenFile

__all__ = ["APPLICATION_ID", "SCHEMA_VERSION", "SQLITE", "SQLiteBackend", "connect", "migrations", "reader"]

APPLICATION_ID = 0x4441474D  # "DAGM": marks the file as a dagmagic run store
SCHEMA_VERSION = 5

_MIGRATIONS: list[list[str]] = [
    [  # version 1
        """CREATE TABLE runs (
            run_id TEXT PRIMARY KEY, goal TEXT NOT NULL, status TEXT NOT NULL, phase TEXT NOT NULL,
            started_at REAL, finished_at REAL, updated_at REAL NOT NULL, error TEXT, answer TEXT NOT NULL,
            follow_ups TEXT NOT NULL, pending TEXT NOT NULL, domain TEXT, routed INTEGER NOT NULL,
            history TEXT NOT NULL, host TEXT NOT NULL, pid INTEGER NOT NULL)""",
        """CREATE TABLE rounds (
            run_id TEXT NOT NULL, idx INTEGER NOT NULL, goal TEXT NOT NULL, analysis TEXT, decision TEXT,
            error TEXT, warnings TEXT NOT NULL, free INTEGER NOT NULL, PRIMARY KEY (run_id, idx))""",
        """CREATE TABLE steps (
            run_id TEXT NOT NULL, round INTEGER NOT NULL, step_id TEXT NOT NULL, position INTEGER NOT NULL,
            status TEXT NOT NULL, data TEXT NOT NULL, PRIMARY KEY (run_id, round, step_id))""",
        """CREATE TABLE calls (
            run_id TEXT NOT NULL, seq INTEGER NOT NULL, purpose TEXT NOT NULL, cost REAL, data TEXT NOT NULL,
            PRIMARY KEY (run_id, seq))""",
        """CREATE TABLE events (
            run_id TEXT NOT NULL, seq INTEGER NOT NULL, type TEXT NOT NULL, at REAL NOT NULL, data TEXT NOT NULL,
            PRIMARY KEY (run_id, seq))""",
        "CREATE INDEX runs_by_start ON runs (started_at)",
    ],
    [  # version 2: a round's re-run origin and its plan's approval
        "ALTER TABLE rounds ADD COLUMN extra TEXT NOT NULL DEFAULT '{}'",
    ],
    [  # version 3: leases; each earlier exchange stored once; a call stored once
        lease.LEASE_TABLE,
        """CREATE TABLE exchanges (
            id INTEGER PRIMARY KEY, previous INTEGER NOT NULL, digest TEXT NOT NULL, goal TEXT NOT NULL,
            answer TEXT NOT NULL, UNIQUE (previous, digest))""",
        # the last exchange of the run's conversation (0: none); NULL in a row of schema 2, whose `history` holds it
        "ALTER TABLE runs ADD COLUMN conversation INTEGER",
        # an llm_call event's calls row (its data then holds no call); NULL for other events, and for schema 2's
        "ALTER TABLE events ADD COLUMN call INTEGER",
    ],
    [  # version 4: experiments (``session.evaluate``): each one's definition, and a row per cell naming its run
        """CREATE TABLE experiments (
            experiment_id TEXT PRIMARY KEY, name TEXT NOT NULL, created_at REAL NOT NULL, data TEXT NOT NULL)""",
        "CREATE INDEX experiments_by_name ON experiments (name, created_at)",
        """CREATE TABLE experiment_cells (
            experiment_id TEXT NOT NULL, idx INTEGER NOT NULL, data TEXT NOT NULL, PRIMARY KEY (experiment_id, idx))""",
    ],
    [  # version 5: a cell's status and cost; owner, owner_host, owner_pid and heard_at held the cell claims of
        # workers sharing an experiment through the store, since removed: no longer written or read, kept so that
        # stores of every version open alike
        "ALTER TABLE experiment_cells ADD COLUMN status TEXT",
        "ALTER TABLE experiment_cells ADD COLUMN cost REAL",
        "ALTER TABLE experiment_cells ADD COLUMN owner TEXT",
        "ALTER TABLE experiment_cells ADD COLUMN owner_host TEXT",
        "ALTER TABLE experiment_cells ADD COLUMN owner_pid INTEGER",
        "ALTER TABLE experiment_cells ADD COLUMN heard_at REAL",
    ],
]
"""Each schema version's statements, applied in order to bring an older file up to date."""

SQLITE = Dialect(
    text="json_extract({column}, '$.{key}')",
    number="json_extract({column}, '$.{key}')",
    flag="json_extract({column}, '$.{key}')",
)
_BUSY_MILLISECONDS = 100
"""SQLite's own wait for a lock, per try, for the writer: it tries again itself, so that it can stop and report."""

_PREPARE_SECONDS = 10.0
"""How long opening a store waits for another process that prepares the same new file."""


def migrations() -> list[list[str]]:
    """Each schema version's statements, in SQLite's dialect (the PostgreSQL store translates them)."""
    return _MIGRATIONS


class SQLiteBackend:
    """A run store in one SQLite file (WAL; another process may write it at the same time)."""

    dialect = SQLITE
    errors: tuple[type[Exception], ...] = (sqlite3.Error,)

    def __init__(self, path: Path) -> None:
        self.location = path

    def writer(self) -> Connection:
        """A connection for the store's writer, the schema brought up to date."""
        db = connect(self.location)
        db.execute(f"PRAGMA busy_timeout = {_BUSY_MILLISECONDS}")
        return db

    def reader(self) -> Connection:
        """A connection that only reads."""
        return reader(self.location)

    def watch(self, db: Connection) -> Watch:
        """The file just opened, held open to notice it was deleted or moved."""
        return OpenFile(self.location)

    @contextmanager
    def snapshot(self, db: Connection) -> Iterator[None]:
        """A deferred transaction: WAL keeps the moment of its first read for every read until it ends."""
        db.execute("BEGIN")
        try:
            yield
        finally:
            db.rollback()

    @contextmanager
    def transaction(self, db: Connection) -> Iterator[None]:
        """The write lock first (``BEGIN IMMEDIATE``): a change never half-waits inside its transaction."""
        db.execute("BEGIN IMMEDIATE")
        try:
            yield
            db.commit()
        except BaseException:
            db.rollback()
            raise

    def locked(self, exc: BaseException) -> bool:
        """SQLite's "database is locked" or "busy"."""
        return isinstance(exc, sqlite3.OperationalError) and ("locked" in str(exc) or "busy" in str(exc))

    def unreachable(self, exc: BaseException) -> bool:
        """Never: a file is there, or is created again at once."""
        return False

    def checkpoint(self, db: Connection) -> None:
        """Copy what no reader needs from the write-ahead log into the file; never waits."""
        db.execute("PRAGMA wal_checkpoint(PASSIVE)")


def reader(path: Path) -> sqlite3.Connection:
    """A connection that only reads the store at ``path`` (opening creates it when missing)."""
    db = connect(path)
    db.execute("PRAGMA query_only = ON")
    return db


def connect(path: Path) -> sqlite3.Connection:
    """A connection to the store at ``path``, its schema brought up to date; refuses what is not ours."""
    existed = path.exists() and path.stat().st_size > 0
    try:
        if not path.parent.exists():
            path.parent.mkdir(mode=0o700, parents=True)
        if not path.exists():
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))  # owner-only before SQLite writes a byte
    except OSError as exc:
        raise StoreUnavailable(_unwritable(path, exc)) from None
    try:
        db = sqlite3.connect(path, timeout=10.0, isolation_level=None, check_same_thread=False)
        db.isolation_level = "DEFERRED"  # `with db:` opens and commits a transaction
        application_id = db.execute("PRAGMA application_id").fetchone()[0]
        version = db.execute("PRAGMA user_version").fetchone()[0]
        tables = db.execute("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table'").fetchone()[0]
    except sqlite3.DatabaseError as exc:
        raise StoreError(
            f"{path} is not a dagmagic run store ({exc}). It was left as it is: move it away, or set DAG_STORE to "
            "another path (or to none)."
        ) from None
    if existed and (application_id != APPLICATION_ID or tables == 0) and (tables or application_id):
        db.close()
        raise StoreError(
            f"{path} is another program's SQLite file, not a dagmagic run store. It was left as it is: set "
            "DAG_STORE to another path (or to none)."
        )
    if version > SCHEMA_VERSION:
        db.close()
        raise StoreError(
            f"{path} was written by a newer dagmagic (schema {version}, this one reads up to {SCHEMA_VERSION}). "
            "Upgrade dagmagic, or set DAG_STORE to another path."
        )
    try:
        _prepare(db)
    except sqlite3.OperationalError as exc:
        db.close()
        if "readonly" in str(exc) or "read-only" in str(exc) or "unable to open" in str(exc):
            raise StoreUnavailable(_unwritable(path, exc)) from None
        raise StoreError(f"{path} could not be prepared as a run store ({exc}); it was left as it is.") from None
    return db


def _prepare(db: sqlite3.Connection) -> None:
    """WAL, and the schema brought up to date. Another process may be preparing the same new file at the same
    moment: switching to WAL then meets its lock at once (SQLite does not wait there), so it is tried again for a
    while; the schema is migrated under a write lock, from the version read under it.
    """
    deadline = time.monotonic() + _PREPARE_SECONDS
    while db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":  # another process may have switched it
        try:
            db.execute("PRAGMA journal_mode = WAL")
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    db.execute("PRAGMA synchronous = NORMAL")  # with WAL: a crash of the process loses nothing committed
    if db.execute("PRAGMA user_version").fetchone()[0] >= len(_MIGRATIONS):
        return  # up to date: opening writes nothing
    db.execute("BEGIN IMMEDIATE")  # waits (the connection's timeout) for another process's migration to end
    try:
        version = db.execute("PRAGMA user_version").fetchone()[0]
        for number, statements in enumerate(_MIGRATIONS[version:], start=version + 1):
            for statement in statements:
                db.execute(statement)
            db.execute(f"PRAGMA user_version = {number}")
            db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        db.commit()
    except BaseException:
        db.rollback()
        raise


def _unwritable(path: Path, exc: BaseException) -> str:
    return (
        f"the run store {path} cannot be written ({exc}); runs go on but are not saved, so they cannot be resumed. "
        "Set DAG_STORE to a writable path to save them."
    )
