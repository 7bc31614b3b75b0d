"""Stop and follow-ups at every moment of a run: what each does in each phase (``engine/inbox.py``).

Each test makes one phase slow with ``ScriptedLLM`` latencies, acts while the run is in it, and checks what
each prompt then contained (``requests_for``) and how many calls each purpose made.
"""

from __future__ import annotations

import asyncio
import typing
from typing import Any

import pytest

from dagmagic import DagError, DagRun, DagSession, DagSettings, ModelRegistry
from dagmagic.engine.calls.synthesis import NOT_ACHIEVED
from dagmagic.engine.loop.decisions import FOLLOW_UP_WHILE_ANSWERING, FOLLOW_UP_WHILE_PLANNING
from dagmagic.engine.run.inbox import EFFECTS, INTERRUPTED, Inbox
from dagmagic.engine.steps.executor import STOPPED_REASON
from dagmagic.events import AnswerCleared, AnswerDelta, AnswerReady, PhaseChanged, Replanning, RunFinished
from dagmagic.messages import FollowUp, Stop
from dagmagic.models import Exchange, RunPhase, RunState
from dagmagic.testing import ScriptedLLM, ScriptedRequest
from tests.engine.conftest import plan_reply, session_for, verdict

TWO_STEPS = plan_reply(("s1", []), ("s2", ["s1"]))
FOLLOW_UP = "also cover Spain"
MARK = f"[User follow-up]: {FOLLOW_UP}"


def script(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "plan": [TWO_STEPS],
        "step": lambda r: f"result of {r.step_id} in round {r.round}",
        "analyze": [verdict(True, 0.9, "all found", "The answer.")],
        "synthesize": [["The ", "answer."]],
    }
    return {**base, **overrides}


class Moment:
    """A scripted reply that says when its request arrived, then takes ``hold`` seconds."""

    def __init__(self, reply: Any, hold: float = 0.3, *, first_only: bool = True) -> None:
        self.reply = reply
        self.hold = hold
        self.first_only = first_only
        self.arrived = asyncio.Event()
        self.prompts: list[str] = []

    async def __call__(self, request: ScriptedRequest) -> Any:
        self.prompts.append(request.prompt)
        reply = self.reply(request) if callable(self.reply) else self.reply
        if not self.first_only or len(self.prompts) == 1:
            self.arrived.set()
            await asyncio.sleep(self.hold)
        return reply


def call_statuses(run: DagRun, purpose: str) -> list[str]:
    return [call.status for call in run.calls if call.purpose == purpose]


def phases(run: DagRun) -> list[str]:
    return [e.phase for e in run.events if isinstance(e, PhaseChanged)]


# --- the table ---------------------------------------------------------------------------------------


def test_the_table_says_what_every_action_does_in_every_phase() -> None:
    phases_ = typing.get_args(RunPhase)
    assert "awaiting_approval" in phases_
    assert {(phase, action) for phase in phases_ for action in ("stop", "follow_up")} <= {(p, a) for a, p in EFFECTS}


class Named:
    """A phase as the inbox sees it, by name only."""

    def __init__(self, name: Any) -> None:
        self.name, self.round = name, 1

    def on(self, message: Any) -> bool:
        raise AssertionError("stop and follow-ups are never delivered")


def inbox_in(phase: Any) -> Inbox:
    state = RunState(run_id="r", goal="g", phase=phase, status="done" if phase == "finished" else "running")
    inbox = Inbox(state, lambda event: None, cancel=lambda: True, check_rerun=lambda m: None, relaunch=lambda m: None)
    inbox.enter(Named(phase))
    return inbox


@pytest.mark.parametrize(("phase", "action"), sorted((p, a) for a, p in EFFECTS if a in ("stop", "follow_up")))
async def test_each_effect_acts_at_once(phase: Any, action: Any) -> None:
    inbox = inbox_in(phase)
    work = asyncio.get_running_loop().create_future()

    async def phase_work() -> str:
        await work
        return "done"

    outcome = asyncio.ensure_future(inbox.interruptible(phase_work(), name="dagmagic:test"))
    await asyncio.sleep(0)
    effect = EFFECTS[(action, phase)]
    message = Stop() if action == "stop" else FollowUp(text="more")
    if effect == "refuse":
        with pytest.raises(DagError):
            inbox.put(message)
    else:
        assert inbox.put(message) == (effect != "ignore")
    if effect != "interrupt":
        work.set_result(None)
    result = await outcome
    assert (result is INTERRUPTED) == (effect == "interrupt")
    assert inbox.round_stop.is_set() == (effect in ("skip", "interrupt"))
    taken = effect not in ("refuse", "ignore")
    assert inbox.stopped == (action == "stop" and taken)
    assert inbox.pending == (["more"] if action == "follow_up" and taken else [])


