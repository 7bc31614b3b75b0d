"""The run store: every run checkpointed as it happens, so that it outlives its kernel, to a SQLite file or a
PostgreSQL database shared by a team (``backend``: the same rows and SQL on both; what is said here of the file,
its lock held by another program, its write-ahead log, or its deletion, is SQLite's).

Each event of a run becomes one change (the rows it changed, and the event), taken in the call that emits
it, before any view hears of it; the store's writer (``writer``) writes the changes in order on a
thread of its own, so that writing never stalls the event loop, not even while another program holds the
file's write lock (the changes wait, and are written once it is released; the run is told when that takes
a while). What holds: a step's result is written before anything that happened after it, and is on disk
when its run ends (``await run`` waits for it, ``SETTLE_SECONDS`` at most, then the run says what is not);
reading through the store sees every change made so far; a killed process loses the changes of its last
moments (normally milliseconds; while another program held the lock, everything since). At the end of each
run the write-ahead log is checkpointed, so the ``.sqlite`` file alone holds every run that ended;
``export`` makes a consistent copy at any time. A store deleted or moved while open is created again at its
path, and the runs going on are written into it whole (their lease, conversation and calls included).

A run has one driver at a time, the holder of its lease (``lease``), taken in the writer's
transaction that writes the run, and checked in each transaction that writes to it; its events are numbered by
the store in the transaction that writes them, so no writer overwrites another's. Starting a new run never
waits (no one else can hold a run id just made); resuming or re-running one waits ``LEASE_WAIT_SECONDS`` at
most for the writer's verdict, so that a refusal (``RunDriven``, naming the driver) reaches the caller, and
a lock held longer by another program refuses the resume with ``StoreUnavailable`` saying so, the store left
as it was.

Each thing is stored once, so a long session grows the file by what each run adds: a run's conversation is a
chain of ``exchanges`` (each earlier goal and answer once, shared by every run planned after it) that the run's
row points to, and an ``llm_call`` event refers to its ``calls`` row instead of copying the call.

One writing and one reading connection per process and file; WAL, so that other processes (another kernel)
can write the same file at the same time. The file is marked as dagmagic's (``application_id``) and versioned
(``user_version``): a file that is another program's, damaged, or from a newer dagmagic is refused with a
``StoreError`` naming it, never overwritten; one that cannot be written is reported as ``StoreUnavailable``
and the run goes on unsaved. Nothing secret is written: a run holds no model options.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from dagmagic.errors import ConfigurationError, DagError, StoreUnavailable
from dagmagic.events import (
    AnswerDelta,
    CallProgress,
    Event,
    LLMCallRecorded,
    RunFinished,
    RunStarted,
    RunWarning,
)
from dagmagic.models import Exchange
from dagmagic.store import experiments, lease, reading, rows
from dagmagic.store.backend import Connection, Location
from dagmagic.store.experiments import ExperimentSummary
from dagmagic.store.export import copy_store
from dagmagic.store.opening import open_backend
from dagmagic.store.reading import RunSummary, StoredRun
from dagmagic.store.saved_runs import SavedRuns
from dagmagic.store.writer import Change, Statements, StoreWriter, Withdrawn
from dagmagic.store_url import StoreURL, store_location

if TYPE_CHECKING:
    from dagmagic.store.live_run import LiveRun

__all__ = ["LEASE_WAIT_SECONDS", "SETTLE_SECONDS", "RunStore", "RunSummary", "StoredRun"]

log = logging.getLogger("dagmagic")

SETTLE_SECONDS = 5.0
"""How long the end of a run waits for its changes to be written (another program may hold the lock)."""
_READ_SECONDS = 1.0
"""How long a read waits for the changes made so far to be written, so that it sees them."""
_CLOSE_SECONDS = 5.0
"""How long closing a store (and leaving Python) waits for changes held up by another program's lock."""
LEASE_WAIT_SECONDS = 1.0
"""How long resuming (or re-running) a run waits for the writer to take its lease: another program holding the
store's write lock longer refuses the resume, with a message saying so."""


