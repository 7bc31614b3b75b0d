"""Real-model benchmark: the real-model note's goals through ``DagSession`` against a small local model.

The model is Qwen2.5-Coder-0.5B-Instruct behind llama.cpp's OpenAI-compatible server, started with
``../shared/tools/local-model.sh start`` (the repository's sibling ``shared`` folder; it serves
``http://127.0.0.1:8765/v1``). Every role is that one model. Per goal it prints the run's status, its rounds,
its LLM calls by purpose, the wall time and the answer's first words; nothing is asserted. The model is slow
and often wrong on purpose: the figures are calls and seconds per goal, not answer quality.

Run: ``python benchmarks/real_model.py`` (minutes per goal on 2 cores; ``--goal N`` runs the N-th goal only;
``--max-tokens N`` caps every reply at N tokens, passed to the registry as litellm's ``max_tokens``: this model
sometimes writes until its context is full; ``--save DIR`` writes each run's state to ``DIR/goalN.json``).
Per goal it also counts the tool steps (a step the planner gave ``tool_args``): how many were called directly
(no model call) and how many fell back to their agent. Without the server it says so and exits.
"""

from __future__ import annotations

import os

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"  # never fetch litellm's price list from the network

import argparse
import asyncio
import platform
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from datetime import UTC, datetime

import dagmagic
from dagmagic import DagSession, DagSettings, ModelRegistry, tool

API_BASE = "http://127.0.0.1:8765/v1"
MODEL = "openai/qwen-0.5b"

GOALS = [
    "What is the capital of France and what is its population?",
    "Rank Paris, Berlin and Madrid by population, using the city_population tool.",
    "Find three prime numbers greater than 100 and check each with the is_prime tool.",
    "Write a Python function that reverses the words of a sentence.",
    "What were the main causes of the French Revolution?",
    "Which has more people, France or Germany? Use the population tool.",
]
"""The real-model note's five goals, then issue 22's lookup goal."""

CITIES = {"paris": 2_102_650, "berlin": 3_878_100, "madrid": 3_332_035, "rome": 2_746_984, "london": 8_945_309}
COUNTRIES = {"france": 68_401_997, "germany": 84_482_267, "spain": 48_610_458, "italy": 58_850_717}


@tool
def city_population(city: str) -> int:
    """The population of a city (Paris, Berlin, Madrid, Rome, London).

    Args:
        city: The city's English name.
    """
    try:
        return CITIES[city.strip().lower()]
    except KeyError:
        raise ValueError(f"unknown city {city!r}; known: {', '.join(c.title() for c in CITIES)}") from None


@tool
def population(place: str) -> int:
    """The population of a country or a city (France, Germany, Spain, Italy; Paris, Berlin, Madrid, Rome, London).

    Args:
        place: The country's or city's English name.
    """
    key = place.strip().lower()
    if key in COUNTRIES:
        return COUNTRIES[key]
    if key in CITIES:
        return CITIES[key]
    known = ", ".join(p.title() for p in [*COUNTRIES, *CITIES])
    raise ValueError(f"unknown place {place!r}; known: {known}")


@tool
def is_prime(n: int) -> bool:
    """Whether n is a prime number.

    Args:
        n: The whole number to check.
    """
    if n < 2:
        return False
    return all(n % d for d in range(2, int(n**0.5) + 1))


def server_up() -> bool:
    """Whether the local model's server answers."""
    try:
        with urllib.request.urlopen(f"{API_BASE}/models", timeout=5):
            return True
    except (urllib.error.URLError, OSError):
        return False


def session(max_tokens: int | None = None) -> DagSession:
    """One model for every role, the run store off, as in the real-model note (replies capped when asked)."""
    cap = {"max_tokens": max_tokens} if max_tokens else {}
    registry = ModelRegistry().register(
        "qwen",
        MODEL,
        api_base=API_BASE,
        api_key="none",
        capabilities=("tool_call", "json_mode", "stream"),
        context_window=8192,
        **cap,
    )
    settings = DagSettings(store="none", llm_timeout=600, max_replan_rounds=2)
    return DagSession(registry, settings, tools=[city_population, population, is_prime])


