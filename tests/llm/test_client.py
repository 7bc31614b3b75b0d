from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest

from dagmagic import errors
from dagmagic.events import Event, LLMCallRecorded, RunWarning
from dagmagic.llm import ChatModel, ModelRegistry, as_chat_model
from dagmagic.llm._litellm import mask_secrets, translate_error
from dagmagic.settings import DagSettings
from dagmagic.testing import ScriptedLLM, ScriptedRequest

FAST_RETRY = DagSettings(llm_retry_backoff=0.001)
HELLO = [{"role": "user", "content": "hello"}]


def recorded(events: list[Event]) -> list[Event]:
    """The calls' records among the events (a call the run waits on is also told when it is sent)."""
    return [event for event in events if isinstance(event, LLMCallRecorded)]


def chat_model(script: dict[str, Any], events: list[Event] | None = None, **kwargs: Any) -> ChatModel:
    llm = ScriptedLLM(script, **kwargs)
    entry = ModelRegistry().register("scripted", llm, roles=["smart"]).get("scripted")
    return ChatModel(entry, settings=FAST_RETRY, emit=None if events is None else events.append)


async def test_chat_records_a_tagged_call_with_usage_latency_and_cost() -> None:
    events: list[Event] = []
    model = chat_model({"step": ["Paris"]}, events, latency=0.02, price=(0.001, 0.002))
    result = await model.chat(HELLO, purpose="step", round=1, step_id="s1")
    assert result.content == "Paris"
    (event,) = events
    assert isinstance(event, LLMCallRecorded) and event.call == result.call
    call = result.call
    assert (call.purpose, call.model, call.round, call.step_id, call.reply) == ("step", "scripted", 1, "s1", "Paris")
    assert call.messages == HELLO and call.structured_level is None and call.retries == 0
    assert call.latency >= 0.02
    assert call.usage.requests == 1 and call.usage.input_tokens > 0 and call.usage.output_tokens > 0
    expected = call.usage.input_tokens * 0.001 + call.usage.output_tokens * 0.002
    assert call.cost == pytest.approx(expected)


async def test_cost_is_none_when_the_price_is_unknown() -> None:
    result = await chat_model({"step": ["x"]}).chat(HELLO, purpose="step")
    assert result.call.cost is None


async def test_transient_errors_are_retried_with_growing_backoff() -> None:
    settings = DagSettings(llm_retries=3, llm_retry_backoff=0.02)
    llm = ScriptedLLM({"step": [errors.ProviderTimeoutError("slow"), ConnectionError("reset"), "ok"]})
    model = ChatModel(ModelRegistry().register("m", llm).get("m"), settings=settings)
    started = asyncio.get_running_loop().time()
    result = await model.chat(HELLO, purpose="step")
    elapsed = asyncio.get_running_loop().time() - started
    assert (result.content, result.call.retries, len(llm.requests)) == ("ok", 2, 3)
    assert elapsed >= 0.02 + 0.04


async def test_when_retries_run_out_the_error_is_raised_and_the_failed_call_recorded() -> None:
    events: list[Event] = []
    model = chat_model({"step": [errors.RateLimitError("429 too many")]}, events)
    with pytest.raises(errors.RateLimitError) as caught:
        await model.chat(HELLO, purpose="step")
    (event,) = recorded(events)
    assert isinstance(event, LLMCallRecorded)
    assert event.call.retries == 2 and event.call.error is not None and "429" in event.call.error
    assert caught.value.call == event.call


async def test_a_fatal_error_is_not_retried() -> None:
    llm = ScriptedLLM({"step": [errors.AuthenticationError("bad key")]})
    model = ChatModel(ModelRegistry().register("m", llm).get("m"), settings=FAST_RETRY)
    with pytest.raises(errors.AuthenticationError):
        await model.chat(HELLO, purpose="step")
    assert len(llm.requests) == 1


async def test_an_unrelated_exception_passes_through_unchanged() -> None:
    boom = RuntimeError("boom")
    with pytest.raises(RuntimeError, match="boom"):
        await chat_model({"step": [boom]}).chat(HELLO, purpose="step")


async def test_stream_yields_pieces_and_records_the_whole_reply() -> None:
    events: list[Event] = []
    model = chat_model({"synthesize": [["The ", "answer ", "is 42."]]}, events)
    pieces = [chunk.text async for chunk in model.stream(HELLO, purpose="synthesize", round=1)]
    assert pieces == ["The ", "answer ", "is 42."]
    (event,) = recorded(events)
    assert isinstance(event, LLMCallRecorded)
    assert (event.call.reply, event.call.stream, event.call.purpose) == ("The answer is 42.", True, "synthesize")
    assert event.call.usage.output_tokens > 0


