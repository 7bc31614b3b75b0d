"""What the run store asks of the database it lives in: one protocol, implemented for a SQLite file (``schema``)
and for a PostgreSQL database (``postgres``), so that the same rows, leases and migrations serve both.

The store's SQL is written once, in the dialect both understand (``?`` placeholders, ``INSERT ... ON CONFLICT``,
``RETURNING``); what differs is here: how a write transaction takes the store's write lock first, what a lock
held elsewhere looks like, how a JSON field is read in SQL, and whether there is a file that can be deleted or
moved while open (SQLite's) and a write-ahead log to checkpoint.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from dagmagic.store_url import StoreURL

__all__ = ["Backend", "Connection", "Cursor", "Dialect", "Location", "Watch"]

Location = Path | StoreURL
"""Where a store lives: a SQLite file's path, or a PostgreSQL database's URL."""


class Cursor(Protocol):
    """The result of one statement (``sqlite3.Cursor``, ``psycopg.Cursor``): DB-API's, as much as the store uses."""

    @property
    def description(self) -> Any:
        """The result's columns, each a sequence whose first item is its name."""
        ...

    def fetchone(self) -> Any:
        """The next row, None after the last."""
        ...

    def fetchall(self) -> list[Any]:
        """The rows left."""
        ...

    def __iter__(self) -> Iterator[Any]: ...


class Connection(Protocol):
    """A connection to the store, as the store's code uses it (a ``sqlite3.Connection`` is one)."""

    def execute(self, sql: str, parameters: Sequence[Any] = (), /) -> Cursor:
        """Run one statement, ``?`` marking its parameters."""
        ...

    def commit(self) -> None:
        """End the transaction, keeping what it wrote."""
        ...

    def rollback(self) -> None:
        """End the transaction, undoing what it wrote."""
        ...

    def close(self) -> None:
        """Close the connection."""
        ...


class Watch(Protocol):
    """The store as it was opened, to notice it was replaced: a file deleted or moved, a connection lost."""

    how: str
    """What happened to it, once replaced (``was deleted or moved while open``)."""

    def replaced(self) -> bool:
        """Whether what is at the store's location is no longer what was opened."""
        ...

    def close(self) -> None:
        """Let it go."""
        ...


@dataclass(frozen=True)
class Dialect:
    """How a JSON field of a text column is read in SQL: as text, as a number, as a flag (true/false)."""

    text: str
    number: str
    flag: str

    def json_text(self, column: str, key: str) -> str:
        """SQL for the text at ``key`` of the JSON in ``column``."""
        return self.text.format(column=column, key=key)

    def json_number(self, column: str, key: str) -> str:
        """SQL for the number at ``key`` of the JSON in ``column``."""
        return self.number.format(column=column, key=key)

    def json_flag(self, column: str, key: str) -> str:
        """SQL for the boolean at ``key`` of the JSON in ``column`` (NULL when it is missing)."""
        return self.flag.format(column=column, key=key)


class Backend(Protocol):
    """One store's database: how to connect, write, and recognise a lock held by someone else."""

    @property
    def location(self) -> Location:
        """Where it is (a URL's password is masked when it is shown)."""
        ...

    dialect: Dialect
    errors: tuple[type[Exception], ...]
    """The database driver's errors."""

    def writer(self) -> Connection:
        """A connection for the store's writer, the schema brought up to date (``StoreError`` for what is not a
        store of ours, ``StoreUnavailable`` when it cannot be written); a lock held elsewhere fails fast
        (``locked``), so that the writer tries again itself.
        """
        ...

    def reader(self) -> Connection:
        """A connection that only reads; each read sees every write committed before it."""
        ...

    def watch(self, db: Connection) -> Watch:
        """What ``db`` was just opened on, to notice when it is replaced."""
        ...

    def snapshot(self, db: Connection) -> AbstractContextManager[None]:
        """A read transaction on the reader ``db``: the reads in the block see the store at one moment, so that a
        run read while another process writes it is whole (never an event without the call it refers to).
        """
        ...

    def transaction(self, db: Connection) -> AbstractContextManager[None]:
        """A write transaction on ``db``, committed when the block ends (rolled back when it raises), the store's
        write lock taken first, so that a change never half-waits inside it; a lock held elsewhere raises an
        error ``locked`` recognises.
        """
        ...

    def locked(self, exc: BaseException) -> bool:
        """Whether ``exc`` says another connection holds the lock (try again), rather than a failure."""
        ...

    def unreachable(self, exc: BaseException) -> bool:
        """Whether ``exc`` says the store cannot be reached for now (a server restarting, the connection lost):
        the writer keeps the changes and tries again, rather than dropping their runs.
        """
        ...

    def checkpoint(self, db: Connection) -> None:
        """Make what is committed durable in the store's main file (SQLite's write-ahead log); never waits."""
        ...
