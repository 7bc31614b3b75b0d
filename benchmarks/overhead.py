"""Executor overhead benchmark: zero-latency DAGs of 1,000 and 10,000 steps, events on and off, in one run.

Every step returns at once (no sleep, no await), so all the time measured is dagmagic's own: task creation,
the semaphore, the timeout scope, status bookkeeping and (with events on) building each event. Reported:

- us/step: wall time of ``execute()`` divided by the number of steps (median of the repeats);
- dispatch p50/p99: ``started_at`` of a step minus the latest ``completed_at`` of its dependencies, over every
  step that has dependencies (all repeats pooled), in microseconds;
- peak memory of one 1,000-step run (tracemalloc);
- linearity: us/step at 10,000 steps / us/step at 1,000 steps.

Run: ``python benchmarks/overhead.py``. It prints numbers; it asserts nothing about time.
"""

from __future__ import annotations

import os

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"  # never fetch litellm's price list from the network

import asyncio
import gc
import platform
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from dagmagic.engine.steps.executor import DagExecutor
from dagmagic.events import Event
from dagmagic.models import ExecutionPlan, PlanStep

SIZES = (1_000, 10_000)
REPEATS = 5  # per size; sizes alternate within a repeat, so background load hits both alike
DEFAULT_CONCURRENCY = 5  # DagSettings.max_concurrency's default
TARGET_US_PER_STEP = 1000.0
TARGET_DISPATCH_P50_US = 1000.0
TARGET_LINEARITY = 1.5


def _sid(i: int) -> str:
    return f"s{i:05d}"


def chain(n: int) -> ExecutionPlan:
    """``s00000 -> s00001 -> ... -> s{n-1}``."""
    steps = [PlanStep(id=_sid(i), task="t", dependencies=[_sid(i - 1)] if i else []) for i in range(n)]
    return ExecutionPlan(goal="chain", steps=steps)


def fan_out(n: int) -> ExecutionPlan:
    """One root, ``n - 2`` parallel steps that need it, one join that needs all of them."""
    middle = [_sid(i) for i in range(1, n - 1)]
    steps = [PlanStep(id=_sid(0), task="t")]
    steps += [PlanStep(id=sid, task="t", dependencies=[_sid(0)]) for sid in middle]
    steps.append(PlanStep(id=_sid(n - 1), task="t", dependencies=middle))
    return ExecutionPlan(goal="fan-out", steps=steps)


@dataclass(frozen=True)
class Config:
    """One row of the table: a shape, its concurrency limit (None = as many as steps) and events on or off."""

    shape: str
    build: Callable[[int], ExecutionPlan]
    concurrency: int | None
    events: bool

    def label(self) -> str:
        """Shape, concurrency and events, as the table shows them."""
        limit = "=steps" if self.concurrency is None else str(self.concurrency)
        return f"{self.shape:<8} c{limit:<7} events {'on' if self.events else 'off'}"


CONFIGS = [
    Config(shape, build, concurrency, events)
    for shape, build, concurrency in (
        ("chain", chain, None),
        ("chain", chain, DEFAULT_CONCURRENCY),
        ("fan-out", fan_out, None),
    )
    for events in (True, False)
]


async def _run_step(step: PlanStep, deps: dict[str, PlanStep]) -> str:
    return "ok"


@dataclass
class Run:
    """What one ``execute()`` measured."""

    seconds: float
    dispatch_us: list[float]
    join_dispatch_us: float | None
    events: int


def _executor(plan: ExecutionPlan, config: Config, n: int, log: list[Event]) -> DagExecutor:
    """The executor under test, configured as ``config`` says (events kept in ``log`` when on)."""
    return DagExecutor(
        plan,
        _run_step,
        max_concurrency=config.concurrency or n,
        step_timeout=600,
        emit=log.append if config.events else None,
    )


async def run_once(config: Config, n: int) -> Run:
    """Build a fresh plan, execute it and measure it."""
    plan = config.build(n)
    log: list[Event] = []
    executor = _executor(plan, config, n, log)
    gc.collect()
    start = time.perf_counter()
    await executor.execute()
    seconds = time.perf_counter() - start
    by_id = {s.id: s for s in plan.steps}
    bad = [s.id for s in plan.steps if s.status != "completed"]
    if bad:
        raise RuntimeError(f"{len(bad)} steps did not complete, e.g. {bad[:3]}")
    dispatch = []
    for step in plan.steps:
        if step.dependencies:
            ready = max(by_id[d].completed_at or 0.0 for d in step.dependencies)
            dispatch.append(((step.started_at or 0.0) - ready) * 1e6)
    join = plan.steps[-1]
    join_us = dispatch[-1] if config.shape == "fan-out" and join.dependencies else None
    return Run(seconds, dispatch, join_us, len(log))


