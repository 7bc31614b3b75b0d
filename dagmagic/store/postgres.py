"""A run store in a PostgreSQL database (``DAG_STORE=postgresql://user@host:5432/db``), shared by a team's
kernels and machines: the same tables as a SQLite store, made by the same migrations (``schema.migrations()``,
their few SQLite words translated here), marked as dagmagic's and versioned in a ``dagmagic_meta`` table.

Writes keep the store's guarantees the way SQLite's ``BEGIN IMMEDIATE`` does: every write transaction takes one
advisory lock of the database first (``pg_advisory_xact_lock``), so a run's lease is checked and its events are
numbered by one writer at a time, whichever machine it is on; a lock held elsewhere fails fast
(``lock_timeout``) and the store's writer tries again, as it does with SQLite's busy file. Readers read outside
any transaction, so each read sees every write committed before it. There is no file to follow and no
write-ahead log to checkpoint: those are no-ops here. Needs psycopg 3 (``pip install "dagmagic[postgres]"``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from functools import lru_cache
from typing import Any

import psycopg
from psycopg import errors as pg_errors

from dagmagic._secrets import mask_secrets
from dagmagic.errors import StoreError, StoreUnavailable
from dagmagic.store.backend import Connection, Cursor, Dialect, Watch
from dagmagic.store.sqlite import APPLICATION_ID, SCHEMA_VERSION, migrations
from dagmagic.store_url import StoreURL

__all__ = ["POSTGRES", "PostgresBackend"]

POSTGRES = Dialect(
    text="({column}::jsonb ->> '{key}')",
    number="(({column}::jsonb ->> '{key}')::double precision)",
    flag="(({column}::jsonb ->> '{key}')::boolean)",
)
_WRITE_LOCK = f"SELECT pg_advisory_xact_lock({APPLICATION_ID})"
"""The store's write lock (one per database): taken first by every write transaction, released at its end."""
_LOCK_TIMEOUT = "SET lock_timeout = '100ms'"
"""The writer's wait for a lock, per try: it tries again itself, so that it can stop and report."""
_PREPARE_TIMEOUT = "SET lock_timeout = '10s'"
"""How long opening a store waits for another process that migrates the same database."""
_META = "CREATE TABLE IF NOT EXISTS dagmagic_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
_LOCKED = (pg_errors.LockNotAvailable, pg_errors.DeadlockDetected, pg_errors.SerializationFailure)


class PostgresBackend:
    """A run store in the PostgreSQL database at a URL (see the module docstring)."""

    dialect = POSTGRES
    errors: tuple[type[Exception], ...] = (psycopg.Error,)

    def __init__(self, location: StoreURL) -> None:
        self.location = location

    def writer(self) -> Connection:
        """A connection for the store's writer, the schema brought up to date first."""
        db = self._connect()
        try:
            db.execute(_PREPARE_TIMEOUT)
            _prepare(db, self.location)
            db.execute(_LOCK_TIMEOUT)
        except psycopg.Error as exc:
            db.close()
            unavailable = _Unreachable if isinstance(exc, psycopg.OperationalError) else StoreUnavailable
            raise unavailable(self._unwritable(exc)) from None
        except BaseException:
            db.close()
            raise
        return db

    def reader(self) -> Connection:
        """A connection that only reads, outside any transaction (each read sees what was committed); one lost
        (the server restarted) connects again at the next read.
        """

        def connect() -> psycopg.Connection[Any]:
            connection = self._connect()._connection
            connection.execute(b"SET default_transaction_read_only = on")
            return connection

        return _Connection(connect(), reconnect=connect)

    def watch(self, db: Connection) -> Watch:
        """``db``'s connection, to notice it was lost (the server restarted, or ended it): the writer then
        connects again and writes the runs going on whole, as into a SQLite file created anew.
        """
        assert isinstance(db, _Connection)
        return _Database(db)

    @contextmanager
    def snapshot(self, db: Connection) -> Iterator[None]:
        """A repeatable-read transaction: every read sees what was committed when its first began."""
        db.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        try:
            yield
        finally:
            with suppress(psycopg.OperationalError):  # a lost connection: the read's own error is the one to tell
                db.rollback()

    @contextmanager
    def transaction(self, db: Connection) -> Iterator[None]:
        """A transaction that holds the store's write lock, its statements pipelined: sent without waiting for
        each one's answer (a write that reads waits for what it reads), so a change costs about one round trip.
        """
        assert isinstance(db, _Connection)
        try:
            with db.pipeline():
                db.execute("BEGIN")
                db.execute(_WRITE_LOCK)
                yield
                db.commit()
        except BaseException:
            db.rollback()
            raise

    def locked(self, exc: BaseException) -> bool:
        """Another connection held the write lock (or a row) past the wait: try again."""
        return isinstance(exc, _LOCKED)

    def unreachable(self, exc: BaseException) -> bool:
        """The server cannot be reached, or the connection was lost (a restart, a failover): try again."""
        return isinstance(exc, psycopg.OperationalError | _Unreachable) and not self.locked(exc)

    def checkpoint(self, db: Connection) -> None:
        """Nothing to do: what PostgreSQL committed is durable."""

    def _connect(self) -> _Connection:
        try:
            return _Connection(psycopg.connect(self.location.url, autocommit=True, connect_timeout=10))
        except psycopg.Error as exc:
            raise _Unreachable(
                f"the run store {self.location} cannot be reached ({self._reason(exc)}); runs go on but are not "
                "saved, so they cannot be resumed. Check that PostgreSQL runs there and that DAG_STORE names its "
                "user and database, or set DAG_STORE to a file path."
            ) from None

    def _unwritable(self, exc: BaseException) -> str:
        return (
            f"the run store {self.location} cannot be written ({self._reason(exc)}); runs go on but are not saved, "
            "so they cannot be resumed. Grant its user CREATE and write rights there, or set DAG_STORE to another "
            "store."
        )

    def _reason(self, exc: BaseException) -> str:
        """The driver's message, on one line, with the URL's password (if any) masked."""
        text = mask_secrets(" ".join(str(exc).split()))
        for secret in self.location.secrets():
            text = text.replace(secret, "***")
        return text


