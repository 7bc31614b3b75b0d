"""Streaming-plan parsing benchmark: the cost of ``PlanStream`` per character of plan, at three plan sizes.

Plans of about 20,000, 200,000 and 1,000,000 characters (``{"steps": [...]}`` with realistic steps, most of
them depending on earlier ones) are streamed as JSON text in pieces of 4 characters (about one token each)
by a ``ScriptedLLM`` with no latency, so all the time measured is the stream's own plus dagmagic's parsing.
Reported per size (median of the repeats):

- ms per 1,000 characters: wall time of ``PlanStream.run`` / characters * 1,000;
- stream only: the same pieces read from the same model without parsing, for scale;
- worst piece: the longest the reader spent on one piece, which is how long the event loop was blocked at
  worst while the plan streamed (a Stop or a Cancel waits that long);
- final parse: from the end of the stream to the end of ``PlanStream.run``, where the whole reply is parsed
  once (``recover_steps``);
- linearity: ms per 1,000 characters at 1M / at 20k (1.0 = linear; a parser that re-reads the whole reply on
  every piece grows with the size).

Run: ``python benchmarks/plan_stream_parsing.py`` (sizes in characters may follow, e.g. ``20000 200000``).
It prints numbers; it asserts nothing about time.
"""

from __future__ import annotations

import os

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"  # never fetch litellm's price list from the network

import asyncio
import json
import platform
import statistics
import sys
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

from dagmagic.engine.calls.plan_stream import PlanStream
from dagmagic.engine.calls.planner import Planner
from dagmagic.llm import ChatModel, ModelRegistry
from dagmagic.llm.protocol import Capabilities, ChatRequest, ChatResponse, StreamChunk
from dagmagic.models import PlanStep
from dagmagic.settings import DagSettings
from dagmagic.testing import ScriptedLLM

SIZES = (20_000, 200_000, 1_000_000)
CHARS_PER_PIECE = 4
REPEATS = 3
TASKS = (
    "Search the population of {place} in 2023 and note the source",
    "Look up the area of {place} in square kilometres",
    "Compute the population density of {place} from the two figures above",
    'Compare {place} with its neighbours and quote the "official" figures',
)
PLACES = ("Norway", "Sweden", "Finland", "Denmark", "Iceland", "Estonia", "Latvia", "Lithuania")


def plan_text(size: int) -> str:
    """A plan of about ``size`` characters of JSON: each step needs one or two earlier ones."""
    steps: list[dict[str, Any]] = []
    length = len('{"steps": []}')
    while length < size:
        i = len(steps)
        step: dict[str, Any] = {"id": f"s{i + 1}", "task": TASKS[i % 4].format(place=PLACES[i % 8])}
        if i % 4:
            step["dependencies"] = [f"s{i}"] + ([f"s{i - 1}"] if i % 4 == 3 else [])
        if i % 4 == 0:
            step["tool_hint"] = "search"
        steps.append(step)
        length += len(json.dumps(step, ensure_ascii=False)) + 2
    return json.dumps({"steps": steps}, ensure_ascii=False)


class TimedBackend:
    """A ``ScriptedLLM`` that notes the longest its reader spent on one piece, and when the stream ended."""

    def __init__(self, inner: ScriptedLLM) -> None:
        self.inner = inner
        self.worst_piece = 0.0
        self.ended = 0.0

    def capabilities(self, model: str) -> Capabilities:
        """The inner model's capabilities."""
        return self.inner.capabilities(model)

    def context_window(self, model: str) -> int | None:
        """The inner model's context window."""
        return self.inner.context_window(model)

    async def complete(self, request: ChatRequest) -> ChatResponse:
        """The inner model's reply."""
        return await self.inner.complete(request)

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamChunk]:
        """The inner model's pieces; from handing one over to being asked for the next is the reader's work."""
        async for chunk in self.inner.stream(request):
            handed = time.perf_counter()
            yield chunk
            self.worst_piece = max(self.worst_piece, time.perf_counter() - handed)
        self.ended = time.perf_counter()