async def test_a_plain_reply_streams_word_by_word() -> None:
    pieces = [c.text async for c in chat_model({"synthesize": ["a b c"]}).stream(HELLO, purpose="synthesize")]
    assert pieces == ["a ", "b ", "c"]


async def test_stream_retries_a_transient_error_before_the_first_piece() -> None:
    model = chat_model({"synthesize": [errors.ServerError("502"), ["ok"]]})
    assert [c.text async for c in model.stream(HELLO, purpose="synthesize")] == ["ok"]


async def test_a_failure_mid_stream_is_raised_and_recorded_with_the_text_so_far() -> None:
    events: list[Event] = []
    model = chat_model({"synthesize": [["Hello ", errors.ServerError("connection dropped"), "never"]]}, events)
    received: list[str] = []
    with pytest.raises(errors.ServerError):
        async for chunk in model.stream(HELLO, purpose="synthesize"):
            received.append(chunk.text)
    assert received == ["Hello "]
    (event,) = recorded(events)
    assert isinstance(event, LLMCallRecorded)
    assert event.call.reply == "Hello " and event.call.error is not None


async def test_cancellation_is_not_swallowed() -> None:
    model = chat_model({"step": ["late"]}, latency=5.0)
    task = asyncio.create_task(model.chat(HELLO, purpose="step"))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_as_chat_model_accepts_strings_backends_and_entries() -> None:
    llm = ScriptedLLM({})
    assert as_chat_model(llm).entry.backend is llm
    assert as_chat_model("openai/gpt-4.1-mini").entry.target == "openai/gpt-4.1-mini"
    entry = ModelRegistry().register("x", llm).get("x")
    assert as_chat_model(entry).entry is entry


def test_secrets_are_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "my-very-secret-value-123")
    text = "Incorrect key my-very-secret-value-123 and sk-proj-abcdefghijklmnop given"
    assert mask_secrets(text) == "Incorrect key *** and *** given"


def test_builtin_timeouts_and_connection_errors_are_transient() -> None:
    assert isinstance(translate_error(TimeoutError(), "m"), errors.ProviderTimeoutError)
    assert isinstance(translate_error(ConnectionResetError("x"), "m"), errors.ProviderConnectionError)
    cancelled = asyncio.CancelledError()
    assert translate_error(cancelled, "m") is cancelled


async def test_a_call_cancelled_before_its_reply_is_recorded_as_cancelled() -> None:
    events: list[Event] = []
    model = chat_model({"step": ["late"]}, events, latency=5.0)
    call = asyncio.ensure_future(model.chat(HELLO, purpose="step", round=2, step_id="s1"))
    await asyncio.sleep(0.05)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    (event,) = events
    assert isinstance(event, LLMCallRecorded)
    record = event.call
    assert (record.status, record.purpose, record.round, record.step_id) == ("cancelled", "step", 2, "s1")
    assert record.usage.requests == 1 and record.usage.total_tokens == 0 and record.cost is None  # unknown
    assert record.messages == HELLO and record.latency >= 0.04


async def test_a_stream_cancelled_mid_way_is_recorded_as_cancelled_with_what_arrived() -> None:
    events: list[Event] = []
    model = chat_model({"synthesize": [["one ", "two ", "three"]]}, events, chunk_delay=1.0)
    pieces: list[str] = []

    async def consume() -> None:
        async for chunk in model.stream(HELLO, purpose="synthesize"):
            pieces.append(chunk.text)

    task = asyncio.ensure_future(consume())
    while not pieces:
        await asyncio.sleep(0.005)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    (event,) = recorded(events)
    assert isinstance(event, LLMCallRecorded)
    assert (event.call.status, event.call.reply, event.call.stream) == ("cancelled", "one ", True)


async def test_failed_and_successful_calls_say_so() -> None:
    events: list[Event] = []
    model = chat_model({"step": [errors.AuthenticationError("bad key"), "fine"]}, events)
    with pytest.raises(errors.AuthenticationError):
        await model.chat(HELLO, purpose="step")
    await model.chat(HELLO, purpose="step")
    assert [e.call.status for e in events if isinstance(e, LLMCallRecorded)] == ["failed", "ok"]


# --- the circuit breaker: a model that stops answering is not called again