async def test_cancelling_the_run_is_not_taken_for_an_interruption() -> None:
    inbox = inbox_in("planning")
    outcome = asyncio.ensure_future(inbox.interruptible(asyncio.sleep(5), name="dagmagic:test"))
    await asyncio.sleep(0)
    outcome.cancel()
    with pytest.raises(asyncio.CancelledError):
        await outcome


async def test_the_phases_of_a_plain_run() -> None:
    run = await session_for(ScriptedLLM(script()), streaming_planner=False).run("goal")
    assert phases(run) == ["planning", "executing", "analyzing", "finished"]  # the verdict wrote the answer
    assert run.phase == "finished" and run.status == "done"


# --- a follow-up while planning -------------------------------------------------------------------------


@pytest.mark.parametrize("streaming", [False, True], ids=["planner", "streaming planner"])
async def test_a_follow_up_while_planning_drops_that_plan_and_plans_again_with_it(streaming: bool) -> None:
    plan = Moment(TWO_STEPS)
    llm = ScriptedLLM(script(plan=plan))
    run = session_for(llm, streaming_planner=streaming).start("goal")
    await plan.arrived.wait()
    run.follow_up(FOLLOW_UP)
    assert run.follow_ups == [] and run.pending_follow_ups == [FOLLOW_UP]  # no plan has seen it yet
    await run

    plans = llm.requests_for("plan")
    assert len(plans) == 2 and MARK not in plans[0].prompt and MARK in plans[1].prompt
    assert call_statuses(run, "plan") == ["cancelled", "ok"]  # the dropped call is on the bill
    first, _ = run.rounds
    assert first.analysis is None and first.plan.steps == []
    assert first.decision is not None and first.decision.reason == FOLLOW_UP_WHILE_PLANNING
    assert first.decision.counts_against_budget is False
    assert len(llm.requests_for("analyze")) == 1 and MARK in llm.requests_for("analyze")[0].prompt
    assert llm.requests_for("synthesize") == []  # the verdict that saw it wrote the answer
    assert [e.follow_up for e in run.events if isinstance(e, Replanning)] == [FOLLOW_UP]
    assert run.follow_ups == [FOLLOW_UP] and run.pending_follow_ups == []
    assert run.answer == "The answer." and run.status == "done"


async def test_a_follow_up_while_the_plan_streams_lets_started_steps_finish() -> None:
    # s1 arrives early in the stream and starts; the follow-up cuts the stream before s2 is complete
    llm = ScriptedLLM(
        script(step=Moment(lambda r: f"result of {r.step_id} in round {r.round}", hold=0.2)), chunk_delay=0.02
    )
    run = session_for(llm).start("goal")
    while not any(s.status == "running" for r in run.rounds for s in r.plan.steps):
        await asyncio.sleep(0.005)
    run.follow_up(FOLLOW_UP)
    await run

    first = run.rounds[0]
    assert [(s.id, s.status) for s in first.plan.steps] == [("s1", "completed")]  # ran to its end, kept
    assert first.decision is not None and first.decision.reason == FOLLOW_UP_WHILE_PLANNING
    assert call_statuses(run, "plan")[0] == "cancelled"
    second_plan = llm.requests_for("plan")[1].prompt
    assert MARK in second_plan and "r1.s1 (completed)" in second_plan  # and reusable
    assert run.follow_ups == [FOLLOW_UP] and run.status == "done"


