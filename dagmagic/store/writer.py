"""A run store's writer: the store's changes written in order, on a thread of its own, so that writing never stalls
the event loop, even while another program holds the file's write lock.

A change is SQL statements with their values, taken when it happened (on the loop); the writer runs the changes in
the order given, each in one transaction, or, when several wait, together in one (each inside a savepoint, so that
one refused is undone alone): a run's burst of events costs one commit. What depends on the file as it is then (an
event's number, the id of a row inserted, whether a run's lease is still this process's) is a write recorded as a
function, run inside that transaction; one that raises a ``DagError`` (the lease is another's) refuses its change
whole. A write lock held by another program (a database browser, a backup) is waited out: the changes wait in
memory, in order, and are written once it is released; the store is told when that takes a while. Before each change
the writer checks that the file it has open is still the one at the store's path: a store deleted or moved while
open (``rm -rf .dagmagic``) is created again there, and each run the new file lacks is written into it whole (the
store is asked for it) before anything else of that run. A change that cannot be written for another reason (a full
disk), or that is refused, drops its run from the file, and the store is told. A store that cannot be reached (a
PostgreSQL server restarting, or down a while) is waited for like a lock, its changes kept in memory, in order, and
the connection tried again, ``reconnect_wait`` seconds at most: once it is back, the runs going on are written
whole into it (a change cut off may or may not have been committed); past that bound the changes waiting are given
up, and their runs dropped and told. The thread ends when idle and starts again with the next change.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from dagmagic.errors import DagError

if TYPE_CHECKING:
    from dagmagic.store.backend import Backend, Connection, Watch

__all__ = ["Change", "OpenFile", "Statements", "StoreWriter", "Withdrawn", "WriterListener"]

log = logging.getLogger("dagmagic")

IDLE_SECONDS = 5.0
"""How long the writer's thread waits for a change before it ends (the next change starts it again)."""
BATCH_CHANGES = 200
"""At most this many changes waiting are written in one transaction (a run's burst of events costs one commit)."""
STALL_SECONDS = 5.0
"""How long a change waits for another program's lock (or for the store to be reachable) before the store is told."""
RECONNECT_WAIT_SECONDS = 300.0
"""How long, by default, the writer keeps the changes it cannot write while the store cannot be reached (a
PostgreSQL server restarting), trying again; past it, their runs are no longer saved (``store_reconnect_wait``)."""
_RETRY_SECONDS = 0.1
_RECONNECT_SECONDS = 0.5
"""How often the writer tries to connect again while the store cannot be reached."""


Write = Callable[["Connection"], object]
"""A write that reads the file before it writes, run by the writer inside the change's transaction."""


class Statements:
    """SQL statements and their values, recorded now and executed by the writer later (the row functions
    write to this as they would to a connection).
    """

    def __init__(self) -> None:
        self.items: list[tuple[str, tuple[object, ...]] | Write] = []

    def execute(self, sql: str, parameters: Sequence[object] = (), /) -> None:
        """Record one statement."""
        self.items.append((sql, tuple(parameters)))

    def call(self, write: Write) -> None:
        """Record a write whose statements depend on what the file holds when it runs (the id of a row it
        inserts, a lease as it is then); its values must be taken now, by the caller.
        """
        self.items.append(write)

    def run(self, db: Connection) -> None:
        """Execute what was recorded, in order (inside the caller's transaction)."""
        for item in self.items:
            if callable(item):
                item(db)
            else:
                db.execute(*item)


class Withdrawn(Exception):
    """Raised by a recorded write whose change its giver no longer wants: nothing of it is written, nobody is
    told.
    """


@dataclass
class Change:
    """One change to the store, written in one transaction."""

    run_id: str | None
    """The run it belongs to (None: the store's own, as a checkpoint)."""
    statements: Statements = field(default_factory=Statements)
    whole: bool = False
    """It writes the run whole, so it is written even into a file that does not hold the run yet."""
    checkpoint: bool = False
    """Then copy the write-ahead log into the database file, so that the ``.sqlite`` file alone holds it."""
    after: Callable[[], None] | None = None
    """Called on the writer's thread once the change was written, dropped or given up."""
    settled: threading.Event | None = None
    """Given by a giver that waits for the change: set once it was written, dropped, refused or given up (after
    ``after``); the giver learns ``failure`` itself, the store is not told."""
    failure: BaseException | None = None
    """Why it was not written, when it was refused or failed."""


