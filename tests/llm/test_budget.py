"""``CostBudget``: what a run may spend, checked by ``ChatModel`` before every call and charged after it."""

from __future__ import annotations

import pytest

from dagmagic.errors import BudgetExceeded
from dagmagic.events import Event, LLMCallRecorded, RunWarning
from dagmagic.llm import ChatModel, ModelRegistry
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


async def test_a_chat_model_under_a_spent_budget_makes_no_call_and_records_none() -> None:
    llm = ScriptedLLM({"*": ["hi"]}, price=(0.01, 0.01))
    events: list[Event] = []
    model = ChatModel(ModelRegistry().register("m", llm).get("m"), emit=events.append)
    token = CURRENT_BUDGET.set(CostBudget(0.05))
    try:
        first = await model.chat(HELLO, purpose="step")  # 2 tokens in, 1 out: $0.03, under the budget
        second = await model.chat(HELLO, purpose="step")  # $0.06 spent: the budget is reached
        assert first.call.cost == second.call.cost == pytest.approx(0.03)
        with pytest.raises(BudgetExceeded):
            await model.chat(HELLO, purpose="step")
        with pytest.raises(BudgetExceeded):
            async for _ in model.stream(HELLO, purpose="synthesize"):
                pass
    finally:
        CURRENT_BUDGET.reset(token)
    assert len(llm.requests) == 2
    assert len([event for event in events if isinstance(event, LLMCallRecorded)]) == 2
    await model.chat(HELLO, purpose="step")  # outside the run's budget: called again
    assert len(llm.requests) == 3
