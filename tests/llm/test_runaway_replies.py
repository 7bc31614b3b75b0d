"""A reply that never ends: every call is sent its purpose's ``max_tokens`` (``DAG_LLM_MAX_TOKENS``), and a try
is bounded in all (``DAG_LLM_TOTAL_TIMEOUT``), not only between two pieces, through litellm over HTTP as a local
server meets it. Caps are part of what a replay matches, and cassettes recorded before them still replay.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from dagmagic import DagSettings, ModelRegistry, errors
from dagmagic.events import Event, LLMCallRecorded
from dagmagic.llm import ChatModel
from dagmagic.llm._litellm import import_litellm_off_the_loop
from dagmagic.llm.cassette import request_key
from dagmagic.llm.protocol import ChatRequest
from dagmagic.llm.replay import forget_cassettes
from dagmagic.llm.replay_matching import RecordedCalls, replay_mismatch
from dagmagic.testing import Cassette
from tests.fake_provider import Provider
from tests.llm.test_replay import provider, run_with

HELLO = [{"role": "user", "content": "hello"}]
BOUND = 1.5
"""The total bound the tests set (seconds): far below the old hold, far above a loopback reply."""
DOCUMENTED_CAPS = {
    "history_summary": 4096,
    "plan": 8192,
    "tool_selection": 4096,
    "step": 8192,
    "compaction": 4096,
    "analyze": 16384,
    "synthesize": 16384,
    "citation_check": 4096,
    "route": 1024,
    "judge": 4096,
}
"""The defaults README documents (``llm_max_tokens``)."""
CASSETTE_07 = Path(__file__).parents[2] / "notebooks" / "07_replay.cassette.jsonl"


def model_at(
    server: Provider, events: list[Event] | None = None, target: str = "openai/local-model", **options: Any
) -> ChatModel:
    registry = ModelRegistry().register("local", target, api_base=server.base, api_key="none", **options)
    settings = DagSettings(store="none", llm_retries=0, llm_timeout=30)
    return ChatModel(registry.get("local"), settings=settings, emit=None if events is None else events.append)


async def test_a_stream_that_never_ends_is_cut_at_the_total_bound_and_its_connection_closed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DAG_LLM_TOTAL_TIMEOUT", str(BOUND))
    await import_litellm_off_the_loop()
    server = Provider()
    server.mode, server.reply = "endless", "la"
    events: list[Event] = []
    model = model_at(server, events)
    pieces: list[str] = []

    async def consume() -> None:
        async for chunk in model.stream(HELLO, purpose="synthesize"):
            pieces.append(chunk.text)

    started = time.monotonic()
    try:
        await asyncio.wait_for(consume(), BOUND * 20)  # only so that the old code's hold ends the test
        outcome: BaseException | None = None
    except Exception as exc:
        outcome = exc
    took = time.monotonic() - started
    try:
        for _ in range(200):  # the server notices the connection closed at its next write
            if server.stopped:
                break
            await asyncio.sleep(0.02)
        still_writing = not server.stopped
    finally:
        server.close()
    assert isinstance(outcome, errors.ProviderTimeoutError), (
        f"after {took:.1f} s ({took / BOUND:.1f}x the bound) and {len(pieces)} pieces: {outcome!r}"
    )
    assert "DAG_LLM_TOTAL_TIMEOUT" in str(outcome) and "still coming" in str(outcome)
    assert took < BOUND * 3, f"{took:.1f} s: {took / BOUND:.1f}x the bound"
    (call,) = [event.call for event in events if isinstance(event, LLMCallRecorded)]
    assert (
        call.status == "failed" and call.pieces > 10 and call.reply.startswith("la0 la1 la2 ")
    )  # what arrived is kept
    assert not still_writing, "the stream given up on was left open: the server is still writing into it"
    assert server.stopped[0] - started < BOUND * 3


async def test_every_purpose_sends_its_documented_max_tokens_through_litellm() -> None:
    server = Provider()
    bodies: list[dict[str, Any]] = []

    def recording(body: dict[str, Any]) -> str:
        bodies.append(body)
        return "ok"

    server.answer = recording
    try:
        model = model_at(server)
        for purpose in DOCUMENTED_CAPS:
            await model.chat(HELLO, purpose=purpose)  # type: ignore[arg-type]
        async for _ in model.stream(HELLO, purpose="synthesize"):
            pass
    finally:
        server.close()
    sent = [body.get("max_tokens") for body in bodies]
    assert sent == [*DOCUMENTED_CAPS.values(), DOCUMENTED_CAPS["synthesize"]]
    assert DagSettings().llm_max_tokens.of("plan") == DOCUMENTED_CAPS["plan"]


async def test_caps_are_configured_per_purpose_a_models_own_wins_and_a_known_models_limit_holds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = Provider()
    bodies: list[dict[str, Any]] = []

    def recording(body: dict[str, Any]) -> str:
        bodies.append(body)
        return "ok"

    server.answer = recording
    monkeypatch.setenv("DAG_LLM_MAX_TOKENS", "step=77, plan=off")
    try:
        configured = model_at(server)
        for purpose in ("step", "plan", "analyze"):
            await configured.chat(HELLO, purpose=purpose)  # type: ignore[arg-type]
        own = model_at(server, max_tokens=333)
        await own.chat(HELLO, purpose="analyze")
        known = model_at(server, target="openai/gpt-3.5-turbo")  # litellm knows it writes 4096 at most
        await known.chat(HELLO, purpose="analyze")
    finally:
        server.close()
    assert [body.get("max_tokens") for body in bodies] == [77, None, 16384, 333, 4096]


def test_a_bad_cap_is_refused_naming_what_is_accepted() -> None:
    with pytest.raises(errors.ConfigurationError, match=r"key=integer pairs.*plan, tool_selection"):
        DagSettings(llm_max_tokens="stepp=5")
    with pytest.raises(errors.ConfigurationError):
        DagSettings(llm_max_tokens="step=0")
    assert DagSettings(llm_max_tokens="off").llm_max_tokens.of("analyze") is None


async def test_a_replay_matches_the_cap_a_call_was_recorded_with(tmp_path: Path) -> None:
    forget_cassettes()
    path = tmp_path / "capped.jsonl"
    await run_with("all", path, provider())
    assert {item.max_tokens for item in Cassette.load(path)} >= {8192, 16384}
    forget_cassettes()
    llm = provider()
    replayed = await run_with("none", path, llm)
    assert replayed.status == "done" and llm.requests == []

    calls = RecordedCalls(Cassette.load(path))
    (plan,) = [item for item in calls.cassette if item.purpose == "plan"]
    request = ChatRequest(model=plan.target, messages=plan.messages, tools=plan.tools, tool_choice=plan.tool_choice,
                          response_format=plan.response_format, temperature=plan.temperature, purpose="plan",
                          round=plan.round, max_tokens=100)  # fmt: skip
    assert calls.take(request_key(plan.model, request)) is None
    mismatch = replay_mismatch(calls, plan.model, request)
    assert "max_tokens: recorded 8192, now 100" in str(mismatch)


def test_a_cassette_recorded_before_caps_still_answers_capped_requests() -> None:
    cassette = Cassette.load(CASSETTE_07)  # the tutorial's, recorded against a real model with no cap sent
    calls = RecordedCalls(cassette)
    caps = DagSettings().llm_max_tokens
    for item in list(cassette):
        assert item.max_tokens is None
        request = ChatRequest(model=item.target, messages=item.messages, tools=item.tools, tool_choice=item.tool_choice,
                              response_format=item.response_format, temperature=item.temperature,
                              purpose=item.purpose, round=item.round, step_id=item.step_id,
                              max_tokens=caps.of(item.purpose))  # fmt: skip
        assert calls.take(request_key(item.model, request)) is not None, item.describe()
