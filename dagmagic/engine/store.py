"""The run store: every run checkpointed to SQLite as it happens, so that it outlives its kernel.

Each event of a run becomes one change (the rows it changed, and the event), taken in the call that emits
it, before any view hears of it; the store's writer (``store_writer``) writes the changes in order on a
thread of its own, so that writing never stalls the event loop, not even while another program holds the
file's write lock (the changes wait, and are written once it is released; the run is told when that takes
a while). What holds: a step's result is written before anything that happened after it, and is on disk
when its run ends (``await run`` waits for it, ``SETTLE_SECONDS`` at most, then the run says what is not);
reading through the store sees every change made so far; a killed process loses the changes of its last
moments (normally milliseconds; while another program held the lock, everything since). At the end of each
run the write-ahead log is checkpointed, so the ``.sqlite`` file alone holds every run that ended;
``export`` makes a consistent copy at any time. A store deleted or moved while open is created again at its
path, and the runs going on are written into it whole.

One writing and one reading connection per process and file; WAL, so that other processes (another kernel)
can write the same file at the same time. The file is marked as dagmagic's (``application_id``) and versioned
(``user_version``): a file that is another program's, damaged, or from a newer dagmagic is refused with a
``StoreError`` naming it, never overwritten; one that cannot be written is reported as ``StoreUnavailable``
and the run goes on unsaved. Nothing secret is written: a run holds no model options.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import socket
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from dagmagic.engine.context import Exchange
from dagmagic.engine.store_copy import copy_store
from dagmagic.engine.store_runs import SavedRuns
from dagmagic.engine.store_writer import Change, OpenFile, Statements, StoreWriter
from dagmagic.errors import DagError, StoreError
from dagmagic.events import (
    EVENTS,
    AnswerCleared,
    AnswerDelta,
    AnswerReady,
    Event,
    LLMCallRecorded,
    PhaseChanged,
    RunFinished,
    RunStarted,
    RunWarning,
    UserAction,
)
from dagmagic.models import (
    AnalysisResult,
    Decision,
    ExecutionPlan,
    LLMCall,
    PlanStep,
    RoundRecord,
    RunState,
)

if TYPE_CHECKING:
    from dagmagic.engine.run import DagRun

__all__ = ["SCHEMA_VERSION", "SETTLE_SECONDS", "RunStore", "RunSummary", "StoreUnavailable", "StoredRun"]

log = logging.getLogger("dagmagic")

APPLICATION_ID = 0x4441474D  # "DAGM": marks the file as a dagmagic run store
SCHEMA_VERSION = 2

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
]
"""Each schema version's statements, applied in order to bring an older file up to date."""

_STEP_EVENTS = frozenset(
    {"step_planned", "step_queued", "step_started", "step_iteration", "verifying", "verification", "step_retrying",
     "step_completed"}
)  # fmt: skip
_ROUND_EVENTS = frozenset({"plan_ready", "step_planned", "analysis_ready", "replanning", "approval_requested"})
_RUN_EVENTS = (PhaseChanged, AnswerReady, AnswerCleared, UserAction, RunFinished)
_HOST = socket.gethostname()
_PREPARE_SECONDS = 10.0
"""How long opening a store waits for another process that prepares the same new file."""
_ROUND_EXTRA = {"rerun_of", "rerun_step", "approval", "follow_ups"}
"""RoundRecord fields kept as JSON in ``rounds.extra`` (schema 2)."""
SETTLE_SECONDS = 5.0
"""How long the end of a run waits for its changes to be written (another program may hold the lock)."""
_READ_SECONDS = 1.0
"""How long a read waits for the changes made so far to be written, so that it sees them."""
_CLOSE_SECONDS = 5.0
"""How long closing a store (and leaving Python) waits for changes held up by another program's lock."""
_RUN_TABLES = ("rounds", "steps", "calls", "events")
"""The tables holding a run's rows besides ``runs``."""
_NEXT_EVENT = (
    "INSERT INTO events (run_id, seq, type, at, data) "
    "SELECT ?, COALESCE(MAX(seq), -1) + 1, ?, ?, ? FROM events WHERE run_id = ?"
)


class StoreUnavailable(DagError):
    """The store cannot be written here (a read-only directory, say): runs go on without being saved."""


