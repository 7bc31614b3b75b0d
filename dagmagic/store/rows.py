"""The run store's rows: a run's state, rounds, steps, calls, events and conversation, written as statements
for the store's writer, and read back. Each thing is stored once: a run's conversation is a chain of
``exchanges`` shared by every run planned after the same ones, and an ``llm_call`` event refers to its ``calls``
row instead of copying the call.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import weakref
from typing import TYPE_CHECKING, Any

from dagmagic.events import (
    AnswerCleared,
    AnswerDelta,
    AnswerReady,
    CallProgress,
    Event,
    LLMCallRecorded,
    PhaseChanged,
    RunFinished,
    UserAction,
)
from dagmagic.models import AnalysisResult, Decision, Exchange, ExecutionPlan, LLMCall, PlanStep, RoundRecord, RunState
from dagmagic.store import lease
from dagmagic.store.backend import Connection
from dagmagic.store.writer import Statements

if TYPE_CHECKING:
    from dagmagic.store.live_run import LiveRun

__all__ = [
    "ROUND_EVENTS",
    "RUN_EVENTS",
    "STEP_EVENTS",
    "conversation",
    "put_call",
    "put_event",
    "put_plan",
    "put_round",
    "put_run",
    "put_state",
    "put_step",
    "put_step_of",
    "put_whole",
    "round_of",
    "run_round",
]

STEP_EVENTS = frozenset(
    {"step_planned", "step_queued", "step_paused", "step_started", "step_iteration", "verifying", "verification",
     "step_retrying", "step_completed"}
)  # fmt: skip
"""The events that change a step's row."""
ROUND_EVENTS = frozenset(
    {"plan_ready", "step_planned", "analysis_ready", "replanning", "approval_requested", "answer_ready"}
)
"""The events that change a round's row (and, ``plan_ready``, its steps)."""
RUN_EVENTS = (PhaseChanged, AnswerReady, AnswerCleared, UserAction, RunFinished)
"""The events (besides ``RunStarted``) that change the run's row."""
_ROUND_EXTRA = {"rerun_of", "rerun_step", "what_if", "approval", "follow_ups", "answered_follow_ups", "plan_cut"}
"""RoundRecord fields kept as JSON in ``rounds.extra`` (schema 2)."""
_RUN_TABLES = ("rounds", "steps", "calls", "events")
"""The tables holding a run's rows besides ``runs``."""


def put_whole(db: Statements, run: LiveRun, history: list[Exchange]) -> None:
    """The run as it is now, in place of whatever the file held of it: its rows, conversation, calls and events."""
    run_id = run.run_id
    for table in _RUN_TABLES:
        db.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))
    put_state(db, run, history)
    calls = run.state.calls
    for sequence, call in enumerate(calls):
        put_call(db, run_id, sequence, call)
    recorded = 0
    for event in run.events:
        if isinstance(event, AnswerDelta | CallProgress):
            continue
        reference = None
        if isinstance(event, LLMCallRecorded):  # the run keeps its calls in the order of these events
            if recorded < len(calls) and calls[recorded] == event.call:
                reference = recorded
            recorded += 1
        put_event(db, run_id, event, reference)


def put_state(db: Statements, run: LiveRun, history: list[Exchange]) -> None:
    """The run's row (pointing to its conversation), rounds and steps."""
    put_run(db, run.state, history=history)
    for record in run.state.rounds:
        put_round(db, run.run_id, record)
        for position, step in enumerate(record.plan.steps):
            put_step(db, run.run_id, record.index, step, position)


def put_run(db: Statements, state: RunState, *, history: list[Exchange] | None = None) -> None:
    """The run's row: written anew with ``history`` (pointing to its conversation), else updated."""
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
            """INSERT INTO runs (run_id, goal, status, phase, started_at, finished_at, updated_at,
               error, answer, follow_ups, pending, domain, routed, history, host, pid, conversation)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, '[]', ?, ?, ?)
               ON CONFLICT (run_id) DO UPDATE SET goal = excluded.goal, status = excluded.status,
               phase = excluded.phase, started_at = excluded.started_at, finished_at = excluded.finished_at,
               updated_at = excluded.updated_at, error = excluded.error, answer = excluded.answer,
               follow_ups = excluded.follow_ups, pending = excluded.pending, domain = excluded.domain,
               routed = excluded.routed, history = excluded.history, host = excluded.host, pid = excluded.pid,
               conversation = excluded.conversation""",
            (*row, _put_conversation(connection, history)),
        )
    )


