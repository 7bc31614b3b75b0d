"""Debugging a run step by step: re-run a step, approve or edit a plan, pause before a step, diff two rounds."""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import dagmagic
from dagmagic import DagError, DagRun, DagSession, DagSettings, ModelRegistry
from dagmagic.diff import RoundDiff
from dagmagic.engine.steps.executor import SKIPPED_BY_USER
from dagmagic.events import StepPaused
from dagmagic.testing import ScriptedLLM, ScriptedRequest

from .conftest import plan_reply, session_for, verdict

CHAIN = plan_reply(("s1", [], "find the base"), ("s2", ["s1"], "double it"), ("s3", ["s2"], "report"), ("s4", []))


def echo_step(request: ScriptedRequest) -> str:
    """A result that shows the step's task and what it was given: changes flow downstream."""
    task = re.search(r"Your task \(\w+\): (.*)", request.prompt)
    seen = re.findall(r"\b(s\d)=([^\n;]*)", request.prompt)
    given = ";".join(f"{sid}<{value[:20]}>" for sid, value in seen)
    return f"{request.step_id}={task.group(1) if task else request.prompt[-40:]};{given}"


def answer_from(request: ScriptedRequest) -> list[str]:
    return ["Answer: " + " | ".join(sorted(set(re.findall(r"s2=[^;\n]*", request.prompt))))]


def script(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "plan": [CHAIN],
        "step": echo_step,
        "analyze": [verdict(True, 0.9, "complete")],
        "synthesize": answer_from,
    }
    return {**base, **overrides}


async def until(condition: Callable[[], bool], what: str, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)


def step_calls(llm: ScriptedLLM, start: int = 0) -> Counter[str]:
    return Counter(str(request.step_id) for request in llm.requests_for("step")[start:])


# --- re-run a step ----------------------------------------------------------------------------------------


async def test_a_rerun_calls_the_model_for_the_step_and_its_dependents_only_and_answers_anew() -> None:
    llm = ScriptedLLM(script())
    run = await session_for(llm).run("goal")
    first_answer, first = run.answer, run.rounds[0]
    before = len(llm.requests_for("step"))
    assert step_calls(llm) == {"s1": 1, "s2": 1, "s3": 1, "s4": 1}

    cleared: list[str] = []
    run.subscribe(lambda event: cleared.append(event.reason) if event.type == "answer_cleared" else None)
    again = await run.rerun("s2", task="triple it")
    assert cleared == ["s2 is re-run: the answer is written again from the new results."]
    assert again is run and run.status == "done"
    assert step_calls(llm, before) == {"s2": 1, "s3": 1}  # s1 and s4 kept their results
    assert len(run.rounds) == 2 and run.rounds[0] is first  # the first round is kept as it was
    redo = run.rounds[1]
    assert (redo.rerun_of, redo.rerun_step, redo.free) == (1, "s2", True)
    assert run.steps["s2"].task == "triple it" and run.steps["s2"].result is not None
    assert run.steps["s2"].result.startswith("s2=triple it")
    assert run.steps["s1"].result == first.plan.step("s1").result and run.steps["s4"].status == "completed"
    assert first.plan.step("s2").task == "double it"  # history not overwritten
    assert "triple it" in run.answer and "triple it" not in first_answer
    judged = llm.requests_for("analyze")[-1].prompt
    assert "double it" not in judged  # the re-run round replaces the one it re-ran
    assert run.rounds[1].decision is not None and "Re-ran s2 of round 1" in run.rounds[1].decision.reason

    diff = run.diff(1, 2)
    changed = {change.id: change.fields for change in diff.changes}
    assert changed == {"s2": ["task", "result"], "s3": ["result"]} and diff.unchanged == ["s1", "s4"]
    assert diff.changes[0].before["task"] == "double it" and diff.changes[0].after["task"] == "triple it"
    assert "| s2 | task, result |" in diff._repr_markdown_()
    assert str(diff).startswith("round 1 -> 2: s2 changed (task, result); s3 changed (result)")