async def test_a_follow_up_while_planning_uses_no_budget() -> None:
    plan = Moment(TWO_STEPS)
    llm = ScriptedLLM(script(plan=plan, analyze=[verdict(False, 0.3, "still missing")]))
    run = session_for(llm, max_replan_rounds=2, streaming_planner=False).start("goal")
    await plan.arrived.wait()
    run.follow_up(FOLLOW_UP)
    await run

    # round 1 was dropped, round 2 is the follow-up's: rounds 3 and 4 are the two autonomous ones
    assert [(r.decision.action, r.decision.counts_against_budget) for r in run.rounds if r.decision] == [
        ("replan", False),
        ("replan", True),
        ("replan", True),
        ("stop", True),
    ]
    last = run.rounds[-1].decision
    assert last is not None and last.reason == "No rounds left (2 of 2)."
    assert len(llm.requests_for("plan")) == 4 and len(llm.requests_for("analyze")) == 3


# --- a follow-up while judging ------------------------------------------------------------------------------


async def test_a_follow_up_while_judging_is_judged_again_then_planned_for() -> None:
    def judge(request: ScriptedRequest) -> dict[str, Any]:
        if MARK in request.prompt and request.round == 1:
            return verdict(False, 0.3, "Spain is not covered")
        return verdict(True, 0.9, "all found")

    analyze = Moment(judge)
    llm = ScriptedLLM(script(analyze=analyze))
    run = session_for(llm, streaming_planner=False).start("goal")
    await analyze.arrived.wait()
    run.follow_up(FOLLOW_UP)
    await run

    verdicts = llm.requests_for("analyze")
    assert len(verdicts) == 3  # interrupted, judged again with it, then round 2's
    assert MARK not in verdicts[0].prompt and MARK in verdicts[1].prompt
    assert call_statuses(run, "analyze")[0] == "cancelled"
    first = run.rounds[0]
    assert first.analysis is not None and first.analysis.reasoning == "Spain is not covered"
    assert first.decision is not None and (first.decision.action, first.decision.counts_against_budget) == (
        "replan",
        False,
    )
    plans = llm.requests_for("plan")
    assert len(plans) == 2 and MARK in plans[1].prompt
    assert run.follow_ups == [FOLLOW_UP] and run.answer == "The answer."


async def test_a_follow_up_while_judging_that_the_results_already_meet_is_answered_without_a_round() -> None:
    analyze = Moment(verdict(True, 0.9, "in French is fine"))
    llm = ScriptedLLM(script(analyze=analyze))
    run = session_for(llm, streaming_planner=False).start("goal")
    await analyze.arrived.wait()
    run.follow_up("answer in French")
    await run

    assert len(run.rounds) == 1 and len(llm.requests_for("plan")) == 1
    assert len(llm.requests_for("analyze")) == 2
    assert "[User follow-up]: answer in French" in llm.requests_for("synthesize")[0].prompt
    assert run.follow_ups == ["answer in French"]  # handled: the final answer saw it


# --- a follow-up while the answer is written -----------------------------------------------------------------


async def test_a_follow_up_while_answering_drops_that_answer_and_plans_again() -> None:
    first_answer = [f"first{i} " for i in range(30)]
    llm = ScriptedLLM(  # a verdict with no answer: a synthesis writes it
        script(analyze=[verdict(True, 0.9, "all found")], synthesize=[first_answer, ["Second ", "answer."]]),
        chunk_delay=0.01,
    )
    run = session_for(llm, streaming_planner=False).start("goal")
    seen: list[str] = []
    run.subscribe(lambda event: seen.append(run.answer))

    while "first3" not in run.answer:
        await asyncio.sleep(0.005)
    run.follow_up(FOLLOW_UP)
    assert run.answer == ""  # at once: the answer being written is gone
    await run

    cleared = [e for e in run.events if isinstance(e, AnswerCleared)]
    assert len(cleared) == 1 and cleared[0].reason == FOLLOW_UP_WHILE_ANSWERING
    after = seen[next(i for i, e in enumerate(run.events) if isinstance(e, AnswerCleared)) :]
    assert not any("first" in answer for answer in after)  # never shown again, never appended to
    assert run.answer == "Second answer."
    assert call_statuses(run, "synthesize") == ["cancelled", "ok"]
    plans = llm.requests_for("plan")
    assert len(plans) == 2 and MARK in plans[1].prompt
    assert MARK in llm.requests_for("synthesize")[1].prompt
    assert run.rounds[0].decision is not None and run.rounds[0].decision.reason == FOLLOW_UP_WHILE_ANSWERING
    assert [e.answer for e in run.events if isinstance(e, AnswerReady)] == ["Second answer."]
    assert run.follow_ups == [FOLLOW_UP]