def put_round(db: Statements, run_id: str, record: RoundRecord) -> None:
    """The round's row (its plan's steps are rows of their own)."""
    db.execute(
        """INSERT INTO rounds (run_id, idx, goal, analysis, decision, error, warnings, free, extra)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (run_id, idx) DO UPDATE SET goal = excluded.goal,
           analysis = excluded.analysis, decision = excluded.decision, error = excluded.error,
           warnings = excluded.warnings, free = excluded.free, extra = excluded.extra""",
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


def put_plan(db: Statements, run_id: str, record: RoundRecord) -> None:
    """The round's whole plan: its steps in order, and none it no longer holds."""
    ids = [step.id for step in record.plan.steps]
    kept = f" AND step_id NOT IN ({', '.join('?' * len(ids))})" if ids else ""  # `IN ()` is SQLite's only
    db.execute(f"DELETE FROM steps WHERE run_id = ? AND round = ?{kept}", (run_id, record.index, *ids))
    for position, step in enumerate(record.plan.steps):
        put_step(db, run_id, record.index, step, position)


def put_step_of(db: Statements, run: LiveRun, event: Event, round_index: int) -> None:
    """The step ``event`` is about, as the run holds it now (nothing when it holds no such step)."""
    step_id = getattr(event, "step_id", None) or getattr(getattr(event, "step", None), "id", None)
    step = run.step_of(round_index, step_id) if step_id is not None else None
    if step is None:
        return
    record = run_round(run, round_index)  # a step that streamed in takes its place at the end of the plan so far
    position = len(record.plan.steps) - 1 if record is not None else 0
    db.execute(
        """INSERT INTO steps VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (run_id, round, step_id)
           DO UPDATE SET status = excluded.status, data = excluded.data""",
        (run.run_id, round_index, step.id, position, step.status, step.model_dump_json()),
    )


def put_step(db: Statements, run_id: str, round_index: int, step: PlanStep, position: int) -> None:
    """One step of a round's plan, at ``position``."""
    db.execute(
        """INSERT INTO steps VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (run_id, round, step_id)
           DO UPDATE SET position = excluded.position, status = excluded.status, data = excluded.data""",
        (run_id, round_index, step.id, position, step.status, step.model_dump_json()),
    )


def put_call(db: Statements, run_id: str, sequence: int, call: LLMCall) -> None:
    """One model call of the run, numbered ``sequence``."""
    db.execute(
        """INSERT INTO calls VALUES (?, ?, ?, ?, ?) ON CONFLICT (run_id, seq)
           DO UPDATE SET purpose = excluded.purpose, cost = excluded.cost, data = excluded.data""",
        (run_id, sequence, call.purpose, call.cost, call.model_dump_json()),
    )


def put_event(db: Statements, run_id: str, event: Event, call: int | None) -> None:
    """The event, numbered after the run's last one as the store holds it when written (whoever wrote that);
    an ``llm_call`` event as a reference to its calls row ``call``.
    """
    data = event.model_dump_json(exclude={"call"}) if call is not None else event.model_dump_json()
    db.execute(
        """INSERT INTO events (run_id, seq, type, at, data, call)
           VALUES (?, (SELECT COALESCE(MAX(seq), -1) + 1 FROM events WHERE run_id = ?), ?, ?, ?, ?)""",
        (run_id, run_id, event.type, event.at, data, call),
    )


def _put_conversation(db: Connection, history: list[Exchange]) -> int:
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
            "INSERT INTO exchanges (previous, digest, goal, answer) VALUES (?, ?, ?, ?) RETURNING id",
            (node, digest, exchange.goal, exchange.answer),
        )
        node = int(inserted.fetchone()[0])
    return node


def conversation(db: Connection, node: int) -> list[Exchange]:
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


def run_round(run: LiveRun, index: int) -> RoundRecord | None:
    """The run's round ``index`` (its latest record), None when it has none."""
    for record in reversed(run.state.rounds):
        if record.index == index:
            return record
    return None


def round_of(row: tuple[Any, ...], steps: list[PlanStep]) -> RoundRecord:
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
