"""The run store: every run checkpointed to SQLite as it happens, so that it outlives its kernel.

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
import hashlib
import json
import logging
import os
import sqlite3
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from dagmagic.engine.context import Exchange
from dagmagic.engine.store import lease
from dagmagic.engine.store.export import copy_store
from dagmagic.engine.store.saved_runs import SavedRuns
from dagmagic.engine.store.writer import Change, OpenFile, Statements, StoreWriter, Withdrawn
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

__all__ = [
    "LEASE_WAIT_SECONDS",
    "SCHEMA_VERSION",
    "SETTLE_SECONDS",
    "RunStore",
    "RunSummary",
    "StoreUnavailable",
    "StoredRun",
]

log = logging.getLogger("dagmagic")

APPLICATION_ID = 0x4441474D  # "DAGM": marks the file as a dagmagic run store
SCHEMA_VERSION = 3

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
]
"""Each schema version's statements, applied in order to bring an older file up to date."""

_STEP_EVENTS = frozenset(
    {"step_planned", "step_queued", "step_started", "step_iteration", "verifying", "verification", "step_retrying",
     "step_completed"}
)  # fmt: skip
_ROUND_EVENTS = frozenset({"plan_ready", "step_planned", "analysis_ready", "replanning", "approval_requested"})
_RUN_EVENTS = (PhaseChanged, AnswerReady, AnswerCleared, UserAction, RunFinished)
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
LEASE_WAIT_SECONDS = 1.0
"""How long resuming (or re-running) a run waits for the writer to take its lease: another program holding the
store's write lock longer refuses the resume, with a message saying so."""


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
    """It did not end and nothing drives it: its process died, or it was cancelled; ``session.resume(run_id)``
    continues it."""
    driver: str | None = None
    """Who drives it now (``pid 123 on host, since ...``), None when no one does."""


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
        self._leases = lease.Heartbeat(path, self._renew)
        """The leases of the runs this store's process drives, renewed while they run."""
        self._renewing = threading.Event()
        """A renewal of the leases waits to be written (the next beat adds none meanwhile)."""

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
        self._leases.stop()  # leases still held expire
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
        """Take the run's lease and save ``run`` from now on: all of it now (its state, when the file holds it
        already), then every event as it is emitted. A run with a past (resumed, or re-run) may be driven
        elsewhere: this waits for the writer's verdict, ``LEASE_WAIT_SECONDS`` at most, and raises ``RunDriven``
        (a ``DagError`` naming the driver) when another holds it, or ``StoreUnavailable`` when the store stays
        locked; nothing is written then. A new run's id was just made: it waits for nothing.
        """
        run_id, history = run.run_id, list(history)
        held = lease.claim(run_id)
        state, whole = Statements(), Statements()
        self._put_state(state, run, history)
        self._put_whole(whole, run, history)
        verdict = _Verdict() if run.events else None

        def open_run(db: sqlite3.Connection) -> None:
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
        except sqlite3.Error:
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

    def _renew(self, leases: list[lease.Lease]) -> None:
        """Have the writer renew ``leases`` (from the heartbeat's thread); one renewal waits at a time."""
        if self._renewing.is_set():
            return  # the last one still waits (another program's lock): the next after it is written

        def renew(db: sqlite3.Connection) -> None:
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

    def record(self, run: DagRun, event: Event) -> None:
        """Queue what ``event`` changed, then the event, as one change (one transaction), written only while the
        run's lease is not another's; its run's end gives the lease back.
        """
        if isinstance(event, AnswerDelta):
            return  # the answer is saved whole when it is ready; resuming writes it again anyway
        run_id = run.run_id
        own = not event.depth  # a subrun's events are kept; its state is saved with its step
        ends = own and isinstance(event, RunFinished)
        held = self._leases.drop(run_id) if ends else self._leases.lease(run_id)
        token = held.token if held is not None else None
        change = Change(run_id=run_id)
        db = change.statements
        db.call(lambda connection: lease.check_driver(connection, run_id, token))
        if isinstance(event, (RunStarted, *_RUN_EVENTS)) and own:
            self._put_run(db, run.state)
        call = None
        if isinstance(event, LLMCallRecorded):
            call = len(run.state.calls) - 1
            self._put_call(db, run_id, call, event.call)
        round_index = getattr(event, "round", None) if own else None
        if round_index is not None and (event.type in _ROUND_EVENTS or isinstance(event, RunWarning)):
            record = _round(run, round_index)
            if record is not None:
                self._put_round(db, run_id, record)
                if event.type == "plan_ready":
                    self._put_plan(db, run_id, record)
        if event.type in _STEP_EVENTS and round_index is not None:
            self._put_step_of(db, run, event, round_index)
        _put_event(db, run_id, event, call)
        if ends and held is not None:
            lease.release(db, held)
            change.after = lambda: lease.forget(held)
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
        """A consistent copy of the store at ``target``, a new file (see ``export.copy_store``), with every change made
        so far; ``StoreError`` when ``target`` exists already.
        """
        source = self._read()
        if not self._writer.flush(0):
            raise StoreUnavailable(
                f"nothing was exported: {self._runs.why_waiting()} Export again once it is released."
            )
        return copy_store(source, target)

    def _whole(self, run: DagRun, history: list[Exchange]) -> Change:
        """The run as it is now, replacing whatever the file held of it: its lease (this store's), rows,
        conversation, calls and events.
        """
        change = Change(run_id=run.run_id, whole=True)
        held = self._leases.lease(run.run_id)
        if held is not None:
            change.statements.call(lambda db: lease.take(db, held))
        self._put_whole(change.statements, run, list(history))
        return change

    def _put_whole(self, db: Statements, run: DagRun, history: list[Exchange]) -> None:
        run_id = run.run_id
        for table in _RUN_TABLES:
            db.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))
        self._put_state(db, run, history)
        calls = run.state.calls
        for sequence, call in enumerate(calls):
            self._put_call(db, run_id, sequence, call)
        recorded = 0
        for event in run.events:
            if isinstance(event, AnswerDelta):
                continue
            reference = None
            if isinstance(event, LLMCallRecorded):  # the run keeps its calls in the order of these events
                if recorded < len(calls) and calls[recorded] == event.call:
                    reference = recorded
                recorded += 1
            _put_event(db, run_id, event, reference)

    def _put_state(self, db: Statements, run: DagRun, history: list[Exchange]) -> None:
        """The run's row (pointing to its conversation), rounds and steps."""
        self._put_run(db, run.state, history=history)
        for record in run.state.rounds:
            self._put_round(db, run.run_id, record)
            for position, step in enumerate(record.plan.steps):
                self._put_step(db, run.run_id, record.index, step, position)

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
        calls_by_seq = {
            seq: LLMCall.model_validate_json(data)
            for seq, data in db.execute("SELECT seq, data FROM calls WHERE run_id = ? ORDER BY seq", (run_id,))
        }
        calls = list(calls_by_seq.values())
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
        if run["conversation"] is None:  # a row of schema 2: its own copy
            history = [Exchange(goal=goal, answer=answer) for goal, answer in json.loads(run["history"])]
        else:
            history = _conversation(db, run["conversation"])
        events = [
            EVENTS.validate_json(data)
            if call is None
            else EVENTS.validate_python({**json.loads(data), "call": calls_by_seq[call]})
            for data, call in db.execute("SELECT data, call FROM events WHERE run_id = ? ORDER BY seq", (run_id,))
        ]
        return StoredRun(state=state, history=history, events=events)

    def runs(self, limit: int = 50, *, goal: str | None = None) -> list[RunSummary]:
        """The latest ``limit`` runs (of ``goal`` only, when given), newest first."""
        return self._summaries("? IS NULL OR r.goal = ?", (goal, goal), limit)

    def summary(self, run_id: str) -> RunSummary | None:
        """The run ``run_id`` as ``runs`` lists it, None when it is not stored."""
        return next(iter(self._summaries("r.run_id = ?", (run_id,), 1)), None)

    def _summaries(self, where: str, params: tuple[object, ...], limit: int) -> list[RunSummary]:
        rows = (
            self._read()
            .execute(
                f"""SELECT r.run_id, r.goal, r.status, r.started_at, r.finished_at, r.updated_at, r.host, r.pid,
                      (SELECT SUM(cost) FROM calls c WHERE c.run_id = r.run_id),
                      l.token, l.host, l.pid, l.since, l.heartbeat, l.expires
               FROM runs r LEFT JOIN leases l ON l.run_id = r.run_id
               WHERE {where} ORDER BY r.started_at DESC LIMIT ?""",
                (*params, limit),
            )
            .fetchall()
        )
        now = time.time()
        summaries = []
        for run_id, goal, status, started, finished, updated, host, pid, cost, *held in rows:
            if held[0] is not None:
                driver: lease.Lease | None = lease.Lease(run_id, *held)
            elif status == "running":  # a row of schema 2, or one whose lease was just given back
                driver = lease.legacy(run_id, host, pid, started, updated)
            else:
                driver = None
            live = driver is not None and driver.live(now)
            summaries.append(
                RunSummary(
                    run_id=run_id,
                    goal=goal,
                    status=status,
                    started_at=started,
                    finished_at=finished,
                    cost=cost,
                    interrupted=status == "cancelled" or (status == "running" and not live),
                    driver=driver.owner() if driver is not None and live else None,
                )
            )
        return summaries

    def _read(self, run_id: str | None = None) -> sqlite3.Connection:
        """The reading connection, once the changes made so far are written (``_READ_SECONDS`` at most), to the
        file now at the path; ``StoreUnavailable`` when ``run_id``'s latest changes still wait.
        """
        if not self._writer.flush(_READ_SECONDS) and run_id is not None and self._writer.pending(run_id):
            raise StoreUnavailable(
                f"run {run_id}'s latest changes are not written yet: {self._runs.why_waiting()} Try again once it is "
                "released."
            )
        return self._reading_now()

    def _reading_now(self) -> sqlite3.Connection:
        """The reading connection, to the file now at the path (whatever still waits to be written)."""
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
        row = (state.run_id, *values, lease.HOST, os.getpid())
        db.call(
            lambda connection: connection.execute(
                """INSERT OR REPLACE INTO runs (run_id, goal, status, phase, started_at, finished_at, updated_at,
                   error, answer, follow_ups, pending, domain, routed, history, host, pid, conversation)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, '[]', ?, ?, ?)""",
                (*row, _put_conversation(connection, history)),
            )
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


def _put_event(db: Statements, run_id: str, event: Event, call: int | None) -> None:
    """The event, numbered after the run's last one as the store holds it when written (whoever wrote that);
    an ``llm_call`` event as a reference to its calls row ``call``.
    """
    data = event.model_dump_json(exclude={"call"}) if call is not None else event.model_dump_json()
    db.execute(
        """INSERT INTO events (run_id, seq, type, at, data, call)
           SELECT ?, COALESCE(MAX(seq), -1) + 1, ?, ?, ?, ? FROM events WHERE run_id = ?""",
        (run_id, event.type, event.at, data, call, run_id),
    )


def _put_conversation(db: sqlite3.Connection, history: list[Exchange]) -> int:
    """The id of ``history``'s last exchange (0 for none), each exchange stored once: runs planned after the
    same exchanges share them.
    """
    node = 0
    for exchange in history:
        digest = _digest(exchange)
        row = db.execute("SELECT id FROM exchanges WHERE previous = ? AND digest = ?", (node, digest)).fetchone()
        if row is not None:
            node = int(row[0])
            continue
        inserted = db.execute(
            "INSERT INTO exchanges (previous, digest, goal, answer) VALUES (?, ?, ?, ?)",
            (node, digest, exchange.goal, exchange.answer),
        )
        node = int(inserted.lastrowid or 0)
    return node


def _conversation(db: sqlite3.Connection, node: int) -> list[Exchange]:
    """The exchanges up to ``node``, oldest first."""
    rows = db.execute(
        """WITH RECURSIVE chain (id, previous, goal, answer, depth) AS (
               SELECT id, previous, goal, answer, 0 FROM exchanges WHERE id = ?
               UNION ALL
               SELECT e.id, e.previous, e.goal, e.answer, chain.depth + 1
               FROM exchanges e JOIN chain ON e.id = chain.previous
           ) SELECT goal, answer FROM chain ORDER BY depth DESC""",
        (node,),
    ).fetchall()
    return [Exchange(goal=goal, answer=answer) for goal, answer in rows]


def _digest(exchange: Exchange) -> str:
    """An exchange's fingerprint, computed once per exchange (not at every run planned after it)."""
    digest = _digests.get(exchange)
    if digest is None:
        digest = _digests[exchange] = hashlib.sha256(json.dumps([exchange.goal, exchange.answer]).encode()).hexdigest()
    return digest


_digests: weakref.WeakKeyDictionary[Exchange, str] = weakref.WeakKeyDictionary()


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
