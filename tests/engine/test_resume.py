"""Resuming a run that did not end: after SIGKILL in another process, after a cancel, in every phase."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from dagmagic import DagError, DagSession, DagSettings, ModelRegistry
from dagmagic.engine.calls import prompts
from dagmagic.engine.loop.decisions import INTERRUPTED_WHILE_PLANNING
from dagmagic.errors import RateLimitError
from dagmagic.events import PlanReady
from dagmagic.llm.protocol import ChatRequest, StreamChunk
from dagmagic.store import RunStore
from dagmagic.testing import ScriptedLLM, ScriptedRequest, ToolCall

from ..stored import step_statuses
from .conftest import plan_reply, verdict, with_a_reasoning_model

CHILD = textwrap.dedent(
    """
    import asyncio, json, pathlib, re, sys
    from dagmagic import DagSession, DagSettings, ModelRegistry
    from dagmagic.testing import ScriptedLLM

    store, calls, mode, run_id = sys.argv[1:5]

    async def step(request):
        with pathlib.Path(calls).open("a") as log:
            log.write(request.step_id + "\\n")
        if mode == "start" and request.step_id == "s3":
            await asyncio.sleep(3600)  # killed while it runs
        return f"value of {request.step_id}"

    def synthesize(request):
        return ["Answer from " + ", ".join(sorted(set(re.findall(r"value of s[0-9]", request.prompt))))]

    plan = {"steps": [
        {"id": "s1", "task": "first half"}, {"id": "s2", "task": "second half"},
        {"id": "s3", "task": "combine", "dependencies": ["s1", "s2"]},
        {"id": "s4", "task": "check", "dependencies": ["s3"]},
    ]}
    script = {
        "plan": [plan], "step": step, "synthesize": synthesize,
        "analyze": [{"achieved": True, "confidence": 0.9, "reasoning": "complete"}],
    }

    async def main():
        session = DagSession(ModelRegistry().register("m", ScriptedLLM(script)), DagSettings(store=store))
        run = await (session.resume(run_id) if mode == "resume" else session.run("the goal"))
        print(json.dumps({"run_id": run.run_id, "status": run.status, "answer": run.answer}))

    asyncio.run(main())
    """
)


def child(store: Path | str, calls: Path, mode: str, run_id: str = "-") -> subprocess.Popen[str]:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    command = [sys.executable, "-c", CHILD, str(store), str(calls), mode, run_id]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def test_a_run_killed_mid_way_is_resumed_in_a_fresh_process_and_nothing_completed_runs_twice(
    store_path: Path | str, tmp_path: Path
) -> None:
    store, calls = store_path, tmp_path / "calls.txt"
    first = child(store, calls, "start")
    deadline = time.monotonic() + 60
    while step_statuses(store) != {"s1": "completed", "s2": "completed", "s3": "running", "s4": "pending"}:
        assert time.monotonic() < deadline and first.poll() is None, step_statuses(store)
        time.sleep(0.05)
    os.kill(first.pid, signal.SIGKILL)
    first.communicate(timeout=30)  # reaped, its pipes closed
    (summary,) = RunStore.open(store).runs()
    assert summary.status == "running" and summary.interrupted  # its process is gone

    second = child(store, calls, "resume", summary.run_id)
    out, err = second.communicate(timeout=120)
    assert second.returncode == 0, err
    resumed = json.loads(out)

    counts = Counter(calls.read_text().split())
    assert counts == {"s1": 1, "s2": 1, "s3": 2, "s4": 1}  # s3 had started: it runs again; s1, s2 do not
    whole = child(tmp_path / "whole.sqlite", tmp_path / "whole-calls.txt", "whole")
    reference = json.loads(whole.communicate(timeout=120)[0])
    assert resumed["status"] == "done" and resumed["run_id"] == summary.run_id
    assert resumed["answer"] == reference["answer"] == "Answer from value of s1, value of s2, value of s3, value of s4"
    assert not RunStore.open(store).runs()[0].interrupted


# --- in one process: cancelled, then resumed


def script(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "plan": [plan_reply(("s1", []), ("s2", ["s1"]))],
        "step": lambda r: f"result of {r.step_id} in round {r.round}",
        "analyze": [verdict(True, 0.9, "all found")],
        "synthesize": [["The ", "answer."]],
    }
    return {**base, **overrides}


def session(path: Path | str, llm: ScriptedLLM, **settings: Any) -> DagSession:
    return DagSession(ModelRegistry().register("scripted", llm), DagSettings(store=str(path), **settings))


def routed_session(path: Path | str, llm: ScriptedLLM, **settings: Any) -> DagSession:
    """Two models behind the roles: the planner says the goal's domain."""
    return DagSession(with_a_reasoning_model(llm), DagSettings(store=str(path), **settings))


