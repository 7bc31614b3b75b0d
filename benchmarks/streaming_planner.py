"""Streaming planner benchmark: steps dispatched while the plan streams, against the normal planner.

ParallelQA-shaped goals, a scripted planner that writes its plan at a realistic token rate, scripted steps
with realistic latencies. Both planners see the same reply at the same rate: the normal one gets it whole
when the last token arrives. Run: ``python benchmarks/streaming_planner.py``.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from dagmagic import DagSession, DagSettings, ModelRegistry
from dagmagic.events import LLMCallRecorded, StepStarted
from dagmagic.testing import ScriptedLLM

TOKENS_PER_SECOND = 40.0
"""A typical rate for a large hosted model writing JSON."""
CHARS_PER_PIECE = 16
"""ScriptedLLM streams a tool call's arguments in slices of this many characters (about 4 tokens)."""
REPEATS = 3

SHAPES: dict[str, dict[str, Any]] = {
    "ParallelQA 3 searches -> add -> compare": {
        "steps": [
            {"id": "s1", "task": "Search the population of Norway in 2023", "tool_hint": "search"},
            {"id": "s2", "task": "Search the population of Sweden in 2023", "tool_hint": "search"},
            {"id": "s3", "task": "Search the population of Germany in 2023", "tool_hint": "search"},
            {"id": "s4", "task": "Add the populations of Norway and Sweden", "dependencies": ["s1", "s2"]},
            {"id": "s5", "task": "Compare that sum with Germany's population", "dependencies": ["s4", "s3"]},
        ]
    },
    "ParallelQA 4 searches -> 2 sums -> compare": {
        "steps": [
            {"id": "s1", "task": "Search the area of Norway", "tool_hint": "search"},
            {"id": "s2", "task": "Search the area of Sweden", "tool_hint": "search"},
            {"id": "s3", "task": "Search the area of Finland", "tool_hint": "search"},
            {"id": "s4", "task": "Search the area of Denmark", "tool_hint": "search"},
            {"id": "s5", "task": "Add the areas of Norway and Sweden", "dependencies": ["s1", "s2"]},
            {"id": "s6", "task": "Add the areas of Finland and Denmark", "dependencies": ["s3", "s4"]},
            {"id": "s7", "task": "Compare the two sums", "dependencies": ["s5", "s6"]},
        ]
    },
}

STEP_LATENCY = {"search": 1.0, "math": 0.4}


def scripted(plan: dict[str, Any], *, streaming: bool) -> ScriptedLLM:
    """A model writing ``plan`` at TOKENS_PER_SECOND, whole (normal) or in pieces (streaming)."""
    pieces = -(-len(json.dumps(plan, ensure_ascii=False)) // CHARS_PER_PIECE)
    piece_delay = CHARS_PER_PIECE / 4 / TOKENS_PER_SECOND
    searches = {step["id"] for step in plan["steps"] if step.get("tool_hint") == "search"}

    async def step(request: Any) -> str:
        await asyncio.sleep(STEP_LATENCY["search" if request.step_id in searches else "math"])
        return f"result of {request.step_id}"

    return ScriptedLLM(
        {
            "plan": [plan],
            "step": step,
            "analyze": [{"achieved": True, "confidence": 0.9, "reasoning": "ok", "final_answer": "x"}],
            "synthesize": [["The answer."]],
        },
        # the normal planner waits for the whole reply: as long as the streamed one takes to arrive
        latency={"plan": 0.0 if streaming else pieces * piece_delay, "analyze": 0.3, "synthesize": 0.2},
        chunk_delay=piece_delay,
        capabilities=("tool_call", "json_mode", "stream") if streaming else ("tool_call", "json_mode"),
    )


async def measure(plan: dict[str, Any], *, streaming: bool) -> tuple[float, float, float]:
    """(seconds to the first started step, seconds to the whole plan, end-to-end seconds) of one run."""
    llm = scripted(plan, streaming=streaming)
    settings = DagSettings(
        store="none", domain_routing=False, citation_verification=False, max_concurrency=8, plan_max_steps=8
    )
    session = DagSession(ModelRegistry().register("planner", llm), settings)
    run = await session.run("goal")
    assert run.status == "done", run.error
    start = run.state.started_at
    first = min(e.at for e in run.events if isinstance(e, StepStarted)) - start
    (plan_call,) = [e.call for e in run.events if isinstance(e, LLMCallRecorded) and e.call.purpose == "plan"]
    planned = plan_call.started_at + plan_call.latency - start
    return first, planned, (run.state.finished_at or 0) - start


async def main() -> None:
    """Print both planners side by side for each shape."""
    print(f"Streaming planner vs normal planner at {TOKENS_PER_SECOND:g} tokens/s (median of {REPEATS} runs)\n")
    header = f"{'shape':44} {'planner':10} {'first step':>11} {'plan done':>10} {'end-to-end':>11}"
    print(header)
    print("-" * len(header))
    speedups = []
    for name, plan in SHAPES.items():
        results = {}
        for streaming in (False, True):
            runs = [await measure(plan, streaming=streaming) for _ in range(REPEATS)]
            results[streaming] = tuple(statistics.median(values) for values in zip(*runs, strict=True))
            first, planned, total = results[streaming]
            label = "streaming" if streaming else "normal"
            print(f"{name:44} {label:10} {first:10.2f}s {planned:9.2f}s {total:10.2f}s")
        speedup = results[False][2] / results[True][2]
        speedups.append(speedup)
        before_plan = results[True][0] < results[True][1]
        print(f"{'':44} speed-up {speedup:.2f}x; first step before the plan finished: {before_plan}\n")
    print(f"smallest end-to-end speed-up: {min(speedups):.2f}x (target >= 1.2x)")


if __name__ == "__main__":
    asyncio.run(main())
    sys.exit(0)
