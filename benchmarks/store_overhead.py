"""Run store overhead: one 1,000-step run with the store off and on (events on), side by side in one run.

A ``ScriptedLLM`` with no latency plans 1,000 steps (100 independent chains of 10) and answers every step at
once, so the wall time is dagmagic's own work. Each configuration runs ``REPEATS`` times, interleaved, each
store-on run into a fresh SQLite file. Reported:

- wall s: median wall time of ``session.run(goal)``;
- ms/step over off: (median on - median off) / steps: what the store adds per step, all in (the run ends
  once its writer has written everything);
- in record: the time spent inside ``RunStore.record`` (the per-event change taken on the event loop, timed
  around each call; the writer's thread writes it), per step and per event: what the loop pays, apart from
  the noise of the whole run;
- events, and the store file's size (the database plus its WAL) after the run.

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
from dagmagic.engine.store import RunStore
from dagmagic.testing import ScriptedLLM

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


async def one_run(store: str) -> tuple[float, int]:
    """One whole run: its wall time and how many events it emitted."""
    started = time.perf_counter()
    run = await session(store).run("a goal of a thousand steps")
    elapsed = time.perf_counter() - started
    assert run.status == "done" and sum(s.status == "completed" for s in run.steps.values()) == STEPS, run
    return elapsed, len(run.events)


def main() -> None:
    """Run both configurations interleaved and print the table."""
    load = os.getloadavg()[0]
    print(
        f"dagmagic run store overhead benchmark - {datetime.now(UTC):%Y-%m-%d %H:%M} UTC - Python "
        f"{platform.python_version()} on {platform.system()} {platform.machine()}, {os.cpu_count()} cores, "
        f"load average {load:.2f}"
    )
    print(f"{STEPS} steps ({STEPS // CHAIN} chains of {CHAIN}), zero-latency ScriptedLLM, {REPEATS} runs each")
    off: list[float] = []
    on: list[float] = []
    record_seconds: list[float] = []
    record_calls = 0
    sizes: list[int] = []
    events = 0
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(one_run("none"))  # warm-up: imports, litellm's tables, first-use caches
        for repeat in range(REPEATS):
            elapsed, events = asyncio.run(one_run("none"))
            off.append(elapsed)
            path = Path(tmp) / f"runs-{repeat}.sqlite"
            with RecordTimer() as timer:
                elapsed, events = asyncio.run(one_run(str(path)))
            on.append(elapsed)
            record_seconds.append(timer.seconds)
            record_calls = timer.calls
            sizes.append(sum(p.stat().st_size for p in Path(tmp).glob(f"runs-{repeat}.sqlite*")))
            RunStore.open(path).close()
    off_s, on_s = statistics.median(off), statistics.median(on)
    per_step = (on_s - off_s) / STEPS * 1000
    in_record = statistics.median(record_seconds)
    print()
    print(f"{'store':<6} {'wall s (median)':>16} {'min':>8} {'max':>8}")
    print(f"{'off':<6} {off_s:>16.3f} {min(off):>8.3f} {max(off):>8.3f}")
    print(f"{'on':<6} {on_s:>16.3f} {min(on):>8.3f} {max(on):>8.3f}")
    print()
    print(f"events per run: {events} ({record_calls} written through RunStore.record)")
    print(f"ms/step over off (whole run):     {per_step:7.3f}")
    print(f"in RunStore.record: {in_record:.3f} s per run = {in_record / STEPS * 1000:.3f} ms/step, "
          f"{in_record / max(record_calls, 1) * 1e6:.0f} us/event")  # fmt: skip
    print(f"store file after one run: {statistics.median(sizes) / 1e6:.2f} MB")
    verdict = "met" if max(per_step, in_record / STEPS * 1000) <= TARGET_MS_PER_STEP else "NOT met"
    print(f"target <= {TARGET_MS_PER_STEP} ms/step with the store on: {verdict}")


if __name__ == "__main__":
    sys.exit(main())