async def cancel_when(run: Any, ready: Any) -> None:
    while not ready():
        await asyncio.sleep(0.005)
    run.cancel()
    await run


async def test_a_step_waiting_for_its_retry_keeps_its_tier_and_its_time_after_a_resume(
    store_path: Path | str, tmp_path: Path
) -> None:
    path = store_path
    tries: list[tuple[str, float]] = []

    def flaky(request: ScriptedRequest) -> str:
        tries.append((str(request.step_id), time.time()))
        if request.step_id == "s1" and len(tries) <= 3:  # the try, the immediate retry, then one after the resume
            raise RateLimitError("429 slow down", model="scripted")
        return "ok"

    settings = {"step_immediate_retries": 1, "step_retry_delays": (0.6, 0.2), "llm_retries": 0}
    run = session(path, ScriptedLLM(script(step=flaky)), **settings).start("goal")
    await cancel_when(run, lambda: run.steps.get("s1") is not None and run.steps["s1"].status == "retrying")
    waiting = RunStore.open(path).load(run.run_id).state.rounds[0].plan.step("s1")
    assert (waiting.status, waiting.failures) == ("cancelled", 2) and waiting.retry_at is not None

    resumed = await session(path, ScriptedLLM(script(step=flaky)), **settings).resume(run.run_id)
    s1 = resumed.steps["s1"]
    assert resumed.status == "done" and s1.status == "completed" and s1.failures == 3
    third, fourth = tries[2][1], tries[3][1]
    assert third >= waiting.retry_at - 0.01  # waited out its first delay, not restarted from tier one
    assert fourth - third >= 0.2 * 0.9  # then its second delay


async def test_a_step_interrupted_after_its_tool_call_continues_from_its_transcript_on_resume(
    store_path: Path | str, tmp_path: Path
) -> None:
    path = store_path
    ledger: list[str] = []

    def pay(amount: int) -> str:
        """Pays an invoice."""
        ledger.append(f"paid {amount}")
        return f"paid {amount}, receipt 7"

    async def step(request: ScriptedRequest) -> Any:
        if request.step_id != "s1":
            return "checked"
        if not any(message["role"] == "tool" for message in request.messages):
            return ToolCall("pay", {"amount": 100})
        await asyncio.Event().wait()  # the run is interrupted while the model reads the receipt
        return "never"

    def resumed_step(request: ScriptedRequest) -> Any:
        if request.step_id == "s1" and not any(message["role"] == "tool" for message in request.messages):
            return ToolCall("pay", {"amount": 100})  # what a step started afresh would do again
        return "Paid 100 (receipt 7)." if request.step_id == "s1" else "checked"

    first = ScriptedLLM(script(step=step))
    run = DagSession(ModelRegistry().register("scripted", first), DagSettings(store=str(path)), tools=[pay])
    started = run.start("pay the invoice")
    await cancel_when(started, lambda: len(first.requests_for("step", "s1")) == 2)
    stored = RunStore.open(path).load(started.run_id).state.rounds[0].plan.step("s1")
    assert stored.status == "cancelled" and [c.observation for c in stored.tool_calls] == ["paid 100, receipt 7"]

    second = ScriptedLLM(script(step=resumed_step))
    fresh = DagSession(ModelRegistry().register("scripted", second), DagSettings(store=str(path)), tools=[pay])
    resumed = await fresh.resume(started.run_id)

    assert resumed.status == "done" and resumed.steps["s1"].result == "Paid 100 (receipt 7)."
    assert ledger == ["paid 100"]  # the payment that returned before the interruption was not made again
    (continued,) = second.requests_for("step", "s1")
    assert continued.messages[-1]["role"] == "tool" and continued.messages[-1]["content"] == "paid 100, receipt 7"