def breaker_models(script: dict[str, Any], limit: int = 3, **kwargs: Any) -> tuple[Any, ScriptedLLM, list[Event]]:
    from dagmagic.llm.breaker import CircuitBreakers

    llm = ScriptedLLM(script, **kwargs)
    entry = ModelRegistry().register("local", llm).get("local")
    events: list[Event] = []
    breakers = CircuitBreakers(limit)
    settings = DagSettings(llm_retries=1, llm_retry_backoff=0.001)

    def model() -> ChatModel:  # each call site makes its own ChatModel; the run's breaker is shared
        return ChatModel(entry, settings=settings, emit=events.append, breaker=breakers.of("local"))

    return model, llm, events


async def test_a_model_silent_for_the_limit_of_tries_is_refused_at_once_without_a_call() -> None:
    model, llm, events = breaker_models({"*": errors.ProviderTimeoutError("Request timed out")})
    with pytest.raises(errors.ProviderTimeoutError):
        await model().chat(HELLO, purpose="plan")  # two tries
    with pytest.raises(errors.ProviderUnavailableError) as opened:
        await model().chat(HELLO, purpose="step", round=1, step_id="s1")  # the third opens it: no retry
    assert len(llm.requests) == 3
    with pytest.raises(errors.ProviderUnavailableError) as refused:
        async for _ in model().stream(HELLO, purpose="synthesize"):
            pass
    assert len(llm.requests) == 3  # refused with no request made, and no call recorded for it
    assert [event.call.purpose for event in events if isinstance(event, LLMCallRecorded)] == ["plan", "step"]
    message = str(refused.value)
    assert message.startswith("Model 'local' did not answer: 3 tries in a row timed out or could not connect")
    assert "(the last: Request timed out)" in message and "DAG_LLM_TIMEOUT" in message
    assert str(opened.value) == message and opened.value.__cause__ is None
    warnings = [event for event in events if isinstance(event, RunWarning)]
    assert [(w.round, w.step_id) for w in warnings] == [(1, "s1")]  # said once, where it happened
    assert "Model 'local' did not answer 3 tries in a row" in warnings[0].message


async def test_any_answer_starts_the_count_again_and_other_failures_neither_count_nor_reset_it() -> None:
    timeout, refused = errors.ProviderTimeoutError("slow"), errors.RateLimitError("429")
    replies = [timeout, timeout, "ok", timeout, refused, refused, timeout, "ok again", timeout, refused, timeout]
    model, llm, events = breaker_models({"step": [*replies, timeout]}, limit=3)
    with pytest.raises(errors.ProviderTimeoutError):
        await model().chat(HELLO, purpose="step")  # two in a row
    assert (await model().chat(HELLO, purpose="step")).content == "ok"  # the count starts again
    with pytest.raises(errors.RateLimitError):
        await model().chat(HELLO, purpose="step")  # one, then a rate limit: an answer of a kind, not counted
    with pytest.raises(errors.ProviderTimeoutError):
        await model().chat(HELLO, purpose="step")  # a rate limit, then the second in a row
    assert (await model().chat(HELLO, purpose="step")).content == "ok again"
    assert not any(isinstance(event, RunWarning) for event in events)
    with pytest.raises(errors.RateLimitError):
        await model().chat(HELLO, purpose="step")  # one, and a rate limit that does not start the count again
    with pytest.raises(errors.ProviderUnavailableError):
        await model().chat(HELLO, purpose="step")  # two and three in a row: the model counts as silent
    assert len(llm.requests) == len(replies) + 1


async def test_a_stream_that_starts_is_an_answer() -> None:
    model, llm, _ = breaker_models(
        {
            "synthesize": [errors.ProviderConnectionError("reset"), ["Par", "is"]],
            "step": errors.ProviderTimeoutError("slow"),
        },
        limit=3,
    )
    assert "".join([chunk.text async for chunk in model().stream(HELLO, purpose="synthesize")]) == "Paris"
    with pytest.raises(errors.ProviderTimeoutError):
        await model().chat(HELLO, purpose="step")  # two more: still not three in a row
    assert len(llm.requests) == 4


async def test_an_answer_that_arrives_late_closes_the_breaker() -> None:
    from dagmagic.llm.breaker import CircuitBreaker

    breaker = CircuitBreaker("local", limit=2)
    for _ in range(2):
        breaker.failed(errors.ProviderConnectionError("refused"))
    assert breaker.open
    with pytest.raises(errors.ProviderUnavailableError):
        breaker.check()
    breaker.answered()  # a call made before it opened still came back
    assert not breaker.open
    breaker.check()


