"""Run store overhead: one 1,000-step run with the store off, on SQLite and on PostgreSQL (events on), side by
side in one run.

A ``ScriptedLLM`` with no latency plans 1,000 steps (100 independent chains of 10) and answers every step at
once, so the wall time is dagmagic's own work. Each configuration runs ``REPEATS`` times, interleaved, each
store-on run into a fresh SQLite file, or a fresh database of a throwaway PostgreSQL server on 127.0.0.1 (started
here as the tests start theirs, fsync on, as a real server has it; skipped, and said so, when PostgreSQL or
psycopg is missing). Reported:

- wall s: median wall time of ``session.run(goal)``;
- ms/step over off: (median on - median off) / steps: what the store adds per step, all in (the run ends
  once its writer has written everything);
- in record: the time spent inside ``RunStore.record`` (the per-event change taken on the event loop, timed
  around each call; the writer's thread writes it), per step and per event: what the loop pays, apart from
  the noise of the whole run;
- per change written: the writer thread's time per change (an event and the rows it changed), timed around
  each transaction (the changes waiting are written together, up to ``BATCH_CHANGES``): what each backend costs
  to write, and how many changes a second one writer keeps up with; and how many transactions that took;
- events, and the store file's size (the database plus its WAL) after the run (SQLite).

Run: ``python benchmarks/store_overhead.py``. It prints numbers; it asserts nothing about time.
"""

from __future__ import annotations

import os

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"  # never fetch litellm's price list from the network

import asyncio
import platform
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dagmagic import DagSession, DagSettings, ModelRegistry
from dagmagic.store import RunStore
from dagmagic.store.writer import StoreWriter
from dagmagic.testing import ScriptedLLM

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the tests' throwaway PostgreSQL server
from tests.postgres_server import PostgresServer, postgres_problem

STEPS = 1_000
CHAIN = 10
REPEATS = 5
TARGET_MS_PER_STEP = 1.0


def plan() -> dict[str, Any]:
    """``STEPS // CHAIN`` independent chains of ``CHAIN`` steps each."""
    steps = []
    for i in range(STEPS):
        dependencies = [f"s{i - 1}"] if i % CHAIN else []
        steps.append({"id": f"s{i}", "task": f"part {i} of the work", "dependencies": dependencies})
    return {"steps": steps}


def session(store: str) -> DagSession:
    """A session whose model plans ``plan()`` and answers everything at once, saving to ``store``."""
    llm = ScriptedLLM(
        {
            "plan": [plan()],
            "step": ["a short result"],
            "analyze": [{"achieved": True, "confidence": 0.9, "reasoning": "complete"}],
            "synthesize": [["The answer."]],
        }
    )
    settings = DagSettings(store=store, plan_max_steps=STEPS, max_concurrency=50)
    return DagSession(ModelRegistry().register("m", llm), settings)


class RecordTimer:
    """Times every ``RunStore.record`` call while installed."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.calls = 0
        self._original = RunStore.record

    def __enter__(self) -> RecordTimer:
        original = self._original

        def timed(store: RunStore, run: Any, event: Any) -> None:
            started = time.perf_counter()
            try:
                original(store, run, event)
            finally:
                self.seconds += time.perf_counter() - started
                self.calls += 1

        RunStore.record = timed  # type: ignore[method-assign]
        return self

    def __exit__(self, *_: object) -> None:
        RunStore.record = self._original  # type: ignore[method-assign]


class CommitTimer:
    """Times every transaction the store's writer commits (on its thread) while installed, and counts the changes
    it wrote (several waiting are written in one).
    """

    def __init__(self) -> None:
        self.seconds = 0.0
        self.changes = 0
        self.transactions = 0
        self._one = StoreWriter._commit
        self._together = StoreWriter._commit_together

    def __enter__(self) -> CommitTimer:
        one, together = self._one, self._together

        def timed_one(writer: StoreWriter, change: Any) -> None:
            started = time.perf_counter()
            try:
                one(writer, change)
            finally:
                if change.statements.items:
                    self.seconds += time.perf_counter() - started
                    self.changes += 1
                    self.transactions += 1

        def timed_together(writer: StoreWriter, changes: list[Any]) -> Any:
            started = time.perf_counter()
            try:
                return together(writer, changes)
            finally:
                self.seconds += time.perf_counter() - started
                self.changes += sum(1 for change in changes if change.statements.items)
                self.transactions += 1

        StoreWriter._commit = timed_one  # type: ignore[method-assign]
        StoreWriter._commit_together = timed_together  # type: ignore[method-assign]
        return self

    def __exit__(self, *_: object) -> None:
        StoreWriter._commit = self._one  # type: ignore[method-assign]
        StoreWriter._commit_together = self._together  # type: ignore[method-assign]


async def one_run(store: str) -> tuple[float, int]:
    """One whole run: its wall time and how many events it emitted."""
    started = time.perf_counter()
    run = await session(store).run("a goal of a thousand steps")
    elapsed = time.perf_counter() - started
    assert run.status == "done" and sum(s.status == "completed" for s in run.steps.values()) == STEPS, run
    return elapsed, len(run.events)


class Backend:
    """One configuration's measurements."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.walls: list[float] = []
        self.record_seconds: list[float] = []
        self.commit_ms: list[float] = []
        self.changes = 0
        self.transactions = 0
        self.record_calls = 0
        self.sizes: list[int] = []

    def measure(self, store: str) -> int:
        """One run into ``store``; its events."""
        with RecordTimer() as recorded, CommitTimer() as committed:
            elapsed, events = asyncio.run(one_run(store))
            if store != "none":
                RunStore.open(store).close()  # what waits is written: every change is counted
        self.walls.append(elapsed)
        self.record_seconds.append(recorded.seconds)
        self.record_calls = recorded.calls
        if committed.changes:
            self.commit_ms.append(committed.seconds / committed.changes * 1000)
            self.changes = committed.changes
            self.transactions = committed.transactions
        return events