class _Unreachable(StoreUnavailable):
    """The server could not be reached, or was lost while the store was opened: it may be back soon."""


class _Connection:
    """A psycopg connection in autocommit mode as the store's code uses connections: ``?`` placeholders, and
    explicit transactions (``BEGIN`` ... ``commit()``).
    """

    def __init__(
        self, connection: psycopg.Connection[Any], reconnect: Callable[[], psycopg.Connection[Any]] | None = None
    ) -> None:
        self._connection = connection
        self._reconnect = reconnect
        """How to connect again when the connection was lost outside a transaction (a reader's)."""

    def execute(self, sql: str, parameters: Sequence[Any] = (), /) -> Cursor:
        idle = self._connection.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        try:
            return self._execute(sql, parameters)
        except psycopg.OperationalError:
            if self._reconnect is None or not idle or not self._connection.broken:
                raise
        self._connection.close()
        self._connection = self._reconnect()
        return self._execute(sql, parameters)

    def _execute(self, sql: str, parameters: Sequence[Any]) -> Cursor:
        if not parameters:
            return self._connection.execute(sql.encode())  # bytes: no placeholders to parse
        return self._connection.execute(_placeholders(sql), tuple(parameters))

    def commit(self) -> None:
        self._connection.execute(b"COMMIT")

    def pipeline(self) -> AbstractContextManager[Any]:
        """The block in psycopg's pipeline mode."""
        return self._connection.pipeline()

    def rollback(self) -> None:
        if not self._connection.closed:
            self._connection.execute(b"ROLLBACK")

    def close(self) -> None:
        self._connection.close()

    @property
    def broken(self) -> bool:
        """Whether the connection was lost (closed by the server, or by a failure)."""
        return self._connection.broken or self._connection.closed


class _Database:
    how = "lost its connection to the server"

    def __init__(self, db: _Connection) -> None:
        self._db = db

    def replaced(self) -> bool:
        return self._db.broken

    def close(self) -> None:
        pass


@lru_cache(maxsize=256)
def _placeholders(sql: str) -> bytes:
    """``sql`` with psycopg's placeholders: the store's SQL holds no ``?`` or ``%`` in its literals."""
    return sql.replace("%", "%%").replace("?", "%s").encode()


def _translated(statement: str) -> str:
    """A migration statement of SQLite's in PostgreSQL's words: times as 8-byte floats (``REAL`` is 4 here),
    integers as 8-byte ones, an ``INTEGER PRIMARY KEY`` as an identity column.
    """
    statement = statement.replace("INTEGER PRIMARY KEY", "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY")
    statement = re.sub(r"\bREAL\b", "DOUBLE PRECISION", statement)
    return re.sub(r"\bINTEGER\b", "BIGINT", statement)


def _prepare(db: Connection, location: StoreURL) -> None:
    """Refuse what is not a store of ours (or is a newer one's); bring the schema up to date, under the write
    lock, from the version read under it (another process may be preparing the same database).
    """
    steps = migrations()
    version = _version(db)
    if version is None and db.execute("SELECT to_regclass('runs')").fetchone()[0] is not None:
        raise StoreError(
            f"{location} holds a table `runs` that is not a dagmagic run store's. It was left as it is: set "
            "DAG_STORE to another database (or to none)."
        )
    if version is not None and version > SCHEMA_VERSION:
        raise StoreError(
            f"{location} was written by a newer dagmagic (schema {version}, this one reads up to {SCHEMA_VERSION}). "
            "Upgrade dagmagic, or set DAG_STORE to another store."
        )
    if version is not None and version >= len(steps):
        return  # up to date: opening writes nothing
    db.execute("BEGIN")
    try:
        db.execute(_WRITE_LOCK)
        db.execute(_META)
        version = _version(db) or 0
        for statements in steps[version:]:
            for statement in statements:
                db.execute(_translated(statement))
        db.execute(
            """INSERT INTO dagmagic_meta VALUES ('schema_version', ?), ('application', 'dagmagic')
               ON CONFLICT (key) DO UPDATE SET value = excluded.value""",
            (str(max(version, len(steps))),),
        )
        db.commit()
    except BaseException:
        db.rollback()
        raise


def _version(db: Connection) -> int | None:
    """The schema version the database is at, None when it holds no dagmagic store yet."""
    if db.execute("SELECT to_regclass('dagmagic_meta')").fetchone()[0] is None:
        return None
    row = db.execute("SELECT value FROM dagmagic_meta WHERE key = 'schema_version'").fetchone()
    return None if row is None else int(row[0])
