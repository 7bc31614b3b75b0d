"""Runs read back from the store: a whole run (its state, conversation and events), and the summaries
``%dag history`` lists.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from dagmagic.events import EVENTS, Event, RunStarted
from dagmagic.models import Exchange, LLMCall, PlanStep, RunState
from dagmagic.store import lease, rows
from dagmagic.store.backend import Connection, Dialect

__all__ = ["RunSummary", "StoredRun", "load", "summaries"]


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
    stopped_by_user: bool = False
    """The user's Stop ended it (its status is ``done``; ``%dag history`` says "stopped by you")."""
    host: str = ""
    """The machine that last started or resumed it (a shared store holds runs of many)."""
    notebook: str | None = None
    """The notebook whose kernel started it (its path, as Jupyter named it), None when unknown: kept in its
    ``run_started`` event, as ``replay_of`` is (no column)."""
    forked_from: str | None = None
    """The run it was forked from (``run.fork``), from its ``run_started`` event too."""
    forked_at: str | None = None
    """The step of ``forked_from`` it was forked at, as ``rN.id``."""
    detached_on: str | None = None
    """The Temporal address whose workers drive it (``on=``), from its ``run_started`` event too."""


@dataclass
class StoredRun:
    """A run read back from the store: its state, and the conversation it was planned in."""

    state: RunState
    history: list[Exchange]
    events: list[Event]


def load(db: Connection, run_id: str) -> StoredRun:
    """The stored run ``run_id`` read from ``db``; ``KeyError`` when there is none."""
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
        rows.round_of(row, steps.get(row[0], []))
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
        history = rows.conversation(db, run["conversation"])
    events = [
        EVENTS.validate_json(data)
        if call is None
        else EVENTS.validate_python({**json.loads(data), "call": calls_by_seq[call]})
        for data, call in db.execute("SELECT data, call FROM events WHERE run_id = ? ORDER BY seq", (run_id,))
    ]
    started = next((event for event in events if isinstance(event, RunStarted) and not event.depth), None)
    if started is not None:  # kept in its event: no column
        state.replay_of, state.forked_from, state.forked_at = started.replay_of, started.forked_from, started.forked_at
        state.detached_on = started.detached_on
    return StoredRun(state=state, history=history, events=events)


def summaries(db: Connection, dialect: Dialect, where: str, params: tuple[object, ...], limit: int) -> list[RunSummary]:
    """The runs ``where`` selects (``%dag history``'s rows), newest first, ``limit`` at most."""
    found = db.execute(
        f"""SELECT r.run_id, r.goal, r.status, r.started_at, r.finished_at, r.updated_at, r.host, r.pid,
                  (SELECT SUM(cost) FROM calls c WHERE c.run_id = r.run_id),
                  (SELECT {dialect.json_flag("e.data", "stopped_by_user")} FROM events e
                   WHERE e.run_id = r.run_id AND e.type = 'run_finished'
                     AND COALESCE({dialect.json_number("e.data", "depth")}, 0) = 0
                   ORDER BY e.seq DESC LIMIT 1),
                  (SELECT e.data FROM events e
                   WHERE e.run_id = r.run_id AND e.type = 'run_started'
                     AND COALESCE({dialect.json_number("e.data", "depth")}, 0) = 0
                   ORDER BY e.seq LIMIT 1),
                  l.token, l.host, l.pid, l.since, l.heartbeat, l.expires
           FROM runs r LEFT JOIN leases l ON l.run_id = r.run_id
           WHERE {where} ORDER BY r.started_at DESC NULLS LAST LIMIT ?""",
        (*params, limit),
    ).fetchall()
    now = time.time()
    listed = []
    for (
        run_id,
        goal,
        status,
        started,
        finished,
        updated,
        host,
        pid,
        cost,
        stopped,
        began,
        *held,
    ) in found:
        started_event = json.loads(began) if began else {}  # its notebook and, for a fork, where it comes from
        if held[0] is not None:
            driver: lease.Lease | None = lease.Lease(run_id, *held)
        elif status == "running":  # a row of schema 2, or one whose lease was just given back
            driver = lease.legacy(run_id, host, pid, started, updated)
        else:
            driver = None
        live = driver is not None and driver.live(now)
        listed.append(
            RunSummary(
                run_id=run_id,
                goal=goal,
                status=status,
                started_at=started,
                finished_at=finished,
                cost=cost,
                interrupted=status == "cancelled" or (status == "running" and not live),
                driver=driver.owner() if driver is not None and live else None,
                stopped_by_user=status == "done" and bool(stopped),
                host=host,
                notebook=started_event.get("notebook"),
                forked_from=started_event.get("forked_from"),
                forked_at=started_event.get("forked_at"),
                detached_on=started_event.get("detached_on"),
            )
        )
    return listed