@dataclass(frozen=True)
class RunSummary:
    """One stored run, as ``%dag history`` lists it."""

    run_id: str
    goal: str
    status: str
    """As stored; a run still ``running`` whose process is gone was interrupted (see ``interrupted``)."""
    started_at: float | None
    finished_at: float | None
    cost: float | None
    interrupted: bool
    """It did not end: its process died, or it was cancelled; ``session.resume(run_id)`` continues it."""


@dataclass
class StoredRun:
    """A run read back from the store: its state, and the conversation it was planned in."""

    state: RunState
    history: list[Exchange]
    events: list[Event]


class RunStore:
    """One SQLite run store file, opened once per process (``RunStore.open``)."""

    _opened: ClassVar[dict[Path, RunStore]] = {}
    _opening: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, path: Path) -> None:
        self.path = path
        self._runs = SavedRuns(path, self._whole)
        self._writer = self._runs.writer = StoreWriter(path, _connect(path), connect=_connect, listener=self._runs)
        self._reader, self._reading = _reader(path), OpenFile(path)
        self._live: set[str] = set()
        """Runs of this process that have not ended (a run leaves once its end is written)."""

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> RunStore:
        """The store at ``path`` (created owner-only if missing), shared by everything in this process."""
        resolved = Path(path).expanduser().resolve()
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
        if not self._writer.close(_CLOSE_SECONDS):
            log.warning("[dagmagic] the run store %s was closed with changes not written (it was locked)", self.path)
        self._reader.close()
        self._reading.close()

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

    def attach(self, run: DagRun, history: list[Exchange]) -> None:
        """Save ``run`` from now on: all of it now, then every event as it is emitted."""
        self._runs.add(run, history)
        self._live.add(run.run_id)
        self._writer.put(self._whole(run, history))

    def record(self, run: DagRun, event: Event) -> None:
        """Queue what ``event`` changed, then the event, as one change (one transaction)."""
        if isinstance(event, AnswerDelta):
            return  # the answer is saved whole when it is ready; resuming writes it again anyway
        run_id = run.run_id
        own = not event.depth  # a subrun's events are kept; its state is saved with its step
        change = Change(run_id=run_id)
        db = change.statements
        if isinstance(event, (RunStarted, *_RUN_EVENTS)) and own:
            self._put_run(db, run.state)
        if isinstance(event, LLMCallRecorded):
            self._put_call(db, run_id, len(run.state.calls) - 1, event.call)
        round_index = getattr(event, "round", None) if own else None
        if round_index is not None and (event.type in _ROUND_EVENTS or isinstance(event, RunWarning)):
            record = _round(run, round_index)
            if record is not None:
                self._put_round(db, run_id, record)
                if event.type == "plan_ready":
                    self._put_plan(db, run_id, record)
        if event.type in _STEP_EVENTS and round_index is not None:
            self._put_step_of(db, run, event, round_index)
        db.execute(_NEXT_EVENT, (run_id, event.type, event.at, event.model_dump_json(), run_id))
        if isinstance(event, RunFinished) and own:
            change.after = lambda: self._live.discard(run_id)
        self._writer.put(change)

    async def settle(self, run: DagRun) -> None:
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
        """A consistent copy of the store at ``target``, a new file (see ``store_copy``), with every change made
        so far; ``StoreError`` when ``target`` exists already.
        """
        source = self._read()
        if not self._writer.flush(0):
            raise StoreUnavailable(
                f"nothing was exported: {self._runs.why_waiting()} Export again once it is released."
            )
        return copy_store(source, target)

    def _whole(self, run: DagRun, history: list[Exchange]) -> Change:
        """The run as it is now, replacing whatever the file held of it: its rows, calls and events."""
        run_id = run.run_id
        change = Change(run_id=run_id, whole=True)
        db = change.statements
        for table in _RUN_TABLES:
            db.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))
        self._put_run(db, run.state, history=history)
        for record in run.state.rounds:
            self._put_round(db, run_id, record)
            for position, step in enumerate(record.plan.steps):
                self._put_step(db, run_id, record.index, step, position)
        for sequence, call in enumerate(run.state.calls):
            self._put_call(db, run_id, sequence, call)
        kept = (event for event in run.events if not isinstance(event, AnswerDelta))
        for sequence, event in enumerate(kept):
            db.execute(
                "INSERT INTO events VALUES (?, ?, ?, ?, ?)",
                (run_id, sequence, event.type, event.at, event.model_dump_json()),
            )
        return change

    # --- reading

    def load(self, run_id: str) -> StoredRun:
        """The stored run ``run_id``; ``KeyError`` when there is none."""
        db = self._read(run_id)
        row = db.execute("SELECT * FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        if row is None:
            raise KeyError(run_id)
        run = dict(zip([c[0] for c in db.execute("SELECT * FROM runs LIMIT 0").description], row, strict=True))
        steps: dict[int, list[PlanStep]] = {}
        for step_round, data in db.execute(
            "SELECT round, data FROM steps WHERE run_id = ? ORDER BY round, position", (run_id,)
        ):
            steps.setdefault(step_round, []).append(PlanStep.model_validate_json(data))
        rounds = [
            _round_of(row, steps.get(row[0], []))
            for row in db.execute(
                """SELECT idx, goal, analysis, decision, error, warnings, free, extra FROM rounds
                   WHERE run_id = ? ORDER BY idx""",
                (run_id,),
            )
        ]
        calls = [
            LLMCall.model_validate_json(data)
            for (data,) in db.execute("SELECT data FROM calls WHERE run_id = ? ORDER BY seq", (run_id,))
        ]
        state = RunState(
            run_id=run_id,
            goal=run["goal"],
            status=run["status"],
            phase=run["phase"],
            rounds=rounds,
            answer=run["answer"],
            follow_ups=json.loads(run["follow_ups"]),
            pending_follow_ups=json.loads(run["pending"]),
            calls=calls,
            error=run["error"],
            started_at=run["started_at"] or 0.0,
            finished_at=run["finished_at"],
            domain=run["domain"],
            routed=bool(run["routed"]),
        )
        history = [Exchange(goal=goal, answer=answer) for goal, answer in json.loads(run["history"])]
        events = [
            EVENTS.validate_json(data)
            for (data,) in db.execute("SELECT data FROM events WHERE run_id = ? ORDER BY seq", (run_id,))
        ]
        return StoredRun(state=state, history=history, events=events)

    def runs(self, limit: int = 50, *, goal: str | None = None) -> list[RunSummary]:
        """The latest ``limit`` runs (of ``goal`` only, when given), newest first."""
        return self._summaries("? IS NULL OR r.goal = ?", (goal, goal), limit)

    def summary(self, run_id: str) -> RunSummary | None:
        """The run ``run_id`` as ``runs`` lists it, None when it is not stored."""
        return next(iter(self._summaries("r.run_id = ?", (run_id,), 1)), None)

    def _summaries(self, where: str, params: tuple[object, ...], limit: int) -> list[RunSummary]:
        db = self._read()
        rows = db.execute(
            f"""SELECT r.run_id, r.goal, r.status, r.started_at, r.finished_at, r.host, r.pid,
                      (SELECT SUM(cost) FROM calls c WHERE c.run_id = r.run_id)
               FROM runs r WHERE {where} ORDER BY r.started_at DESC LIMIT ?""",
            (*params, limit),
        ).fetchall()
        return [
            RunSummary(
                run_id=run_id,
                goal=goal,
                status=status,
                started_at=started,
                finished_at=finished,
                cost=cost,
                interrupted=status == "cancelled" or (status == "running" and not self._alive(run_id, host, pid)),
            )
            for run_id, goal, status, started, finished, host, pid, cost in rows
        ]

    def _alive(self, run_id: str, host: str, pid: int) -> bool:
        if pid == os.getpid() and host == _HOST:
            return run_id in self._live
        if host != _HOST:
            return True  # another machine's run: nothing says it died
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # another user's process: alive
            return True
        return True

    def _read(self, run_id: str | None = None) -> sqlite3.Connection:
        """The reading connection, once the changes made so far are written (``_READ_SECONDS`` at most), to the
        file now at the path; ``StoreUnavailable`` when ``run_id``'s latest changes still wait.
        """
        if not self._writer.flush(_READ_SECONDS) and run_id is not None and self._writer.pending(run_id):
            raise StoreUnavailable(
                f"run {run_id}'s latest changes are not written yet: {self._runs.why_waiting()} Try again once it is "
                "released."
            )
        if self._reading.replaced():  # deleted or moved: read what is at the path now
            self._reader.close()
            self._reading.close()
            self._reader, self._reading = _reader(self.path), OpenFile(self.path)
        return self._reader

    # --- rows

    def _put_run(self, db: Statements, state: RunState, *, history: list[Exchange] | None = None) -> None:
        values = (
            state.goal,
            state.status,
            state.phase,
            state.started_at,
            state.finished_at,
            time.time(),
            state.error,
            state.answer,
            json.dumps(state.follow_ups),
            json.dumps(state.pending_follow_ups),
            state.domain,
            int(state.routed),
        )
        if history is None:
            db.execute(
                """UPDATE runs SET goal = ?, status = ?, phase = ?, started_at = ?, finished_at = ?, updated_at = ?,
                   error = ?, answer = ?, follow_ups = ?, pending = ?, domain = ?, routed = ? WHERE run_id = ?""",
                (*values, state.run_id),
            )
            return
        db.execute(
            "INSERT OR REPLACE INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                state.run_id,
                *values,
                json.dumps([[exchange.goal, exchange.answer] for exchange in history]),
                _HOST,
                os.getpid(),
            ),
        )

    @staticmethod
    def _put_round(db: Statements, run_id: str, record: RoundRecord) -> None:
        db.execute(
            """INSERT OR REPLACE INTO rounds (run_id, idx, goal, analysis, decision, error, warnings, free, extra)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)""",
            (
                run_id,
                record.index,
                record.plan.goal,
                record.analysis.model_dump_json() if record.analysis else None,
                record.decision.model_dump_json() if record.decision else None,
                record.error,
                json.dumps(record.warnings),
                int(record.free),
                json.dumps({**record.model_dump(mode="json", include=_ROUND_EXTRA), "query": record.plan.query}),
            ),
        )

    def _put_plan(self, db: Statements, run_id: str, record: RoundRecord) -> None:
        """The round's whole plan: its steps in order, and none it no longer holds."""
        ids = [step.id for step in record.plan.steps]
        db.execute(
            f"DELETE FROM steps WHERE run_id = ? AND round = ? AND step_id NOT IN ({', '.join('?' * len(ids))})",
            (run_id, record.index, *ids),
        )
        for position, step in enumerate(record.plan.steps):
            self._put_step(db, run_id, record.index, step, position)

    def _put_step_of(self, db: Statements, run: DagRun, event: Event, round_index: int) -> None:
        step_id = getattr(event, "step_id", None) or getattr(getattr(event, "step", None), "id", None)
        step = run.step_of(round_index, step_id) if step_id is not None else None
        if step is None:
            return
        record = _round(run, round_index)  # a step that streamed in takes its place at the end of the plan so far
        position = len(record.plan.steps) - 1 if record is not None else 0
        db.execute(
            """INSERT INTO steps VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (run_id, round, step_id)
               DO UPDATE SET status = excluded.status, data = excluded.data""",
            (run.run_id, round_index, step.id, position, step.status, step.model_dump_json()),
        )

    @staticmethod
    def _put_step(db: Statements, run_id: str, round_index: int, step: PlanStep, position: int) -> None:
        db.execute(
            "INSERT OR REPLACE INTO steps VALUES (?, ?, ?, ?, ?, ?)",
            (run_id, round_index, step.id, position, step.status, step.model_dump_json()),
        )

    @staticmethod
    def _put_call(db: Statements, run_id: str, sequence: int, call: LLMCall) -> None:
        db.execute(
            "INSERT OR REPLACE INTO calls VALUES (?, ?, ?, ?, ?)",
            (run_id, sequence, call.purpose, call.cost, call.model_dump_json()),
        )


def _reader(path: Path) -> sqlite3.Connection:
    """A connection that only reads the store at ``path`` (opening creates it when missing)."""
    db = _connect(path)
    db.execute("PRAGMA query_only = ON")
    return db


def _round(run: DagRun, index: int) -> RoundRecord | None:
    for record in reversed(run.state.rounds):
        if record.index == index:
            return record
    return None


def _connect(path: Path) -> sqlite3.Connection:
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


def _round_of(row: tuple[Any, ...], steps: list[PlanStep]) -> RoundRecord:
    """A round read back from its row (its plan's query, and the fields of schema 2, are in ``extra``)."""
    index, goal, analysis, decision, error, warnings, free, extra = row
    extra = json.loads(extra)
    return RoundRecord(
        index=index,
        plan=ExecutionPlan(goal=goal, query=extra.pop("query", ""), steps=steps, round=index),
        analysis=AnalysisResult.model_validate_json(analysis) if analysis else None,
        decision=Decision.model_validate_json(decision) if decision else None,
        error=error,
        warnings=json.loads(warnings),
        free=bool(free),
        **extra,
    )


atexit.register(RunStore._close_every_store)
