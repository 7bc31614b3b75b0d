"""The run store on PostgreSQL: a run resumed on another machine once its lease expired, runs of every machine
listed with their host, what it refuses, and a copy into a SQLite file. (The rest of the store's suite runs on
both backends: ``store_path`` in tests/store/test_store.py and test_resume.py.)
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dagmagic import DagSession, DagSettings, ModelRegistry
from dagmagic.errors import StoreError, StoreUnavailable
from dagmagic.store import SCHEMA_VERSION, RunStore
from dagmagic.store.lease import HOST
from dagmagic.testing import ScriptedLLM, ScriptedRequest
from tests.engine.conftest import plan_reply, verdict
from tests.stored import connect, step_statuses

MACHINE = textwrap.dedent(
    """
    import asyncio, json, sys
    from dagmagic.store import lease

    store, host, mode, run_id = sys.argv[1:5]
    lease.HOST = host  # as if on another machine
    lease.LEASE_SECONDS, lease.HEARTBEAT_SECONDS = 6.0, 0.2

    from dagmagic import DagSession, DagSettings, ModelRegistry
    from dagmagic.testing import ScriptedLLM

    async def step(request):
        if mode == "start" and request.step_id == "s2":
            await asyncio.sleep(3600)  # killed while it runs
        return f"{request.step_id} on {host}"

    def synthesize(request):
        return [" + ".join(sorted(set(w for w in request.prompt.split("\\n") if " on machine-" in w)))]

    plan = {"steps": [{"id": "s1", "task": "first"}, {"id": "s2", "task": "second", "dependencies": ["s1"]}]}
    script = {"plan": [plan], "step": step, "synthesize": synthesize,
              "analyze": [{"achieved": True, "confidence": 0.9, "reasoning": "complete"}]}

    async def main():
        session = DagSession(ModelRegistry().register("m", ScriptedLLM(script)), DagSettings(store=store))
        try:
            run = await (session.resume(run_id) if mode == "resume" else session.run("the goal"))
        except Exception as exc:
            print(json.dumps({"error": str(exc)}))
            return
        print(json.dumps({"run_id": run.run_id, "status": run.status, "steps": {
            s.id: s.result for s in run.steps.values()}}))

    asyncio.run(main())
    """
)


def machine(store: str, host: str, mode: str, run_id: str = "-") -> subprocess.Popen[str]:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    command = [sys.executable, "-c", MACHINE, store, host, mode, run_id]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def finished(process: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    return dict(json.loads(out))


def test_a_run_whose_machine_vanished_is_resumed_on_another_once_its_lease_expired(postgres: Any) -> None:
    url = postgres.database()
    first = machine(url, "machine-a", "start")
    deadline = time.monotonic() + 60
    while step_statuses(url) != {"s1": "completed", "s2": "running"}:
        assert time.monotonic() < deadline and first.poll() is None, step_statuses(url)
        time.sleep(0.05)
    os.kill(first.pid, signal.SIGKILL)  # its machine gone: nobody gives the lease back
    first.communicate(timeout=30)
    store = RunStore.open(url)
    (summary,) = store.runs()
    assert summary.host == "machine-a" and not summary.interrupted  # another host: only the lease's end tells
    assert summary.driver is not None and f"pid {first.pid} on machine-a" in summary.driver

    refused = finished(machine(url, "machine-b", "resume", summary.run_id))
    assert f"being driven by another process (pid {first.pid} on machine-a" in refused["error"]
    while not store.runs()[0].interrupted:  # its lease expires
        assert time.monotonic() < deadline + 60
        time.sleep(0.2)

    resumed = finished(machine(url, "machine-b", "resume", summary.run_id))
    assert resumed == {
        "run_id": summary.run_id,
        "status": "done",
        "steps": {"s1": "s1 on machine-a", "s2": "s2 on machine-b"},  # s1 is not run again
    }
    (after,) = store.runs()
    assert (after.status, after.interrupted, after.driver, after.host) == ("done", False, None, "machine-b")
    store.close()
    postgres.drop(url)


async def test_runs_of_every_machine_are_listed_with_their_host(postgres: Any) -> None:
    url = postgres.database()
    theirs = finished(machine(url, "machine-a", "whole"))
    llm = ScriptedLLM(
        {
            "plan": [plan_reply(("s1", []))],
            "step": ["ok"],
            "analyze": [verdict(True, 0.9)],
            "synthesize": [["mine"]],
        }
    )
    mine = await DagSession(ModelRegistry().register("m", llm), DagSettings(store=url)).run("my goal")
    store = RunStore.open(url)
    listed = {summary.run_id: summary.host for summary in store.runs()}
    assert listed == {theirs["run_id"]: "machine-a", mine.run_id: HOST}
    store.close()
    postgres.drop(url)


def test_a_database_with_another_programs_runs_table_is_refused_and_left_alone(postgres: Any) -> None:
    url = postgres.database()
    with connect(url) as db:
        db.execute("CREATE TABLE runs (id INTEGER, what TEXT)")
        db.execute("INSERT INTO runs VALUES (1, 'theirs')")
    with pytest.raises(StoreError, match="holds a table `runs` that is not a dagmagic run store's"):
        RunStore.open(url)
    with connect(url) as db:
        assert db.execute("SELECT * FROM runs").fetchall() == [(1, "theirs")]
        assert db.execute("SELECT to_regclass('dagmagic_meta')").fetchone()[0] is None
    postgres.drop(url)


def test_a_store_from_a_newer_dagmagic_is_refused(postgres: Any) -> None:
    url = postgres.database()
    RunStore.open(url).close()
    with connect(url) as db:
        db.execute("UPDATE dagmagic_meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),))
    with pytest.raises(StoreError, match=f"newer dagmagic \\(schema {SCHEMA_VERSION + 1}"):
        RunStore.open(url)
    postgres.drop(url)


def test_a_server_that_cannot_be_reached_is_unavailable_and_says_where_without_the_password(
    postgres: Any,
) -> None:
    url = f"postgresql://someone:hunter2-secret@127.0.0.1:{postgres.port}/no_such_database"
    with pytest.raises(StoreUnavailable) as refused:
        RunStore.open(url)
    message = str(refused.value)
    assert "postgresql://someone:***@127.0.0.1" in message and "cannot be reached" in message
    assert "hunter2" not in message


async def test_a_postgres_store_is_copied_into_one_sqlite_file(postgres: Any, tmp_path: Path) -> None:
    url = postgres.database()
    llm = ScriptedLLM(
        {
            "plan": [plan_reply(("s1", []), ("s2", ["s1"]))],
            "step": ["ok"],
            "analyze": [verdict(True, 0.9)],
            "synthesize": [["copied"]],
        }
    )
    session = DagSession(ModelRegistry().register("m", llm), DagSettings(store=url))
    await session.run("first")
    run = await session.run("second, after the first")
    copy = RunStore.open(url).export(tmp_path / "copy.sqlite")
    copied = RunStore.open(copy).load(run.run_id)
    assert copied.state.model_dump() == RunStore.open(url).load(run.run_id).state.model_dump()
    assert [exchange.goal for exchange in copied.history] == ["first"]
    RunStore.open(url).close()
    postgres.drop(url)


async def test_connections_lost_mid_run_are_made_again_and_the_run_is_saved_whole(postgres: Any) -> None:
    url = postgres.database()
    halfway = asyncio.Event()
    go_on = asyncio.Event()

    async def step(request: ScriptedRequest) -> str:
        if request.step_id == "s2":
            halfway.set()
            await go_on.wait()
        return f"result of {request.step_id}"

    llm = ScriptedLLM(
        {
            "plan": [plan_reply(("s1", []), ("s2", ["s1"]), ("s3", ["s2"]))],
            "step": step,
            "analyze": [verdict(True, 0.9)],
            "synthesize": [["after the restart"]],
        }
    )
    run = DagSession(ModelRegistry().register("m", llm), DagSettings(store=url)).start("goal")
    await halfway.wait()
    store = RunStore.open(url)
    assert store.runs()[0].status == "running"
    with connect(postgres.url()) as admin:  # as a server restart ends them: every connection to the store
        admin.execute("COMMIT")
        ended = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = ?", (url.rsplit("/", 1)[1],)
        ).fetchall()
        admin.execute("BEGIN")
    assert len(ended) >= 2  # the writer's and the reader's
    go_on.set()
    await run
    assert run.status == "done" and run.durable
    (summary,) = store.runs()  # the reader connects again too
    assert summary.status == "done"
    stored = store.load(run.run_id)
    assert stored.state.answer == "after the restart"
    assert [step.result for step in stored.state.rounds[0].plan.steps] == [f"result of s{i}" for i in (1, 2, 3)]
    assert [event.type for event in stored.events] == [
        event.type for event in run.events if event.type not in ("answer_delta", "call_progress")
    ]
    store.close()
    postgres.drop(url)


async def test_a_run_whose_postgres_store_cannot_be_reached_goes_on_unsaved_and_says_so(postgres: Any) -> None:
    url = f"postgresql://dag:hunter2-secret@127.0.0.1:{postgres.port}/no_such_database"
    llm = ScriptedLLM(
        {"plan": [plan_reply(("s1", []))], "step": ["ok"], "analyze": [verdict(True, 0.9)], "synthesize": [["x"]]}
    )
    run = await DagSession(ModelRegistry().register("m", llm), DagSettings(store=url)).run("goal")
    assert run.status == "done" and not run.durable
    (warning,) = [event.message for event in run.events if event.type == "warning"]
    assert "This run is not saved: the run store postgresql://dag:***@127.0.0.1" in warning
    assert "cannot be reached" in warning and "hunter2" not in warning


async def test_a_write_lock_held_by_another_connection_holds_up_nothing_and_loses_nothing(
    postgres: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dagmagic.store import run_store, writer
    from dagmagic.store.sqlite import APPLICATION_ID

    monkeypatch.setattr(run_store, "SETTLE_SECONDS", 0.3)  # the end of a run waits this long
    monkeypatch.setattr(writer, "STALL_SECONDS", 0.1)  # then a run going on is told its changes wait

    url = postgres.database()
    RunStore.open(url)  # the tables
    llm = ScriptedLLM(
        {
            "plan": [plan_reply(("s1", []), ("s2", ["s1"]))],
            "step": ["ok"],
            "analyze": [verdict(True, 0.9)],
            "synthesize": [["written"]],
        }
    )
    with connect(url) as other:  # a long transaction holding the store's write lock (as another writer would)
        other.execute(f"SELECT pg_advisory_xact_lock({APPLICATION_ID})")
        run = await DagSession(ModelRegistry().register("m", llm), DagSettings(store=url)).run("goal")
        store = RunStore.open(url)
        assert store._writer.locked_since is not None  # its changes wait in memory
    assert run.status == "done" and run.answer == "written"
    warnings = [event.message for event in run.events if event.type == "warning"]
    assert any("This run's last changes are not on disk yet" in warning for warning in warnings), warnings
    assert store._writer.flush(30)
    stored = store.load(run.run_id)  # written once the lock was released
    assert stored.state.status == "done" and len(stored.events) == len(
        [event for event in run.events if event.type not in ("answer_delta", "call_progress")]
    )
    store.close()
    postgres.drop(url)


async def test_an_experiment_is_stored_and_summed_up_in_postgres_as_in_sqlite(postgres: Any, tmp_path: Path) -> None:
    summaries = []
    for store in (str(tmp_path / "runs.sqlite"), postgres.database()):
        llm = ScriptedLLM(
            {"plan": [plan_reply(("s1", []))], "step": ["ok"], "analyze": [verdict(True, 0.9)], "synthesize": [["x"]]},
            price=(1e-6, 2e-6),
        )
        session = DagSession(ModelRegistry().register("m", llm), DagSettings(store=store))
        experiment = await session.evaluate(["a", "b", "c"], name="grid")
        opened = RunStore.open(store)
        (summary,) = opened.experiments()
        assert opened.experiment_id("grid") == summary.experiment_id == experiment.id
        assert summary.cost is not None
        summaries.append((summary.name, summary.statuses, summary.cells, summary.finished, summary.cost))
    (*in_sqlite, sqlite_cost), (*in_postgres, postgres_cost) = summaries
    assert in_sqlite == in_postgres == ["grid", {"done": 3}, 3, 3] and postgres_cost == pytest.approx(sqlite_cost)


def _three_rounds(restart: Callable[[], None]) -> ScriptedLLM:
    """A run of three rounds of three steps each, ``restart`` called (on a thread) as round 2 begins."""
    started: list[threading.Thread] = []

    def step(request: ScriptedRequest) -> str:
        if request.round == 2 and not started:
            started.append(threading.Thread(target=restart))
            started[0].start()
        return f"result of {request.step_id} in round {request.round}"

    llm = ScriptedLLM(
        {
            "plan": [plan_reply(("s1", []), ("s2", ["s1"]), ("s3", ["s2"]))],
            "step": step,
            "analyze": [verdict(False, 0.2), verdict(False, 0.2), verdict(True, 0.9)],
            "synthesize": [["the answer"]],
        },
        latency=0.05,
    )
    llm.restarts = started  # type: ignore[attr-defined]
    return llm


async def _written_whole(store: RunStore, run_id: str) -> None:
    """Wait (on the loop, which writes a run whole again) until the store holds ``run_id`` ended, 60 s at most."""
    for _ in range(600):
        summary = store.summary(run_id)
        if summary is not None and summary.status != "running" and not store._writer.pending(run_id):
            return
        await asyncio.sleep(0.1)


def _saved(run: Any) -> list[str]:
    return [event.type for event in run.events if event.type not in ("answer_delta", "call_progress")]


@pytest.mark.slow
@pytest.mark.parametrize("down_seconds", [0.2, 8.0])
async def test_a_server_restarted_mid_run_loses_nothing_of_it(postgres: Any, down_seconds: float) -> None:
    url = postgres.database()
    llm = _three_rounds(lambda: postgres.restart(down_seconds))
    session = DagSession(ModelRegistry().register("m", llm), DagSettings(store=url, max_replan_rounds=3))
    run = await session.run("goal")
    llm.restarts[0].join()  # type: ignore[attr-defined]
    assert run.status == "done" and run.answer == "the answer" and len(run.state.rounds) == 3
    assert run.durable, [event.message for event in run.events if event.type == "warning"]
    store = RunStore.open(url)
    await _written_whole(store, run.run_id)  # a run that ended while the server was down: once it is back
    stored = store.load(run.run_id)
    live = (run.state.status, len(run.state.rounds), len(run.state.calls), len(_saved(run)), run.state.answer)
    kept = (stored.state.status, len(stored.state.rounds), len(stored.state.calls), len(stored.events))
    assert (*kept, stored.state.answer) == live
    assert [event.type for event in stored.events] == _saved(run)
    (summary,) = store.runs()
    assert summary.status == "done" and not summary.interrupted
    store.close()
    postgres.drop(url)


async def test_a_server_down_past_the_reconnect_wait_leaves_the_run_unsaved_said_once_and_shown_interrupted(
    postgres: Any,
) -> None:
    url = postgres.database()
    went_down = threading.Event()
    go_on = asyncio.Event()

    async def step(request: ScriptedRequest) -> str:
        if request.round == 1 and request.step_id == "s1" and not went_down.is_set():
            await asyncio.to_thread(postgres.down)
            went_down.set()
        if request.round == 2:
            await go_on.wait()
        return f"result of {request.step_id}"

    llm = ScriptedLLM(
        {
            "plan": [plan_reply(("s1", []), ("s2", ["s1"]))],
            "step": step,
            "analyze": [verdict(False, 0.2), verdict(True, 0.9)],
            "synthesize": [["the answer"]],
        },
        latency=0.02,
    )
    settings = DagSettings(store=url, store_reconnect_wait=1.0)
    session = DagSession(ModelRegistry().register("m", llm), settings)
    run = session.start("goal")
    try:
        for _ in range(600):  # the writer gives up 1 s after the server went down; 60 s at most
            if not run.durable:
                break
            await asyncio.sleep(0.1)
    finally:
        await asyncio.to_thread(went_down.wait, 60)
        await asyncio.to_thread(postgres.start)
    store = RunStore.open(url)
    summary = store.summary(run.run_id)  # the run goes on here, unsaved: its stored part is not shown as driven
    assert summary is not None and summary.status == "running", summary
    assert summary.interrupted and summary.driver is None, summary
    lost = [event.message for event in run.events if event.type == "warning"]
    assert not run.durable and len(lost) == 1, lost
    assert "could not be reached for" in lost[0] and "store_reconnect_wait" in lost[0], lost[0]
    assert "shows as interrupted" in lost[0]
    go_on.set()
    await run
    assert run.status == "done" and run.answer == "the answer"
    assert [event.type for event in run.events].count("warning") == 1  # said once
    again = await session.run("another goal")  # the server is back: the next run is saved whole
    assert again.durable and again.status == "done", [e.message for e in again.events if e.type == "warning"]
    await _written_whole(store, again.run_id)
    assert store.load(again.run_id).state.answer == again.answer
    store.close()
    postgres.drop(url)
