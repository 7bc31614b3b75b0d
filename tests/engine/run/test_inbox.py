"""The inbox's table, cell by cell: every kind of message in every phase gets the effect ``EFFECTS`` names
(``engine/inbox.py``), and every message the table delivers reaches a phase that takes it.

The first test puts each message into an inbox whose phase is a recording stand-in, and looks at what
happened: an error, nothing, a recorded ``UserAction``, the round's stop, the phase's work cancelled, the
phase's ``on`` called, the run's task cancelled, a relaunch. The others drive real runs with ``ScriptedLLM``
to the moments the table's ``deliver`` cells are about, and check the phase acted.
"""

from __future__ import annotations

import asyncio
import typing
from typing import Any

import pytest

from dagmagic import DagError, DagSession, DagSettings, ModelRegistry
from dagmagic.engine.loop.phases import AwaitingApproval, Executing, Phase
from dagmagic.engine.loop.planning_phase import Planning
from dagmagic.engine.run.inbox import EFFECTS, INTERRUPTED, Effect, Inbox
from dagmagic.errors import RateLimitError
from dagmagic.events import UserAction
from dagmagic.messages import (
    KINDS,
    Approve,
    BreakBefore,
    Cancel,
    ClearBreakpoints,
    Continue,
    FollowUp,
    Message,
    Reject,
    Rerun,
    RetryNow,
    Skip,
    Step,
    StepThrough,
    Stop,
)
from dagmagic.models import ExecutionPlan, PlanStep, RoundRecord, RunPhase, RunState
from dagmagic.testing import ScriptedLLM, ScriptedRequest
from tests.engine.conftest import plan_reply, session_for, verdict

PHASES: tuple[RunPhase, ...] = typing.get_args(RunPhase)

EXAMPLES: dict[str, Message] = {
    "stop": Stop(),
    "follow_up": FollowUp(text="also Spain"),
    "cancel": Cancel(),
    "approve": Approve(),
    "reject": Reject(feedback="one step"),
    "continue": Continue(step="s1"),
    "step": Step(step="s1"),
    "skip": Skip(step="s1"),
    "break": BreakBefore(steps=("s2",)),
    "clear_breakpoints": ClearBreakpoints(),
    "step_through": StepThrough(),
    "retry_now": RetryNow(step="s1"),
    "rerun": Rerun(step="s1"),
}


class Stand:
    """A phase by name that records what is delivered to it."""

    def __init__(self, name: RunPhase) -> None:
        self.name, self.round = name, 1
        self.delivered: list[Message] = []

    def on(self, message: Message) -> bool:
        self.delivered.append(message)
        return True


class Harness:
    def __init__(self, phase: RunPhase) -> None:
        status = "done" if phase == "finished" else "running"
        step = PlanStep(id="s1", task="t", status="pending")
        record = RoundRecord(index=1, plan=ExecutionPlan(goal="g", steps=[step], round=1))
        self.state = RunState(run_id="r", goal="g", status=status, phase=phase, rounds=[record])
        self.events: list[Any] = []
        self.cancelled: list[bool] = []
        self.relaunched: list[Rerun] = []
        self.inbox = Inbox(
            self.state,
            self.events.append,
            cancel=lambda: self.cancelled.append(True) or True,
            check_rerun=lambda message: None,
            relaunch=self.relaunched.append,
        )
        self.phase = Stand(phase)
        self.inbox.enter(self.phase)
        self.events.clear()

    def recorded(self) -> list[str]:
        return [event.action for event in self.events if isinstance(event, UserAction)]


def test_the_table_has_a_cell_for_every_kind_in_every_phase() -> None:
    assert set(EFFECTS) == {(kind, phase) for kind in KINDS for phase in PHASES}
    assert set(EXAMPLES) == set(KINDS)


@pytest.mark.parametrize(("kind", "phase"), sorted(EFFECTS), ids=[f"{k}@{p}" for k, p in sorted(EFFECTS)])
async def test_each_cell_gives_its_effect(kind: str, phase: RunPhase) -> None:
    effect: Effect = EFFECTS[(kind, phase)]  # type: ignore[index]
    harness = Harness(phase)
    inbox, message = harness.inbox, EXAMPLES[kind]
    work = asyncio.get_running_loop().create_future()
    running = asyncio.ensure_future(inbox.interruptible(_awaited(work), name="dagmagic:test"))
    await asyncio.sleep(0)

    if effect == "refuse":
        with pytest.raises(DagError):
            inbox.put(message)
    else:
        assert inbox.put(message) is (effect != "ignore")
    if not work.done():
        work.set_result("done")
    outcome = await running

    taken = effect not in ("refuse", "ignore")
    assert harness.recorded() == ([kind] if taken else [])
    assert (outcome is INTERRUPTED) == (effect == "interrupt")
    assert inbox.round_stop.is_set() == (effect in ("skip", "interrupt"))
    assert harness.phase.delivered == ([message] if effect == "deliver" else [])
    assert harness.cancelled == ([True] if effect == "cancel" else [])
    assert harness.relaunched == ([message] if effect == "relaunch" else [])
    if taken:  # the user's word keeps what the message says, whatever its effect
        word = inbox.word
        expected = {
            "stop": word.stopped,
            "follow_up": inbox.pending == ["also Spain"] and not word.stopped,
            "break": word.breakpoints == {"s2"},
            "step_through": word.step_through,
            "step": word.step_through,
            "skip": inbox.skipped("s1"),
        }
        assert expected.get(kind, True), f"{kind} left no word"


async def _awaited(future: asyncio.Future[str]) -> str:
    return await future