async def test_a_run_cancelled_while_planning_plans_again_on_resume(store_path: Path | str, tmp_path: Path) -> None:
    path = store_path
    planning = asyncio.Event()

    async def slow_plan(request: ScriptedRequest) -> dict[str, Any]:
        planning.set()
        await asyncio.sleep(5)
        return plan_reply(("s1", []))

    run = routed_session(path, ScriptedLLM(script(plan=slow_plan)), streaming_planner=False).start("goal")
    await cancel_when(run, planning.is_set)
    llm = ScriptedLLM(script())
    resumed = await routed_session(path, llm, streaming_planner=False).resume(run.run_id)
    assert resumed.status == "done" and len(resumed.rounds) == 1 and len(llm.requests_for("plan")) == 1
    # the interrupted plan never said the goal's domain: the plan made on resume is asked for it
    assert prompts.PLANNER_DOMAIN_ASK in llm.requests_for("plan")[0].messages[0]["content"]


async def test_a_resumed_run_keeps_the_domain_its_first_plan_said(store_path: Path | str, tmp_path: Path) -> None:
    path = store_path
    stepping = asyncio.Event()

    async def slow_step(request: ScriptedRequest) -> str:
        stepping.set()
        await asyncio.sleep(5)
        return "late"

    legal = {"domain": "legal", **plan_reply(("s1", []))}
    run = routed_session(path, ScriptedLLM(script(plan=[legal], step=slow_step)), streaming_planner=False).start("goal")
    await cancel_when(run, stepping.is_set)
    llm = ScriptedLLM(script(plan=[plan_reply(("s1", []))], analyze=[verdict(False, 0.2, "no"), verdict(True, 0.9)]))
    resumed = await routed_session(path, llm, streaming_planner=False).resume(run.run_id)
    assert resumed.status == "done" and resumed.state.domain == "legal" and len(resumed.rounds) == 2
    (replan,) = llm.requests_for("plan")  # round 2: steered by the stored domain, not asked again
    assert prompts.PLANNER_DOMAIN.format(domain="legal") in replan.messages[0]["content"]
    assert prompts.PLANNER_DOMAIN_ASK not in replan.messages[0]["content"]


class HeldPlan(ScriptedLLM):
    """Streams the plan's first piece, then holds the rest until the run is cancelled."""

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamChunk]:
        async for number, chunk in aenumerate(super().stream(request)):
            if request.purpose == "plan" and number == 1:
                await asyncio.Event().wait()  # never set: the rest of the plan is not written
            yield chunk


async def aenumerate(chunks: AsyncIterator[StreamChunk]) -> AsyncIterator[tuple[int, StreamChunk]]:
    number = 0
    async for chunk in chunks:
        yield number, chunk
        number += 1