def tool_steps(state) -> tuple[int, int, int]:
    """(tool steps, called directly, fell back to their agent) over every round: a tool step is a step with
    ``tool_args``; called directly when its turn-0 call (the executor's own) returned without an error.
    """
    total = direct = fallback = 0
    for record in state.rounds:
        for step in record.plan.steps:
            if getattr(step, "tool_args", None) is None:
                continue
            total += 1
            own = next((call for call in step.tool_calls if call.turn == 0), None)
            agent_turns = any((call.turn or 0) > 0 for call in step.tool_calls) or any(
                call.step_id == step.id and call.round == record.index and call.purpose == "step"
                for call in state.calls
            )
            if own is not None and own.error is None and not agent_turns:
                direct += 1
            elif own is not None or agent_turns:
                fallback += 1
    return total, direct, fallback


async def run_goal(number: int, goal: str, max_tokens: int | None, save: str | None) -> None:
    """Run one goal in a fresh session and print its line."""
    start = time.perf_counter()
    run = await session(max_tokens).run(goal)
    wall = time.perf_counter() - start
    state = run.state
    purposes = Counter(call.purpose for call in state.calls)
    by_purpose = ", ".join(f"{purpose} {count}" for purpose, count in purposes.most_common())
    seconds: dict[str, float] = {}
    for call in state.calls:
        seconds[call.purpose] = seconds.get(call.purpose, 0.0) + call.latency
    by_seconds = ", ".join(f"{purpose} {secs:.0f}s" for purpose, secs in sorted(seconds.items(), key=lambda x: -x[1]))
    usage = state.usage
    answer = " ".join((state.answer or state.error or "").split())
    print(f"[{number}] {goal}")
    print(
        f"    status {state.status}, rounds {len(state.rounds)}, LLM calls {len(state.calls)} ({by_purpose}), "
        f"wall {wall:.0f}s"
    )
    print(f"    call seconds: {by_seconds}; tokens {usage.input_tokens} in, {usage.output_tokens} out")
    total, direct, fallback = tool_steps(state)
    steps = sum(len(record.plan.steps) for record in state.rounds)
    print(
        f"    steps {steps}: tool steps {total} ({direct} called directly, {fallback} fell back to their agent, "
        f"{total - direct - fallback} not run)"
    )
    print(f"    answer: {answer[:160]!r}", flush=True)
    if save:
        os.makedirs(save, exist_ok=True)
        with open(os.path.join(save, f"goal{number}.json"), "w") as out:
            out.write(state.model_dump_json(indent=1))


async def main(only: int | None, max_tokens: int | None = None, save: str | None = None) -> None:
    """Every goal in turn (or the one asked for)."""
    print(
        f"dagmagic real-model benchmark - {datetime.now(UTC):%Y-%m-%d %H:%M} UTC - Python {sys.version.split()[0]} "
        f"on {platform.system()} {platform.machine()}, {os.cpu_count()} cores, load average "
        f"{os.getloadavg()[0]:.2f}; model {MODEL} at {API_BASE}; max_tokens {max_tokens or 'none'}; "
        f"dagmagic from {os.path.dirname(os.path.dirname(dagmagic.__file__))}",
        flush=True,
    )
    total = time.perf_counter()
    for number, goal in enumerate(GOALS, 1):
        if only is None or number == only:
            await run_goal(number, goal, max_tokens, save)
    print(f"Total benchmark time: {time.perf_counter() - total:.0f}s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--goal", type=int, choices=range(1, len(GOALS) + 1), help="run only this goal (1-based)")
    parser.add_argument("--max-tokens", type=int, help="cap every reply at N tokens (litellm's max_tokens)")
    parser.add_argument("--save", metavar="DIR", help="write each run's state to DIR/goalN.json")
    arguments = parser.parse_args()
    if not server_up():
        print(
            f"real_model.py: no model server at {API_BASE}; start one with ../shared/tools/local-model.sh start "
            "(see its header), then run this again. Skipped."
        )
        sys.exit(0)
    asyncio.run(main(arguments.goal, arguments.max_tokens, arguments.save))
