"""Scheduler benchmark: makespan / critical path of LLMCompiler-style DAGs under five executors, in one run.

Every step is simulated by ``asyncio.sleep(latency)``; the executors compared side by side are dagmagic's
``DagExecutor``, a sequential one-at-a-time loop (ReAct-like), a level-by-level barrier (superstep), a 10 ms
polling dispatcher and LangGraph (when installed). Each shape runs 3 times per executor; the median is
reported. A ratio of 1.00 means the executor finished exactly when the critical path allows.

Run: ``python benchmarks/scheduler.py``. It prints numbers; it asserts nothing about time.
"""

from __future__ import annotations

import os

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"  # never fetch litellm's price list from the network

import asyncio
import math
import operator
import platform
import random
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, TypedDict

from dagmagic.engine.steps.executor import DagExecutor
from dagmagic.models import ExecutionPlan, PlanStep

REPEATS = 3
MAX_CONCURRENCY = 8
POLL_INTERVAL = 0.01
TARGET = 1.05


@dataclass(frozen=True)
class Shape:
    """A DAG with a simulated latency (seconds) per step."""

    name: str
    deps: dict[str, list[str]]
    latency: dict[str, float]

    def plan(self) -> ExecutionPlan:
        """A fresh plan (the executor mutates its steps)."""
        steps = [PlanStep(id=sid, task=f"simulated {sid}", dependencies=list(d)) for sid, d in self.deps.items()]
        return ExecutionPlan(goal=self.name, steps=steps)

    def layers(self) -> list[list[str]]:
        """Topological levels, as ``ExecutionPlan.layers()`` computes them."""
        return self.plan().layers()

    def order(self) -> list[str]:
        """One topological order: level by level, ids sorted within a level."""
        return [sid for layer in self.layers() for sid in layer]

    def critical_path(self) -> float:
        """The sum of latencies along the longest path: no executor can finish sooner."""
        finish: dict[str, float] = {}
        for sid in self.order():
            finish[sid] = max((finish[d] for d in self.deps[sid]), default=0.0) + self.latency[sid]
        return max(finish.values())

    def zero(self) -> Shape:
        """The same DAG with no latency (for warm-up)."""
        return Shape(self.name, self.deps, dict.fromkeys(self.latency, 0.0))


def _shape(name: str, steps: list[tuple[str, list[str], float]]) -> Shape:
    return Shape(name, {s: d for s, d, _ in steps}, {s: lat for s, _, lat in steps})


def build_shapes() -> list[Shape]:
    """The benchmark's DAGs: the LLMCompiler paper's shapes plus a straggler and a fan-out/join."""
    rng = random.Random(20240607)
    movie = [(f"m{i}", [], round(min(0.6, max(0.05, rng.lognormvariate(math.log(0.2), 0.5))), 3)) for i in range(8)]
    return [
        _shape("HotpotQA: 2 searches -> join", [("s1", [], 0.30), ("s2", [], 0.45), ("join", ["s1", "s2"], 0.15)]),
        _shape("Movie rec.: 8 parallel -> join", [*movie, ("join", [m[0] for m in movie], 0.10)]),
        _shape(
            "ParallelQA A: 3 -> add -> compare",
            [
                ("s1", [], 0.30),
                ("s2", [], 0.20),
                ("s3", [], 0.50),
                ("s4_add", ["s1", "s2"], 0.05),
                ("s5_cmp", ["s4_add", "s3"], 0.10),
            ],
        ),
        _shape(
            "ParallelQA B: 4 -> 2 sums -> compare",
            [
                ("s1", [], 0.20),
                ("s2", [], 0.50),
                ("s3", [], 0.30),
                ("s4", [], 0.25),
                ("s5_sum", ["s1", "s2"], 0.05),
                ("s6_sum", ["s3", "s4"], 0.05),
                ("s7_cmp", ["s5_sum", "s6_sum"], 0.10),
            ],
        ),
        _shape(
            "Straggler: fast->a->b->c | slow",
            [("fast", [], 0.05), ("a", ["fast"], 0.15), ("b", ["a"], 0.15), ("c", ["b"], 0.15), ("slow", [], 0.60)],
        ),
        _shape(
            "Fan-out 4, depth 3 (6 steps)",
            [
                ("s1", [], 0.10),
                ("s2", ["s1"], 0.15),
                ("s3", ["s1"], 0.30),
                ("s4", ["s1"], 0.20),
                ("s5", ["s1"], 0.45),
                ("s6", ["s2", "s3", "s4", "s5"], 0.10),
            ],
        ),
    ]