@pytest.mark.parametrize("s2_done", [True, False], ids=["s1-s2-completed", "s2-running"])
async def test_a_run_cancelled_while_its_plan_streams_plans_the_rest_on_resume(
    store_path: Path | str, tmp_path: Path, s2_done: bool
) -> None:
    path = store_path
    calls: Counter[str] = Counter()
    running = asyncio.Event()

    async def step(request: ScriptedRequest) -> str:
        calls[str(request.step_id)] += 1
        if request.step_id == "s2" and not s2_done and calls["s2"] == 1:
            running.set()
            await asyncio.Event().wait()  # still running when the run is cancelled
        return f"value of {request.step_id}"

    def synthesize(request: ScriptedRequest) -> list[str]:
        return ["Answer from " + ", ".join(sorted(set(re.findall(r"value of s[0-9]", request.prompt))))]

    head = '{"steps": [{"id": "s1", "task": "a"}, {"id": "s2", "task": "b", "dependencies": ["s1"]}, '
    tail = '{"id": "s3", "task": "c", "dependencies": ["s2"]}]}'
    first = HeldPlan(script(plan=[[head, tail]], step=step), capabilities=("json_mode", "stream"))
    run = session(path, first).start("goal")

    def ready() -> bool:
        steps = run.steps
        if s2_done:
            return all(sid in steps and steps[sid].status == "completed" for sid in ("s1", "s2"))
        return running.is_set() and steps["s1"].status == "completed"

    await cancel_when(run, ready)
    assert list(run.steps) == ["s1", "s2"] and not any(isinstance(e, PlanReady) for e in run.events)

    again = [("s3", ["r1.s2"], "c")] if s2_done else [("s2", ["r1.s1"], "b"), ("s3", ["s2"], "c")]
    llm = ScriptedLLM(
        script(plan=[plan_reply(*again)], step=step, synthesize=synthesize), capabilities=("json_mode", "stream")
    )
    resumed = await session(path, llm).resume(run.run_id)

    assert resumed.status == "done" and resumed.achieved
    assert resumed.answer == "Answer from value of s1, value of s2, value of s3"
    assert calls == {"s1": 1, "s2": 1 if s2_done else 2, "s3": 1}  # nothing completed ran again
    interrupted, replanned = resumed.rounds
    assert interrupted.decision is not None and interrupted.decision.reason == INTERRUPTED_WHILE_PLANNING
    assert not replanned.free  # it took the interrupted round's place: the budget is as if nothing happened
    statuses = {"s1": "completed", "s2": "completed" if s2_done else "cancelled"}
    assert {s.id: s.status for s in interrupted.plan.steps} == statuses
    (planning,) = llm.requests_for("plan")
    assert "r1.s1 (completed)" in planning.prompt and f"r1.s2 ({statuses['s2']})" in planning.prompt
    stored = RunStore.open(path).load(run.run_id).state
    assert [{s.id: s.status for s in r.plan.steps} for r in stored.rounds] == [
        statuses,
        {s.id: "completed" for s in replanned.plan.steps},
    ]


async def test_a_follow_up_not_yet_planned_for_is_planned_after_a_resume(
    store_path: Path | str, tmp_path: Path
) -> None:
    path = store_path
    running = asyncio.Event()

    async def slow_step(request: ScriptedRequest) -> str:
        running.set()
        await asyncio.sleep(5)
        return "late"

    run = session(path, ScriptedLLM(script(step=slow_step))).start("goal")
    await running.wait()
    run.follow_up("also cover Spain")
    await cancel_when(run, lambda: True)
    llm = ScriptedLLM(script(analyze=[verdict(False, 0.3, "Spain missing"), verdict(True, 0.9, "ok")]))
    resumed = await session(path, llm).resume(run.run_id)
    assert resumed.status == "done" and resumed.follow_ups == ["also cover Spain"]
    assert "[User follow-up]: also cover Spain" in llm.requests_for("plan")[-1].prompt
    assert resumed.rounds[-1].free  # the follow-up's round used no budget


async def test_a_round_already_decided_goes_on_from_its_decision(store_path: Path | str, tmp_path: Path) -> None:
    path = store_path
    answering = asyncio.Event()

    async def slow_answer(request: ScriptedRequest) -> list[str]:
        answering.set()
        await asyncio.sleep(5)
        return ["never"]

    run = session(path, ScriptedLLM(script(synthesize=slow_answer))).start("goal")
    await cancel_when(run, answering.is_set)
    llm = ScriptedLLM(script())
    resumed = await session(path, llm).resume(run.run_id)
    assert resumed.answer == "The answer." and resumed.status == "done"
    assert llm.requests_for("plan") == [] and llm.requests_for("step") == [] and llm.requests_for("analyze") == []


