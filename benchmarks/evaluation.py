"""Evaluation at scale on one machine: 1,000 cases x 2 configs with a zero-latency ScriptedLLM, the store on.

Three experiments of 250, 500 and 1,000 cases x 2 configs (500, 1,000 and 2,000 cells), each in a fresh session
and a fresh SQLite file, so the wall time is dagmagic's own work. Reported for each size:

- ms/cell: wall time of ``session.evaluate(...)`` per cell (plan, one step, analyze, synthesize, scoring and the
  store's writes of the run and the experiment row), measured without tracemalloc;
- peak KB/cell: the tracemalloc peak during the experiment, per cell (a second run of the same size: tracing
  slows allocation more as more is alive, so it would bend the times);
- retained KB/cell: what is still allocated after the experiment, the session and experiment still alive;
- store bytes/cell: the database plus its WAL after the experiment.

Flat means the per-cell columns stay about the same from 500 to 2,000 cells (linear totals). The ScriptedLLMs keep
only their last 100 requests: a test's keeps every prompt, and that growing heap alone made Python's cyclic GC
(which walks it) cost more per cell as the experiment grew (ms/cell 6.7 -> 9.3 from 500 to 2,000 cells).
Run: ``python benchmarks/evaluation.py`` (``--quick``: 50/100/200 cells). It prints numbers; it asserts nothing.
"""

from __future__ import annotations

import os

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"  # never fetch litellm's price list from the network

import asyncio
import collections
import gc
import platform
import sys
import tempfile
import time
import tracemalloc
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dagmagic import DagSession, DagSettings, ModelRegistry
from dagmagic.engine.run.dag_run import DagRun
from dagmagic.evaluation import Case
from dagmagic.testing import ScriptedLLM

PLAN = {"steps": [{"id": "s1", "task": "look it up"}]}
VERDICT = {"achieved": True, "confidence": 0.9, "reasoning": "complete"}
CONCURRENCY = 50


def scripted(answer: str) -> ScriptedLLM:
    """A model that plans one step, finds it, judges it achieved and answers ``answer``, at once."""
    return ScriptedLLM({"plan": [PLAN], "step": ["found it"], "analyze": [VERDICT], "synthesize": [[answer]]})


def says_paris(case: Case, run: DagRun) -> bool:
    """A scorer, so that scoring is part of each cell's cost."""
    return "Paris" in run.answer


async def one_experiment(cases: int, store: Path, *, traced: bool) -> dict[str, Any]:
    """Evaluate ``cases`` goals under two configs into ``store``: wall time and size, or (``traced``) memory."""
    small, big = scripted("Lyon"), scripted("Paris")
    for llm in (small, big):  # a test's ScriptedLLM keeps every request; here that would be the heap's bulk
        llm.requests = collections.deque(maxlen=100)  # type: ignore[assignment]
    session = DagSession(ModelRegistry().register("m", small), DagSettings(store=str(store)))
    configs = {"small": {"models": {"smart": small}}, "big": {"models": {"smart": big}}}
    goals = [f"Question number {i}: what is the capital of France?" for i in range(cases)]
    gc.collect()
    if traced:
        tracemalloc.start()
    baseline = tracemalloc.get_traced_memory()[0]
    started = time.perf_counter()
    experiment = await session.evaluate(goals, configs=configs, scorers=[says_paris], concurrency=CONCURRENCY)
    elapsed = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1] - baseline
    small.requests.clear()
    big.requests.clear()
    gc.collect()
    retained = tracemalloc.get_traced_memory()[0] - baseline
    tracemalloc.stop()
    frame = experiment.to_dataframe()
    cells = len(frame)
    assert cells == 2 * cases and set(frame["status"]) == {"done"}, frame["status"].value_counts()
    if session.store is not None:
        session.store.close()
    size = sum(p.stat().st_size for p in store.parent.glob(store.name + "*"))
    return {"cells": cells, "seconds": elapsed, "peak": peak, "retained": retained, "bytes": size}


def main() -> None:
    """Run the three sizes and print the table."""
    sizes = (25, 50, 100) if "--quick" in sys.argv else (250, 500, 1000)
    print(
        f"dagmagic evaluation benchmark - {datetime.now(UTC):%Y-%m-%d %H:%M} UTC - Python "
        f"{platform.python_version()} on {platform.system()} {platform.machine()}, {os.cpu_count()} cores, "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    print(f"cases x 2 configs, zero-latency ScriptedLLM, store on, concurrency {CONCURRENCY}")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        asyncio.run(one_experiment(5, folder / "warmup.sqlite", traced=False))  # imports, first-use caches
        rows = []
        for n in sizes:
            timed = asyncio.run(one_experiment(n, folder / f"timed-{n}.sqlite", traced=False))
            traced = asyncio.run(one_experiment(n, folder / f"traced-{n}.sqlite", traced=True))
            rows.append({**timed, "peak": traced["peak"], "retained": traced["retained"]})
    print()
    print(
        f"{'cells':>6} {'wall s':>8} {'ms/cell':>8} {'peak KB/cell':>13} {'retained KB/cell':>17} {'store KB/cell':>14}"
    )
    for row in rows:
        cells = row["cells"]
        print(
            f"{cells:>6} {row['seconds']:>8.2f} {row['seconds'] / cells * 1000:>8.2f} "
            f"{row['peak'] / cells / 1024:>13.1f} {row['retained'] / cells / 1024:>17.1f} "
            f"{row['bytes'] / cells / 1024:>14.1f}"
        )
    first, last = rows[0], rows[-1]
    print()
    print(f"from {first['cells']} to {last['cells']} cells ({last['cells'] / first['cells']:.0f}x): "
          f"wall x{last['seconds'] / first['seconds']:.2f}, peak x{last['peak'] / first['peak']:.2f}, "
          f"store x{last['bytes'] / first['bytes']:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
