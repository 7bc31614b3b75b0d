"""A ``litellm.Router`` that refuses a call by its own limits, through the real litellm path to the fake provider on
127.0.0.1: the call waits its turn (the next minute's window, a free parallel slot) instead of failing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from dagmagic import errors
from dagmagic.llm import ChatModel, ModelRegistry
from dagmagic.llm import _litellm as litellm_door
from dagmagic.models import LLMCall
from dagmagic.settings import DagSettings
from tests.fake_provider import Provider

MODEL = "openai/gpt-4.1-mini"
HELLO = [{"role": "user", "content": "hello"}]
BEFORE_THE_MINUTE = 0.5
"""How long before a minute ends the refused call is made: the clocks stand still there until the calls filling the
minute's rpm are answered, however slowly a loaded machine makes them, and run on from then."""


@pytest.fixture
def provider() -> Iterator[Provider]:
    served = Provider()
    yield served
    served.close()


def router(provider: Provider, **limits: Any) -> Any:
    from litellm.router import Router

    deployment = {"model": MODEL, "api_base": provider.base, "api_key": "sk-test", **limits}
    return Router(
        model_list=[{"model_name": "pool", "litellm_params": deployment}],
        optional_pre_call_checks=["enforce_model_rate_limits"],
    )


def chat_model(pool: Any, **settings: Any) -> ChatModel:
    entry = ModelRegistry().register("pool", pool, model_group="pool").get("pool")
    return ChatModel(entry, settings=DagSettings(llm_retry_backoff=0.05, **settings))


@pytest.fixture
def minute_filled_after(monkeypatch: pytest.MonkeyPatch, provider: Provider) -> Callable[[Any, int], None]:
    """Sets litellm's clock (its rpm windows) and ours (the wait for the next window) at ``BEFORE_THE_MINUTE``
    seconds before a minute ends, standing still until the provider has answered ``filling`` requests and running
    on from the last one's arrival: the minute's end is then that arrival plus ``BEFORE_THE_MINUTE``.
    """
    import time

    from litellm.router_utils.pre_call_checks.model_rate_limit_check import ModelRateLimitingCheck

    standing = datetime(2026, 1, 1, 12, 1, tzinfo=UTC).timestamp() - BEFORE_THE_MINUTE
    filled_at = 0

    def clock() -> float:
        if len(provider.times) < filled_at:
            return standing
        return standing + time.monotonic() - provider.times[filled_at - 1]

    monkeypatch.setattr(litellm_door, "_clock", clock)

    def set_for(pool: Any, filling: int) -> None:
        nonlocal filled_at
        filled_at = filling
        for check in pool.optional_callbacks or []:
            if isinstance(check, ModelRateLimitingCheck):
                check.clock = lambda: datetime.fromtimestamp(clock(), UTC)

    return set_for


async def test_a_call_past_the_routers_rpm_waits_for_the_next_minute_and_is_answered(
    provider: Provider, minute_filled_after: Callable[[Any, int], None]
) -> None:
    pool = router(provider, rpm=2)
    model = chat_model(pool, llm_retries=0)
    minute_filled_after(pool, 2)

    results = [await model.chat(HELLO, purpose="step") for _ in range(3)]

    assert [result.content for result in results] == ["hello there"] * 3
    assert [result.call.retries for result in results] == [0, 0, 0]  # a wait for its turn is not a retry
    assert provider.requests == 3  # the refused try never reached the provider
    waited = provider.times[2] - provider.times[1]
    assert waited >= BEFORE_THE_MINUTE  # in the next minute's window
    assert waited <= BEFORE_THE_MINUTE + 2.0 + 3.0  # the rest of the minute (a jitter, a slow machine), not 60 s


async def test_a_call_refused_a_parallel_slot_waits_for_one(provider: Provider) -> None:
    import asyncio

    provider.mode, provider.slow_seconds = "slow", 0.3
    model = chat_model(router(provider, max_parallel_requests=1), llm_retries=0)

    results = await asyncio.gather(*(model.chat(HELLO, purpose="step") for _ in range(3)))

    assert [result.content for result in results] == ["hello there"] * 3
    assert provider.requests == 3
    assert min(b - a for a, b in zip(provider.times, provider.times[1:], strict=False)) >= 0.3  # one at a time


async def test_past_llm_rate_limit_wait_the_refusal_is_a_rate_limit_not_retried(provider: Provider) -> None:
    model = chat_model(router(provider, rpm=1), llm_retries=3, llm_rate_limit_wait=0)
    await model.chat(HELLO, purpose="step")

    with pytest.raises(errors.RateLimitError) as refused:
        await model.chat(HELLO, purpose="step")

    assert refused.value.router_limit
    assert isinstance(refused.value.call, LLMCall) and refused.value.call.retries == 0  # no wait was allowed
    assert provider.requests == 1


def test_a_providers_own_429_is_not_a_routers_limit() -> None:
    from litellm.exceptions import RateLimitError

    error = litellm_door.translate_error(RateLimitError("slow down", llm_provider="openai", model=MODEL), "gpt")
    assert isinstance(error, errors.RateLimitError) and not error.router_limit


async def test_a_stream_refused_a_parallel_slot_waits_for_one(provider: Provider) -> None:
    import asyncio

    provider.mode, provider.slow_seconds = "slow", 0.3
    model = chat_model(router(provider, max_parallel_requests=1), llm_retries=0)

    async def streamed() -> str:
        return "".join([chunk.text async for chunk in model.stream(HELLO, purpose="synthesize")])

    assert await asyncio.gather(streamed(), streamed()) == ["hello there"] * 2
    assert provider.requests == 2


def test_the_usage_based_routing_strategys_refusal_is_a_routers_limit_too() -> None:
    """``routing_strategy="usage-based-routing-v2"`` refuses with a request of its own making, as it does here."""
    import httpx
    from litellm.exceptions import RateLimitError

    refusal = httpx.Response(
        429, headers={"retry-after": "60"}, request=httpx.Request(method="tpm_rpm_limits", url="https://litellm.ai")
    )
    error = litellm_door.translate_error(RateLimitError("over", llm_provider="", model=MODEL, response=refusal), "p")
    assert isinstance(error, errors.RateLimitError) and error.router_limit
    assert error.retry_after is not None and 0 < error.retry_after <= 60  # the rest of this minute