async def test_what_cannot_be_resumed_says_why(store_path: Path | str, tmp_path: Path) -> None:
    path = store_path
    finished = await session(path, ScriptedLLM(script())).run("goal")
    s = session(path, ScriptedLLM(script()))
    with pytest.raises(DagError, match=f"run {finished.run_id} ended \\(done\\): there is nothing to resume"):
        await s.resume(finished.run_id)
    with pytest.raises(DagError, match=r"no run 'nope' in the run store .* `%dag history` lists the stored runs"):
        await s.resume("nope")
    offline = DagSession(ModelRegistry().register("m", ScriptedLLM(script())), DagSettings(store="none"))
    with pytest.raises(DagError, match="there is no run store to resume 'x' from \\(DAG_STORE is none\\)"):
        await offline.resume("x")


# --- one driver at a time: the run's lease


async def test_two_sessions_resuming_one_run_at_once_drive_it_once(store_path: Path | str, tmp_path: Path) -> None:
    path = store_path
    running = asyncio.Event()

    async def slow_step(request: ScriptedRequest) -> str:
        running.set()
        await asyncio.sleep(5)
        return "late"

    run = session(path, ScriptedLLM(script(step=slow_step))).start("goal")
    await running.wait()
    await cancel_when(run, lambda: True)
    llm = ScriptedLLM(script())  # both sessions' model: it counts what the two of them asked
    outcomes = await asyncio.gather(
        session(path, llm).resume(run.run_id), session(path, llm).resume(run.run_id), return_exceptions=True
    )

    refused = [outcome for outcome in outcomes if isinstance(outcome, BaseException)]
    assert len(refused) == 1 and isinstance(refused[0], DagError), outcomes
    owner = f"pid {os.getpid()} on {socket.gethostname()}"
    assert f"run {run.run_id} is being driven by another session of this process ({owner}" in str(refused[0])
    (resumed,) = [outcome for outcome in outcomes if not isinstance(outcome, BaseException)]
    assert resumed.status == "done"
    assert Counter(str(r.step_id) for r in llm.requests_for("step")) == {"s1": 1, "s2": 1}
    assert len(llm.requests_for("synthesize")) == 1
    stored = RunStore.open(path).load(run.run_id)
    assert [event.type for event in stored.events].count("run_finished") == 2  # the cancel's, the resume's
    assert RunStore.open(path).summary(run.run_id) == RunStore.open(path).runs()[0]
    assert not RunStore.open(path).runs()[0].interrupted


async def test_a_run_driven_here_is_refused_to_another_process_naming_its_driver(
    store_path: Path | str, tmp_path: Path
) -> None:
    path, calls = store_path, tmp_path / "calls.txt"
    release = asyncio.Event()
    steps: Counter[str] = Counter()

    async def held_step(request: ScriptedRequest) -> str:
        steps[str(request.step_id)] += 1
        await release.wait()
        return f"value of {request.step_id}"

    run = session(path, ScriptedLLM(script(step=held_step))).start("goal")
    while not steps:
        await asyncio.sleep(0.01)
    other = child(path, calls, "resume", run.run_id)
    out, err = await asyncio.to_thread(other.communicate, timeout=120)
    release.set()
    await run

    assert other.returncode != 0 and out == "", out
    assert f"run {run.run_id} is being driven by another process (pid {os.getpid()} on {socket.gethostname()}" in err
    assert "wait for it to end" in err
    assert not calls.exists()  # the other process ran nothing
    assert run.status == "done" and steps == {"s1": 1, "s2": 1}
    stored = RunStore.open(path).load(run.run_id)
    assert [event.type for event in stored.events].count("run_finished") == 1