def planner_for(text: str) -> tuple[Planner, TimedBackend]:
    """A planner whose model streams ``text`` in pieces of CHARS_PER_PIECE characters, as JSON text."""
    pieces = [text[i : i + CHARS_PER_PIECE] for i in range(0, len(text), CHARS_PER_PIECE)]
    backend = TimedBackend(ScriptedLLM({"plan": [pieces]}, capabilities=("json_mode", "stream")))
    settings = DagSettings(store="none", plan_max_steps=100_000)  # every step is handed over
    model = ChatModel(ModelRegistry().register("planner", backend).get("planner"), settings=settings)
    return Planner(model, settings), backend


async def parse_once(text: str) -> tuple[float, float, float, int]:
    """(seconds of ``PlanStream.run``, the reader's worst piece, seconds after the stream ended, steps)."""
    planner, backend = planner_for(text)
    started: list[PlanStep] = []
    began = time.perf_counter()
    streamed = await PlanStream(planner, started.append).run("goal", round=1)
    ended = time.perf_counter()
    # every step depends only on earlier ones, so each one is handed over while the plan streams
    assert streamed.readable and len(started) >= len(streamed.drafts) - 1, "steps were held back"
    return ended - began, backend.worst_piece, ended - backend.ended, len(streamed.drafts)


async def stream_only(text: str) -> float:
    """Seconds to read the same pieces from the same model without parsing them."""
    planner, _ = planner_for(text)
    began = time.perf_counter()
    async for _ in planner.model.stream(planner.messages("goal"), purpose="plan"):
        pass
    return time.perf_counter() - began


def main(sizes: tuple[int, ...]) -> None:
    """Measure every size and print the table and the linearity ratio."""
    print(
        f"dagmagic streaming-plan parsing benchmark - {datetime.now(UTC):%Y-%m-%d %H:%M} UTC - Python "
        f"{sys.version.split()[0]} on {platform.system()} {platform.machine()}, {os.cpu_count()} cores, "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    print(f"JSON text in pieces of {CHARS_PER_PIECE} characters, no latency; median of {REPEATS} runs.")
    print()
    began = time.perf_counter()
    asyncio.run(parse_once(plan_text(2_000)))  # warm-up: imports and first-call costs are not measured
    header = (
        f"{'characters':>11}{'steps':>7}{'seconds':>9}{'ms/1k chars':>13}{'stream only':>13}"
        f"{'worst piece':>13}{'final parse':>13}"
    )
    print(header)
    print("-" * len(header))
    per_k: dict[int, float] = {}
    for size in sizes:
        text = plan_text(size)
        runs = [asyncio.run(parse_once(text)) for _ in range(REPEATS)]
        seconds = statistics.median(run[0] for run in runs)
        worst = max(run[1] for run in runs)
        final = statistics.median(run[2] for run in runs)
        baseline = statistics.median(asyncio.run(stream_only(text)) for _ in range(REPEATS))
        per_k[size] = seconds / len(text) * 1e6
        print(
            f"{len(text):>11,}{runs[0][3]:>7}{seconds:>9.2f}{per_k[size]:>13.3f}"
            f"{baseline / len(text) * 1e6:>13.3f}{worst * 1000:>10.1f} ms{final * 1000:>10.0f} ms"
        )
    print()
    print("ms/1k chars: PlanStream.run wall time per 1,000 characters; stream only: the same pieces read without")
    print("parsing; worst piece: the longest the reader held the event loop on one piece (all runs, garbage")
    print("collection included); final parse: from the stream's end to the plan's (the whole reply, once).")
    if len(sizes) > 1:
        first, last = sizes[0], sizes[-1]
        print(f"linearity (ms/1k chars at {last:,} / at {first:,}): {per_k[last] / per_k[first]:.2f} (1.0 = linear)")
    print(f"Total benchmark time: {time.perf_counter() - began:.1f}s")


if __name__ == "__main__":
    main(tuple(int(arg) for arg in sys.argv[1:]) or SIZES)
