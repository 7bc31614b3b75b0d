"""Response cache lookup time: 1,000 cached requests of a real run's size, looked up again (hits) and not (misses).

Each request has a system prompt of ~2,000 characters and a user message of ~6,000 (a step's task with earlier
results), a third of them with two tool schemas; each reply is ~1,500 characters, a third of them a tool call.
Reported, as the mean over ``REQUESTS`` requests of ``ROUNDS`` rounds (the median round):

- key: ``request_key`` (the canonical JSON and its sha256);
- lookup, hit / miss: key and ``ResponseCache.get`` (read on the caller's thread, the reply parsed);
- ``CachingBackend.complete``, hit: everything a hit costs at the backend boundary (the key, the lookup, the reply
  marked cached);
- ``ChatModel.chat`` through the cache (hit) vs straight to a zero-latency ``ScriptedLLM``: what a hit costs
  beside a call that costs nothing at all;
- store: ``ResponseCache.put`` (in the worker thread, as a miss stores its answer), per request;
- the cache file, and with its WAL, after the 1,000 requests.

Run: ``python benchmarks/cache_lookup.py``. It prints numbers; it asserts nothing about time.
"""

from __future__ import annotations

import os

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"  # never fetch litellm's price list from the network

import asyncio
import platform
import random
import statistics
import string
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dagmagic.llm import ChatModel, ChatRequest, ChatResponse, ModelRegistry, ToolCallData
from dagmagic.llm.cache import CachingBackend, ResponseCache, request_key
from dagmagic.testing import ScriptedLLM

REQUESTS = 1_000
ROUNDS = 5
SYSTEM_CHARS = 2_000
USER_CHARS = 6_000
REPLY_CHARS = 1_500
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name} the web for a query and return the top results with their addresses",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
        },
    }
    for name in ("search", "fetch")
]


def prose(rng: random.Random, chars: int) -> str:
    """Words of random letters, ``chars`` characters in all (no two requests alike)."""
    words: list[str] = []
    length = 0
    while length < chars:
        word = "".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 9)))
        words.append(word)
        length += len(word) + 1
    return " ".join(words)[:chars]


def requests(rng: random.Random, count: int) -> list[ChatRequest]:
    """``count`` step requests of a real run's size."""
    system = prose(rng, SYSTEM_CHARS)
    return [
        ChatRequest(
            model="openai/gpt-4.1-mini",
            messages=[{"role": "system", "content": system}, {"role": "user", "content": prose(rng, USER_CHARS)}],
            tools=TOOLS if number % 3 == 0 else None,
            temperature=0.2,
            purpose="step",
            step_id=f"s{number}",
            options={"api_key": "sk-benchmark-not-a-key-000000"},
        )
        for number in range(count)
    ]


def reply(rng: random.Random, number: int) -> ChatResponse:
    """A reply of ``REPLY_CHARS`` characters, a third of them a tool call."""
    if number % 3 == 0:
        arguments = '{"query": "' + prose(rng, REPLY_CHARS - 14) + '"}'
        return ChatResponse(
            tool_calls=[ToolCallData(id=f"call_{number}", name="search", arguments=arguments)],
            input_tokens=2_100,
            output_tokens=380,
            cost=0.0012,
            finish_reason="tool_calls",
        )
    return ChatResponse(
        content=prose(rng, REPLY_CHARS), input_tokens=2_000, output_tokens=375, cost=0.0011, finish_reason="stop"
    )


def mean_microseconds(action: Callable[[Any], object], items: list[Any]) -> float:
    """The mean time of ``action(item)`` over ``items``, in microseconds."""
    started = time.perf_counter()
    for item in items:
        action(item)
    return (time.perf_counter() - started) / len(items) * 1e6


async def mean_microseconds_async(action: Callable[[Any], Awaitable[object]], items: list[Any]) -> float:
    """The mean time of ``await action(item)`` over ``items``, in microseconds."""
    started = time.perf_counter()
    for item in items:
        await action(item)
    return (time.perf_counter() - started) / len(items) * 1e6


async def measure(folder: Path) -> dict[str, float]:
    """One round: a fresh cache filled with ``REQUESTS`` replies, then every lookup timed."""
    rng = random.Random(7)
    cached = requests(rng, REQUESTS)
    missing = requests(rng, REQUESTS)
    replies = [reply(rng, number) for number in range(REQUESTS)]
    path = folder / "cache.sqlite"
    cache = ResponseCache(path)
    try:
        keys = [request_key(request) for request in cached]
        started = time.perf_counter()
        for key, request, response in zip(keys, cached, replies, strict=True):
            await asyncio.to_thread(cache.put, key, request.model, response)
        store = (time.perf_counter() - started) / REQUESTS * 1e6
        assert len(cache) == REQUESTS
        backend = CachingBackend(ScriptedLLM({"*": ["never asked"]}), cache)
        scripted = ScriptedLLM({"*": ["x" * REPLY_CHARS]})
        straight = ChatModel(ModelRegistry().register("m", scripted).get("m"))
        model = cached[0].model  # a backend's entry is asked for by its name: the model the replies were stored for
        through = ChatModel(ModelRegistry().register(model, backend).get(model))
        hit_messages = [request.messages for request in cached]
        # ChatModel sends no tools here, so hits need requests stored without them: the ones not a third
        plain = [request for number, request in enumerate(cached) if number % 3]
        results = {
            "key": mean_microseconds(request_key, cached),
            "lookup, hit": mean_microseconds(lambda request: cache.get(request_key(request)), cached),
            "lookup, miss": mean_microseconds(lambda request: cache.get(request_key(request)), missing),
            "CachingBackend.complete, hit": await mean_microseconds_async(backend.complete, cached),
            "ChatModel.chat, no cache (zero-latency ScriptedLLM)": await mean_microseconds_async(
                lambda messages: straight.chat(messages, purpose="step", temperature=0.2), hit_messages
            ),
            "ChatModel.chat, cache hit": await mean_microseconds_async(
                lambda request: through.chat(request.messages, purpose="step", temperature=0.2), plain
            ),
            "store (put, in the worker thread)": store,
            "file MB": path.stat().st_size / 1e6,
            "file and its WAL MB": sum(p.stat().st_size for p in folder.glob("cache.sqlite*")) / 1e6,
        }
        assert cache.get(request_key(missing[0])) is None
        assert all([(await backend.complete(request)).cached for request in cached[:10]])
        assert len(cache) == REQUESTS  # every ChatModel.chat above was a hit: nothing was added
        return results
    finally:
        cache.close()


def main() -> None:
    """Run ``ROUNDS`` rounds and print the median of each figure."""
    print(
        f"dagmagic response cache benchmark - {datetime.now(UTC):%Y-%m-%d %H:%M} UTC - Python "
        f"{platform.python_version()} on {platform.system()} {platform.machine()}, {os.cpu_count()} cores, "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    print(
        f"{REQUESTS} cached requests ({SYSTEM_CHARS:,} + {USER_CHARS:,} characters of messages, a third with 2 tools; "
        f"replies of {REPLY_CHARS:,}), {ROUNDS} rounds, median round\n"
    )
    rounds: list[dict[str, float]] = []
    for _ in range(ROUNDS):
        with tempfile.TemporaryDirectory() as folder:
            rounds.append(asyncio.run(measure(Path(folder))))
    for name in rounds[0]:
        value = statistics.median(result[name] for result in rounds)
        size = name.endswith("MB")
        print(f"{name:<56} {value:>10.{2 if size else 1}f}{'' if size else ' us'}")


if __name__ == "__main__":
    main()
