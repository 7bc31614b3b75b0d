"""The run store: what it keeps, when, with which permissions, what it refuses, and two writers at once."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import socket
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

import dagmagic
from dagmagic import DagError, DagRun, DagSession, DagSettings, ModelRegistry
from dagmagic.errors import StoreError
from dagmagic.events import LLMCallRecorded, RunFinished, RunWarning, StepCompleted
from dagmagic.models import Exchange, RunState
from dagmagic.store import SCHEMA_VERSION, RunStore, rows
from dagmagic.store.sqlite import _MIGRATIONS as MIGRATIONS
from dagmagic.store.sqlite import APPLICATION_ID
from dagmagic.store.writer import Statements
from dagmagic.store_url import store_location
from dagmagic.testing import ScriptedLLM, ScriptedRequest
from tests.engine.conftest import plan_reply, verdict
from tests.stored import connect, table_rows

THREE = plan_reply(("s1", []), ("s2", []), ("s3", ["s1", "s2"]))


def script(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "plan": [THREE],
        "step": lambda r: f"result of {r.step_id} in round {r.round}",
        "analyze": [verdict(True, 0.9, "all found")],
        "synthesize": [["The ", "answer."]],
    }
    return {**base, **overrides}


def session(path: Path | str, llm: ScriptedLLM | None = None, **settings: Any) -> DagSession:
    registry = ModelRegistry().register("scripted", llm or ScriptedLLM(script()))
    return DagSession(registry, DagSettings(store=str(path), **settings))


def without_deltas(run: DagRun) -> list[str]:
    """The event log as saved: every event but the answer's pieces. Events that carry a step or a plan are
    compared by type and time: in memory they hold the live step, which has moved on since.
    """
    return [
        f"{event.type} {event.at}" if event.type in ("step_planned", "plan_ready") else event.model_dump_json()
        for event in run.events
        if event.type not in ("answer_delta", "call_progress")  # what is told on the way, not saved
    ]


async def test_a_finished_run_reads_back_as_it_was(store_path: Path | str) -> None:
    path = store_path
    llm = ScriptedLLM(script(analyze=[verdict(False, 0.3, "not yet"), verdict(True, 0.9, "done")]), price=(1e-6, 2e-6))
    run = await session(path, llm).run("Compare the populations")
    assert run.durable and len(run.rounds) == 2

    loaded = dagmagic.load_run(run.run_id, store=str(path))
    assert loaded.state.model_dump() == run.state.model_dump()
    assert without_deltas(loaded) == without_deltas(run)
    assert loaded.read_only and loaded.answer == "The answer." and loaded.cost == pytest.approx(run.cost)
    with pytest.raises(DagError, match="read back from the run store"):
        loaded.follow_up("more")
    (summary,) = RunStore.open(path).runs()
    assert (summary.run_id, summary.status, summary.interrupted) == (run.run_id, "done", False)
    assert summary.cost == pytest.approx(run.cost)


async def test_a_completed_steps_result_is_read_back_before_anyone_hears_of_it_and_on_disk_when_the_run_ends(
    store_path: Path | str,
) -> None:
    path = store_path
    seen: list[tuple[str, str, str | None]] = []
    run = session(path).start("goal")

    def check(event: Any) -> None:
        if isinstance(event, StepCompleted) and event.status == "completed":
            step = RunStore.open(path).load(run.run_id).state.rounds[0].plan.step(event.step_id)
            seen.append((event.step_id, step.status, step.result))

    run.subscribe(check)
    await run
    assert sorted(seen) == [(sid, "completed", f"result of {sid} in round 1") for sid in ("s1", "s2", "s3")]
    with connect(path) as other:  # another connection: only what was committed
        rows = other.execute("SELECT step_id, status, data FROM steps WHERE run_id = ?", (run.run_id,)).fetchall()
    assert sorted((sid, status, json.loads(data)["result"]) for sid, status, data in rows) == sorted(seen)


async def test_the_store_and_its_directory_are_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "new" / "deeper" / "runs.sqlite"
    await session(path).run("goal")
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert oct(path.parent.stat().st_mode & 0o777) == "0o700"


def test_another_programs_sqlite_file_is_refused_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "theirs.sqlite"
    with sqlite3.connect(path) as theirs:
        theirs.execute("CREATE TABLE customers (name TEXT)")
        theirs.execute("INSERT INTO customers VALUES ('Ada')")
    before = path.read_bytes()
    with pytest.raises(StoreError, match=f"{path} is another program's SQLite file"):
        RunStore.open(path)
    with pytest.raises(StoreError, match="DAG_STORE"):  # a run does not start on it either
        asyncio.run(session(path).run("goal"))
    assert path.read_bytes() == before


@pytest.mark.parametrize("content", [b"this is a text file\n" * 50, os.urandom(4096)], ids=["text", "random"])
def test_a_damaged_or_foreign_file_is_refused_and_left_alone(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "runs.sqlite"
    path.write_bytes(content)
    with pytest.raises(StoreError, match=f"{path} is not a dagmagic run store"):
        RunStore.open(path)
    assert path.read_bytes() == content


def test_a_store_from_a_newer_dagmagic_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    RunStore.open(path).close()
    with sqlite3.connect(path) as db:
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(StoreError, match="written by a newer dagmagic"):
        RunStore.open(path)


async def test_a_store_that_cannot_be_written_leaves_the_run_going_unsaved_and_says_so(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    run = await session(blocker / "runs.sqlite").run("goal")
    assert run.status == "done" and run.answer == "The answer." and not run.durable
    warnings = [e.message for e in run.events if e.type == "warning"]
    assert any("This run is not saved" in w and "cannot be written" in w for w in warnings)


async def test_a_store_that_fails_mid_run_leaves_the_run_going_and_says_so(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"

    async def step(request: ScriptedRequest) -> str:
        if request.step_id == "s2":
            RunStore.open(path).close()  # the disk went away
        return "ok"

    run = await session(path, ScriptedLLM(script(step=step))).run("goal")
    assert run.status == "done" and not run.durable
    assert any("no longer saved" in e.message for e in run.events if e.type == "warning")


async def test_no_secret_is_ever_written(store_path: Path | str, tmp_path: Path) -> None:
    path = store_path
    canary = "sk-test-canary-tok-in-the-store"

    def step(request: ScriptedRequest) -> str:
        if request.step_id == "s2":
            raise RuntimeError(f"the proxy says: invalid key {canary}")
        return "ok"

    registry = ModelRegistry().register("scripted", ScriptedLLM(script(step=step)), api_key=canary)
    run = await DagSession(registry, DagSettings(store=str(path))).run("goal")
    assert run.steps["s2"].status == "failed" and "***" in (run.steps["s2"].error or "")
    for file in tmp_path.iterdir():  # the database and its write-ahead log
        assert canary.encode() not in file.read_bytes(), file
    tables = table_rows(path)
    assert {"runs", "events", "calls", "leases"} <= set(tables) and tables["events"]
    assert canary not in repr(tables) and canary[8:] not in repr(tables)


WRITER = textwrap.dedent(
    """
    import asyncio, sys
    from dagmagic import DagSession, DagSettings, ModelRegistry
    from dagmagic.testing import ScriptedLLM

    steps = [{"id": f"s{i}", "task": f"part {i}"} for i in range(10)]
    script = {
        "plan": [{"steps": steps}], "step": ["ok"],
        "analyze": [{"achieved": True, "confidence": 0.9, "reasoning": "ok"}], "synthesize": [["done"]],
    }
    async def main():
        session = DagSession(ModelRegistry().register("m", ScriptedLLM(script)),
                             DagSettings(store=sys.argv[1], plan_max_steps=10))
        for n in range(3):
            run = await session.run(f"{sys.argv[2]} goal {n}")
            print(run.run_id)
    asyncio.run(main())
    """
)


def test_two_processes_writing_one_store_at_once_lose_nothing(store_path: Path | str) -> None:
    path = store_path
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(path), name], stdout=subprocess.PIPE, text=True, env=env)
        for name in ("first", "second")
    ]
    ids = [run_id for writer in writers for run_id in writer.communicate(timeout=120)[0].split()]
    assert all(writer.returncode == 0 for writer in writers) and len(ids) == 6
    store = RunStore.open(path)
    assert {summary.run_id for summary in store.runs()} == set(ids)
    for run_id in ids:
        stored = store.load(run_id)
        assert stored.state.status == "done" and stored.state.answer == "done"
        assert [step.status for step in stored.state.rounds[0].plan.steps] == ["completed"] * 10
        assert stored.events[-1].type == "run_finished"


async def test_a_store_of_schema_1_is_migrated_and_its_runs_read_back(tmp_path: Path) -> None:
    run = await session(tmp_path / "scratch.sqlite").run("g")
    path = tmp_path / "runs.sqlite"
    with sqlite3.connect(path) as db:  # a run as schema 2 wrote it, then back to how schema 1 left it
        for statement in SCHEMA_2:
            db.execute(statement)
        write_as_schema_2(db, run, [], run_id=run.run_id, status="done", pid=os.getpid())
        db.execute("ALTER TABLE rounds DROP COLUMN extra")
        db.execute("PRAGMA user_version = 1")
    stored = RunStore.open(path).load(run.run_id)  # opening migrates it
    assert stored.state.rounds[0].rerun_of is None and stored.state.answer == run.answer
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 5
        assert "extra" in [row[1] for row in db.execute("PRAGMA table_info(rounds)")]


# --- one driver at a time: event numbers from the store, leases instead of host/pid liveness


async def interrupted_run(path: Path | str) -> DagRun:
    """A run cancelled while s3 runs: s1 and s2 completed."""
    running = asyncio.Event()

    async def step(request: ScriptedRequest) -> str:
        if request.step_id == "s3":
            running.set()
            await asyncio.sleep(5)
        return f"result of {request.step_id}"

    run = session(path, ScriptedLLM(script(step=step))).start("goal")
    await running.wait()
    run.cancel()
    return await run


def test_events_from_two_writers_are_all_kept_in_the_order_written(store_path: Path | str) -> None:
    path = store_location(str(store_path))
    run = DagRun(RunState(run_id="r1", goal="goal", started_at=time.time()))
    first, second = RunStore(path), RunStore(path)  # as two processes have it: two connections
    first.attach(run, [])
    first.record(run, RunWarning(message="a"))
    first.record(run, RunFinished(status="done", achieved=True, confidence=0.9))
    assert first.checkpoint(wait=30)  # each store writes on a thread of its own: this one's changes are written
    for writer, text in [(second, "b"), (first, "c"), (second, "d")]:  # late words from both
        writer.record(run, RunWarning(message=text))
        assert writer.checkpoint(wait=30)
    reader = RunStore(path)
    events = reader.load("r1").events
    for store in (first, second, reader):
        store.close()
    assert [getattr(event, "message", event.type) for event in events] == ["a", "run_finished", "b", "c", "d"]


@pytest.mark.parametrize(
    ("host", "pid"), [("elsewhere", 4242), (socket.gethostname(), os.getppid())], ids=["another-host", "a-reused-pid"]
)
async def test_a_run_whose_driver_is_gone_shows_interrupted_and_resumes(
    store_path: Path | str, host: str, pid: int
) -> None:
    path = store_path
    run = await interrupted_run(path)
    with connect(path) as db:  # as a driver on `host` (or a process whose pid is now another's) left it
        db.execute(
            "UPDATE runs SET status = 'running', host = ?, pid = ?, updated_at = ? WHERE run_id = ?",
            (host, pid, time.time() - 3600, run.run_id),
        )
    store = RunStore.open(path)
    summary = store.summary(run.run_id)
    assert summary is not None and summary.status == "running" and summary.interrupted

    for expires, live in [(time.time() + 3600, True), (time.time() - 1, False)]:
        with connect(path) as db:  # its lease: still live, then expired
            db.execute("DELETE FROM leases WHERE run_id = ?", (run.run_id,))
            db.execute(
                "INSERT INTO leases VALUES (?, 'their-token', ?, ?, ?, ?, ?)",
                (run.run_id, host, pid, time.time() - 60, time.time() - 5, expires),
            )
        summary = store.summary(run.run_id)
        assert summary is not None and summary.interrupted is not live
        if live:
            assert summary.driver is not None and f"pid {pid} on {host}" in summary.driver
            with pytest.raises(DagError, match=f"run {run.run_id} is being driven by another process \\(pid {pid} on"):
                await session(path).resume(run.run_id)
    resumed = await session(path).resume(run.run_id)
    assert resumed.status == "done" and [s.status for s in resumed.steps.values()] == ["completed"] * 3
    summary = store.summary(run.run_id)
    assert summary is not None and (summary.status, summary.interrupted, summary.driver) == ("done", False, None)


async def test_a_long_run_keeps_its_lease_while_it_runs_and_gives_it_back_when_it_ends(
    store_path: Path | str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dagmagic.store import lease

    monkeypatch.setattr(lease, "LEASE_SECONDS", 1.5)  # a loaded 2-core machine may delay a heartbeat by a second
    monkeypatch.setattr(lease, "HEARTBEAT_SECONDS", 0.05)
    path = store_path
    release = asyncio.Event()

    async def held(request: ScriptedRequest) -> str:
        await release.wait()
        return "ok"

    run = session(path, ScriptedLLM(script(step=held))).start("goal")
    while not run.steps or run.steps["s1"].status != "running":
        await asyncio.sleep(0.01)

    def expiry() -> float | None:
        with connect(path) as db:
            row = db.execute("SELECT expires FROM leases WHERE run_id = ?", (run.run_id,)).fetchone()
        return None if row is None else float(row[0])

    first = expiry()
    assert first is not None
    while time.time() < first + 3.0:  # twice as long as a lease lasts: only its heartbeat keeps it
        await asyncio.sleep(0.05)
    later = expiry()
    assert later is not None and later > first + 1.5
    summary = RunStore.open(path).summary(run.run_id)
    assert summary is not None and not summary.interrupted
    with pytest.raises(DagError, match="is being driven by another session of this process"):
        session(path).start_resume(run.run_id)
    release.set()
    await run
    assert run.status == "done" and expiry() is None


# --- a store of schema 2, as dagmagic 0.x wrote it

SCHEMA_2 = [
    *(statement for statements in MIGRATIONS[:2] for statement in statements),  # versions 1 and 2, as released
    "PRAGMA user_version = 2",
    f"PRAGMA application_id = {APPLICATION_ID}",
]


def write_as_schema_2(
    db: sqlite3.Connection, run: DagRun, history: list[list[str]], *, run_id: str, status: str, pid: int
) -> None:
    """``run``'s rows, as ``run_id``, as schema 2 wrote them: the conversation copied into the run's row, each
    call twice, the driver named by host and pid.
    """
    state = run.state
    db.execute(
        "INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (run_id, state.goal, status, state.phase, state.started_at, state.finished_at, time.time(), state.error,
         state.answer, json.dumps(state.follow_ups), json.dumps(state.pending_follow_ups), state.domain,
         int(state.routed), json.dumps(history), socket.gethostname(), pid),
    )  # fmt: skip
    for record in state.rounds:
        extra = record.model_dump(mode="json", include={"rerun_of", "rerun_step", "approval", "follow_ups"})
        db.execute(
            "INSERT INTO rounds VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (run_id, record.index, record.plan.goal,
             record.analysis.model_dump_json() if record.analysis else None,
             record.decision.model_dump_json() if record.decision else None,
             record.error, json.dumps(record.warnings), int(record.free),
             json.dumps({**extra, "query": record.plan.query})),
        )  # fmt: skip
        for position, step in enumerate(record.plan.steps):
            db.execute(
                "INSERT INTO steps VALUES (?, ?, ?, ?, ?, ?)",
                (run_id, record.index, step.id, position, step.status, step.model_dump_json()),
            )
    for sequence, call in enumerate(state.calls):
        db.execute(
            "INSERT INTO calls VALUES (?, ?, ?, ?, ?)",
            (run_id, sequence, call.purpose, call.cost, call.model_dump_json()),
        )
    for sequence, event in enumerate(event for event in run.events if event.type != "answer_delta"):
        db.execute(
            "INSERT INTO events VALUES (?, ?, ?, ?, ?)",
            (run_id, sequence, event.type, event.at, event.model_dump_json()),
        )


async def test_a_store_of_schema_2_migrates_reads_back_and_judges_its_drivers_by_host_and_pid(tmp_path: Path) -> None:
    done = await session(tmp_path / "scratch.sqlite").run("an earlier goal")
    cut = await interrupted_run(tmp_path / "scratch.sqlite")
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    path = tmp_path / "runs.sqlite"
    history = [["before", "an answer before"]]
    with sqlite3.connect(path) as db:
        for statement in SCHEMA_2:
            db.execute(statement)
        write_as_schema_2(db, done, history, run_id="done", status="done", pid=int(gone.stdout))
        write_as_schema_2(db, cut, history, run_id="orphan", status="running", pid=int(gone.stdout))
        write_as_schema_2(db, cut, history, run_id="driven", status="running", pid=os.getppid())

    store = RunStore.open(path)  # migrates it
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 5
    stored = store.load("done")
    assert stored.state.model_dump() == {**done.state.model_dump(), "run_id": "done"}
    assert stored.history == [Exchange(goal="before", answer="an answer before")]
    assert [event.model_dump() for event in stored.events] == [
        event.model_dump() for event in done.events if event.type != "answer_delta"
    ]
    summaries = {summary.run_id: summary for summary in store.runs()}
    assert (summaries["done"].interrupted, summaries["orphan"].interrupted) == (False, True)  # its process is gone
    assert not summaries["driven"].interrupted  # its process lives, and it was written a moment ago
    assert f"pid {os.getppid()} on {socket.gethostname()}" in (summaries["driven"].driver or "")
    with pytest.raises(DagError, match=f"run driven is being driven by another process \\(pid {os.getppid()} on"):
        await session(path).resume("driven")

    resumed = await session(path).resume("orphan")
    assert resumed.status == "done" and [s.status for s in resumed.steps.values()] == ["completed"] * 3
    assert store.load("orphan").history == [Exchange(goal="before", answer="an answer before")]


# --- each thing stored once


def stored_text(path: Path) -> list[str]:
    """Every text value of every table of the store."""
    with sqlite3.connect(path) as db:
        tables = [name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return [value for table in tables for row in db.execute(f"SELECT * FROM {table}") for value in row
                if isinstance(value, str)]  # fmt: skip


def store_bytes(path: Path) -> int:
    with sqlite3.connect(path) as db:  # the WAL's committed pages included
        return int(db.execute("PRAGMA page_count").fetchone()[0]) * int(db.execute("PRAGMA page_size").fetchone()[0])


async def test_a_long_session_stores_each_run_once_and_grows_linearly(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    runs = 30
    llm = ScriptedLLM(
        script(
            plan=lambda r: {**THREE, "note": f"call-marker-{len(llm.requests_for('plan'))}"},
            synthesize=lambda r: [f"Answer {len(llm.requests_for('synthesize'))}: " + "the long answer. " * 600],
            history_summary=["What was asked and answered so far, in short."],
        )
    )
    s = session(path, llm, planner_input_tokens=1000)
    sizes = [store_bytes(path)] if path.exists() else [0]
    for n in range(runs):
        await s.run(f"goal {n}")
        sizes.append(store_bytes(path))

    growth = [after - before for before, after in itertools.pairwise(sizes)]
    first, last = sum(growth[2:8]) / 6, sum(growth[-6:]) / 6  # run 1 creates the tables
    assert last < first * 1.5, growth  # a copy of the conversation per run would make it grow with the session
    text = stored_text(path)
    for n in range(1, runs + 1):  # each call's record once, not also in its event
        assert sum(value.count(f"call-marker-{n}\\") for value in text) == 1, n

    latest = s.runs[-1]
    stored = RunStore.open(path).load(latest.run_id)
    assert stored.history == s.history[:-1] and len(stored.history) == runs - 1
    calls = [event for event in stored.events if event.type == "llm_call"]
    assert [event.model_dump() for event in calls] == [
        event.model_dump() for event in latest.events if event.type == "llm_call"
    ]
    assert stored.state.calls == latest.calls


async def test_changes_that_waited_are_written_together_and_one_refused_is_undone_alone(
    store_path: Path | str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dagmagic.store.writer import StoreWriter

    batches: list[int] = []
    together = StoreWriter._commit_together

    def counted(writer: StoreWriter, changes: list[Any]) -> Any:
        batches.append(len(changes))
        return together(writer, changes)

    monkeypatch.setattr(StoreWriter, "_commit_together", counted)
    store = RunStore.open(store_path)
    ours, theirs = (DagRun(RunState(run_id=run_id, goal="goal", started_at=time.time())) for run_id in "ab")
    for run in (ours, theirs):
        store.attach(run, [])
    assert store.checkpoint(wait=30)
    with connect(store_path) as db:  # run b is driven elsewhere now
        db.execute("DELETE FROM leases WHERE run_id = 'b'")
        db.execute(
            "INSERT INTO leases VALUES ('b', 'their-token', 'elsewhere', 4242, ?, ?, ?)",
            (time.time(), time.time(), time.time() + 3600),
        )
    with connect(store_path) as other:  # the write lock held elsewhere: the changes wait, then go together
        if isinstance(other, sqlite3.Connection):
            other.execute("BEGIN IMMEDIATE")
        else:
            other.execute(f"SELECT pg_advisory_xact_lock({APPLICATION_ID})")
        for run, text in [(ours, "a1"), (theirs, "b1"), (ours, "a2")]:
            store.record(run, RunWarning(message=text))
        await asyncio.sleep(0.3)
    assert store.checkpoint(wait=30)
    assert max(batches) >= 3
    messages = {run_id: [getattr(e, "message", None) for e in store.load(run_id).events] for run_id in "ab"}
    assert messages == {"a": ["a1", "a2"], "b": []}


class _WritesAfterReadingCalls:
    """The store's reader, with another process's change committed just after the run's calls were read."""

    def __init__(self, db: Any, write: Any) -> None:
        self._db, self._write = db, write

    def execute(self, sql: str, parameters: Any = (), /) -> Any:
        cursor = self._db.execute(sql, parameters)
        if "FROM calls" not in sql or self._write is None:
            return cursor
        read = cursor.fetchall()
        self._write()
        self._write = None
        return iter(read)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)


async def test_a_run_read_while_another_process_writes_it_is_read_at_one_moment(
    store_path: Path | str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A notebook following a worker's run read an event before the call it refers to (CI: ``KeyError: 0``)."""
    run = await session(store_path).run("Compare the populations")
    store = RunStore.open(store_path)
    before = store.load(run.run_id)
    recorded = next(event for event in before.events if isinstance(event, LLMCallRecorded))
    position = len(before.state.calls)

    def another_process_records_a_call() -> None:
        change = Statements()
        rows.put_call(change, run.run_id, position, recorded.call)
        rows.put_event(change, run.run_id, recorded, position)
        with connect(store_path) as db:
            change.run(db)

    monkeypatch.setattr(store, "_reader", _WritesAfterReadingCalls(store._reader, another_process_records_a_call))
    during = store.load(run.run_id)
    assert (len(during.state.calls), len(during.events)) == (position, len(before.events))  # the moment it began
    monkeypatch.undo()
    after = store.load(run.run_id)
    assert (len(after.state.calls), len(after.events)) == (position + 1, len(before.events) + 1)
    assert after.events[-1] == recorded