async def test_a_rerun_can_use_another_model_and_replaces_the_runs_answer_in_the_history() -> None:
    main, quick = ScriptedLLM(script()), ScriptedLLM(script())
    registry = (
        ModelRegistry().register("main", main, roles=["smart", "general"]).register("quick", quick, roles=["fast"])
    )
    session = DagSession(registry, DagSettings(store="none"))
    run = await session.run("goal")
    await run.rerun("s4", model="fast")
    assert [r.step_id for r in quick.requests_for("step")] == ["s4"] and run.steps["s4"].model == "quick"
    await run.rerun("s4", model="main")  # a registered model's name works too
    assert run.steps["s4"].model == "main" and len(run.rounds) == 3
    assert len(session.history) == 1 and session.history[0].answer == run.answer  # replaced, not appended


async def test_what_cannot_be_rerun_says_why() -> None:
    llm = ScriptedLLM(script(step=lambda r: asyncio.sleep(5, "late")))
    run = session_for(llm).start("goal")
    await until(lambda: bool(run.steps), "a plan")
    with pytest.raises(DagError, match="once the run has ended"):
        run.start_rerun("s2")
    run.cancel()
    await run
    with pytest.raises(DagError, match="no step 's9' in the latest round \\(its steps: s1, s2, s3, s4\\)"):
        run.start_rerun("s9")
    with pytest.raises(DagError, match="no model or role 'gpt-9'; choose one of: smart, general, fast, reasoning"):
        run.start_rerun("s2", model="gpt-9")


async def test_a_rerun_round_is_stored_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    llm = ScriptedLLM(script())
    run = await DagSession(ModelRegistry().register("m", llm), DagSettings(store=str(path))).run("goal")
    await run.rerun("s2", task="triple it")
    stored = dagmagic.load_run(run.run_id, store=str(path))
    assert [(r.index, r.rerun_of, r.rerun_step) for r in stored.rounds] == [(1, None, None), (2, 1, "s2")]
    assert stored.steps["s2"].task == "triple it" and stored.answer == run.answer


# --- plan approval ---------------------------------------------------------------------------------------


def approving(llm: ScriptedLLM, path: Path | None = None) -> DagSession:
    settings = DagSettings(store=str(path) if path else "none")
    return DagSession(ModelRegistry().register("m", llm), settings, approve_plans=True)


async def test_an_edited_plan_runs_as_edited() -> None:
    llm = ScriptedLLM(script())
    run = approving(llm).start("goal")
    await until(lambda: run.awaiting_approval, "the plan to wait")
    assert run.phase == "awaiting_approval" and run.rounds[0].approval == "pending"
    assert llm.requests_for("step") == []  # nothing ran, nothing is held
    assert [s.status for s in run.plan.steps] == ["pending"] * 4

    with pytest.raises(ValueError, match="the edited plan cannot run: the steps s1, s2 form a cycle"):
        run.approve(
            [{"id": "s1", "task": "a", "dependencies": ["s2"]}, {"id": "s2", "task": "b", "dependencies": ["s1"]}]
        )
    assert run.awaiting_approval  # a bad edit changes nothing

    steps = [step.model_dump() for step in run.plan.steps if step.id != "s3"]  # s3 removed
    steps[1]["task"] = "halve it"
    steps.append({"id": "s5", "task": "compare", "dependencies": ["s2", "s4"]})
    run.approve(steps)
    await run
    assert run.status == "done" and run.rounds[0].approval == "approved"
    assert sorted(step_calls(llm)) == ["s1", "s2", "s4", "s5"]
    assert run.steps["s2"].result is not None and run.steps["s2"].result.startswith("s2=halve it")
    assert list(run.steps) == ["s1", "s2", "s4", "s5"]