class WriterListener(Protocol):
    """What the writer tells its store, from the writer's thread."""

    def rewrite(self, run_id: str) -> None:
        """The file at the store's path lacks ``run_id`` (it was deleted or moved): write the run whole."""
        ...

    def reopened(self) -> list[str]:
        """A new file was created at the store's path; returns the runs it will write whole into it."""
        ...

    def lost(self, run_id: str, reason: str) -> None:
        """``run_id`` cannot be written (``reason``, a sentence): it is no longer saved."""
        ...

    def stalled(self, run_ids: set[str]) -> None:
        """Another program has held the write lock (or the store could not be reached) for ``STALL_SECONDS``;
        these runs' changes wait.
        """
        ...


class _CannotOpen(Exception):
    """The store's path cannot be opened again (after the file was deleted or moved, or the connection lost)."""

    def __init__(self, message: str, cause: BaseException) -> None:
        super().__init__(message)
        self.cause = cause


class StoreWriter:
    """Writes one store's changes in order on its own thread (see the module docstring)."""

    def __init__(self, backend: Backend, db: Connection, *, listener: WriterListener) -> None:
        self.path = backend.location
        self._backend = backend
        self._listener = listener
        self._db: Connection | None = db
        self._file: Watch | None = backend.watch(db)
        self._retried: tuple[type[Exception], ...] = (*backend.errors, _CannotOpen)
        """What a change may be written again after (``_try_again`` decides)."""
        self._changes: deque[Change] = deque()
        """Changes not written yet, the one being written first."""
        self._condition = threading.Condition()
        self._thread: threading.Thread | None = None
        self._given = self._finished = 0
        self._written: set[str] = set()
        """Runs the open file holds (written whole into it since it was opened)."""
        self._recreated = False
        """The open file was created again at the path (the first one was deleted or moved): a run it does not
        hold yet is written whole into it before anything else of that run."""
        self._asked: set[str] = set()
        """Runs the store was asked to write whole, not written yet."""
        self._lost: set[str] = set()
        self._closing: float | None = None
        """When closing: the moment to give up on a lock."""
        self.locked_since: float | None = None
        """Since when the write lock has been held by another program (None: it is not)."""
        self.reconnect_wait = RECONNECT_WAIT_SECONDS
        """How long the changes wait while the store cannot be reached, before their runs are given up."""
        self.unreachable_since: float | None = None
        """Since when the store could not be reached (None: it was, at the last write)."""
        self._stall_told = False

    # --- the store's side

    def put(self, change: Change) -> None:
        """Write ``change`` after every change given before it."""
        with self._condition:
            if self._closing is not None:
                raise DagError(f"the run store {self.path} was closed")
            self._changes.append(change)
            self._given += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name=f"dagmagic-store:{self.path}", daemon=True)
                self._thread.start()
            self._condition.notify_all()

    def flush(self, timeout: float | None) -> bool:
        """Wait (``timeout`` seconds at most) until every change given so far is written; whether it was."""
        with self._condition:
            target = self._given
            return self._condition.wait_for(lambda: self._finished >= target, timeout)

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called: no change is taken any more."""
        return self._closing is not None

    def pending(self, run_id: str) -> bool:
        """Whether a change of ``run_id`` waits to be written."""
        with self._condition:
            return any(change.run_id == run_id for change in self._changes)

    def close(self, timeout: float) -> bool:
        """Write what waits (giving up on a lock after ``timeout`` seconds), checkpoint, close the file;
        whether everything was written.
        """
        with self._condition:
            if self._closing is not None:
                return not self._changes
            self._closing = time.monotonic() + timeout
            thread = self._thread
            if thread is None:  # idle: nothing waits (no thread is started here: Python may be exiting)
                self._checkpoint_and_close()
                return True
            self._changes.append(Change(run_id=None, checkpoint=True))
            self._given += 1
            self._condition.notify_all()
        thread.join(timeout + 1.0)
        with self._condition:
            complete = not self._changes
            if self._thread is None:
                self._close_file()
        return complete

    # --- the writer's thread

    def _work(self) -> None:
        while True:
            with self._condition:
                if not self._changes:
                    self._condition.wait(0 if self._closing is not None else IDLE_SECONDS)
                if not self._changes:
                    self._thread = None
                    return
                batch = self._next_batch()
            try:
                if len(batch) == 1:
                    self._write(batch[0])
                else:
                    self._write_together(batch)
            except Exception:  # the writer must go on, whatever one change meets
                log.exception("[dagmagic] the run store's writer failed on a change")
            finally:
                for change in batch:
                    if change.after is not None:
                        try:
                            change.after()
                        except Exception:
                            log.exception("[dagmagic] the run store's writer failed after a change")
                    if change.settled is not None:
                        change.settled.set()
                with self._condition:
                    for _ in batch:
                        self._changes.popleft()
                    self._finished += len(batch)
                    self._condition.notify_all()

    def _next_batch(self) -> list[Change]:
        """The changes to write next (the caller holds the condition): those waiting, up to ``BATCH_CHANGES``,
        written in one transaction; a change that writes a run whole, or whose giver waits for it, on its own
        (and so are all, in a file created anew: which runs it holds changes as they are written).
        """
        first = self._changes[0]
        if self._recreated or first.whole or first.settled is not None:
            return [first]
        batch = []
        for change in itertools.islice(self._changes, BATCH_CHANGES):
            if change.whole or change.settled is not None:
                break
            batch.append(change)
        return batch

    def _write_together(self, batch: list[Change]) -> None:
        """Write ``batch`` in one transaction, each change inside a savepoint (one refused is undone alone); when
        that fails for another reason than a lock, each change is written on its own, as ``_write`` does.
        """
        while True:
            try:
                self._follow_the_path()
                if self._recreated:
                    break
                written = [change for change in batch if not self._left_out(change)]
                refused = self._commit_together(written)
            except self._retried as exc:
                if self._try_again(exc):
                    continue
                break
            self.unreachable_since = None
            for change in written:
                reason = refused.get(id(change))
                if isinstance(reason, DagError):  # refused (the run's lease is another's): it goes on unsaved
                    self._failed(change, reason)
            self.locked_since = None
            return
        for change in batch:
            self._write(change)

    def _commit_together(self, changes: list[Change]) -> dict[int, Exception]:
        """Write ``changes`` in one transaction; the changes refused (by ``id``), each undone alone."""
        assert self._db is not None
        db = self._db
        refused: dict[int, Exception] = {}
        with self._backend.transaction(db):
            for number, change in enumerate(changes):
                if not change.statements.items:
                    continue
                db.execute(f"SAVEPOINT change_{number}")
                try:
                    change.statements.run(db)
                except (DagError, Withdrawn) as exc:
                    db.execute(f"ROLLBACK TO SAVEPOINT change_{number}")
                    refused[id(change)] = exc
                db.execute(f"RELEASE SAVEPOINT change_{number}")
        if any(change.checkpoint for change in changes):
            self._backend.checkpoint(db)
        return refused

    def _write(self, change: Change) -> None:
        run_id = change.run_id
        if run_id is None and not change.statements.items and (self._file is None or self._file.replaced()):
            return  # a checkpoint of a store deleted meanwhile: it is not created again for that
        if run_id is not None and run_id in self._lost and not change.whole:
            return  # dropped already: not worth a connection tried again
        while True:
            try:
                self._follow_the_path()
                if self._left_out(change):
                    return
                self._commit(change)
                self.unreachable_since = None
            except Withdrawn:  # it had the lock: it is free again
                pass
            except DagError as exc:  # refused (the run's lease is another's): the run goes on unsaved
                self._failed(change, exc)
            except self._retried as exc:
                if self._try_again(exc):
                    continue
                self._failed(change, exc)
            else:
                if run_id is not None and change.whole:
                    self._written.add(run_id)
                    self._asked.discard(run_id)
                    self._lost.discard(run_id)
            self.locked_since = None
            return

    def _left_out(self, change: Change) -> bool:
        """Whether ``change`` is not written: its run was dropped from the file (and told), or the file was
        created anew and does not hold the run yet (the store is asked for it whole).
        """
        run_id = change.run_id
        if run_id is None or change.whole:
            return False
        if run_id in self._lost:
            return True
        if self._recreated and run_id not in self._written:
            self._ask_for(run_id)
            return True
        return False

    def _commit(self, change: Change) -> None:
        assert self._db is not None
        db = self._db
        if change.statements.items:
            with self._backend.transaction(db):  # the write lock first: a change never half-waits inside
                change.statements.run(db)
        if change.checkpoint:
            self._backend.checkpoint(db)  # copies what no reader needs; never waits

    def _follow_the_path(self) -> None:
        """Open the file at the store's path again when the one open is no longer there."""
        if self._db is not None and self._file is not None and not self._file.replaced():
            return
        if self._db is not None:
            how = self._file.how if self._file is not None else "was closed"
            log.info("[dagmagic] the run store %s %s; it is opened again", self.path, how)
            self._close_file()  # SQLite neither checkpoints nor deletes a moved file's log: the new file is safe
        how = self._file.how if self._file is not None else "was closed"
        try:
            self._db = self._backend.writer()
            self._file = self._backend.watch(self._db)
        except (DagError, OSError) as exc:
            self._close_file()
            raise _CannotOpen(f"it {how}, and cannot be opened again ({exc})", exc) from None
        self._written.clear()
        self._recreated = True
        self._asked = set(self._listener.reopened())

    def _checkpoint_and_close(self) -> None:
        if self._db is not None and self._file is not None and not self._file.replaced():
            try:
                self._backend.checkpoint(self._db)
            except self._backend.errors as exc:
                log.warning("[dagmagic] the run store %s could not be checkpointed (%s)", self.path, exc)
        self._close_file()

    def _close_file(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
        if self._file is not None:
            self._file.close()
            self._file = None

    def _ask_for(self, run_id: str) -> None:
        if run_id not in self._asked and run_id not in self._lost:
            self._asked.add(run_id)
            self._listener.rewrite(run_id)

    def _try_again(self, exc: BaseException) -> bool:
        """Whether to write the change again, after a pause: another program holds the lock, or the store cannot
        be reached for now (each within its bound).
        """
        if isinstance(exc, _CannotOpen):
            return self._wait_for_the_store(exc.cause)
        if self._backend.locked(exc) and not self._past_closing():
            self._wait_for_the_lock()
            return True
        return self._wait_for_the_store(exc)

    def _wait_for_the_lock(self) -> None:
        now = time.monotonic()
        if self.locked_since is None:
            self.locked_since, self._stall_told = now, False
        self._tell_if_stalled(now - self.locked_since)
        time.sleep(_RETRY_SECONDS)

    def _wait_for_the_store(self, exc: BaseException) -> bool:
        """Whether to try the change again after a pause: ``exc`` says the store cannot be reached for now, and
        it has not been for ``reconnect_wait`` seconds yet.
        """
        if not self._backend.unreachable(exc):
            return False
        now = time.monotonic()
        if self.unreachable_since is None:
            self.unreachable_since, self._stall_told = now, False
            log.warning(
                "[dagmagic] the run store %s cannot be reached (%s); its changes wait in memory and are written once "
                "it is back (%g s at most)",
                self.path,
                " ".join(str(exc).split()),
                self.reconnect_wait,
            )
        if now - self.unreachable_since >= self.reconnect_wait or self._past_closing():
            return False
        self._tell_if_stalled(now - self.unreachable_since)
        time.sleep(_RECONNECT_SECONDS)
        return True

    def _tell_if_stalled(self, waited: float) -> None:
        if waited >= STALL_SECONDS and not self._stall_told:
            self._stall_told = True
            with self._condition:
                waiting = {change.run_id for change in self._changes if change.run_id is not None}
            self._listener.stalled(waiting)

    def _past_closing(self) -> bool:
        return self._closing is not None and time.monotonic() > self._closing

    def _failed(self, change: Change, exc: BaseException) -> None:
        if isinstance(exc, self._backend.errors) and self._file is not None and self._file.replaced():
            self._ask_for_again(change)  # deleted or moved while this change was written: into the new file
            return
        change.failure = exc
        if change.settled is not None:
            return
        reason = str(exc) if isinstance(exc, _CannotOpen) else f"{exc}"
        if self._backend.locked(exc):
            reason = "another program still held its write lock when it was closed"
        reason = str(exc).rstrip(".") + "." if isinstance(exc, DagError) else f"the run store failed ({reason})."
        if self.unreachable_since is not None:
            reason = (
                f"the run store {self.path} could not be reached for {time.monotonic() - self.unreachable_since:.0f} "
                f"s (the writer waits {self.reconnect_wait:g} s at most: `store_reconnect_wait`). What the run did "
                "since is not stored; the stored run stops there and shows as interrupted."
            )
        if change.run_id is None:
            log.warning("[dagmagic] the run store %s: %s", self.path, reason)
            return
        self._written.discard(change.run_id)
        self._lost.add(change.run_id)
        self._listener.lost(change.run_id, reason)

    def _ask_for_again(self, change: Change) -> None:
        try:
            self._follow_the_path()
        except _CannotOpen as exc:
            self._failed(change, exc)
            return
        if change.run_id is not None:
            self._ask_for(change.run_id)


class OpenFile:
    """The file opened at ``path``, held open so that it is known again: while it is held, a file created at
    its path after it was deleted cannot reuse its inode.
    """

    how = "was deleted or moved while open"

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDONLY)

    def replaced(self) -> bool:
        """Whether the file at the path is no longer this one (deleted, moved, or another put there)."""
        try:
            there = os.stat(self.path)
        except OSError:
            return True
        here = os.fstat(self._fd)
        return (there.st_dev, there.st_ino) != (here.st_dev, here.st_ino)

    def close(self) -> None:
        """Let the file go."""
        os.close(self._fd)