async def _sleep_step(shape: Shape, sid: str) -> str:
    await asyncio.sleep(shape.latency[sid])
    return sid


async def run_dagmagic(shape: Shape) -> float:
    """The event-driven DagExecutor of dagmagic; returns the makespan in seconds."""
    plan = shape.plan()

    async def run_step(step: PlanStep, deps: dict[str, PlanStep]) -> str:
        return await _sleep_step(shape, step.id)

    executor = DagExecutor(plan, run_step, max_concurrency=MAX_CONCURRENCY, step_timeout=60)
    start = time.perf_counter()
    await executor.execute()
    elapsed = time.perf_counter() - start
    bad = [s.id for s in plan.steps if s.status != "completed"]
    if bad:
        raise RuntimeError(f"dagmagic did not complete {bad}")
    return elapsed


async def run_sequential(shape: Shape) -> float:
    """One step at a time in topological order (a ReAct-like agent)."""
    start = time.perf_counter()
    for sid in shape.order():
        await _sleep_step(shape, sid)
    return time.perf_counter() - start


async def run_barrier(shape: Shape) -> float:
    """Level by level: every step of a level at once, the next level after all of them finish."""
    start = time.perf_counter()
    for layer in shape.layers():
        await asyncio.gather(*(_sleep_step(shape, sid) for sid in layer))
    return time.perf_counter() - start


async def run_polling(shape: Shape) -> float:
    """A dispatcher that wakes every 10 ms, collects finished steps and launches the ready ones."""
    pending = set(shape.deps)
    running: dict[str, asyncio.Task[str]] = {}
    done: set[str] = set()
    start = time.perf_counter()
    while True:
        for sid, task in list(running.items()):
            if task.done():
                task.result()
                done.add(sid)
                del running[sid]
        if len(done) == len(shape.deps):
            return time.perf_counter() - start
        for sid in sorted(pending):
            if all(d in done for d in shape.deps[sid]):
                pending.discard(sid)
                running[sid] = asyncio.create_task(_sleep_step(shape, sid))
        await asyncio.sleep(POLL_INTERVAL)


class _GraphState(TypedDict):
    latency: dict[str, float]
    log: Annotated[list[str], operator.add]


def langgraph_runner(shape: Shape) -> Callable[[Shape], Awaitable[float]] | None:
    """A LangGraph ``StateGraph`` of the same DAG (one node per step), or None when LangGraph is not installed.

    Each node sleeps its step's latency, read from the graph state, and appends its id to the ``log``.

    A step with one dependency gets ``add_edge(dep, step)``; a step with several gets ``add_edge([deps], step)``,
    LangGraph's join that waits for ALL of them (separate single edges would fire it once per parent). Roots
    hang off START, leaves go to END. The graph is compiled once, outside the timed region.
    """
    try:
        from langgraph.graph import END, START, StateGraph
    except ImportError:
        return None

    graph: Any = StateGraph(_GraphState)
    for sid in shape.deps:

        async def node(state: _GraphState, sid: str = sid) -> dict[str, list[str]]:
            await asyncio.sleep(state["latency"][sid])
            return {"log": [sid]}

        graph.add_node(sid, node)
    has_children = {d for deps in shape.deps.values() for d in deps}
    for sid, deps in shape.deps.items():
        if not deps:
            graph.add_edge(START, sid)
        elif len(deps) == 1:
            graph.add_edge(deps[0], sid)
        else:
            graph.add_edge(list(deps), sid)
        if sid not in has_children:
            graph.add_edge(sid, END)
    compiled = graph.compile()

    async def run(timed: Shape) -> float:
        start = time.perf_counter()
        state = await compiled.ainvoke({"latency": timed.latency, "log": []})
        elapsed = time.perf_counter() - start
        if sorted(state["log"]) != sorted(shape.deps):
            raise RuntimeError(f"LangGraph ran {sorted(state['log'])}, expected each of {sorted(shape.deps)} once")
        return elapsed

    return run