async def test_a_rejected_plan_is_planned_again_with_the_reason() -> None:
    llm = ScriptedLLM(script(plan=[CHAIN, plan_reply(("s1", [], "do it all at once"))]))
    run = approving(llm).start("goal")
    await until(lambda: run.awaiting_approval, "the first plan")
    with pytest.raises(ValueError, match="say why"):
        run.reject("  ")
    run.reject("one step is enough")
    await until(lambda: run.awaiting_approval and len(run.rounds) == 2, "the second plan")
    assert "The user rejected this plan: one step is enough" in llm.requests_for("plan")[1].prompt
    first = run.rounds[0]
    assert first.approval == "rejected" and {s.status for s in first.plan.steps} == {"skipped"}
    run.approve()
    await run
    assert run.status == "done" and step_calls(llm) == {"s1": 1} and run.rounds[1].approval == "approved"
    assert run.rounds[1].free  # planned again at the user's word: no budget used


async def test_a_run_waiting_for_approval_can_be_stopped_or_cancelled() -> None:
    llm = ScriptedLLM(script())
    run = approving(llm).start("goal")
    await until(lambda: run.awaiting_approval, "the plan")
    run.stop()
    await run
    assert run.status == "done" and run.partial and llm.requests_for("step") == []
    # the plan was ready: it was not approved, so it did not run (not "before the plan was ready")
    assert run.rounds[0].decision is not None
    assert run.rounds[0].decision.reason == "You stopped the run before approving this round's plan: it did not run."
    assert {s.error for s in run.plan.steps} == {"Skipped — you stopped the run before approving the plan"}
    assert "plan was ready" not in run.answer and "before approving this round's plan" in run.answer
    assert run.stopped_by_user
    with pytest.raises(DagError, match="no plan of this run is waiting for approval \\(the run is done\\)"):
        run.approve()

    other = approving(ScriptedLLM(script())).start("goal")
    await until(lambda: other.awaiting_approval, "the plan")
    other.cancel()
    await other
    assert other.status == "cancelled"