async def test_a_call_under_way_tells_what_has_arrived_so_far_at_a_bounded_rate() -> None:
    from dagmagic.events import CallProgress
    from dagmagic.llm.client import PROGRESS_SECONDS

    events: list[Event] = []
    words = [f"w{i} " for i in range(120)]
    model = chat_model({"plan": [words]}, events, chunk_delay=PROGRESS_SECONDS / 20)
    async for _ in model.stream(HELLO, purpose="plan", round=1):
        pass
    *progress, recorded = events
    assert isinstance(recorded, LLMCallRecorded) and all(isinstance(e, CallProgress) for e in progress)
    assert progress[0].pieces == 0  # told when it is sent, before the model's first piece
    pieces = [e.pieces for e in progress if isinstance(e, CallProgress)]
    assert pieces == sorted(pieces) and 0 < pieces[-1] <= 120 and 3 <= len(progress) < 120 / 5  # throttled
    gaps = [b.at - a.at for a, b in itertools.pairwise(progress)]
    assert all(gap >= PROGRESS_SECONDS * 0.9 for gap in gaps)
    first = progress[0]
    assert isinstance(first, CallProgress) and first.started_at == recorded.call.started_at  # the same call
    assert (first.purpose, first.round, first.step_id, first.model, first.stream) == ("plan", 1, None, "scripted", True)


async def test_a_call_the_run_waits_on_is_told_when_sent_a_steps_call_is_not() -> None:
    from dagmagic.events import CallProgress

    events: list[Event] = []
    model = chat_model({"analyze": ["judged"], "step": ["done"]}, events)
    await model.chat(HELLO, purpose="analyze", round=1)
    await model.chat(HELLO, purpose="step", round=1, step_id="s1")
    assert [type(e) for e in events] == [CallProgress, LLMCallRecorded, LLMCallRecorded]
    assert isinstance(events[0], CallProgress) and not events[0].stream  # no pieces will come: the reply is whole


async def test_parallel_calls_hit_by_one_rate_limit_do_not_retry_in_lockstep() -> None:
    tried_at: dict[str, list[float]] = {}

    def limited_once(request: ScriptedRequest) -> str:
        times = tried_at.setdefault(str(request.step_id), [])
        times.append(asyncio.get_running_loop().time())
        if len(times) == 1:
            raise errors.RateLimitError("429 too many requests")
        return "ok"

    llm = ScriptedLLM({"step": limited_once})
    model = ChatModel(ModelRegistry().register("m", llm).get("m"), settings=DagSettings(llm_retry_backoff=0.2))
    steps = [f"s{index}" for index in range(8)]
    results = await asyncio.gather(*(model.chat(HELLO, purpose="step", step_id=step) for step in steps))
    assert [result.call.retries for result in results] == [1] * 8
    waits = sorted(times[1] - times[0] for times in tried_at.values())
    assert waits[0] >= 0.2  # the backoff, then a jitter of up to as much again
    assert waits[-1] - waits[0] >= 0.03, f"the retries came in lockstep: {waits}"


async def test_a_providers_retry_after_is_honoured() -> None:
    asked = errors.RateLimitError("429 too many requests")
    asked.retry_after = 0.3
    llm = ScriptedLLM({"step": [asked, "ok"]})
    model = ChatModel(ModelRegistry().register("m", llm).get("m"), settings=DagSettings(llm_retry_backoff=0.01))
    started = asyncio.get_running_loop().time()
    result = await model.chat(HELLO, purpose="step")
    waited = asyncio.get_running_loop().time() - started
    assert (result.content, result.call.retries) == ("ok", 1)
    assert waited >= 0.3  # not the 0.01 s backoff


def test_a_prompt_too_long_for_the_window_is_a_bad_request_of_its_own_that_says_the_window() -> None:
    import litellm

    said = "This model's maximum context length is 8,192 tokens. However, your messages resulted in 9,000 tokens."
    error = translate_error(litellm.ContextWindowExceededError(said, model="m", llm_provider="openai"), "local")
    assert isinstance(error, errors.ContextWindowExceededError) and isinstance(error, errors.BadRequestError)
    assert error.window == 8192 and error.model == "local"
    assert "context_window=N" in str(error) and "DAG_DEFAULT_CONTEXT_TOKENS" in str(error)  # what to set
    llama = '{"error":{"message":"the request exceeds the available context size","n_prompt_tokens":5000,"n_ctx":4096}}'
    assert errors.ContextWindowExceededError(llama).window == 4096  # llama.cpp's body
    assert errors.ContextWindowExceededError("Prompt is too long").window is None