EXECUTORS: dict[str, Callable[[Shape], Awaitable[float]]] = {
    "dagmagic": run_dagmagic,
    "sequential": run_sequential,
    "barrier": run_barrier,
    "poll 10ms": run_polling,
}


def _langgraph_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("langgraph")
    except PackageNotFoundError:
        return "(version unknown)"


async def measure(shapes: list[Shape]) -> dict[str, dict[str, list[float]]]:
    """Makespans (seconds) per shape and executor; repeats interleave executors so drift hits all alike."""
    results: dict[str, dict[str, list[float]]] = {s.name: {} for s in shapes}
    runners: dict[str, dict[str, Callable[[Shape], Awaitable[float]]]] = {}
    for shape in shapes:
        runners[shape.name] = dict(EXECUTORS)
        graph_run = langgraph_runner(shape)
        if graph_run is not None:
            runners[shape.name]["LangGraph"] = graph_run
    for shape in shapes:  # warm-up: first-call costs (imports, caches) are not what we measure
        for run in runners[shape.name].values():
            await run(shape.zero())
    for _ in range(REPEATS):
        for shape in shapes:
            for name, run in runners[shape.name].items():
                results[shape.name].setdefault(name, []).append(await run(shape))
    return results


def report(shapes: list[Shape], results: dict[str, dict[str, list[float]]], seconds: float) -> None:
    """Print the ratio table and the target check."""
    columns = [*EXECUTORS, "LangGraph"]
    name_width = max(len(s.name) for s in shapes) + 2
    header = f"{'shape':<{name_width}}{'steps':>5}{'crit. path':>12}" + "".join(f"{c:>12}" for c in columns)
    header += f"{'dagmagic +ms':>14}"
    print(header)
    print("-" * len(header))
    dagmagic_ratios = []
    for shape in shapes:
        cp = shape.critical_path()
        row = f"{shape.name:<{name_width}}{len(shape.deps):>5}{cp:>11.3f}s"
        for column in columns:
            runs = results[shape.name].get(column)
            row += f"{statistics.median(runs) / cp:>12.3f}" if runs else f"{'n/a':>12}"
        dagmagic_ms = statistics.median(results[shape.name]["dagmagic"])
        row += f"{(dagmagic_ms - cp) * 1000:>14.1f}"
        dagmagic_ratios.append(dagmagic_ms / cp)
        print(row)
    print()
    print("Cells: median makespan over", REPEATS, "runs / critical path (1.000 = optimal).")
    print("dagmagic +ms: median makespan minus critical path, in milliseconds.")
    worst = max(dagmagic_ratios)
    verdict = "met" if worst <= TARGET else "MISSED"
    print(f"dagmagic max ratio over all shapes: {worst:.3f} (target <= {TARGET}: {verdict})")
    if any("LangGraph" in runs for runs in results.values()):
        print(f"LangGraph: {_langgraph_version()}")
    else:
        print("LangGraph: not installed (pip install -e '.[bench]')")
    print(f"Total benchmark time: {seconds:.1f}s")


def main() -> None:
    """Run every shape under every executor and print the table."""
    shapes = build_shapes()
    cores = os.cpu_count()
    print(
        f"dagmagic scheduler benchmark - {datetime.now(UTC):%Y-%m-%d %H:%M} UTC - Python {sys.version.split()[0]} "
        f"on {platform.system()} {platform.machine()}, {cores} cores, load average {os.getloadavg()[0]:.2f}; "
        f"max_concurrency={MAX_CONCURRENCY}"
    )
    movie = next(s for s in shapes if s.name.startswith("Movie"))
    latencies = ", ".join(f"{v:.3f}" for k, v in movie.latency.items() if k != "join")
    print(f"Movie rec. latencies (lognormal, seed 20240607, clipped to 0.05-0.6 s): {latencies}")
    print()
    start = time.perf_counter()
    results = asyncio.run(measure(shapes))
    report(shapes, results, time.perf_counter() - start)


if __name__ == "__main__":
    main()
