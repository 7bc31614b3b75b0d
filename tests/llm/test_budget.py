"""``CostBudget``: what a run may spend, checked by ``ChatModel`` before every call and charged after it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from dagmagic.errors import BudgetExceeded
from dagmagic.events import Event, LLMCallRecorded, RunWarning
from dagmagic.llm import ChatModel, ChatResult, LiteLLMBackend, ModelRegistry
from dagmagic.llm.budget import CURRENT_BUDGET, CostBudget, dollars
from dagmagic.models import LLMCall, Usage
from dagmagic.testing import ScriptedLLM

HELLO = [{"role": "user", "content": "hello"}]


def priced(cost: float | None, *, status: str = "ok", cached: bool = False) -> LLMCall:
    usage = Usage(requests=1, cost=cost)
    return LLMCall(purpose="step", model="m", usage=usage, status=status, cached=cached)  # type: ignore[arg-type]


def test_the_budget_is_reached_when_the_spend_meets_it_and_tells_its_listeners_once() -> None:
    budget = CostBudget(0.05)
    told: list[float] = []
    budget.subscribe(lambda reached: told.append(reached.spent))
    budget.charge(priced(0.03))
    budget.check()  # not reached: nothing raised
    budget.charge(priced(0.022))
    assert budget.reached and told == [pytest.approx(0.052)]
    budget.charge(priced(0.01))  # a call under way when it was reached still counts
    assert budget.spent == pytest.approx(0.062) and len(told) == 1
    with pytest.raises(BudgetExceeded, match=r"^the cost budget of 0\.05 USD was reached \(0\.062 USD spent\)$"):
        budget.check()


def test_unpriced_calls_are_said_once_and_count_as_nothing() -> None:
    events: list[Event] = []
    budget = CostBudget(1.0, emit=events.append)
    budget.charge(priced(None, status="cancelled"))  # its usage is unknown, not unpriced: nothing said
    budget.charge(priced(0.0, cached=True))
    assert events == []
    budget.charge(priced(None))
    budget.charge(priced(None))
    assert budget.unpriced == 2 and budget.spent == 0.0
    assert [type(event) for event in events] == [RunWarning]
    assert "cannot be enforced for calls whose price is unknown" in events[0].message  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("amount", "shown"),
    [(0.05, "0.05 USD"), (0.0523, "0.0523 USD"), (0.05234, "0.0523 USD"), (1.5, "1.5 USD"), (0, "0 USD")],
)
def test_dollars(amount: float, shown: str) -> None:
    assert dollars(amount) == shown


def priced_model(llm: ScriptedLLM, events: list[Event] | None = None, **options: Any) -> ChatModel:
    sink = events.append if events is not None else None
    return ChatModel(ModelRegistry().register("m", llm, **options).get("m"), emit=sink)


async def test_a_chat_model_makes_no_call_its_budget_cannot_hold_and_records_none() -> None:
    llm = ScriptedLLM({"*": ["hi"]}, price=(0.01, 0.01))
    events: list[Event] = []
    model = priced_model(llm, events, max_tokens=1)
    # each call is estimated at 0.09 USD (HELLO: 8 tokens with the chat format's, and 1 of reply) and costs
    # 0.03 (2 tokens in, 1 out, by ScriptedLLM's count)
    token = CURRENT_BUDGET.set(budget := CostBudget(0.13))
    try:
        for _ in range(2):  # 0 + 0.09 and 0.03 + 0.09 fit in 0.13
            result = await model.chat(HELLO, purpose="step")
            assert result.call.cost == pytest.approx(0.03)
        assert budget.held == 0 and budget.spent == pytest.approx(0.06)
        said = r"^the cost budget of 0\.13 USD was reached \(0\.06 USD spent, the next call estimated at 0\.09 USD\)$"
        with pytest.raises(BudgetExceeded, match=said):
            await model.chat(HELLO, purpose="step")  # 0.06 of 0.13 spent, but it may cost more than is left
        with pytest.raises(BudgetExceeded, match=said):
            async for _ in model.stream(HELLO, purpose="synthesize"):  # once a call is refused, none starts
                pass
    finally:
        CURRENT_BUDGET.reset(token)
    assert len(llm.requests) == 2 and budget.reached
    assert len([event for event in events if isinstance(event, LLMCallRecorded)]) == 2
    await model.chat(HELLO, purpose="step")  # outside the run's budget: called again
    assert len(llm.requests) == 3


async def test_a_call_waits_for_the_calls_under_way_then_starts_if_it_fits_and_is_refused_if_not() -> None:
    llm = ScriptedLLM({"*": ["hi"]}, price=(0.01, 0.01), latency=0.05)
    model = priced_model(llm, max_tokens=10)  # estimated at 0.18 USD, costs 0.03
    token = CURRENT_BUDGET.set(budget := CostBudget(0.25))
    try:
        first, second = await asyncio.gather(
            model.chat(HELLO, purpose="step"), model.chat(HELLO, purpose="step"), return_exceptions=True
        )
        third = await asyncio.gather(model.chat(HELLO, purpose="step"), return_exceptions=True)
    finally:
        CURRENT_BUDGET.reset(token)
    assert isinstance(first, ChatResult) and isinstance(second, ChatResult)
    # 0.18 + 0.18 do not fit in 0.25: the second waited for the first to cost 0.03, then fit
    assert second.call.started_at >= first.call.started_at + first.call.latency
    # 0.06 spent and 0.18 more fit: the third runs; a fourth does not, and nothing is under way to wait for
    assert isinstance(third[0], ChatResult) and budget.spent == pytest.approx(0.09)
    with pytest.raises(BudgetExceeded):
        await budget.reserve(0.18)
    assert len(llm.requests) == 3 and budget.held == 0


async def test_a_call_made_while_its_own_stream_is_open_is_refused_not_left_waiting_for_itself() -> None:
    llm = ScriptedLLM({"*": ["one two three"]}, price=(0.01, 0.01))
    model = priced_model(llm, max_tokens=10)  # estimated at 0.18 USD: two do not fit
    token = CURRENT_BUDGET.set(CostBudget(0.25))
    try:
        async with asyncio.timeout(30):  # a hang guard only: the refusal is immediate
            async for _ in model.stream(HELLO, purpose="synthesize"):
                with pytest.raises(BudgetExceeded):
                    await model.chat(HELLO, purpose="step")
                break
    finally:
        CURRENT_BUDGET.reset(token)
    assert len(llm.requests) == 1


def test_litellm_prices_a_call_before_it_is_made() -> None:
    backend = LiteLLMBackend()
    assert backend.estimate_cost("openai/gpt-4o-mini", 1000, 1000) == pytest.approx(0.00075)
    assert backend.estimate_cost("openai/not-a-model-litellm-knows", 1000, 1000) is None