def main() -> None:
    """Run the configurations interleaved and print the table."""
    load = os.getloadavg()[0]
    print(
        f"dagmagic run store overhead benchmark - {datetime.now(UTC):%Y-%m-%d %H:%M} UTC - Python "
        f"{platform.python_version()} on {platform.system()} {platform.machine()}, {os.cpu_count()} cores, "
        f"load average {load:.2f}"
    )
    print(f"{STEPS} steps ({STEPS // CHAIN} chains of {CHAIN}), zero-latency ScriptedLLM, {REPEATS} runs each")
    problem = postgres_problem()
    server = PostgresServer(fsync=True) if problem is None else None
    if server is None:
        print(f"PostgreSQL: not measured ({problem})")
    off, sqlite, postgres = Backend("off"), Backend("sqlite"), Backend("postgres")
    events = 0
    try:
        with tempfile.TemporaryDirectory() as tmp:
            asyncio.run(one_run("none"))  # warm-up: imports, litellm's tables, first-use caches
            for repeat in range(REPEATS):
                events = off.measure("none")
                path = Path(tmp) / f"runs-{repeat}.sqlite"
                sqlite.measure(str(path))
                sqlite.sizes.append(sum(p.stat().st_size for p in Path(tmp).glob(f"runs-{repeat}.sqlite*")))
                if server is not None:
                    url = server.database()
                    postgres.measure(url)
                    server.drop(url)
    finally:
        if server is not None:
            server.stop()
    measured = [backend for backend in (off, sqlite, postgres) if backend.walls]
    off_s = statistics.median(off.walls)
    print()
    print(f"events per run: {events} ({sqlite.record_calls} written through RunStore.record)")
    print(
        f"{'store':<9} {'wall s':>8} {'min':>7} {'max':>7} {'ms/step over off':>17} {'in record ms/step':>18} "
        f"{'us/event':>9} {'changes':>8} {'transactions':>13} {'ms/change written':>18}"
    )
    for backend in measured:
        wall = statistics.median(backend.walls)
        in_record = statistics.median(backend.record_seconds)
        written = f"{statistics.median(backend.commit_ms):18.3f}" if backend.commit_ms else f"{'-':>18}"
        print(
            f"{backend.name:<9} {wall:8.3f} {min(backend.walls):7.3f} {max(backend.walls):7.3f} "
            f"{(wall - off_s) / STEPS * 1000:17.3f} {in_record / STEPS * 1000:18.3f} "
            f"{in_record / max(backend.record_calls, 1) * 1e6:9.0f} {backend.changes:8} {backend.transactions:13} "
            f"{written}"
        )
    print(f"SQLite file after one run: {statistics.median(sqlite.sizes) / 1e6:.2f} MB")
    if postgres.walls:
        ratio = (statistics.median(postgres.walls) - off_s) / max(statistics.median(sqlite.walls) - off_s, 1e-9)
        per_change = statistics.median(postgres.commit_ms) / statistics.median(sqlite.commit_ms)
        print(
            f"PostgreSQL / SQLite: {ratio:.2f}x the time added to a run, {per_change:.2f}x the time per change written"
        )
    for backend in (sqlite, postgres):
        if backend.walls:
            per_step = (statistics.median(backend.walls) - off_s) / STEPS * 1000
            in_record = statistics.median(backend.record_seconds) / STEPS * 1000
            verdict = "met" if max(per_step, in_record) <= TARGET_MS_PER_STEP else "NOT met"
            print(f"target <= {TARGET_MS_PER_STEP} ms/step with the store on ({backend.name}): {verdict}")


if __name__ == "__main__":
    sys.exit(main())