# --- Stop ------------------------------------------------------------------------------------------------------


async def test_stop_while_steps_run_answers_from_what_completed_and_says_it_is_partial() -> None:
    step = Moment(lambda r: f"result of {r.step_id}", hold=0.2)
    llm = ScriptedLLM(
        script(
            plan=[plan_reply(("s1", []), ("s2", ["s1"]), ("s3", ["s2"]))],
            step=step,
            analyze=[verdict(False, 0.4, "s2 and s3 are missing")],
            synthesize=[["Partial: ", "s1 only."]],
        )
    )
    run = session_for(llm, streaming_planner=False).start("goal")
    await step.arrived.wait()
    run.stop()
    await run

    assert [(s.id, s.status) for s in run.plan.steps] == [("s1", "completed"), ("s2", "skipped"), ("s3", "skipped")]
    assert run.steps["s2"].error == STOPPED_REASON
    assert len(run.rounds) == 1 and len(llm.requests_for("plan")) == 1
    (synthesis,) = llm.requests_for("synthesize")
    assert synthesis.stream and "result of s1" in synthesis.prompt and "the answer is partial" in synthesis.prompt
    assert [e.text for e in run.events if isinstance(e, AnswerDelta)] == ["Partial: ", "s1 only."]
    assert run.answer == "Partial: s1 only." and run.partial
    ready = [e for e in run.events if isinstance(e, AnswerReady)]
    assert [(e.partial, e.fallback) for e in ready] == [(True, False)]
    assert run.status == "done"


async def test_stop_falls_back_to_the_listing_when_the_partial_answer_cannot_be_written() -> None:
    step = Moment(lambda r: f"result of {r.step_id}", hold=0.2)
    llm = ScriptedLLM(
        script(
            step=step,
            analyze=[verdict(False, 0.4, "s2 is missing")],
            synthesize=[["Par", RuntimeError("stream broke")]],
        )
    )
    run = session_for(llm, streaming_planner=False).start("goal")
    await step.arrived.wait()
    run.stop()
    await run
    lead = "*The answer could not be written (RuntimeError: stream broke): here are the results of the steps that"
    assert run.answer.startswith(lead) and run.partial
    assert run.answer.endswith(" completed.*\n\nThe goal was not reached: s2 is missing\n\n---\n\n**s1**: result of s1")


async def test_stop_while_planning_the_first_round_answers_at_once() -> None:
    plan = Moment(TWO_STEPS)
    llm = ScriptedLLM(script(plan=plan))
    run = session_for(llm, streaming_planner=False).start("goal")
    await plan.arrived.wait()
    run.stop()
    await run
    assert call_statuses(run, "plan") == ["cancelled"]
    assert llm.requests_for("step") == [] and llm.requests_for("analyze") == [] and llm.requests_for("synthesize") == []
    assert run.answer.startswith(NOT_ACHIEVED) and "You stopped the run before this round's plan was ready" in (
        run.answer
    )
    assert run.partial and run.status == "done"


async def test_stop_while_planning_a_later_round_answers_from_the_earlier_rounds() -> None:
    second_plan = asyncio.Event()

    async def plan(request: ScriptedRequest) -> dict[str, Any]:
        if request.round == 2:
            second_plan.set()
            await asyncio.sleep(0.3)
        return TWO_STEPS

    llm = ScriptedLLM(script(plan=plan, analyze=[verdict(False, 0.3, "not yet")]))
    run = session_for(llm, streaming_planner=False).start("goal")
    await second_plan.wait()
    run.stop()
    await run
    assert call_statuses(run, "plan") == ["ok", "cancelled"] and len(llm.requests_for("analyze")) == 1
    (synthesis,) = llm.requests_for("synthesize")
    assert "[r1.s1] (completed)" in synthesis.prompt and "result of s2 in round 1" in synthesis.prompt
    assert run.partial and run.answer == "The answer."
    assert run.rounds[1].decision is not None and run.rounds[1].decision.partial


