"""An evaluation through the real litellm path against the fake provider on 127.0.0.1: a 429 storm backs off
without failing cells, and a ``litellm.Router``'s ``rpm`` holds (requests beyond it never reach the provider).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from dagmagic import DagSession, DagSettings, ModelRegistry
from tests.fake_provider import Provider

MODEL = "openai/gpt-4.1-mini"
# one reply that every purpose reads: a plan, a step's result, a verdict and an answer
REPLY = json.dumps(
    {"steps": [{"id": "s1", "task": "look it up"}], "achieved": True, "confidence": 0.9, "reasoning": "ok"}
)


@pytest.fixture
def provider() -> Iterator[Provider]:
    served = Provider()
    served.reply = REPLY
    yield served
    served.close()


async def test_a_429_storm_backs_off_and_every_cell_ends_done(provider: Provider) -> None:
    storm = 6
    provider.modes, provider.retry_after = ["429"] * storm + ["ok"], "1"
    registry = ModelRegistry().register("gpt", MODEL, api_base=provider.base, api_key="sk-test")
    settings = DagSettings(store="none", llm_retries=3, llm_retry_backoff=0.3)
    session = DagSession(registry, settings)

    experiment = await session.evaluate([f"question {i}" for i in range(4)], concurrency=4)

    frame = experiment.to_dataframe()
    assert list(frame["status"]) == ["done"] * 4, frame[["status", "error"]]
    first_ok = provider.times[storm]
    assert first_ok - provider.times[0] >= 1.0  # the retries waited the Retry-After, not the backoff alone
    assert provider.requests > storm
    retried = provider.times[4:8]  # the four cells' first plan calls, all refused, came back jittered
    assert max(retried) - min(retried) > 0.005


async def test_a_routers_rpm_holds_the_requests_that_reach_the_provider(
    provider: Provider, monkeypatch: pytest.MonkeyPatch
) -> None:
    """litellm counts ``rpm`` per calendar minute; the minute is frozen so that the count cannot reset mid-test.
    Requests beyond it are refused by the Router before the network; a call waits for the next minute's window
    (tests/llm/test_router_limits.py), which never comes here: ``llm_rate_limit_wait=0`` keeps the test short,
    so the cells that needed those requests do without them (a run answers from what completed).
    """
    from litellm.router import Router
    from litellm.router_strategy import lowest_tpm_rpm_v2

    frozen = datetime(2026, 1, 1, 12, 0, 30, tzinfo=UTC)
    monkeypatch.setattr(lowest_tpm_rpm_v2, "get_utc_datetime", lambda: frozen)
    rpm = 6
    router = Router(
        model_list=[
            {
                "model_name": "pool",
                "litellm_params": {"model": MODEL, "api_base": provider.base, "api_key": "sk-test", "rpm": rpm},
            }
        ],
        routing_strategy="usage-based-routing-v2",
        num_retries=0,
    )
    asked = 0
    acompletion = router.acompletion

    async def counted(*arguments: Any, **options: Any) -> Any:
        nonlocal asked
        asked += 1
        return await acompletion(*arguments, **options)

    monkeypatch.setattr(router, "acompletion", counted)
    registry = ModelRegistry().register("pool", router, model_group="pool")
    settings = DagSettings(
        store="none",
        llm_retries=0,
        llm_rate_limit_wait=0,
        max_replan_rounds=1,
        step_immediate_retries=0,
        step_retry_delays=(),
    )
    session = DagSession(registry, settings)

    experiment = await session.evaluate([f"question {i}" for i in range(4)], concurrency=4)  # 4+ calls a cell

    assert len(experiment.to_dataframe()) == 4
    assert asked >= 4 * 3 > rpm  # each cell asked for a plan, a step and a verdict at least
    assert 0 < provider.requests <= rpm, provider.requests  # litellm may count a refused request too