class RunStore:
    """One run store (a SQLite file, or a PostgreSQL database), opened once per process (``RunStore.open``)."""

    _opened: ClassVar[dict[Location, RunStore]] = {}
    _opening: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, path: Location) -> None:
        self.path = path
        """The SQLite file's path, or the PostgreSQL URL (shown with its password masked)."""
        self._backend = backend = open_backend(path)
        self._runs = SavedRuns(path, self._whole, self._let_go)
        self._writer = self._runs.writer = StoreWriter(backend, backend.writer(), listener=self._runs)
        self._reader = backend.reader()
        self._reading = backend.watch(self._reader)
        self._reading_one = threading.Lock()
        """Held through a read of several statements: the reader's snapshot is one at a time."""
        self._leases = lease.Heartbeat(path, self._renew)
        """The leases of the runs this store's process drives, renewed while they run."""
        self._renewing = threading.Event()
        """A renewal of the leases waits to be written (the next beat adds none meanwhile)."""

    @classmethod
    def open(cls, path: str | os.PathLike[str] | StoreURL) -> RunStore:
        """The store at ``path`` (a SQLite file, created owner-only if missing; or a ``postgresql://`` URL),
        shared by everything in this process. ``ConfigurationError`` for a URL of another scheme, or a PostgreSQL
        one without psycopg installed.
        """
        resolved: Location
        if isinstance(path, StoreURL):
            resolved = path
        else:
            try:
                located = store_location(os.fspath(path))
            except ValueError as exc:
                raise ConfigurationError(f"{exc}.") from None
            resolved = located if isinstance(located, StoreURL) else located.expanduser().resolve()
        with cls._opening:
            store = cls._opened.get(resolved)
            if store is None:
                store = cls._opened[resolved] = cls(resolved)
            return store

    def close(self) -> None:
        """Write what waits (``_CLOSE_SECONDS`` at most), checkpoint, and close (a later ``open`` opens it again)."""
        with self._opening:
            if self._opened.get(self.path) is self:
                del self._opened[self.path]
        self._leases.stop()  # leases still held expire
        if not self._writer.close(_CLOSE_SECONDS):
            log.warning("[dagmagic] the run store %s was closed with changes not written (it was locked)", self.path)
        self._reader.close()
        self._reading.close()

    @property
    def reconnect_wait(self) -> float:
        """Seconds the changes wait in memory while the store cannot be reached, before their runs are given up."""
        return self._writer.reconnect_wait

    @reconnect_wait.setter
    def reconnect_wait(self, seconds: float) -> None:
        self._writer.reconnect_wait = seconds

    @property
    def closed(self) -> bool:
        """Whether ``close()`` ran: nothing more is written (``RunStore.open`` opens the path again)."""
        return self._writer.closed

    @classmethod
    def _close_every_store(cls) -> None:
        """At exit: what waits is written and every store checkpointed, so the ``.sqlite`` files hold it all."""
        for store in list(cls._opened.values()):
            store.close()

    # --- writing, as a run's events happen

    def attach(self, run: LiveRun, history: list[Exchange]) -> None:
        """Take the run's lease and save ``run`` from now on: all of it now (its state, when the file holds it
        already), then every event as it is emitted. A run with a past (resumed, or re-run) may be driven
        elsewhere: this waits for the writer's verdict, ``LEASE_WAIT_SECONDS`` at most, and raises ``RunDriven``
        (a ``DagError`` naming the driver) when another holds it, or ``StoreUnavailable`` when the store stays
        locked; nothing is written then. A new run's id was just made: it waits for nothing.
        """
        run_id, history = run.run_id, list(history)
        held = lease.claim(run_id)
        state, whole = Statements(), Statements()
        rows.put_state(state, run, history)
        rows.put_whole(whole, run, history)
        verdict = _Verdict() if run.events else None

        def open_run(db: Connection) -> None:
            if verdict is not None:
                verdict.begin()
            try:
                lease.take(db, held)
            except lease.RunDriven:
                self._leases.drop(run_id, held.token)
                raise
            if db.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone() is None:
                whole.run(db)  # a new run, or one re-run after its store was deleted: all of it
            else:
                state.run(db)  # its events and calls stay as they were written (by whichever driver)

        settled = threading.Event() if verdict is not None else None
        change = Change(run_id=run_id, whole=True, settled=settled)
        change.statements.call(open_run)
        if verdict is None:
            self._runs.add(run, history)
            self._leases.hold(held)
            self._writer.put(change)
            return
        self._writer.put(change)
        assert settled is not None
        if not settled.wait(LEASE_WAIT_SECONDS) and verdict.give_up():
            raise self._not_taken(run_id)
        if not settled.wait(_CLOSE_SECONDS):  # it began: the lock is taken, it ends at once
            raise StoreUnavailable(f"run {run_id} was not resumed: {self._runs.why_waiting()} Try again.")
        if isinstance(change.failure, DagError):
            raise change.failure
        if change.failure is not None:
            raise StoreUnavailable(f"run {run_id} was not resumed: the run store failed ({change.failure}).")
        self._runs.add(run, history)
        self._leases.hold(held)

    def _not_taken(self, run_id: str) -> DagError:
        """Why the lease on ``run_id`` was not taken in time: another's, or the store's lock held elsewhere."""
        now = time.time()
        try:
            current = lease.holder(self._reading_now(), run_id)
        except self._backend.errors:
            current = None
        if current is not None and current.token and current.live(now):
            return lease.RunDriven(current.refusal(now))
        return StoreUnavailable(
            f"run {run_id} was not resumed: {self._runs.why_waiting()} Nothing was changed; resume it again once it "
            "is released."
        )

    def lease_token(self, run_id: str) -> str | None:
        """The token of this store's lease on ``run_id``, None when it holds none."""
        held = self._leases.lease(run_id)
        return None if held is None else held.token

    def release(self, run_id: str, token: str) -> None:
        """Give back the lease ``token`` on ``run_id`` (its drive ended), if it is still held: written after
        every change given before.
        """
        held = self._leases.drop(run_id, token)
        if held is not None:
            change = Change(run_id=None, after=lambda: lease.forget(held))
            lease.release(change.statements, held)
            self._writer.put(change)

    def _let_go(self, run_id: str) -> None:
        """Stop renewing ``run_id``'s lease (it is no longer saved): the stored run then shows as interrupted, here
        at once and elsewhere once the lease expires, rather than as driven while its run goes on unsaved.
        """
        held = self._leases.drop(run_id)
        if held is not None:
            lease.forget(held)

    def _renew(self, leases: list[lease.Lease]) -> None:
        """Have the writer renew ``leases`` (from the heartbeat's thread); one renewal waits at a time."""
        if self._renewing.is_set():
            return  # the last one still waits (another program's lock): the next after it is written

        def renew(db: Connection) -> None:
            for held in leases:
                if not lease.renew(db, held) and self._leases.drop(held.run_id, held.token) is not None:
                    lease.forget(held)
                    log.warning("[dagmagic] run %s was taken over elsewhere after its lease here expired", held.run_id)

        change = Change(run_id=None, after=self._renewing.clear)
        change.statements.call(renew)
        self._renewing.set()
        try:
            self._writer.put(change)
        except DagError:  # closed
            self._renewing.clear()

    def record(self, run: LiveRun, event: Event) -> None:
        """Queue what ``event`` changed, then the event, as one change (one transaction), written only while the
        run's lease is not another's; its run's end gives the lease back.
        """
        if isinstance(event, AnswerDelta | CallProgress):
            return  # the answer is saved whole when it is ready (resuming writes it again), a call when it ends
        run_id = run.run_id
        own = not event.depth  # a subrun's events are kept; its state is saved with its step
        ends = own and isinstance(event, RunFinished)
        held = self._leases.drop(run_id) if ends else self._leases.lease(run_id)
        token = held.token if held is not None else None
        change = Change(run_id=run_id)
        db = change.statements
        db.call(lambda connection: lease.check_driver(connection, run_id, token))
        if isinstance(event, (RunStarted, *rows.RUN_EVENTS)) and own:
            rows.put_run(db, run.state)
        call = None
        if isinstance(event, LLMCallRecorded):
            call = len(run.state.calls) - 1
            rows.put_call(db, run_id, call, event.call)
        round_index = getattr(event, "round", None) if own else None
        if round_index is not None and (event.type in rows.ROUND_EVENTS or isinstance(event, RunWarning)):
            record = rows.run_round(run, round_index)
            if record is not None:
                rows.put_round(db, run_id, record)
                if event.type == "plan_ready":
                    rows.put_plan(db, run_id, record)
        if event.type in rows.STEP_EVENTS and round_index is not None:
            rows.put_step_of(db, run, event, round_index)
        rows.put_event(db, run_id, event, call)
        if ends and held is not None:
            lease.release(db, held)
            change.after = lambda: lease.forget(held)
        self._writer.put(change)

    async def settle(self, run: LiveRun) -> None:
        """Wait until what ``run`` did is written and the store checkpointed, so that the ``.sqlite`` file alone
        holds it; after ``SETTLE_SECONDS`` (another program holds the lock) the run says what is not on disk yet.
        """
        await self._runs.settle(run, SETTLE_SECONDS)

    def checkpoint(self, wait: float = 0.0) -> bool:
        """Copy what is written into the ``.sqlite`` file once what waits is written; wait ``wait`` seconds at
        most for that. Whether it was done.
        """
        try:
            self._writer.put(Change(run_id=None, checkpoint=True))
        except DagError:
            return False
        return self._writer.flush(wait) if wait else False

    def export(self, target: str | os.PathLike[str]) -> Path:
        """A consistent copy of the store at ``target``, a new file (see ``export.copy_store``), with every change made
        so far; ``StoreError`` when ``target`` exists already.
        """
        source = self._read()
        if not self._writer.flush(0):
            raise StoreUnavailable(
                f"nothing was exported: {self._runs.why_waiting()} Export again once it is released."
            )
        return copy_store(source, target, self._backend.errors)

    def _whole(self, run: LiveRun, history: list[Exchange]) -> Change:
        """The run as it is now, replacing whatever the file held of it: its lease (this store's), rows,
        conversation, calls and events.
        """
        change = Change(run_id=run.run_id, whole=True)
        held = self._leases.lease(run.run_id)
        if held is not None:
            change.statements.call(lambda db: lease.take(db, held))
        rows.put_whole(change.statements, run, list(history))
        return change

    # --- experiments (``session.evaluate``)

    def save_experiment(
        self, experiment_id: str, name: str, created_at: float, definition: str, *, if_missing: bool = False
    ) -> None:
        """Record an experiment's definition (JSON), written in order with the runs' changes; ``if_missing``: only
        when no worker recorded it first.
        """
        change = Change(run_id=None)
        experiments.put_definition(
            change.statements, experiment_id, name, created_at, definition, if_missing=if_missing
        )
        self._writer.put(change)

    def save_experiment_cell(
        self,
        experiment_id: str,
        index: int,
        cell: str,
        status: str,
        cost: float | None,
        *,
        if_missing: bool = False,
    ) -> None:
        """Record one cell of an experiment as it is now (JSON, its status and cost); ``if_missing``: only when it
        is not there yet.
        """
        change = Change(run_id=None)
        experiments.put_cell(change.statements, experiment_id, index, cell, status, cost, if_missing=if_missing)
        self._writer.put(change)

    def experiment_spent(self, experiment_id: str) -> float:
        """USD an experiment's cells spent as recorded so far, whichever worker ran them."""
        return experiments.spent(self._read(), experiment_id)

    def read_experiment_cell(self, experiment_id: str, index: int) -> str | None:
        """One cell of an experiment as stored now (JSON), None when there is none."""
        return experiments.read_cell(self._read(), experiment_id, index)

    def load_experiment(self, name_or_id: str) -> tuple[str, list[str]] | None:
        """The experiment with that id (or the latest with that name): its definition and cells (JSON), or None."""
        return experiments.find(self._read(), name_or_id)

    def experiment_id(self, name_or_id: str) -> str | None:
        """The id of the experiment with that id (or of the latest with that name), None when there is none."""
        return experiments.find_id(self._read(), name_or_id)

    def experiments(self, limit: int = 20) -> list[ExperimentSummary]:
        """The latest ``limit`` experiments, newest first, their cells counted by status."""
        return experiments.latest(self._read(), limit, self._backend.dialect)

    # --- reading

    def load(self, run_id: str) -> StoredRun:
        """The stored run ``run_id``; ``KeyError`` when there is none."""
        db = self._read(run_id)
        with self._reading_one, self._backend.snapshot(db):
            return reading.load(db, run_id)

    def runs(self, limit: int = 50, *, goal: str | None = None) -> list[RunSummary]:
        """The latest ``limit`` runs (of ``goal`` only, when given), newest first."""
        return self._summaries("CAST(? AS TEXT) IS NULL OR r.goal = ?", (goal, goal), limit)

    def summary(self, run_id: str) -> RunSummary | None:
        """The run ``run_id`` as ``runs`` lists it, None when it is not stored."""
        return next(iter(self._summaries("r.run_id = ?", (run_id,), 1)), None)

    def _summaries(self, where: str, params: tuple[object, ...], limit: int) -> list[RunSummary]:
        return reading.summaries(self._read(), self._backend.dialect, where, params, limit)

    def _read(self, run_id: str | None = None) -> Connection:
        """The reading connection, once the changes made so far are written (``_READ_SECONDS`` at most), to the
        file now at the path; ``StoreUnavailable`` when ``run_id``'s latest changes still wait.
        """
        if not self._writer.flush(_READ_SECONDS) and run_id is not None and self._writer.pending(run_id):
            raise StoreUnavailable(
                f"run {run_id}'s latest changes are not written yet: {self._runs.why_waiting()} Try again once it is "
                "released."
            )
        return self._reading_now()

    def _reading_now(self) -> Connection:
        """The reading connection, to the file now at the path (whatever still waits to be written)."""
        if self._reading.replaced():  # deleted or moved (disconnected): read what is at the path now
            self._reader.close()
            self._reading.close()
            self._reader = self._backend.reader()
            self._reading = self._backend.watch(self._reader)
        return self._reader


class _Verdict:
    """Whether the writer began taking a lease the caller waits for, or the caller gave up first (then the
    writer withdraws the change: nothing of it is written).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._began = self._given_up = False

    def begin(self) -> None:
        """In the writer's transaction: go on, or ``Withdrawn`` when the caller gave up."""
        with self._lock:
            if self._given_up:
                raise Withdrawn
            self._began = True

    def give_up(self) -> bool:
        """The caller stops waiting; False when the writer began already (its verdict comes at once)."""
        with self._lock:
            self._given_up = not self._began
            return self._given_up


atexit.register(RunStore._close_every_store)