@pytest.mark.parametrize(("achieved", "partial"), [(True, False), (False, True)])
async def test_stop_while_judging_lets_the_verdict_decide(achieved: bool, partial: bool) -> None:
    analyze = Moment(verdict(achieved, 0.5, "judged"))
    llm = ScriptedLLM(script(analyze=analyze))
    run = session_for(llm, streaming_planner=False).start("goal")
    await analyze.arrived.wait()
    run.stop()
    await run
    assert call_statuses(run, "analyze") == ["ok"]  # not interrupted: the verdict is worth having
    assert len(llm.requests_for("synthesize")) == 1 and run.partial is partial and run.answer == "The answer."


async def test_stop_while_answering_changes_nothing() -> None:
    synthesize = Moment(["The ", "answer."])
    llm = ScriptedLLM(script(analyze=[verdict(True, 0.9, "all found")], synthesize=synthesize))
    run = session_for(llm, streaming_planner=False).start("goal")
    await synthesize.arrived.wait()
    run.stop()
    await run
    assert run.answer == "The answer." and not run.partial and call_statuses(run, "synthesize") == ["ok"]


async def test_stop_after_the_end_does_nothing() -> None:
    run = await session_for(ScriptedLLM(script())).run("goal")
    run.stop()
    assert run.status == "done" and not run.partial


# --- Stop's words: the same everywhere ---------------------------------------------------------------------


async def test_a_step_a_stop_skipped_says_the_user_stopped_the_run_and_the_run_says_it_was_stopped() -> None:
    step = Moment(lambda r: f"result of {r.step_id}", hold=0.2)
    llm = ScriptedLLM(script(step=step, analyze=[verdict(False, 0.4, "s2 is missing")]))
    run = session_for(llm, streaming_planner=False).start("goal")
    await step.arrived.wait()
    run.stop()
    await run
    assert run.steps["s2"].error == "Skipped — you stopped the run"
    assert run.rounds[0].decision is not None
    assert run.rounds[0].decision.reason == "You stopped the run: answering from what completed."
    assert run.status == "done" and run.stopped_by_user  # the status keeps its contract; the views say why
    assert [e.stopped_by_user for e in run.events if isinstance(e, RunFinished)] == [True]


async def test_a_step_a_follow_up_skipped_says_the_follow_up_changed_the_goal() -> None:
    step = Moment(lambda r: f"result of {r.step_id} in round {r.round}", hold=0.2)
    llm = ScriptedLLM(script(step=step, analyze=[verdict(True, 0.9, "all found", "The answer.")]))
    run = session_for(llm, streaming_planner=False).start("goal")
    await step.arrived.wait()
    run.follow_up(FOLLOW_UP)
    await run
    assert run.rounds[0].plan.step("s2").error == "Skipped — your follow-up changed the goal"
    assert run.status == "done" and not run.stopped_by_user


# --- Stop and follow-up together: the latest word wins ---------------------------------------------------------


async def test_a_follow_up_after_stop_gets_its_round() -> None:
    step = Moment(lambda r: f"result of {r.step_id} in round {r.round}", hold=0.2)
    llm = ScriptedLLM(script(step=step, analyze=[verdict(False, 0.3, "Spain missing"), verdict(True, 0.9)]))
    run = session_for(llm, streaming_planner=False).start("goal")
    await step.arrived.wait()
    run.stop()
    run.follow_up(FOLLOW_UP)
    await run
    assert len(run.rounds) == 2 and MARK in llm.requests_for("plan")[1].prompt
    assert not run.partial and run.answer == "The answer." and run.follow_ups == [FOLLOW_UP]
    assert not run.stopped_by_user  # the follow-up was the latest word


async def test_a_follow_up_while_the_partial_answer_is_written_wins_over_the_stop() -> None:
    step = Moment(lambda r: f"result of {r.step_id} in round {r.round}", hold=0.2)
    llm = ScriptedLLM(
        script(
            step=step,
            analyze=[verdict(False, 0.3, "s2 missing"), verdict(True, 0.9)],
            synthesize=[[f"partial{i} " for i in range(30)], ["Full ", "answer."]],
        ),
        chunk_delay=0.01,
    )
    run = session_for(llm, streaming_planner=False).start("goal")
    await step.arrived.wait()
    run.stop()
    while "partial2" not in run.answer:
        await asyncio.sleep(0.005)
    run.follow_up(FOLLOW_UP)
    await run
    assert len(run.rounds) == 2 and MARK in llm.requests_for("plan")[1].prompt
    assert run.answer == "Full answer." and not run.partial
    assert [e.partial for e in run.events if isinstance(e, AnswerReady)] == [False]


