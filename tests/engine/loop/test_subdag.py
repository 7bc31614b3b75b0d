"""Composite steps: a step marked ``subplan`` runs as a nested DAG in the same run, bounded by DAG_MAX_DEPTH."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import dagmagic
from dagmagic import DagRun, DagSession, DagSettings, ModelRegistry
from dagmagic.engine.calls import prompts
from dagmagic.testing import ScriptedLLM, ScriptedRequest
from tests.engine.conftest import verdict, with_a_reasoning_model

NESTED = "This is one step of a larger goal"
OUTER = {
    "steps": [
        {"id": "s1", "task": "gather the facts"},
        {"id": "s2", "task": "compare three markets in depth", "dependencies": ["s1"], "tool_hint": "subplan"},
        {"id": "s3", "task": "write it up", "dependencies": ["s2"]},
    ]
}
INNER = {
    "steps": [
        {"id": "s1", "task": "look at each market"},
        {"id": "s2", "task": "weigh them", "dependencies": ["s1"], "tool_hint": "subplan"},  # one level too deep
    ]
}


def plan(request: ScriptedRequest) -> dict[str, Any]:
    return INNER if NESTED in request.prompt else OUTER


def step(request: ScriptedRequest) -> str:
    where = "inner" if NESTED in request.prompt else "outer"
    return f"{where} {request.step_id} result"


def synthesize(request: ScriptedRequest) -> list[str]:
    return ["nested answer"] if NESTED in request.messages[-1]["content"] else ["top answer"]


def session(path: Path | None = None, **settings: Any) -> tuple[DagSession, ScriptedLLM]:
    llm = ScriptedLLM(
        {
            "plan": plan,
            "step": step,
            "analyze": lambda request: verdict(True, 0.9, "fine"),
            "synthesize": synthesize,
        }
    )
    store = str(path) if path else "none"
    return DagSession(with_a_reasoning_model(llm), DagSettings(store=store, **settings)), llm


async def test_a_composite_step_runs_as_a_nested_dag_whose_answer_is_its_result(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    sess, llm = session(path)
    run = await sess.run("which market should we enter?")
    assert run.status == "done" and run.answer == "top answer"
    s2 = run.steps["s2"]
    assert s2.status == "completed" and s2.result == "nested answer"
    assert run.steps["s3"].status == "completed" and "nested answer" in llm.requests_for("step")[-1].prompt
    assert run.steps["s1"].result == "outer s1 result"  # the nested run's own s1 touched nothing here

    sub = s2.subrun
    assert isinstance(sub, DagRun) and sub.status == "done" and sub.answer == "nested answer"
    assert {sid: st.result for sid, st in sub.steps.items()} == {"s1": "inner s1 result", "s2": "inner s2 result"}
    assert "compare three markets in depth" in sub.goal and "which market should we enter?" in sub.goal
    assert "outer s1 result" in sub.goal  # what the step depends on reaches its nested plan

    paths = {(call.purpose, call.step_id) for call in run.calls}
    assert {("plan", "s2"), ("step", "s2/s1"), ("step", "s2/s2"), ("analyze", "s2"), ("synthesize", "s2")} <= paths
    assert all(call.round == 1 for call in run.calls if call.step_id and call.step_id.startswith("s2"))
    assert s2.usage.requests == sum(1 for c in run.calls if c.step_id and c.step_id.split("/")[0] == "s2")

    nested_events = [e for e in run.events if e.depth]
    assert nested_events and {e.scope for e in nested_events} == {"s2"} and {e.depth for e in nested_events} == {1}
    assert [e.type for e in nested_events][:2] == ["run_started", "phase_changed"]
    assert all(e.depth == 0 for e in sub.events)  # the nested run's own log is its own

    # depth limit 1: the nested planner is not offered composite steps, and its "subplan" step ran as a step
    outer_prompt, inner_prompt = (r.prompt for r in llm.requests_for("plan"))
    assert "subplan for a step too big" in outer_prompt and "subplan" not in inner_prompt
    # the run's plan is asked for the goal's domain; a subrun's is not (it has no domain routing)
    assert prompts.PLANNER_DOMAIN_ASK in outer_prompt and "domain" not in inner_prompt
    assert len(llm.requests_for("plan")) == 2

    stored = dagmagic.load_run(run.run_id, store=str(path))
    assert stored.steps["s1"].result == "outer s1 result" and stored.steps["s2"].result == "nested answer"
    assert [s.id for s in stored.steps["s2"].subrun.plan.steps] == ["s1", "s2"]
    assert stored.calls == run.calls


async def test_depth_zero_runs_a_composite_step_as_an_ordinary_step() -> None:
    sess, llm = session(max_depth=0)
    run = await sess.run("goal")
    assert run.steps["s2"].result == "outer s2 result" and run.steps["s2"].subrun is None
    assert len(llm.requests_for("plan")) == 1 and '"subplan"' not in llm.requests_for("plan")[0].prompt


async def test_a_stop_reaches_the_nested_run() -> None:
    sess, llm = session()
    gate = asyncio.Event()

    async def slow(request: ScriptedRequest) -> str:
        if NESTED in request.prompt:
            gate.set()
            await asyncio.sleep(0.3)
        return step(request)

    llm.script["step"] = slow
    run = sess.start("goal")
    await gate.wait()
    run.stop()
    await run
    sub = run.rounds[0].plan.step("s2").subrun
    assert sub is not None and sub.steps["s2"].status == "skipped"  # its steps not started were skipped
    assert run.status == "done" and run.steps["s3"].status == "skipped"


async def test_a_subrun_spends_its_runs_cost_budget_and_both_stop_when_it_is_reached() -> None:
    def priced_session(**settings: Any) -> tuple[DagSession, ScriptedLLM]:
        llm = ScriptedLLM(
            {"plan": plan, "step": step, "analyze": lambda r: verdict(True, 0.9, "fine"), "synthesize": synthesize},
            price=(1e-4, 2e-4),
            capabilities=("json_mode", "stream"),  # no tool schema in a prompt: estimates near what calls cost here
        )
        registry = ModelRegistry().register("m", llm, max_tokens=8)  # a call's estimate: its prompt and 8 tokens
        return DagSession(registry, DagSettings(store="none", **settings)), llm

    unbudgeted = await priced_session()[0].run("which market should we enter?")
    order = [(call.purpose, call.step_id) for call in unbudgeted.calls]
    inner_first = order.index(("step", "s2/s1"))
    spent = [call.cost or 0.0 for call in unbudgeted.calls]
    # the subrun's first step fits; its second (about as dear) does not fit in the half step left
    budget = sum(spent[: inner_first + 1]) + spent[inner_first] / 2

    sess, llm = priced_session(max_cost=budget)
    run = await sess.run("which market should we enter?")
    assert [(call.purpose, call.step_id) for call in run.calls] == order[: inner_first + 1]
    assert len(llm.requests) == inner_first + 1  # nothing after the subrun's first step called the model
    sub = run.steps["s2"].subrun
    assert isinstance(sub, DagRun) and sub.partial and sub.steps["s2"].status == "cancelled"
    assert "the cost budget of" in (sub.steps["s2"].error or "")
    assert "Stopped: the cost budget of" in sub.answer and "inner s1 result" in sub.answer
    assert run.steps["s3"].status == "skipped" and run.partial
    assert "inner s1 result" in run.answer and "Stopped: the cost budget of" in run.answer
