"""A run's cost budget (``DAG_MAX_COST``): no LLM call starts unless its estimate fits in what is left; once one
does not, nothing more starts and the run answers from what completed."""

from __future__ import annotations

import re
from typing import Any

import pytest

from dagmagic import DagSession, DagSettings, ModelRegistry
from dagmagic.events import AnswerReady, RunWarning
from dagmagic.llm.budget import dollars
from dagmagic.testing import ScriptedLLM, ToolCall

from .conftest import plan_reply, session_for, verdict

FOUR_STEPS = plan_reply(("s1", []), ("s2", []), ("s3", []), ("s4", ["s3"]))
PRICE = (1e-4, 2e-4)
JSON_MODE = ("json_mode", "stream")
"""Structured output without a tool schema in the prompt: a provider counts a schema as input (so does a call's
estimate), ScriptedLLM does not; without one, a call's estimate is close to what it costs here."""


def script() -> dict[str, Any]:
    return {
        "plan": [FOUR_STEPS],
        "step": lambda request: f"result of {request.step_id}",
        "analyze": [verdict(True, 0.9, "all found", "The answer.")],
        "synthesize": [["The ", "answer."]],
    }


def budgeted(llm: ScriptedLLM, reply_tokens: int = 8, **settings: Any) -> DagSession:
    """A session whose model writes at most ``reply_tokens`` a reply (its ``max_tokens``): each call's estimate
    is its prompt and that many tokens of reply."""
    registry = ModelRegistry().register("scripted", llm, max_tokens=reply_tokens)
    return DagSession(registry, DagSettings(store="none", **settings))


async def costs_without_budget() -> dict[str, float]:
    """What each call of the scripted run costs, by purpose or step, measured on a run with no budget."""
    llm = ScriptedLLM(script(), price=PRICE, capabilities=JSON_MODE)
    run = await session_for(llm, max_concurrency=1).run("goal")
    return {call.step_id or call.purpose: call.cost or 0.0 for call in run.calls}


REFUSED = r"the cost budget of {budget} was reached \({spent} spent, the next call estimated at \d+(\.\d+)? USD\)"
"""What a budget says when it refused a call whose estimate did not fit in what was left."""


async def test_a_budget_stops_a_run_mid_round_with_a_partial_answer_from_what_completed() -> None:
    costs = await costs_without_budget()
    # s2's estimate (about what it costs) does not fit in the half of it left: s2 does not start, nor anything after
    budget = costs["plan"] + costs["s1"] + costs["s2"] / 2
    llm = ScriptedLLM(script(), price=PRICE, capabilities=JSON_MODE)
    run = await budgeted(llm, max_concurrency=1, max_cost=budget).run("goal")

    assert [(r.purpose, r.step_id) for r in llm.requests] == [("plan", None), ("step", "s1")]
    steps = {step.id: step for step in run.rounds[0].plan.steps}
    assert (steps["s1"].status, steps["s1"].result) == ("completed", "result of s1")
    spent = costs["plan"] + costs["s1"]
    said = REFUSED.format(budget=re.escape(dollars(budget)), spent=re.escape(dollars(spent)))
    assert steps["s2"].status == "cancelled" and re.fullmatch(f"Cancelled — {said}", steps["s2"].error or "")
    said = (steps["s2"].error or "").removeprefix("Cancelled — ")
    assert steps["s3"].status == steps["s4"].status == "skipped"
    assert steps["s3"].error == steps["s4"].error == f"Skipped — {said}"

    assert run.status == "done" and run.partial and not run.achieved
    decision = run.rounds[0].decision
    assert decision is not None and decision.reason == f"Stopped: {said}: answering from what completed."
    assert run.answer.startswith(f"*Stopped: {said}: here are the results of the steps that completed.*")
    assert "$" not in run.answer  # JupyterLab and GitHub would typeset the words between two dollars as math
    assert "result of s1" in run.answer
    ready = [event for event in run.events if isinstance(event, AnswerReady)]
    assert len(ready) == 1 and ready[0].partial and ready[0].fallback
    assert run.cost == pytest.approx(spent)


async def test_a_call_that_does_not_fit_beside_the_calls_under_way_waits_for_them_to_end() -> None:
    costs = await costs_without_budget()
    reply_tokens = 400  # each call holds 400 tokens of reply (0.08 USD) and writes a few
    estimate = costs["s1"] + reply_tokens * PRICE[1]  # about a step's: its prompt and the reply it may write
    # s1 and s2 are ready at once: their estimates do not fit together; s2's fits once s1 cost what it did; s3's
    # does not fit after s2
    budget = costs["plan"] + costs["s1"] + estimate + costs["s2"] / 2
    llm = ScriptedLLM(script(), price=PRICE, capabilities=JSON_MODE, latency={"step": 0.02})
    run = await budgeted(llm, reply_tokens, max_concurrency=2, max_cost=budget).run("goal")

    assert [r.step_id or r.purpose for r in llm.requests] == ["plan", "s1", "s2"]
    calls = {call.step_id: call for call in run.calls if call.purpose == "step"}
    assert calls["s2"].started_at >= calls["s1"].started_at + calls["s1"].latency  # it waited for s1 to end
    assert [step.status for step in run.rounds[0].plan.steps] == ["completed", "completed", "cancelled", "skipped"]
    assert run.partial and run.cost is not None and run.cost <= budget


def lookup(q: str) -> str:
    """Look it up."""
    return "found"