def peak_memory(config: Config, n: int) -> tuple[float, float]:
    """MiB traced while building the plan, and tracemalloc's peak during executor construction and ``execute()``."""
    tracemalloc.start()
    plan = config.build(n)
    plan_mib = tracemalloc.get_traced_memory()[0] / 2**20
    tracemalloc.stop()
    log: list[Event] = []

    async def execute() -> None:
        executor = _executor(plan, config, n, log)
        await executor.execute()

    gc.collect()
    tracemalloc.start()
    asyncio.run(execute())
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return plan_mib, peak


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    """Measure every configuration at every size and print the tables."""
    print(
        f"dagmagic executor overhead benchmark - {datetime.now(UTC):%Y-%m-%d %H:%M} UTC - Python "
        f"{sys.version.split()[0]} on {platform.system()} {platform.machine()}, {os.cpu_count()} cores, "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    print("Zero-latency steps (run_step returns at once). c=steps: max_concurrency = number of steps.")
    print()
    began = time.perf_counter()
    for config in CONFIGS:  # warm-up: first-call costs (imports, caches, allocator growth) are not measured
        asyncio.run(run_once(config, SIZES[0]))
    per_step: dict[tuple[str, int], float] = {}
    p50s: dict[tuple[str, int], float] = {}
    joins: dict[int, list[float]] = {n: [] for n in SIZES}
    header = f"{'configuration':<30}{'steps':>7}{'us/step':>10}{'dispatch p50':>14}{'p99':>10}{'join':>10}{'events':>8}"
    print(header)
    print("-" * len(header))
    for config in CONFIGS:
        by_size: dict[int, list[Run]] = {n: [] for n in SIZES}
        for _ in range(REPEATS):
            for n in SIZES:
                by_size[n].append(asyncio.run(run_once(config, n)))
        for n, runs in by_size.items():
            us = statistics.median(r.seconds for r in runs) / n * 1e6
            per_step[(config.label(), n)] = us
            dispatch = [d for r in runs for d in r.dispatch_us]
            p50, p99 = _percentile(dispatch, 0.5), _percentile(dispatch, 0.99)
            p50s[(config.label(), n)] = p50
            join_runs = [r.join_dispatch_us for r in runs if r.join_dispatch_us is not None]
            join = f"{statistics.median(join_runs):>10.0f}" if join_runs else f"{'-':>10}"
            if join_runs:
                joins[n].append(statistics.median(join_runs))
            print(f"{config.label():<30}{n:>7}{us:>10.1f}{p50:>14.0f}{p99:>10.0f}{join}{runs[0].events:>8}")
    print()
    print("us/step: median wall time of execute() / steps. dispatch: started_at - max(completed_at of deps), us,")
    print("over every step with dependencies (all repeats). join: the fan-out's join step alone (median). In a")
    print("fan-out, p50/p99 include each sibling's wait behind the others on the one event-loop thread: with k")
    print("steps ready at once, the i-th starts after the i-1 before it have run (a throughput figure).")
    print()

    print(f"{'linearity (us/step at 10k / at 1k)':<45}{'ratio':>8}")
    print("-" * 53)
    worst_linearity = 0.0
    for config in CONFIGS:
        ratio = per_step[(config.label(), SIZES[1])] / per_step[(config.label(), SIZES[0])]
        worst_linearity = max(worst_linearity, ratio)
        print(f"{config.label():<45}{ratio:>8.2f}")
    print()

    print(f"{'peak memory, 1,000 steps, events on':<45}{'plan MiB':>10}{'execute peak MiB':>18}")
    print("-" * 73)
    for config in CONFIGS:
        if config.events and not (config.shape == "chain" and config.concurrency is not None):
            plan_mib, peak = peak_memory(config, 1_000)
            print(f"{config.label():<45}{plan_mib:>10.2f}{peak:>18.2f}")
    print("plan MiB: the ExecutionPlan itself; execute peak: tracemalloc peak from DagExecutor() to the end of")
    print("execute() (tasks, events kept by emit, bookkeeping), on top of the plan.")
    print()

    def verdict(ok: bool) -> str:
        return "met" if ok else "MISSED"

    worst_us_on = max(us for (label, _), us in per_step.items() if "events on" in label)
    chain_p50 = max(p50 for (label, _), p50 in p50s.items() if label.startswith("chain"))
    fan_p50 = max(p50 for (label, _), p50 in p50s.items() if label.startswith("fan-out"))
    join_by_size = {n: max(values) for n, values in joins.items()}
    worst_join = max(join_by_size.values())
    limit = TARGET_DISPATCH_P50_US
    print("Targets:")
    print(
        f"  overhead <= 1 ms/step, events on: worst {worst_us_on:.1f} us/step "
        f"-> {verdict(worst_us_on <= TARGET_US_PER_STEP)}"
    )
    print(f"  dispatch p50 <= 1 ms, chains (every step): worst {chain_p50:.0f} us -> {verdict(chain_p50 <= limit)}")
    joins_text = ", ".join(f"{n:,} steps {us:.0f} us" for n, us in join_by_size.items())
    print(f"  dispatch <= 1 ms, fan-out join (worst run median): {joins_text} -> {verdict(worst_join <= limit)}")
    print(
        f"  dispatch p50 <= 1 ms, fan-out siblings (every step): worst {fan_p50:.0f} us -> {verdict(fan_p50 <= limit)}"
        " (steps ready together queue, see above)"
    )
    print(
        f"  linear growth (10k vs 1k per step <= {TARGET_LINEARITY}): worst {worst_linearity:.2f} "
        f"-> {verdict(worst_linearity <= TARGET_LINEARITY)}"
    )
    print(f"Total benchmark time: {time.perf_counter() - began:.1f}s")


if __name__ == "__main__":
    main()
