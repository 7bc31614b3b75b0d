"""Replay benchmark: what answering a run's calls from its recording costs, and how big a cassette is.

One scripted run (a plan of eight steps, four of them calling a tool first, a verdict that leaves the answer to
a streamed synthesis) at zero latency is the baseline. Measured in one run, median of the repeats:

- replay overhead per call: (wall time of the run replayed with ``replay(run)`` - wall time of the scripted
  run) / calls; and the same through a cassette file (``record=none``);
- cassette size: bytes of the run's cassette, per run and per call (JSON lines, as committed beside a notebook);
- matching at scale: a request looked up among 10,000 recorded calls (the time to find its key).

Run: ``python benchmarks/replay_overhead.py``. It prints numbers; it asserts nothing about time.
"""

from __future__ import annotations

import os

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"  # never fetch litellm's price list from the network

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dagmagic import DagSession, DagSettings, ModelRegistry, tool
from dagmagic.llm.cassette import Cassette, Interaction, request_key
from dagmagic.llm.protocol import ChatRequest
from dagmagic.llm.replay import ReplayLLM, forget_cassettes
from dagmagic.testing import ScriptedLLM, ToolCall, recording_of, replay

REPEATS = 15
GOAL = "Compare eight cities by population and say which is largest"
CITIES = ["Paris", "Berlin", "Rome", "Madrid", "Vienna", "Warsaw", "Prague", "Lisbon"]


@tool
def lookup(city: str) -> str:
    """The population of a city."""
    return f"{len(city)}.0 million"


def provider() -> ScriptedLLM:
    """The scripted 'provider': eight parallel steps, every other one calling the tool first."""
    steps = [{"id": f"s{i + 1}", "task": f"population of {city}"} for i, city in enumerate(CITIES)]
    script: dict[str, Any] = {
        "plan": [{"steps": steps}],
        "analyze": [{"achieved": False, "confidence": 0.9, "reasoning": "every figure is known"}],
        "synthesize": [["Berlin ", "is the ", "largest ", "of the eight."]],
    }
    for i, city in enumerate(CITIES):
        replies: list[Any] = [f"{city} has {len(city)}.0 million people."]
        if i % 2 == 0:
            replies.insert(0, ToolCall("lookup", {"city": city}))
        script[f"step:s{i + 1}"] = replies
    return ScriptedLLM(script)


def settings(**extra: Any) -> DagSettings:
    """Room for the eight steps, all at once; no run store (its writes are not what is measured)."""
    return DagSettings(store="none", plan_max_steps=8, max_concurrency=8, **extra)


async def timed(models: ModelRegistry, **extra: Any) -> tuple[float, Any]:
    """Seconds one run of the goal takes with ``models``, and the run."""
    session = DagSession(models, settings(**extra), tools=[lookup])
    started = time.perf_counter()
    run = await session.run(GOAL)
    return time.perf_counter() - started, run


async def main() -> None:
    """Measure and print."""
    _, recorded = await timed(ModelRegistry().register("m", provider(), roles=["smart"]))
    assert recorded.status == "done", recorded.error
    calls = len(recorded.calls)
    folder = Path(tempfile.mkdtemp(prefix="dagmagic-replay-bench-"))
    cassette_path = recording_of(recorded).save(folder / "run.jsonl")

    scripted: list[float] = []
    replayed: list[float] = []
    from_file: list[float] = []
    for _ in range(REPEATS):  # the three alternate, so background load hits each alike
        seconds, _run = await timed(ModelRegistry().register("m", provider(), roles=["smart"]))
        scripted.append(seconds)
        seconds, run = await timed(replay(recorded))
        assert run.answer == recorded.answer, run.error
        replayed.append(seconds)
        forget_cassettes()
        seconds, run = await timed(
            ModelRegistry().register("m", provider(), roles=["smart"]), cassette=str(cassette_path), record="none"
        )
        assert run.answer == recorded.answer, run.error
        from_file.append(seconds)

    base = statistics.median(scripted)
    size = cassette_path.stat().st_size
    print(f"run: {calls} calls ({len(CITIES)} steps, half with a tool call), {REPEATS} repeats, median wall time")
    print(f"  scripted (ScriptedLLM, zero latency) {base * 1000:8.1f} ms")
    for name, times in (("replay(run)", replayed), ("cassette, record=none", from_file)):
        median = statistics.median(times)
        per_call = (median - base) / calls * 1000
        print(f"  {name:34} {median * 1000:8.1f} ms   overhead per call {per_call:+.2f} ms ({median / base:.2f}x)")
    print(f"cassette: {size:,} bytes per run, {size / calls:,.0f} bytes per call ({cassette_path})")

    # matching at scale: one pool of 10,000 recorded calls; a lookup of the last one
    template = recording_of(recorded).interactions
    many = [
        item.model_copy(update={"step_id": f"x{n}"}) for n in range(10_000 // len(template) + 1) for item in template
    ]
    big = Cassette(many[:10_000], recording_of(recorded).models.values())
    target = big.interactions[-1]
    request = ChatRequest(
        model="m", messages=target.messages, purpose=target.purpose, step_id=target.step_id,
        tools=target.tools, tool_choice=target.tool_choice, response_format=target.response_format,
    )  # fmt: skip
    llm = ReplayLLM(big, "m")
    started = time.perf_counter()
    llm._pool.take(Interaction.of("m", request, stream=False, latency=0).key)  # builds the index once
    first = time.perf_counter() - started
    lookups = []
    for _ in range(200):
        started = time.perf_counter()
        key = request_key("m", request)
        llm._pool.recorded(key)
        lookups.append(time.perf_counter() - started)
    print(
        f"matching among 10,000 recorded calls: index built in {first * 1000:.0f} ms (once), then "
        f"{statistics.median(lookups) * 1e6:.0f} us per lookup (key of the request included)"
    )


if __name__ == "__main__":
    asyncio.run(main())
