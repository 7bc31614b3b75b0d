"""The run store: what it keeps, when, with which permissions, what it refuses, and two writers at once."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import dagmagic
from dagmagic import DagError, DagRun, DagSession, DagSettings, ModelRegistry
from dagmagic.engine.store import SCHEMA_VERSION, RunStore
from dagmagic.errors import StoreError
from dagmagic.events import StepCompleted
from dagmagic.testing import ScriptedLLM, ScriptedRequest

from .conftest import plan_reply, verdict

THREE = plan_reply(("s1", []), ("s2", []), ("s3", ["s1", "s2"]))


def script(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "route": [{"domain": None}],
        "plan": [THREE],
        "step": lambda r: f"result of {r.step_id} in round {r.round}",
        "analyze": [verdict(True, 0.9, "all found")],
        "synthesize": [["The ", "answer."]],
    }
    return {**base, **overrides}


def session(path: Path, llm: ScriptedLLM | None = None, **settings: Any) -> DagSession:
    registry = ModelRegistry().register("scripted", llm or ScriptedLLM(script()))
    return DagSession(registry, DagSettings(store=str(path), **settings))


def without_deltas(run: DagRun) -> list[str]:
    """The event log as saved: every event but the answer's pieces. Events that carry a step or a plan are
    compared by type and time: in memory they hold the live step, which has moved on since.
    """
    return [
        f"{event.type} {event.at}" if event.type in ("step_planned", "plan_ready") else event.model_dump_json()
        for event in run.events
        if event.type != "answer_delta"
    ]


async def test_a_finished_run_reads_back_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
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
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.sqlite"
    seen: list[tuple[str, str, str | None]] = []
    run = session(path).start("goal")

    def check(event: Any) -> None:
        if isinstance(event, StepCompleted) and event.status == "completed":
            step = RunStore.open(path).load(run.run_id).state.rounds[0].plan.step(event.step_id)
            seen.append((event.step_id, step.status, step.result))

    run.subscribe(check)
    await run
    assert sorted(seen) == [(sid, "completed", f"result of {sid} in round 1") for sid in ("s1", "s2", "s3")]
    with sqlite3.connect(path) as other:  # another connection: only what was committed
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


async def test_no_secret_is_ever_written(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    canary = "canary-tok-in-the-store"

    def step(request: ScriptedRequest) -> str:
        if request.step_id == "s2":
            raise RuntimeError(f"the proxy says: invalid key {canary}")
        return "ok"

    registry = ModelRegistry().register("scripted", ScriptedLLM(script(step=step)), api_key=canary)
    run = await DagSession(registry, DagSettings(store=str(path))).run("goal")
    assert run.steps["s2"].status == "failed" and "***" in (run.steps["s2"].error or "")
    for file in tmp_path.iterdir():  # the database and its write-ahead log
        assert canary.encode() not in file.read_bytes(), file


WRITER = textwrap.dedent(
    """
    import asyncio, sys
    from dagmagic import DagSession, DagSettings, ModelRegistry
    from dagmagic.testing import ScriptedLLM

    steps = [{"id": f"s{i}", "task": f"part {i}"} for i in range(10)]
    script = {
        "route": [{"domain": None}], "plan": [{"steps": steps}], "step": ["ok"],
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


def test_two_processes_writing_one_store_at_once_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
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
    from dagmagic.engine import store as store_module

    path = tmp_path / "runs.sqlite"
    run = await DagSession(ModelRegistry().register("m", ScriptedLLM(script())), DagSettings(store=str(path))).run("g")
    RunStore.open(path).close()
    with sqlite3.connect(path) as db:  # back to how schema 1 left it
        db.execute("ALTER TABLE rounds DROP COLUMN extra")
        db.execute("PRAGMA user_version = 1")
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 1
    stored = RunStore.open(path).load(run.run_id)  # opening migrates it
    assert stored.state.rounds[0].rerun_of is None and stored.state.answer == run.answer
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == store_module.SCHEMA_VERSION == 2
        assert "extra" in [row[1] for row in db.execute("PRAGMA table_info(rounds)")]