def session_with_lookup(llm: ScriptedLLM, **settings: Any) -> DagSession:
    registry = ModelRegistry().register("scripted", llm, max_tokens=8)
    return DagSession(registry, DagSettings(store="none", **settings), tools=[lookup])


async def test_a_step_whose_next_call_is_refused_ends_cancelled_and_no_verdict_is_asked_for() -> None:
    tool_script = {
        "plan": [plan_reply(("s1", []))],
        "step": [ToolCall("lookup", {"q": "x"}), "done"],  # s1's second call does not fit in what is left
        "analyze": [verdict(True, 0.9, "ok", "The answer.")],
    }
    unbudgeted = await session_with_lookup(ScriptedLLM(tool_script, price=PRICE, capabilities=JSON_MODE)).run("goal")
    assert [call.purpose for call in unbudgeted.calls] == ["plan", "step", "step", "analyze"]
    costs = [call.cost or 0.0 for call in unbudgeted.calls]
    budget = costs[0] + costs[1] + costs[2] / 2  # the plan, the step's first call and half its second

    llm = ScriptedLLM(tool_script, price=PRICE, capabilities=JSON_MODE)
    run = await session_with_lookup(llm, max_cost=budget).run("goal")
    assert [(r.purpose, r.step_id) for r in llm.requests] == [("plan", None), ("step", "s1")]
    step = run.rounds[0].plan.steps[0]
    assert step.status == "cancelled"
    said = REFUSED.format(budget=re.escape(dollars(budget)), spent=re.escape(dollars(costs[0] + costs[1])))
    assert re.fullmatch(f"Cancelled — {said}", step.error or "")
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
    no_stream = ("json_mode",)  # a smart model that cannot stream has its answer written apart
    run = await session_for(ScriptedLLM(script(), price=PRICE, capabilities=no_stream)).run("goal")
    assert [call.purpose for call in run.calls][-2:] == ["analyze", "synthesize"]
    # everything but the answer written apart, and half of that: its estimate does not fit
    budget = sum(call.cost or 0.0 for call in run.calls[:-1]) + (run.calls[-1].cost or 0.0) / 2

    llm = ScriptedLLM(script(), price=PRICE, capabilities=no_stream)
    run = await budgeted(llm, max_cost=budget).run("goal")
    assert "synthesize" not in [request.purpose for request in llm.requests]
    assert run.achieved and not run.partial and run.answer == "The answer."
    assert any("the answer is the verdict's" in event.message for event in run.events if isinstance(event, RunWarning))


SIX_STEPS = plan_reply(*[(f"s{n}", []) for n in range(1, 7)])
PARALLEL_PRICE = (1e-6, 1e-5)
"""USD per input and output token: output dearer, as providers price it."""
STEP_REPLY = "word " * 800
"""A step's reply: 1,001 tokens by ScriptedLLM's count, within the 1,024 a step's call is expected to write."""


def six_steps_script() -> dict[str, Any]:
    return {
        "plan": [SIX_STEPS],
        "step": lambda request: f"{STEP_REPLY}{request.step_id}",
        "analyze": [verdict(True, 0.9, "all found", "The answer.")],
        "synthesize": [["The ", "answer."]],
    }


@pytest.mark.parametrize(
    ("planning", "settings", "in_flight"),
    [
        ("streaming", {"max_concurrency": 6}, 7),  # six steps and the plan still streaming
        ("whole", {"max_concurrency": 6, "streaming_planner": False}, 6),
        ("concurrency 1", {"max_concurrency": 1, "streaming_planner": False}, 1),
    ],
)
async def test_six_parallel_steps_pass_a_budget_of_about_one_step_by_at_most_the_estimates_errors(
    planning: str, settings: dict[str, Any], in_flight: int
) -> None:
    unbudgeted = await session_for(ScriptedLLM(six_steps_script(), price=PARALLEL_PRICE), **settings).run("goal")
    costs = {call.step_id or call.purpose: call.cost or 0.0 for call in unbudgeted.calls}
    budget = costs["plan"] + 1.5 * costs["s1"]  # the plan and about one step
    # docs/budgets.md's bound: the spend passes the budget by at most what the calls in flight when the last one
    # started cost beyond their estimates. Each reply here is within its purpose's expected length, so a
    # call's estimate can only miss its prompt's tokens: at most that prompt's cost, per call in flight (the
    # plan's and the steps': the verdict's, with every result in its prompt, is never in flight beside them).
    prompt_costs = [
        call.usage.input_tokens * PARALLEL_PRICE[0] for call in unbudgeted.calls if call.purpose != "analyze"
    ]
    bound = budget + in_flight * max(prompt_costs)

    llm = ScriptedLLM(six_steps_script(), price=PARALLEL_PRICE, latency={"step": 0.05})
    run = await session_for(llm, max_cost=budget, **settings).run("goal")

    assert run.cost is not None
    assert run.cost <= bound, (
        f"{planning}: spent {run.cost:.5f} USD = {run.cost / budget:.2f}x the budget of {budget:.5f} USD "
        f"(bound {bound:.5f}); calls: {[r.step_id or r.purpose for r in llm.requests]}"
    )
    steps = run.rounds[0].plan.steps
    assert any(step.status == "completed" for step in steps)  # the budget was used, not refused at once
    assert run.partial and "Stopped: the cost budget of" in run.answer
    assert all(step.status == "completed" or "the cost budget of" in (step.error or "") for step in steps)
