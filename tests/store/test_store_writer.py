"""The run store's writes: off the event loop, through another program's lock, into a store deleted while
open, and into a file that holds its runs alone once they end (plus a safe copy of it).
"""

from __future__ import annotations

import asyncio
import itertools
import shutil
import sqlite3
import threading
import time
from pathlib import Path

import pytest

import dagmagic
from dagmagic import DagError, DagRun
from dagmagic.store import RunStore, StoreUnavailable, run_store, writer
from dagmagic.testing import ScriptedLLM, ScriptedRequest
from tests.store.test_store import interrupted_run, script, session
from tests.store.test_store import without_deltas as as_saved


def on_disk(path: Path, run_id: str) -> tuple[str, list[str]] | None:
    """The run's status and its steps' statuses as another program reads the file (None: not there)."""
    if not path.exists():
        return None
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as other:
        row = other.execute("SELECT status FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        steps = [s for (s,) in other.execute("SELECT status FROM steps WHERE run_id = ? ORDER BY position", (run_id,))]
    return None if row is None else (row[0], steps)


async def eventually_on_disk(path: Path, run_id: str) -> tuple[str, list[str]] | None:
    """What is on disk once the run's writes stop changing it (a lock just released takes a moment)."""
    seen = None
    for _ in range(200):
        seen = on_disk(path, run_id)
        if seen is not None and seen[0] != "running":
            break
        await asyncio.sleep(0.05)
    return seen


# --- point 8: another program holding the write lock -------------------------------------------------------


class WriteLock:
    """Another connection holding the store's write lock, as a database browser mid-edit or a backup does."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.held_from = self.held_until = 0.0
        self._taken = threading.Event()
        self._release = threading.Event()
        self._thread = threading.Thread(target=self._hold, daemon=True)

    def _hold(self) -> None:
        db = sqlite3.connect(self.path, isolation_level=None, timeout=30)
        db.execute("BEGIN IMMEDIATE")
        self.held_from = time.monotonic()
        self._taken.set()
        self._release.wait()
        self.held_until = time.monotonic()
        db.execute("ROLLBACK")
        db.close()

    def take(self) -> None:
        self._thread.start()
        self._taken.wait()

    def release(self) -> None:
        self._release.set()
        self._thread.join()


@pytest.mark.parametrize("taken", ["before the run starts", "while a step runs"])
async def test_another_program_holding_the_write_lock_stalls_neither_the_loop_nor_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, taken: str
) -> None:
    monkeypatch.setattr(run_store, "SETTLE_SECONDS", 0.3, raising=False)  # the end of a run waits this long
    monkeypatch.setattr(writer, "STALL_SECONDS", 0.1)  # then a run going on is told its changes wait
    path = tmp_path / "runs.sqlite"
    lock = WriteLock(path)
    armed = False

    async def step(request: ScriptedRequest) -> str:
        if request.step_id == "s2" and taken == "while a step runs" and armed:
            lock.take()
        if request.step_id == "s3" and armed:
            await asyncio.sleep(0.5)  # the run goes on a while under the lock
        return f"result of {request.step_id}"

    work = session(path, ScriptedLLM(script(step=step), latency=0.05))
    await work.run("warm-up")  # the store exists
    beats: list[float] = []

    async def heartbeat() -> None:
        while True:
            beats.append(time.monotonic())
            await asyncio.sleep(0.005)

    ticking = asyncio.create_task(heartbeat())
    armed = True
    if taken == "before the run starts":
        lock.take()
    run = await work.run("goal")
    await asyncio.sleep(1.0)  # the lock outlives the run
    lock.release()
    ticking.cancel()

    held = lock.held_until - lock.held_from
    start, end = lock.held_from, lock.held_until
    longest = max(  # the longest time without a beat while the lock was held
        min(later, end) - max(earlier, start)
        for earlier, later in itertools.pairwise(beats)
        if later >= start and earlier <= end
    )
    print(f"\nlock held {held:.2f} s; longest gap between heartbeats meanwhile {longest * 1000:.0f} ms")
    assert longest < held / 5
    assert run.status == "done" and run.answer == "The answer." and run.durable
    warnings = [event.message for event in run.events if event.type == "warning"]
    assert not any("database is locked" in w or "OperationalError" in w for w in warnings), warnings
    assert any("changes wait in memory" in w and "locked by another program" in w for w in warnings), warnings
    assert any("not on disk yet" in w and "locked by another program" in w for w in warnings), warnings

    assert await eventually_on_disk(path, run.run_id) == ("done", ["completed"] * 3)
    stored = dagmagic.load_run(run.run_id, store=str(path))
    assert stored.state.model_dump() == run.state.model_dump()
    assert as_saved(stored) == as_saved(run)


async def test_a_write_that_fails_for_good_leaves_the_run_going_unsaved_and_says_so_plainly(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"

    def step(request: ScriptedRequest) -> str:
        if request.step_id == "s2":  # the disk fills up
            with sqlite3.connect(path) as other:
                other.execute("CREATE TRIGGER full BEFORE INSERT ON events BEGIN SELECT RAISE(ABORT, 'disk full'); END")
        return "ok"

    run = await session(path, ScriptedLLM(script(step=step))).run("goal")
    assert run.status == "done" and run.answer == "The answer." and not run.durable
    (warning,) = [event.message for event in run.events if event.type == "warning"]
    assert warning.startswith("This run is no longer saved: ") and "disk full" in warning


# --- point 6: the store deleted or moved while the kernel has it open --------------------------------------


async def test_runs_after_the_store_was_deleted_are_saved_in_a_new_one(tmp_path: Path) -> None:
    directory = tmp_path / ".dagmagic"
    path = directory / "runs.sqlite"
    work = session(path)
    first = await work.run("first goal")
    shutil.rmtree(directory)  # clearing the history, with the kernel running
    second = await work.run("second goal")
    assert second.durable
    assert on_disk(path, second.run_id) == ("done", ["completed"] * 3)
    assert on_disk(path, first.run_id) is None  # what was deleted stays deleted
    store = RunStore.open(path)
    assert [summary.run_id for summary in store.runs()] == [second.run_id]
    shutil.rmtree(directory)
    work.close()  # checkpoints the store: one deleted is not created again for that
    store.checkpoint(wait=30)  # once the close's checkpoint is done too
    assert not directory.exists()


@pytest.mark.parametrize("how", ["deleted", "moved"])
async def test_a_run_going_on_when_its_store_is_deleted_or_moved_is_saved_whole_in_a_new_one(
    tmp_path: Path, how: str
) -> None:
    directory = tmp_path / ".dagmagic"
    path = directory / "runs.sqlite"
    armed = False

    def step(request: ScriptedRequest) -> str:
        if request.step_id == "s2" and armed:
            RunStore.open(path).checkpoint(wait=30)  # nothing being written as it goes (a test's certainty)
            shutil.rmtree(directory) if how == "deleted" else directory.rename(tmp_path / "moved")
        return f"result of {request.step_id}"

    work = session(path, ScriptedLLM(script(step=step)))
    await work.run("warm-up")
    armed = True
    run = await work.run("goal")
    assert run.durable and on_disk(path, run.run_id) == ("done", ["completed"] * 3)
    stored = dagmagic.load_run(run.run_id, store=str(path))
    assert stored.state.model_dump() == run.state.model_dump()
    assert as_saved(stored) == as_saved(run)
    if how == "moved":  # the moved file keeps what it held
        assert on_disk(tmp_path / "moved" / "runs.sqlite", run.run_id) is not None


# --- point 10: the .sqlite file alone holds the runs that ended; a safe copy --------------------------------


async def test_once_a_run_ends_the_sqlite_file_alone_holds_it(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    run = await session(path).run("goal")
    copy = tmp_path / "copy" / "runs.sqlite"
    copy.parent.mkdir()
    shutil.copyfile(path, copy)  # without runs.sqlite-wal, as after a kill -9 and a careless copy
    assert on_disk(copy, run.run_id) == ("done", ["completed"] * 3)


def test_closing_a_session_checkpoints_its_store(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    work = session(path)

    async def cancelled_before_it_began() -> DagRun:
        run = work.start("goal")
        run.cancel()  # its task never runs: the run ends without the end of a run's checkpoint
        return await run

    run = asyncio.run(cancelled_before_it_began())
    work.close()
    copy = tmp_path / "copy" / "runs.sqlite"
    copy.parent.mkdir()
    shutil.copyfile(path, copy)
    assert on_disk(copy, run.run_id) == ("cancelled", [])


async def test_export_store_makes_a_copy_that_load_run_reads(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    run = await session(path).run("goal")
    target = tmp_path / "backup.sqlite"
    assert dagmagic.export_store(target, store=str(path)) == target
    assert [p.name for p in tmp_path.iterdir() if "backup" in p.name] == ["backup.sqlite"]  # one file, whole
    assert oct(target.stat().st_mode & 0o777) == "0o600"  # runs hold what the user asked: owner-only
    copied = dagmagic.load_run(run.run_id, store=str(target))
    assert copied.state.model_dump() == run.state.model_dump() and copied.answer == "The answer."

    before = target.read_bytes()
    with pytest.raises(DagError, match=f"{target} exists already"):
        dagmagic.export_store(target, store=str(path))
    assert target.read_bytes() == before
    assert "export_store" in dagmagic.__all__


async def test_a_copy_exported_while_a_run_goes_on_reads_back(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    target = tmp_path / "mid-run.sqlite"

    def step(request: ScriptedRequest) -> str:
        if request.step_id == "s3":
            dagmagic.export_store(target, store=str(path))
        return "ok"

    run = await session(path, ScriptedLLM(script(step=step))).run("goal")
    copied = dagmagic.load_run(run.run_id, store=str(target)).state
    assert copied.status == "running"  # interrupted, as far as the copy knows: it can be resumed from it
    assert [step.status for step in copied.rounds[0].plan.steps] == ["completed", "completed", "running"]


# --- the writer with the lease and the rows stored once (r21-storeio merged with r21-storerows) -------------


async def test_a_store_deleted_while_a_run_goes_on_gets_the_runs_lease_conversation_and_calls_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dagmagic.store import lease

    monkeypatch.setattr(lease, "LEASE_SECONDS", 1.5)  # a loaded 2-core machine may delay a heartbeat by a second
    monkeypatch.setattr(lease, "HEARTBEAT_SECONDS", 0.05)
    directory = tmp_path / ".dagmagic"
    path = directory / "runs.sqlite"
    armed, release = False, asyncio.Event()

    async def step(request: ScriptedRequest) -> str:
        if request.step_id == "s2" and armed:
            RunStore.open(path).checkpoint(wait=30)
            shutil.rmtree(directory)
        if request.step_id == "s3" and armed:
            await release.wait()
        return f"result of {request.step_id}"

    work = session(path, ScriptedLLM(script(step=step)))
    await work.run("warm-up")
    armed = True
    run = work.start("goal")

    def lease_expiry() -> float | None:
        if not path.exists():
            return None
        try:
            with sqlite3.connect(path) as other:
                row = other.execute("SELECT expires FROM leases WHERE run_id = ?", (run.run_id,)).fetchone()
        except sqlite3.OperationalError:  # the new file is there, its tables not yet: read again
            return None
        return None if row is None else float(row[0])

    for _ in range(1000):  # the new store, once the run is written whole into it
        if lease_expiry() is not None:
            break
        await asyncio.sleep(0.02)
    first = lease_expiry()
    assert first is not None
    while time.time() < first + 3.0:  # twice as long as a lease lasts: only its heartbeat, in the new file, keeps it
        await asyncio.sleep(0.05)
    later = lease_expiry()
    assert later is not None and later > first + 1.5
    summary = RunStore.open(path).summary(run.run_id)
    assert summary is not None and not summary.interrupted and summary.driver is not None
    with pytest.raises(DagError, match="is being driven by another session of this process"):
        session(path).start_resume(run.run_id)

    release.set()
    await run
    assert run.durable and lease_expiry() is None  # given back at its end, in the new file
    stored = dagmagic.load_run(run.run_id, store=str(path))
    assert stored.state.model_dump() == run.state.model_dump() and as_saved(stored) == as_saved(run)
    assert RunStore.open(path).load(run.run_id).history == work.history[:1]  # planned after the warm-up
    with sqlite3.connect(path) as other:
        exchanges = other.execute("SELECT goal FROM exchanges").fetchall()
        references = other.execute("SELECT COUNT(*), COUNT(call) FROM events WHERE type = 'llm_call'").fetchone()
    assert exchanges == [("warm-up",)]  # the conversation as a chain, once
    assert references[0] == len(run.state.calls) > 0 and references[1] == references[0]  # calls by reference


async def test_resuming_while_another_program_holds_the_write_lock_is_refused_plainly_and_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run_store, "LEASE_WAIT_SECONDS", 0.2)
    path = tmp_path / "runs.sqlite"
    cut = await interrupted_run(path)
    lock = WriteLock(path)
    lock.take()
    try:
        with pytest.raises(StoreUnavailable) as refused:
            await session(path).resume(cut.run_id)
    finally:
        lock.release()
    message = str(refused.value)
    assert f"run {cut.run_id} was not resumed" in message and "locked by another program" in message, message
    assert "resume it again once it is released" in message
    assert "database is locked" not in message

    RunStore.open(path).checkpoint(wait=30)  # whatever waited is written now
    with sqlite3.connect(path) as other:
        assert other.execute("SELECT COUNT(*) FROM leases").fetchone()[0] == 0  # the withdrawn resume took nothing
    summary = RunStore.open(path).summary(cut.run_id)
    assert summary is not None and summary.interrupted
    resumed = await session(path).resume(cut.run_id)
    assert resumed.status == "done" and [s.status for s in resumed.steps.values()] == ["completed"] * 3