async def test_a_plan_waiting_for_approval_waits_again_after_a_resume(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    run = approving(ScriptedLLM(script()), path).start("goal")
    await until(lambda: run.awaiting_approval, "the plan")
    run.cancel()  # as a kernel restart would leave it
    await run
    fresh = ScriptedLLM(script())
    resumed = approving(fresh, path).start_resume(run.run_id)
    await until(lambda: resumed.awaiting_approval, "the plan to wait again")
    assert fresh.requests_for("plan") == [] and fresh.requests_for("step") == []  # not planned again
    resumed.approve()
    await resumed
    assert resumed.status == "done" and sorted(step_calls(fresh)) == ["s1", "s2", "s3", "s4"]


# --- breakpoints and step-through -------------------------------------------------------------------------


async def test_a_breakpoint_pauses_before_the_step_and_continue_runs_it_with_an_edited_task() -> None:
    llm = ScriptedLLM(script())
    run = session_for(llm, step_timeout=0.2).start("goal")
    run.break_before("s2")
    paused: list[StepPaused] = []
    run.subscribe(lambda event: paused.append(event) if isinstance(event, StepPaused) else None)
    await until(lambda: run.paused == ["s2"], "s2 to pause")
    assert run.steps["s2"].status == "paused" and "s2" not in step_calls(llm)  # no call made for it
    (event,) = paused
    system, user = event.messages
    assert system["role"] == "system" and "double it" in user["content"]
    assert "s1=find the base" in user["content"]  # the dependency context it is about to send
    await asyncio.sleep(0.3)  # longer than the step timeout: a pause does not count against it
    run.resume_step(task="square it")
    await run
    assert run.status == "done" and run.steps["s2"].status == "completed" and step_calls(llm)["s2"] == 1
    assert run.steps["s2"].task == "square it" and "square it" in llm.requests_for("step")[-2].prompt + (
        llm.requests_for("step")[-1].prompt
    )
    with pytest.raises(DagError, match="no step is paused \\(the run is done\\)"):
        run.resume_step()


async def test_step_through_runs_exactly_one_step_per_step() -> None:
    llm = ScriptedLLM(script())
    run = DagSession(ModelRegistry().register("m", llm), DagSettings(store="none"), step_through=True).start("goal")
    order = []
    while True:
        await until(lambda: bool(run.paused) or run.done(), "a paused step or the end")
        if run.done():
            break
        running = [s.id for s in run.steps.values() if s.status in ("queued", "running")]
        assert running == []  # everything else waits
        calls = len(llm.requests_for("step"))
        sid = run.paused[0]
        run.step_over()
        await until(lambda sid=sid: run.steps[sid].status == "completed", f"{sid} to complete")
        await asyncio.sleep(0.02)  # anything else that would start starts now
        assert len(llm.requests_for("step")) == calls + 1  # that step, and only it
        order.append(sid)
    assert sorted(order) == ["s1", "s2", "s3", "s4"] and run.status == "done"


async def test_skip_skips_a_paused_step_and_what_needs_it() -> None:
    llm = ScriptedLLM(script(analyze=[verdict(False, 0.9, "s2 was skipped")]))
    run = session_for(llm).start("goal")
    run.break_before("s2")
    await until(lambda: run.paused == ["s2"], "s2 to pause")
    run.skip("s2")
    await run
    assert run.steps["s2"].status == "skipped" and run.steps["s2"].error == SKIPPED_BY_USER
    assert run.steps["s3"].error == "Skipped — dependency s2 skipped" and run.steps["s4"].status == "completed"
    assert "s2" not in step_calls(llm)


async def test_a_stop_while_a_step_is_paused_skips_it_and_answers() -> None:
    llm = ScriptedLLM(script())
    run = session_for(llm).start("goal")
    run.break_before("s2")
    await until(lambda: run.paused == ["s2"], "s2 to pause")
    run.stop()
    await run
    assert run.status == "done" and run.answer and run.steps["s2"].status == "skipped" and run.paused == []
    assert "s2" not in step_calls(llm)


async def test_a_run_read_back_cannot_be_debugged_here(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    run = await DagSession(ModelRegistry().register("m", ScriptedLLM(script())), DagSettings(store=str(path))).run("g")
    stored: DagRun = dagmagic.load_run(run.run_id, store=str(path))
    for action in (lambda: stored.start_rerun("s2"), stored.approve, lambda: stored.break_before("s1")):
        with pytest.raises(DagError, match="read back from the run store"):
            action()
    assert isinstance(stored.diff(1, 1), RoundDiff) and stored.diff(1, 1).changes == []


async def test_a_round_keeps_the_follow_ups_it_was_planned_for(tmp_path: Path) -> None:
    gate = asyncio.Event()

    async def slow(request: ScriptedRequest) -> str:
        if request.round == 1:
            await gate.wait()
        return echo_step(request)

    verdicts = [verdict(False, 0.3, "the euros are missing"), verdict(True, 0.9, "complete")]
    llm = ScriptedLLM(script(step=slow, plan=[CHAIN, plan_reply(("s1", [], "in euros"))], analyze=verdicts))
    path = tmp_path / "runs.sqlite"
    run = DagSession(ModelRegistry().register("m", llm), DagSettings(store=str(path))).start("goal")
    await until(lambda: any(s.status == "running" for s in run.steps.values()), "a running step")
    run.follow_up("and in euros")
    gate.set()
    await run
    assert [r.follow_ups for r in run.rounds] == [[], ["and in euros"]]
    stored = dagmagic.load_run(run.run_id, store=str(path))
    assert [r.follow_ups for r in stored.rounds] == [[], ["and in euros"]]

    from dagmagic.notebook.widget import widget_state

    second = widget_state(run)["rounds"][1]
    assert second["follow_ups"] == ["and in euros"] and second["diff_base"] == 1 and second["diff"]
    assert widget_state(run)["rounds"][0]["diff"] is None
