"""The real litellm path, offline: litellm's own ``mock_response`` / ``mock_tool_calls`` hooks."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel

from dagmagic import errors
from dagmagic.events import Event, LLMCallRecorded
from dagmagic.llm import ChatModel, ModelRegistry, structured_llm_call
from dagmagic.llm._litellm import import_litellm
from dagmagic.settings import DagSettings

MODEL = "openai/gpt-4.1-mini"
HELLO = [{"role": "user", "content": "hello"}]


class Capital(BaseModel):
    city: str
    country: str


def chat_model(events: list[Event] | None = None, model: str = MODEL, **options: Any) -> ChatModel:
    entry = ModelRegistry().register("gpt", model, roles=["smart"], **options).get("gpt")
    return ChatModel(
        entry, settings=DagSettings(llm_retry_backoff=0.001), emit=events.append if events is not None else None
    )


def test_capabilities_come_from_litellm() -> None:
    assert chat_model().entry.capabilities.tool_call
    assert chat_model().entry.capabilities.json_mode
    unknown = chat_model(model="openai/some-local-model").entry.capabilities
    assert (unknown.tool_call, unknown.json_mode) == (False, False)
    declared = ModelRegistry().register("local", "openai/x", capabilities=("tool_call",)).get("local").capabilities
    assert (declared.tool_call, declared.json_mode) == (True, False)


async def test_chat_through_litellm_records_usage_and_litellm_pricing() -> None:
    events: list[Event] = []
    result = await chat_model(events, mock_response="Paris").chat(HELLO, purpose="step", temperature=0)
    assert result.content == "Paris"
    call = result.call
    assert (call.usage.input_tokens, call.usage.output_tokens) == (10, 20)  # litellm's mock usage
    litellm = import_litellm()
    expected = litellm.cost_per_token(model=MODEL, prompt_tokens=10, completion_tokens=20)
    assert call.cost == pytest.approx(sum(expected))
    assert isinstance(events[0], LLMCallRecorded)


async def test_structured_call_at_the_tool_level_through_litellm() -> None:
    tool_calls = [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "submit_capital", "arguments": json.dumps({"city": "Paris", "country": "France"})},
        }
    ]
    model = chat_model(mock_tool_calls=tool_calls)
    result = await structured_llm_call(model, HELLO, Capital, purpose="plan")
    assert result.value == Capital(city="Paris", country="France")
    assert (result.level_used, result.llm_calls) == ("tool_call", 1)
    assert result.usage.cost is not None and result.usage.cost > 0


async def test_structured_call_in_json_mode_through_litellm() -> None:
    model = chat_model(mock_response='{"city": "Rome", "country": "Italy"}', capabilities=("json_mode",))
    result = await structured_llm_call(model, HELLO, Capital, purpose="plan")
    assert (result.value.city, result.level_used) == ("Rome", "json_mode")


async def test_streaming_through_litellm() -> None:
    events: list[Event] = []
    model = chat_model(events, mock_response="hello streaming world")
    pieces = [chunk.text async for chunk in model.stream(HELLO, purpose="synthesize")]
    assert len(pieces) > 1 and "".join(pieces) == "hello streaming world"
    (event,) = [e for e in events if e.type != "call_progress"]
    assert isinstance(event, LLMCallRecorded)
    assert event.call.stream and event.call.reply == "hello streaming world"
    assert event.call.usage.output_tokens > 0 and event.call.cost is not None


async def test_an_authentication_error_from_litellm_is_translated_and_raised_after_one_call() -> None:
    litellm = import_litellm()
    events: list[Event] = []
    model = chat_model(
        events, mock_response=litellm.AuthenticationError("Incorrect API key", llm_provider="openai", model=MODEL)
    )
    with pytest.raises(errors.AuthenticationError, match="Incorrect API key") as caught:
        await structured_llm_call(model, HELLO, Capital, purpose="plan")
    assert len([e for e in events if e.type == "llm_call"]) == 1
    assert "OPENAI_API_KEY" in str(caught.value)


async def test_a_rate_limit_from_litellm_is_transient() -> None:
    litellm = import_litellm()
    events: list[Event] = []
    model = chat_model(events, mock_response=litellm.RateLimitError("slow", llm_provider="openai", model=MODEL))
    with pytest.raises(errors.RateLimitError):
        await model.chat(HELLO, purpose="step")
    assert isinstance(events[0], LLMCallRecorded) and events[0].call.retries == 2


async def test_an_unknown_provider_is_an_unknown_model_error() -> None:
    model = chat_model(model="nosuchprovider/some-model")
    with pytest.raises(errors.UnknownModelError, match="LLM Provider NOT provided"):
        await model.chat(HELLO, purpose="step")


async def test_a_router_model_group_spreads_over_deployments() -> None:
    litellm = import_litellm()
    router = litellm.Router(
        model_list=[
            {"model_name": "pool", "litellm_params": {"model": MODEL, "mock_response": "from a", "rpm": 100}},
            {"model_name": "pool", "litellm_params": {"model": MODEL, "mock_response": "from b", "rpm": 100}},
        ]
    )
    entry = ModelRegistry().register("pool", router, roles=["general"]).get("pool")
    assert entry.target == "pool" and entry.capabilities.tool_call
    model = ChatModel(entry)
    replies = {(await model.chat(HELLO, purpose="step")).content for _ in range(12)}
    assert replies <= {"from a", "from b"} and replies


async def test_a_routers_error_is_translated_though_nothing_imported_litellm_through_dagmagic(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import litellm  # as a notebook does to build its Router

    from dagmagic.llm import _litellm

    monkeypatch.setattr(_litellm, "_litellm", None)  # no run warmed it up: dagmagic has not set litellm up yet
    router = litellm.Router(model_list=[{"model_name": "pool", "litellm_params": {"model": MODEL}}])

    async def limited(**arguments: Any) -> Any:
        raise litellm.RateLimitError("slow", llm_provider="openai", model=MODEL)

    monkeypatch.setattr(router, "acompletion", limited)
    model = ChatModel(ModelRegistry().register("pool", router).get("pool"), settings=DagSettings(llm_retries=0))
    with pytest.raises(errors.RateLimitError):
        await model.chat(HELLO, purpose="step")


async def test_a_rate_limits_retry_after_header_is_read_and_honoured() -> None:
    from tests.fake_provider import Provider

    provider = Provider()
    try:
        provider.modes, provider.retry_after = ["429", "ok"], "1"
        entry = ModelRegistry().register("gpt", MODEL, api_base=provider.base, api_key="sk-test").get("gpt")
        model = ChatModel(entry, settings=DagSettings(llm_retry_backoff=0.01))
        result = await model.chat(HELLO, purpose="step")
        assert (result.content, result.call.retries, provider.requests) == ("hello there", 1, 2)
        assert provider.times[1] - provider.times[0] >= 1.0  # the header's second, not the 0.01 s backoff
    finally:
        provider.close()


def test_a_rate_limit_without_retry_after_says_nothing_of_it() -> None:
    from dagmagic.llm._litellm import translate_error

    litellm = import_litellm()
    error = translate_error(litellm.RateLimitError("slow", llm_provider="openai", model=MODEL), "gpt")
    assert isinstance(error, errors.RateLimitError) and error.retry_after is None


@pytest.mark.parametrize(
    ("model", "usage"),
    [
        (  # OpenAI's shape: cached tokens under prompt_tokens_details, reasoning under completion_tokens_details
            "openai/gpt-4o",
            {
                "prompt_tokens_details": {"cached_tokens": 800},
                "completion_tokens_details": {"reasoning_tokens": 30},
            },
        ),
        ("anthropic/claude-sonnet-4-5", {"cache_read_input_tokens": 800}),  # Anthropic's
    ],
)
async def test_prompt_cache_reads_are_counted_and_priced_at_the_cached_input_rate(
    model: str, usage: dict[str, Any]
) -> None:
    litellm = import_litellm()
    from litellm.types.utils import Usage as LiteLLMUsage

    reply = litellm.ModelResponse(
        model=model.split("/")[1],
        choices=[{"message": {"role": "assistant", "content": "Paris"}, "finish_reason": "stop", "index": 0}],
        usage=LiteLLMUsage(prompt_tokens=1000, completion_tokens=100, total_tokens=1100, **usage),
    )
    call = (await chat_model(model=model, mock_response=reply).chat(HELLO, purpose="step")).call
    reasoning = usage.get("completion_tokens_details", {}).get("reasoning_tokens", 0)
    assert (call.usage.input_tokens, call.usage.cached_input_tokens) == (1000, 800)
    assert (call.usage.output_tokens, call.usage.reasoning_tokens) == (100, reasoning)
    price = litellm.model_cost[model.split("/")[1]]
    assert price["cache_read_input_token_cost"] < price["input_cost_per_token"]
    cached_rate = (
        200 * price["input_cost_per_token"]
        + 800 * price["cache_read_input_token_cost"]
        + 100 * price["output_cost_per_token"]
    )
    assert call.cost == pytest.approx(cached_rate)


async def test_max_tokens_given_to_register_bounds_every_reply() -> None:
    from tests.fake_provider import Provider

    provider = Provider()
    bodies: list[dict[str, Any]] = []
    provider.answer = lambda body: bodies.append(body) or "short"
    try:
        entry = (
            ModelRegistry()
            .register("local", "openai/qwen", api_base=provider.base, api_key="none", max_tokens=64)
            .get("local")
        )
        model = ChatModel(entry, settings=DagSettings(llm_retry_backoff=0.01))
        await model.chat(HELLO, purpose="step")
        async for _ in model.stream(HELLO, purpose="synthesize"):
            pass
        assert [body.get("max_tokens") for body in bodies] == [64, 64]
    finally:
        provider.close()