async def test_stop_after_a_follow_up_answers_now_and_the_answer_sees_the_follow_up() -> None:
    step = Moment(lambda r: f"result of {r.step_id}", hold=0.2)
    llm = ScriptedLLM(script(step=step, analyze=[verdict(False, 0.3, "Spain missing")]))
    run = session_for(llm, streaming_planner=False).start("goal")
    await step.arrived.wait()
    run.follow_up(FOLLOW_UP)
    run.stop()
    await run
    assert len(run.rounds) == 1 and len(llm.requests_for("plan")) == 1
    assert MARK in llm.requests_for("analyze")[0].prompt
    assert MARK in llm.requests_for("synthesize")[0].prompt and run.partial and run.stopped_by_user
    assert run.follow_ups == [FOLLOW_UP] and run.pending_follow_ups == []


async def test_stop_before_the_first_round_begins() -> None:
    summary = Moment("the earlier conversation, in short")  # before the first round: the history, summarized
    llm = ScriptedLLM(script(history_summary=summary))
    models = ModelRegistry().register("scripted", llm, roles=["smart", "general", "fast"])
    session = DagSession(models, DagSettings(store="none", planner_input_tokens=1000))
    session.history = [Exchange(f"question {i}", "a long answer " * 400) for i in range(3)]
    run = session.start("goal")
    await summary.arrived.wait()
    run.stop()
    await run
    assert run.rounds == [] and llm.requests_for("plan") == []
    assert run.answer.startswith(NOT_ACHIEVED) and run.status == "done"


# --- a follow-up is never lost -------------------------------------------------------------------------------


ONE_REPLY: dict[str, Any] = {
    "plan": TWO_STEPS,
    "step": lambda r: f"result of {r.step_id}",
    "analyze": verdict(True, 0.9, "ok"),
    "synthesize": ["The ", "answer."],
}


@pytest.mark.parametrize("slow", sorted(ONE_REPLY))
async def test_a_follow_up_at_any_moment_reaches_a_plan_or_the_final_answer(slow: str) -> None:
    overrides: dict[str, Any] = {slow: Moment(ONE_REPLY[slow])}
    if slow == "synthesize":  # a synthesis writes the answer when the verdict has none
        overrides["analyze"] = [verdict(True, 0.9, "ok")]
    llm = ScriptedLLM(script(**overrides))
    run = session_for(llm, streaming_planner=False).start("goal")
    await overrides[slow].arrived.wait()
    run.follow_up(FOLLOW_UP)
    await run
    writer = llm.requests_for("synthesize") or llm.requests_for("analyze")  # the verdict writes it when it can
    assert MARK in writer[-1].prompt, f"the answer did not see a follow-up sent in {slow}"
    if slow in ("plan", "synthesize"):
        assert MARK in llm.requests_for("plan")[-1].prompt
    assert run.follow_ups == [FOLLOW_UP] and run.pending_follow_ups == [] and run.status == "done"


# --- what the views are told: a Stop that skipped steps, a follow-up's outlook and its round ----------------------


PARALLEL = plan_reply(("s1", []), ("s2", []), ("s3", ["s1"]))
"""s1 is slow, s2 quick, s3 waits for s1: a Stop or a follow-up while s1 runs skips s3 only."""


async def test_a_stop_that_skipped_steps_makes_the_answer_partial_even_when_the_verdict_finds_the_goal_met() -> None:
    step = Moment(lambda r: f"result of {r.step_id}", hold=0.2)
    llm = ScriptedLLM(
        script(
            plan=[PARALLEL],
            step=step,
            analyze=[verdict(True, 0.9, "all found", "The verdict's answer.")],
            synthesize=[["From s1 and s2 only."]],
        )
    )
    run = session_for(llm, streaming_planner=False, max_concurrency=2).start("goal")
    await step.arrived.wait()
    run.stop()
    await run

    assert [(s.id, s.status) for s in run.plan.steps] == [("s1", "completed"), ("s2", "completed"), ("s3", "skipped")]
    assert run.partial and run.stopped_by_user and run.achieved  # the verdict's finding stands; the answer is partial
    decision = run.rounds[0].decision
    assert (
        decision is not None
        and decision.partial
        and decision.reason == "You stopped the run: answering from what completed."
    )
    (synthesis,) = llm.requests_for("synthesize")  # the partial answer is written apart, saying what is missing
    assert "the answer is partial" in synthesis.prompt
    assert run.answer == "From s1 and s2 only."
    assert [e.partial for e in run.events if isinstance(e, AnswerReady)] == [True]
    assert repr(run).startswith("<DagRun done (stopped by you, partial answer): 'goal'")


