"""A run's cost budget (``DAG_MAX_COST``): once reached, no LLM call starts and the run answers from what completed."""

from __future__ import annotations

from typing import Any

import pytest

from dagmagic import DagSession, DagSettings, ModelRegistry
from dagmagic.events import AnswerReady, RunWarning
from dagmagic.llm.budget import dollars
from dagmagic.testing import ScriptedLLM, ToolCall

from .conftest import plan_reply, session_for, verdict

FOUR_STEPS = plan_reply(("s1", []), ("s2", []), ("s3", []), ("s4", ["s3"]))
PRICE = (1e-4, 2e-4)


def script() -> dict[str, Any]:
    return {
        "plan": [FOUR_STEPS],
        "step": lambda request: f"result of {request.step_id}",
        "analyze": [verdict(True, 0.9, "all found", "The answer.")],
        "synthesize": [["The ", "answer."]],
    }


async def costs_without_budget() -> dict[str, float]:
    """What each call of the scripted run costs, by purpose or step, measured on a run with no budget."""
    run = await session_for(ScriptedLLM(script(), price=PRICE), max_concurrency=1).run("goal")
    return {call.step_id or call.purpose: call.cost or 0.0 for call in run.calls}


async def test_a_budget_stops_a_run_mid_round_with_a_partial_answer_from_what_completed() -> None:
    costs = await costs_without_budget()
    # reached while s2 runs: s2 finishes (it started), nothing after it starts
    budget = costs["plan"] + costs["s1"] + costs["s2"] / 2
    llm = ScriptedLLM(script(), price=PRICE)
    run = await session_for(llm, max_concurrency=1, max_cost=budget).run("goal")

    assert [(r.purpose, r.step_id) for r in llm.requests] == [("plan", None), ("step", "s1"), ("step", "s2")]
    steps = {step.id: step for step in run.rounds[0].plan.steps}
    assert (steps["s1"].status, steps["s1"].result) == ("completed", "result of s1")
    assert (steps["s2"].status, steps["s2"].result) == ("completed", "result of s2")
    spent = costs["plan"] + costs["s1"] + costs["s2"]
    said = f"the cost budget of {dollars(budget)} was reached ({dollars(spent)} spent)"
    assert steps["s3"].status == steps["s4"].status == "skipped"
    assert steps["s3"].error == steps["s4"].error == f"Skipped — {said}"

    assert run.status == "done" and run.partial and not run.achieved
    decision = run.rounds[0].decision
    assert decision is not None and decision.reason == f"Stopped: {said}: answering from what completed."
    assert run.answer.startswith(f"*Stopped: {said}: here are the results of the steps that completed.*")
    assert "$" not in run.answer  # JupyterLab and GitHub would typeset the words between two dollars as math
    assert "result of s1" in run.answer and "result of s2" in run.answer
    ready = [event for event in run.events if isinstance(event, AnswerReady)]
    assert len(ready) == 1 and ready[0].partial and ready[0].fallback
    assert run.cost == pytest.approx(spent)


async def test_a_call_under_way_when_the_budget_is_reached_finishes_and_counts() -> None:
    costs = await costs_without_budget()
    budget = costs["plan"] + costs["s1"] / 2  # reached by s1, while s2 runs beside it
    llm = ScriptedLLM(script(), price=PRICE, latency={"step": 0.01})
    run = await session_for(llm, max_concurrency=2, max_cost=budget).run("goal")

    assert sorted(r.step_id or r.purpose for r in llm.requests) == ["plan", "s1", "s2"]
    assert [step.status for step in run.rounds[0].plan.steps] == ["completed", "completed", "skipped", "skipped"]
    assert run.partial and run.cost is not None and run.cost > budget


def lookup(q: str) -> str:
    """Look it up."""
    return "found"


def session_with_lookup(llm: ScriptedLLM, **settings: Any) -> DagSession:
    registry = ModelRegistry().register("scripted", llm)
    return DagSession(registry, DagSettings(store="none", **settings), tools=[lookup])


async def test_a_step_whose_next_call_is_refused_ends_cancelled_and_no_verdict_is_asked_for() -> None:
    tool_script = {
        "plan": [plan_reply(("s1", []))],
        "step": [ToolCall("lookup", {"q": "x"}), "done"],  # s1's second call meets the spent budget
        "analyze": [verdict(True, 0.9, "ok", "The answer.")],
    }
    unbudgeted = await session_with_lookup(ScriptedLLM(tool_script, price=PRICE)).run("goal")
    assert [call.purpose for call in unbudgeted.calls] == ["plan", "step", "step", "analyze"]
    budget = sum(call.cost or 0.0 for call in unbudgeted.calls[:2])  # the plan and the step's first call

    llm = ScriptedLLM(tool_script, price=PRICE)
    run = await session_with_lookup(llm, max_cost=budget).run("goal")
    assert [(r.purpose, r.step_id) for r in llm.requests] == [("plan", None), ("step", "s1")]
    step = run.rounds[0].plan.steps[0]
    assert step.status == "cancelled"
    assert step.error == f"Cancelled — the cost budget of {dollars(budget)} was reached ({dollars(budget)} spent)"
    assert run.partial and run.answer.startswith("(goal not achieved)")
    assert "Stopped: the cost budget of" in run.answer


async def test_a_budget_of_nothing_makes_no_call() -> None:
    llm = ScriptedLLM(script(), price=PRICE)
    run = await session_for(llm, max_cost=0.0).run("goal")
    assert [r.purpose for r in llm.requests] == []  # a budget of 0 USD is spent before the first call
    assert run.status == "done" and run.answer.startswith("(goal not achieved)")
    assert "Stopped: the cost budget of 0 USD was reached (0 USD spent)" in run.answer


async def test_a_budget_with_unknown_prices_says_once_that_it_cannot_be_enforced() -> None:
    llm = ScriptedLLM(script())  # no price: every cost is unknown
    run = await session_for(llm, max_cost=0.01).run("goal")
    warnings = [event.message for event in run.events if isinstance(event, RunWarning)]
    said = [message for message in warnings if "cannot be enforced" in message]
    assert said == [
        "The cost budget (0.01 USD) cannot be enforced for calls whose price is unknown: litellm has no price for "
        "model 'scripted', so its calls count as 0 USD against the budget."
    ]
    assert run.achieved and not run.partial and run.answer == "The answer."
    assert len(llm.requests) == 6  # the plan, four steps, the verdict: the budget stopped nothing


async def test_no_budget_changes_nothing() -> None:
    llm = ScriptedLLM(script(), price=PRICE)
    run = await session_for(llm, max_concurrency=1).run("goal")
    assert run.achieved and not run.partial
    assert not [event for event in run.events if isinstance(event, RunWarning)]


async def test_a_reached_goal_keeps_the_verdicts_answer_when_no_budget_is_left_to_write_it_again() -> None:
    no_stream = ("tool_call", "json_mode")  # a smart model that cannot stream has its answer written apart
    run = await session_for(ScriptedLLM(script(), price=PRICE, capabilities=no_stream)).run("goal")
    assert [call.purpose for call in run.calls][-2:] == ["analyze", "synthesize"]
    budget = sum(call.cost or 0.0 for call in run.calls[:-1])  # everything but the answer written apart

    llm = ScriptedLLM(script(), price=PRICE, capabilities=no_stream)
    run = await session_for(llm, max_cost=budget).run("goal")
    assert "synthesize" not in [request.purpose for request in llm.requests]
    assert run.achieved and not run.partial and run.answer == "The answer."
    assert any("the answer is the verdict's" in event.message for event in run.events if isinstance(event, RunWarning))