def test_a_refused_message_says_why_in_the_users_terms() -> None:
    harness = Harness("executing")
    with pytest.raises(DagError, match=r"no plan of this run is waiting for approval \(the run is executing\)"):
        harness.inbox.put(Approve())
    with pytest.raises(DagError, match="can be re-run once the run has ended"):
        harness.inbox.put(Rerun(step="s1"))
    finished = Harness("finished")
    with pytest.raises(DagError, match="this run is done; a follow-up can only steer a running run"):
        finished.inbox.put(FollowUp(text="more"))
    with pytest.raises(ValueError, match="a follow-up needs some text"):
        finished.inbox.put(FollowUp(text="  "))
    assert harness.recorded() == [] and finished.recorded() == []


@pytest.mark.parametrize("phase", [Planning, AwaitingApproval, Executing])
def test_every_delivered_kind_has_a_phase_that_takes_it(phase: type[Phase]) -> None:
    delivered = {kind for (kind, name), effect in EFFECTS.items() if effect == "deliver" and name == phase.name}
    assert delivered, f"nothing is delivered to {phase.__name__}"
    takes = {
        "planning": {"continue", "step", "skip", "retry_now"},
        "awaiting_approval": {"approve", "reject", "skip"},
        "executing": {"continue", "step", "skip", "retry_now"},
    }[phase.name]
    assert delivered <= takes


# --- the deliver cells in real runs ------------------------------------------------------------------------


STREAMED = plan_reply(("s1", []), ("s2", ["s1"]), ("s3", []))


async def until(condition: Any, what: str, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)


def slow_plan_stream(request: ScriptedRequest) -> list[str]:
    """The plan in many small pieces: it streams for a while after its first step is whole."""
    import json

    text = json.dumps(STREAMED)
    return [text[i : i + 4] for i in range(0, len(text), 4)]


def streaming_session(**script: Any) -> tuple[DagSession, ScriptedLLM]:
    base: dict[str, Any] = {
        "plan": slow_plan_stream,
        "step": lambda r: f"result of {r.step_id}",
        "analyze": verdict(True, 0.9, "done"),
        "synthesize": ["The ", "answer."],
    }
    llm = ScriptedLLM({**base, **script}, capabilities=("json_mode", "stream"), chunk_delay=0.02)
    return DagSession(ModelRegistry().register("m", llm), DagSettings(store="none")), llm


@pytest.mark.parametrize("word", ["continue", "step", "skip"])
async def test_a_step_paused_while_its_plan_streams_takes_the_users_word(word: str) -> None:
    session, llm = streaming_session()
    run = session.start("goal")
    run.break_before("s1")
    await until(lambda: run.paused == ["s1"], "s1 to pause")
    assert run.phase == "planning"  # the plan is still streaming
    {"continue": run.resume_step, "step": run.step_over, "skip": lambda: run.skip("s1")}[word]()
    assert run.paused == []
    actions = [(e.action, e.text) for e in run.events if isinstance(e, UserAction)]
    assert actions[-1] == (word, "s1")
    if word == "step":  # the next ready step pauses too
        await until(lambda: bool(run.paused), "the next step to pause")
        run.clear_breakpoints()
        while not run.done():
            if run.paused:
                run.resume_step()
            await asyncio.sleep(0.005)
    await run
    ran = [r.step_id for r in llm.requests_for("step")]
    assert ("s1" in ran) is (word != "skip")
    assert run.steps["s1"].status == ("skipped" if word == "skip" else "completed")
    assert run.status == "done"


async def test_a_step_waiting_to_retry_while_its_plan_streams_retries_now() -> None:
    calls: list[str] = []

    def step(request: ScriptedRequest) -> Any:
        calls.append(str(request.step_id))
        if request.step_id == "s1" and calls.count("s1") == 1:
            return RateLimitError("slow down", model="m")
        return f"result of {request.step_id}"

    llm = ScriptedLLM(
        {
            "plan": slow_plan_stream,
            "step": step,
            "analyze": verdict(True, 0.9, "done"),
            "synthesize": ["ok"],
        },
        capabilities=("json_mode", "stream"),
        chunk_delay=0.02,
    )
    settings = DagSettings(store="none", step_immediate_retries=0, step_retry_delays=[30.0], llm_retries=0)
    run = DagSession(ModelRegistry().register("m", llm), settings).start("goal")
    await until(lambda: bool(run.steps) and run.steps["s1"].status == "retrying", "s1 to wait for its retry")
    assert run.phase == "planning"
    assert run.retry_now("s1") and not run.retry_now("s3")
    await run
    assert calls.count("s1") == 2 and run.steps["s1"].status == "completed" and run.status == "done"


async def test_cancel_is_recorded_and_a_stop_after_the_end_is_not() -> None:
    llm = ScriptedLLM(
        {
            "plan": plan_reply(("s1", [])),
            "step": lambda r: asyncio.sleep(5, "late"),
            "analyze": verdict(True, 0.9),
            "synthesize": ["x"],
        }
    )
    run = session_for(llm).start("goal")
    await until(lambda: run.phase == "executing", "the steps")
    assert run.cancel()
    await run
    assert run.status == "cancelled" and not run.cancel()
    run.stop()
    assert [e.action for e in run.events if isinstance(e, UserAction)] == ["cancel"]


async def test_a_run_cancelled_before_its_task_began_still_ends() -> None:
    llm = ScriptedLLM({"plan": plan_reply(("s1", []))})
    run = session_for(llm).start("goal")
    assert run.cancel()  # nothing of the loop has run yet
    await run
    assert run.status == "cancelled" and run.phase == "finished"
    assert [e.type for e in run.events][-1] == "run_finished"