async def test_a_stop_that_skipped_nothing_lets_the_verdict_decide() -> None:
    step = Moment(lambda r: f"result of {r.step_id}", hold=0.2)
    llm = ScriptedLLM(script(plan=[plan_reply(("s1", []))], step=step))
    run = session_for(llm, streaming_planner=False).start("goal")
    await step.arrived.wait()
    run.stop()  # s1 runs, and nothing else is left to skip: the results are whole
    await run
    assert not run.partial and run.answer == "The answer." and llm.requests_for("synthesize") == []
    assert "partial" not in repr(run)


async def test_a_follow_up_while_steps_run_is_told_what_happens_and_the_verdict_takes_it_into_account() -> None:
    step = Moment(lambda r: f"result of {r.step_id}", hold=0.2)
    llm = ScriptedLLM(script(plan=[PARALLEL], step=step, analyze=[verdict(True, 0.9, "covered", "With Spain.")]))
    run = session_for(llm, streaming_planner=False, max_concurrency=2).start("goal")
    await step.arrived.wait()
    outlook = run.follow_up_outlook
    run.follow_up(FOLLOW_UP)
    await run

    # what the user was told: the verdict judges with it, and answers with it when the results already meet it
    assert "the verdict judges what completed against the goal with your follow-up" in outlook
    assert "and then the answer takes it into account" in outlook
    assert len(run.rounds) == 1 and MARK in llm.requests_for("analyze")[0].prompt and run.answer == "With Spain."
    first = run.rounds[0]
    assert first.follow_ups == [] and first.answered_follow_ups == [FOLLOW_UP]  # the round it shaped keeps it
    assert run.follow_ups == [FOLLOW_UP] and not run.partial
    assert run.follow_up_outlook == ""  # ended: a follow-up is refused


async def test_a_follow_up_while_steps_run_that_the_results_do_not_meet_gets_its_round() -> None:
    step = Moment(lambda r: f"result of {r.step_id} in round {r.round}", hold=0.2)
    llm = ScriptedLLM(
        script(
            plan=[PARALLEL],
            step=step,
            analyze=[verdict(False, 0.3, "Spain missing"), verdict(True, 0.9, "ok", "Done.")],
        )
    )
    run = session_for(llm, streaming_planner=False, max_concurrency=2).start("goal")
    await step.arrived.wait()
    outlook = run.follow_up_outlook
    run.follow_up(FOLLOW_UP)
    await run
    assert "a new round plans for it" in outlook
    assert len(run.rounds) == 2 and MARK in llm.requests_for("plan")[1].prompt
    assert run.rounds[1].follow_ups == [FOLLOW_UP] and run.rounds[0].answered_follow_ups == []
    assert run.answer == "Done." and not run.partial


@pytest.mark.parametrize(
    ("slow", "says"),
    [
        ("plan", "the plan being made is dropped; a new round plans for it"),
        ("analyze", "the round is judged again with it"),
        ("synthesize", "the answer being written is dropped; a new round plans for it"),
    ],
)
async def test_the_outlook_of_a_follow_up_is_what_then_happens(slow: str, says: str) -> None:
    overrides: dict[str, Any] = {slow: Moment(ONE_REPLY[slow])}
    if slow == "synthesize":
        overrides["analyze"] = [verdict(True, 0.9, "ok")]
    llm = ScriptedLLM(script(**overrides))
    run = session_for(llm, streaming_planner=False).start("goal")
    await overrides[slow].arrived.wait()
    outlook = run.follow_up_outlook
    run.follow_up(FOLLOW_UP)
    await run
    assert says in outlook
    if "new round" in says:
        assert len(run.rounds) == 2 and run.rounds[-1].follow_ups == [FOLLOW_UP]
    else:  # judged again, and (the verdict finding it met) answered in its round
        assert len(run.rounds) == 1 and run.rounds[0].answered_follow_ups == [FOLLOW_UP]
