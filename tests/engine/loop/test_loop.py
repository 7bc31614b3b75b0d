from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from dagmagic import errors
from dagmagic.engine.calls import prompts
from dagmagic.engine.calls.synthesis import NOT_ACHIEVED
from dagmagic.engine.loop.decisions import decide, replan_context
from dagmagic.engine.steps.executor import FOLLOWED_UP_REASON
from dagmagic.errors import AuthenticationError
from dagmagic.events import AnswerDelta, AnswerReady, Event, Replanning, RunWarning, StepStarted
from dagmagic.models import AnalysisResult, ExecutionPlan, PlanStep, RoundRecord, Usage
from dagmagic.settings import DagSettings
from dagmagic.testing import ScriptedLLM, ScriptedRequest
from tests.engine.conftest import plan_reply, session_for, verdict

TWO_STEPS = plan_reply(("s1", []), ("s2", ["s1"]))


def script(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "plan": [TWO_STEPS],
        "step": lambda r: f"result of {r.step_id} in round {r.round}",
        "analyze": [verdict(True, 0.9, "all found", "The answer.")],
        "synthesize": [["The ", "answer."]],
    }
    return {**base, **overrides}


# --- the decision table ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("analysis", "kwargs", "action", "budget", "partial"),
    [
        (
            AnalysisResult(achieved=True, confidence=0.1),
            {"follow_up": True, "stopped": True, "autonomous_rounds": 9},
            "synthesize",
            True,
            False,
        ),
        (AnalysisResult(confidence=0.95), {"follow_up": True, "autonomous_rounds": 9}, "replan", False, False),
        (AnalysisResult(confidence=0.1), {"stopped": True}, "synthesize", True, True),
        # a Stop that came after a follow-up: the Stop is the latest word (a follow-up after it clears it)
        (AnalysisResult(confidence=0.1), {"stopped": True, "follow_up": True}, "synthesize", True, True),
        (AnalysisResult(confidence=0.1), {"autonomous_rounds": 3}, "stop", True, False),
        (AnalysisResult(confidence=0.8), {"autonomous_rounds": 1}, "stop", True, False),
        (AnalysisResult(confidence=0.79), {"autonomous_rounds": 2}, "replan", True, False),
    ],
)
def test_decide_follows_the_design_order(
    analysis: AnalysisResult, kwargs: dict[str, Any], action: str, budget: bool, partial: bool
) -> None:
    arguments = {"follow_up": False, "stopped": False, "autonomous_rounds": 1, **kwargs}
    decision = decide(analysis, settings=DagSettings(), **arguments)
    assert (decision.action, decision.counts_against_budget, decision.partial) == (action, budget, partial)


def test_replan_context_previews_the_latest_round_longer() -> None:
    def record(index: int) -> RoundRecord:
        steps = [
            PlanStep(id="s1", task="look", status="completed", result="x" * 1000),
            PlanStep(id="s2", task="check", status="failed", error="RuntimeError: boom"),
        ]
        analysis = AnalysisResult(confidence=0.3, reasoning=f"missing data {index}")
        return RoundRecord(index=index, plan=ExecutionPlan(goal="g", steps=steps, round=index), analysis=analysis)

    text = replan_context([record(1), record(2)], DagSettings())
    assert "--- Round 1 ---" in text and "--- Round 2 ---" in text
    assert "Analysis: missing data 1" in text and "Achieved: False, confidence: 0.30" in text
    assert "- r1.s1 (completed): look" in text and "- r2.s2 (failed): check" in text
    assert "Error: RuntimeError: boom" in text
    older, latest = text.split("--- Round 2 ---")
    assert "x" * 200 + "... (truncated)" in older and "x" * 201 not in older
    assert "x" * 500 + "... (truncated)" in latest and "x" * 501 not in latest


# --- rounds --------------------------------------------------------------------------------------


async def test_achieved_in_round_one_is_one_round_with_a_streamed_answer() -> None:
    answer = "The answer, shown while the verdict is written."
    llm = ScriptedLLM(script(analyze=[verdict(True, 0.9, "all found", answer)]))
    run = await session_for(llm).run("goal")
    assert (run.status, len(run.rounds), run.achieved, run.confidence) == ("done", 1, True, 0.9)
    deltas = [e.text for e in run.events if isinstance(e, AnswerDelta)]
    assert len(deltas) > 1 and "".join(deltas) == answer and run.answer == answer
    assert llm.requests_for("synthesize") == []  # the verdict wrote it
    ready = [e for e in run.events if isinstance(e, AnswerReady)]
    assert len(ready) == 1 and ready[0].fallback is False
    assert run.rounds[0].decision is not None and run.rounds[0].decision.action == "synthesize"
    assert [s.status for s in run.steps.values()] == ["completed", "completed"]


async def test_low_confidence_three_times_is_exactly_three_rounds() -> None:
    llm = ScriptedLLM(script(analyze=[verdict(False, 0.3, "still missing")]))
    run = await session_for(llm).run("goal")
    assert len(run.rounds) == 3 and len(llm.requests_for("plan")) == 3
    assert [r.decision.action for r in run.rounds if r.decision] == ["replan", "replan", "stop"]
    assert [e.reason for e in run.events if isinstance(e, Replanning)] == ["still missing", "still missing"]
    assert run.status == "done" and not run.achieved
    # the rounds are spent: the answer is written from what completed, told it is not reached
    (written,) = llm.requests_for("synthesize")
    assert "What the analysis concluded: still missing" in written.prompt
    assert "[s2] (completed) do s2\nResult: result of s2 in round 3" in written.prompt
    assert run.answer.startswith("**Not fully answered.** ") and run.answer.endswith("\n\nThe answer.")
    assert [e.fallback for e in run.events if isinstance(e, AnswerReady)] == [False]


def reworded_each_round(request: ScriptedRequest) -> dict[str, Any]:
    """The same two steps every round, each round wording their tasks anew (so no round supersedes another's)."""
    n = request.round
    return plan_reply(("s1", [], f"look up the figure, try {n}"), ("s2", ["s1"], f"check the figure, try {n}"))


async def test_a_run_that_spends_its_rounds_gets_an_answer_written_from_what_completed() -> None:
    llm = ScriptedLLM(
        script(
            plan=reworded_each_round,
            step=lambda r: f"the same result of {r.step_id}",
            analyze=[verdict(False, 0.3, "The 2024 figure is still missing.")],
            # a 0.5B model asked to say what was missing copied the instruction: it is no longer asked to
            synthesize=[["The goal was not fully reached and what is missing. ", "2023: 2.1 million."]],
        )
    )
    run = await session_for(llm).run("goal")
    assert len(run.rounds) == 3 and not run.achieved and run.status == "done"
    assert [r.decision.action for r in run.rounds if r.decision] == ["replan", "replan", "stop"]
    (written,) = llm.requests_for("synthesize")
    assert "The 2024 figure is still missing." in written.prompt  # the last verdict says what is missing
    assert prompts.SYNTHESIS_UNREACHED.strip() in written.prompt
    # six results of three rounds, two distinct texts: each given once, under every reference that had it
    assert written.prompt.count("the same result of s1") == 1 and written.prompt.count("the same result of s2") == 1
    assert "r1.s1, r2.s1, s1" in written.prompt
    assert "do not repeat these instructions" in written.prompt  # the model is not asked to say what is missing
    lead = "**Not fully answered.** The 2024 figure is still missing.\n\n"  # said by the run, in the verdict's words
    assert run.answer == lead + "The goal was not fully reached and what is missing. 2023: 2.1 million."
    deltas = "".join(e.text for e in run.events if isinstance(e, AnswerDelta))
    assert deltas == run.answer  # streamed as it reads: the lead first
    (ready,) = [e for e in run.events if isinstance(e, AnswerReady)]
    assert (ready.fallback, ready.partial) == (False, False)


async def test_when_no_answer_can_be_written_the_listing_says_why_and_gives_each_result_once() -> None:
    llm = ScriptedLLM(
        script(
            plan=reworded_each_round,
            step=lambda r: f"the same result of {r.step_id}",
            analyze=[verdict(False, 0.3, "The 2024 figure is still missing.")],
            synthesize=[RuntimeError("the model is down")],
        )
    )
    run = await session_for(llm).run("goal")
    assert len(run.rounds) == 3 and not run.achieved
    lead, *rest = run.answer.split("\n\n---\n\n")
    assert "could not be written (RuntimeError: the model is down)" in lead
    assert "goal was not reached" in lead and "The 2024 figure is still missing." in lead
    assert rest == ["**r1.s1, r2.s1, s1**: the same result of s1", "**r1.s2, r2.s2, s2**: the same result of s2"]
    assert [e.fallback for e in run.events if isinstance(e, AnswerReady)] == [True]


async def test_max_replan_rounds_one_means_one_round() -> None:
    llm = ScriptedLLM(script(analyze=[verdict(False, 0.3)]))
    run = await session_for(llm, max_replan_rounds=1).run("goal")
    assert len(run.rounds) == 1


async def test_confident_but_not_achieved_stops_after_one_round_with_an_answer_saying_what_is_missing() -> None:
    llm = ScriptedLLM(script(analyze=[verdict(False, 0.85, "partly answered")]))
    run = await session_for(llm).run("goal")
    assert len(run.rounds) == 1 and run.rounds[0].decision is not None
    assert run.rounds[0].decision.action == "stop" and "Confident enough" in run.rounds[0].decision.reason
    (written,) = llm.requests_for("synthesize")
    assert "partly answered" in written.prompt and "Write only what these results do establish" in written.prompt
    assert run.answer == "**Not fully answered.** partly answered\n\nThe answer." and not run.partial


async def test_the_replan_context_reaches_the_planner() -> None:
    llm = ScriptedLLM(script(analyze=[verdict(False, 0.3, "no sources"), verdict(True, 0.9)]))
    await session_for(llm).run("goal")
    second = llm.requests_for("plan")[1].prompt
    assert "--- Round 1 ---" in second and "Analysis: no sources" in second
    assert "r1.s1 (completed)" in second and "This is round 2" in second


async def test_a_follow_up_mid_round_replans_without_using_budget() -> None:
    step_started = asyncio.Event()

    async def slow_step(request: ScriptedRequest) -> str:
        if request.round == 1:
            step_started.set()
            await asyncio.sleep(0.2)
        return f"result of {request.step_id}"

    llm = ScriptedLLM(script(step=slow_step, analyze=[verdict(False, 0.3, "not yet")]))
    run = session_for(llm).start("goal")
    await step_started.wait()
    run.follow_up("also cover Spain")
    await run
    first = run.rounds[0]
    assert first.plan.step("s1").status == "completed"
    assert (first.plan.step("s2").status, first.plan.step("s2").error) == ("skipped", FOLLOWED_UP_REASON)
    assert first.decision is not None
    assert (first.decision.action, first.decision.counts_against_budget) == ("replan", False)
    # round 2 came from the follow-up: rounds 1, 3 and 4 are the three autonomous ones
    assert len(run.rounds) == 4
    assert [(r.decision.action, r.decision.counts_against_budget) for r in run.rounds if r.decision] == [
        ("replan", False),
        ("replan", True),
        ("replan", True),
        ("stop", True),
    ]
    replans = [e for e in run.events if isinstance(e, Replanning)]
    assert replans[0].follow_up == "also cover Spain" and replans[1].follow_up is None
    assert "[User follow-up]: also cover Spain" in llm.requests_for("plan")[1].prompt
    assert "[User follow-up]: also cover Spain" in llm.requests_for("analyze")[1].prompt
    assert run.state.follow_ups == ["also cover Spain"]


async def test_a_later_round_reuses_an_earlier_result_without_running_it_again() -> None:
    def step(request: ScriptedRequest) -> str:
        if request.round == 1 and request.step_id == "s2":
            raise RuntimeError("source down")
        return f"result of {request.step_id} in round {request.round}"

    round_two = plan_reply(("s1", ["r1.s1"], "finish with the earlier data"))
    llm = ScriptedLLM(
        script(plan=[TWO_STEPS, round_two], step=step, analyze=[verdict(False, 0.3, "s2 failed"), verdict(True, 0.9)])
    )
    run = await session_for(llm).run("goal")
    assert len(run.rounds) == 2
    assert [(r.round, r.step_id) for r in llm.requests_for("step")] == [(1, "s1"), (1, "s2"), (2, "s1")]
    assert "[r1.s1] (completed) do s1\nResult: result of s1 in round 1" in llm.requests_for("step")[2].prompt
    assert "can be used again without running them: write $r1.s1 where" in llm.requests_for("plan")[1].prompt
    assert "[r1.s1] (completed)" in llm.requests_for("analyze")[1].prompt


async def test_analyzer_garbage_gives_the_safe_default_and_a_replan() -> None:
    llm = ScriptedLLM(script(analyze=["total garbage", "total garbage", "total garbage", "x", "y", verdict(True, 1)]))
    run = await session_for(llm).run("goal")
    assert run.rounds[0].analysis is not None
    assert (
        run.rounds[0].analysis.reasoning
        == "The model's verdict could not be read, so whether the goal was reached is not known"
    )
    assert run.rounds[0].decision is not None and run.rounds[0].decision.action == "replan"
    assert len(run.rounds) == 2 and run.achieved


# --- synthesis and its fallbacks -----------------------------------------------------------------
# (a smart model that cannot stream: its verdict's answer is not the run's, a synthesis writes it)

NO_STREAM = ("tool_call", "json_mode")
WITH_ITS_ANSWER = [verdict(True, 0.9, "all found", "fallback answer")]


async def test_a_failing_synthesis_falls_back_to_the_analyzers_final_answer() -> None:
    llm = ScriptedLLM(script(analyze=WITH_ITS_ANSWER, synthesize=[RuntimeError("down")]), capabilities=NO_STREAM)
    run = await session_for(llm).run("goal")
    assert run.answer == "fallback answer"
    assert [e.fallback for e in run.events if isinstance(e, AnswerReady)] == [True]


async def test_a_stream_failing_mid_way_falls_back_and_drops_what_it_wrote() -> None:
    llm = ScriptedLLM(script(analyze=[verdict(True, 0.9, "all found")], synthesize=[["Partial ", RuntimeError("x")]]))
    run = await session_for(llm).run("goal")
    lead, listing = run.answer.split("\n\n---\n\n", 1)
    assert (
        lead == "*The answer could not be written (RuntimeError: x): here are the results of the steps that "
        "completed.*\n\nall found"
    )
    assert listing.startswith("**s1**")
    assert [e.fallback for e in run.events if isinstance(e, AnswerReady)] == [True]


async def test_an_empty_answer_falls_back_to_the_analyzers_final_answer() -> None:
    llm = ScriptedLLM(script(analyze=WITH_ITS_ANSWER, synthesize=[""]), capabilities=NO_STREAM)
    run = await session_for(llm).run("goal")
    assert run.answer == "fallback answer"


async def test_without_a_final_answer_the_fallback_lists_the_steps() -> None:
    llm = ScriptedLLM(script(synthesize=[""], analyze=[verdict(True, 0.9, "done", None)]))
    run = await session_for(llm).run("goal")
    assert run.answer.startswith("*The answer could not be written (the reply was empty): here are the results")
    assert "\n\ndone\n\n---\n\n**s1**: result of s1" in run.answer


async def test_a_model_without_streaming_answers_in_one_call() -> None:
    llm = ScriptedLLM(script(synthesize=["Whole answer."]), capabilities=("tool_call", "json_mode"))
    run = await session_for(llm).run("goal")
    assert run.answer == "Whole answer." and not llm.requests_for("synthesize")[0].stream


async def test_nothing_completed_says_goal_not_achieved_with_the_reasoning() -> None:
    llm = ScriptedLLM(script(step=RuntimeError("everything is down"), analyze=[verdict(False, 0.9, "no data at all")]))
    run = await session_for(llm).run("goal")
    assert run.answer == f"{NOT_ACHIEVED}\n\nno data at all"
    assert run.steps["s1"].error == "RuntimeError: everything is down"
    assert run.steps["s2"].error == "Skipped — dependency s1 failed"


# --- failures ------------------------------------------------------------------------------------


async def test_a_cyclic_plan_written_twice_is_repaired_and_the_run_answers() -> None:
    cycle = plan_reply(("s1", ["s2"]), ("s2", ["s1"]))
    llm = ScriptedLLM(script(plan=[cycle]))
    run = await session_for(llm).run("goal")
    assert run.status == "done" and run.answer == "The answer." and run.error is None
    assert [(s.id, s.dependencies, s.status) for s in run.plan.steps] == [
        ("s1", [], "completed"),
        ("s2", ["s1"], "completed"),
    ]
    warnings = run.rounds[0].warnings
    assert any("form a cycle" in w for w in warnings) and "Step s1 no longer waits for s2" in " ".join(warnings)
    assert [e.message for e in run.events if isinstance(e, RunWarning)] == warnings  # the widget shows them


async def test_an_authentication_error_fails_the_run_and_raise_for_status_says_so() -> None:
    from dagmagic.errors import RunFailedError

    run = await session_for(ScriptedLLM(script(plan=[AuthenticationError("invalid key")]))).run("goal")
    assert run.status == "failed" and run.error is not None and "Authentication failed" in run.error
    assert run.answer.startswith(NOT_ACHIEVED)
    with pytest.raises(RunFailedError, match="invalid key"):
        run.raise_for_status()


# --- usage ---------------------------------------------------------------------------------------


def assert_same(a: Usage, b: Usage) -> None:
    """Equal token counts and costs equal up to float rounding (sums in another order)."""
    assert (a.input_tokens, a.output_tokens, a.requests) == (b.input_tokens, b.output_tokens, b.requests)
    assert a.cost == pytest.approx(b.cost)


async def test_usage_and_cost_add_up() -> None:
    llm = ScriptedLLM(script(analyze=[verdict(False, 0.3), verdict(True, 0.9)]), price=(1e-6, 2e-6))
    run = await session_for(llm).run("goal")
    assert_same(run.usage, Usage.total(call.usage for call in run.calls))
    assert run.usage.requests == len(run.calls) == len(llm.requests)
    assert run.cost == pytest.approx(sum(call.cost or 0 for call in run.calls))
    by_purpose = run.usage_by("purpose")
    assert set(by_purpose) == {"plan", "step", "analyze", "synthesize"}
    assert_same(Usage.total(by_purpose.values()), run.usage)
    assert_same(Usage.total(run.usage_by("round").values()), run.usage)
    by_step = run.usage_by("step")
    for record in run.rounds:
        for step in record.plan.steps:
            assert_same(step.usage, by_step[(record.index, step.id)])
            assert step.usage.requests == 1


async def test_events_reach_subscribers_and_a_broken_listener_does_not_break_the_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: list[Event] = []
    run = session_for(ScriptedLLM(script())).start("goal")
    run.subscribe(seen.append)
    run.subscribe(lambda event: 1 / 0)
    await run
    assert run.status == "done" and [e.type for e in seen] == [e.type for e in run.events]
    assert any(isinstance(e, StepStarted) for e in seen)
    assert "a run listener failed" in caplog.text


async def test_a_follow_up_while_the_answer_streams_gets_its_own_round() -> None:
    holder: dict[str, Any] = {}

    def answer(request: ScriptedRequest) -> list[str]:
        if request.index == 0:
            holder["run"].follow_up("and in euros")
            return ["First ", "answer."]
        return ["Second ", "answer."]

    llm = ScriptedLLM(script(synthesize=answer, analyze=[verdict(True, 0.9, "all found")]))  # no answer: a synthesis
    run = session_for(llm).start("goal")
    holder["run"] = run
    await run
    assert len(run.rounds) == 2 and run.answer == "Second answer."
    assert "[User follow-up]: and in euros" in llm.requests_for("plan")[1].prompt
    assert [e.follow_up for e in run.events if isinstance(e, Replanning)] == ["and in euros"]


async def test_a_follow_up_is_judged_with_the_goal() -> None:
    gate = asyncio.Event()

    async def step(request: ScriptedRequest) -> str:
        gate.set()
        await asyncio.sleep(0.05)
        return "r"

    llm = ScriptedLLM(script(step=step))
    run = session_for(llm).start("goal")
    await gate.wait()
    run.follow_up("in French")
    await run
    assert "[User follow-up]: in French" in llm.requests_for("analyze")[0].prompt
    assert run.answer == "The answer." and llm.requests_for("synthesize") == []  # the verdict's: it saw it
    assert len(run.rounds) == 1 and run.state.follow_ups == ["in French"]


# --- results across rounds -----------------------------------------------------------------------------


PARALLEL_HALVES = plan_reply(("s1", [], "fetch the first half"), ("s2", [], "fetch the second half"))


async def test_a_round_that_repairs_only_what_failed_is_judged_and_answered_with_the_earlier_good_results() -> None:
    def step(request: ScriptedRequest) -> str:
        if request.round == 1 and request.step_id == "s2":
            raise RuntimeError("source down")
        return f"result of {request.step_id} in round {request.round}"

    def judge(request: ScriptedRequest) -> dict[str, Any]:
        both = "result of s1 in round 1" in request.prompt and "result of s1 in round 2" in request.prompt
        return verdict(both, 0.9 if both else 0.3, "both halves" if both else "the second half is missing")

    repair = plan_reply(("s1", [], "fetch the second half from another source"))
    llm = ScriptedLLM(script(plan=[PARALLEL_HALVES, repair], step=step, analyze=judge))
    run = await session_for(llm).run("goal")

    assert len(run.rounds) == 2 and run.achieved
    second_verdict = llm.requests_for("analyze")[1].prompt
    assert "[r1.s1] (completed) fetch the first half\nResult: result of s1 in round 1" in second_verdict
    assert "[s1] (completed) fetch the second half from another source" in second_verdict
    assert "[r1.s2]" not in second_verdict  # an earlier failure is history, not a result
    assert "result of s1 in round 1" in llm.requests_for("synthesize")[0].prompt
    assert run.answer == "The answer." and [e.fallback for e in run.events if isinstance(e, AnswerReady)] == [False]


async def test_an_earlier_result_redone_by_a_later_round_is_not_shown_twice() -> None:
    again = plan_reply(("s1", [], "fetch the first half"), ("s2", [], "fetch the rest"))
    llm = ScriptedLLM(
        script(plan=[PARALLEL_HALVES, again], analyze=[verdict(False, 0.3, "unsure"), verdict(True, 0.9)])
    )
    run = await session_for(llm).run("goal")
    second_verdict = llm.requests_for("analyze")[1].prompt
    assert "[r1.s1]" not in second_verdict  # "fetch the first half" was done again in round 2
    assert "[r1.s2] (completed) fetch the second half" in second_verdict
    assert "[s1] (completed) fetch the first half\nResult: result of s1 in round 2" in second_verdict
    assert len(run.rounds) == 2


# --- real providers: a broken plan stream, a refused key, a missing key, a call that never ends -------------


def plan_chunks(*steps: str, then: BaseException | None = None) -> list[Any]:
    """A plan streamed as text, each step its own piece, optionally breaking after them."""
    pieces: list[Any] = ['{"steps": [']
    pieces += [f"{step}," for step in steps]
    if then is not None:
        pieces.append(then)
    return pieces


S1 = '{"id": "s1", "task": "fetch the first half"}'
S2 = '{"id": "s2", "task": "fetch the second half"}'


@pytest.mark.parametrize(
    ("again", "s1_requests"),
    [
        (plan_reply(("s1", [], "fetch the first half"), ("s3", ["s1"], "combine")), 1),
        (plan_reply(("s1", [], "fetch it all differently"), ("s3", ["s1"], "combine")), 2),
    ],
    ids=["same step kept", "changed step redone"],
)
async def test_a_plan_stream_that_breaks_mid_way_is_planned_again_and_the_run_goes_on(
    again: dict[str, Any], s1_requests: int
) -> None:
    from dagmagic.errors import ProviderConnectionError

    broken = plan_chunks(S1, S2, then=ProviderConnectionError("connection reset by peer"))

    def plan(request: ScriptedRequest) -> Any:
        return broken if request.stream else again

    async def step(request: ScriptedRequest) -> str:
        await asyncio.sleep(0.05)
        return f"result of {request.step_id}"

    llm = ScriptedLLM(script(plan=plan, step=step), chunk_delay=0.02)
    run = await session_for(llm, llm_retries=0).run("goal")

    assert run.status == "done" and run.answer == "The answer."
    assert [(r.stream, r.level) for r in llm.requests_for("plan")] == [(True, "text"), (False, "text")]
    assert [(s.id, s.status) for s in run.plan.steps] == [("s1", "completed"), ("s3", "completed")]
    assert len(llm.requests_for("step", "s1")) == s1_requests  # kept when unchanged, redone when not
    assert all(call.step_id != "s2" or call.status == "cancelled" for call in run.calls)  # s2 was withdrawn
    assert any("stream broke" in warning for warning in run.rounds[0].warnings)


@pytest.mark.parametrize("error", [errors.AuthenticationError, errors.PermissionDeniedError, errors.UnknownModelError])
async def test_a_refused_key_in_a_step_ends_the_run_at_once(error: type[errors.ProviderError]) -> None:
    async def step(request: ScriptedRequest) -> str:
        if request.step_id == "s2":
            raise error("the provider refused", model="scripted")
        await asyncio.sleep(5)  # a sibling still running: cancelled, not waited for
        return "never"

    llm = ScriptedLLM(script(plan=[PARALLEL_HALVES], step=step, analyze=[verdict(False, 0.3, "retry")]))
    run = await session_for(llm).run("goal")
    assert run.status == "failed" and len(run.rounds) == 1
    assert run.error is not None and error.kind in run.error and "the provider refused" in run.error
    assert error.hint and error.hint in run.error
    assert llm.requests_for("analyze") == [] and len(llm.requests_for("plan")) == 1  # no replanning
    assert {s.id: s.status for s in run.plan.steps} == {"s1": "cancelled", "s2": "failed"}
    with pytest.raises(errors.RunFailedError) as caught:
        run.raise_for_status()
    assert isinstance(caught.value.__cause__, error)


async def test_a_bad_request_in_one_step_fails_only_that_step() -> None:
    def step(request: ScriptedRequest) -> str:
        if request.step_id == "s2":
            raise errors.BadRequestError("this prompt is too long", model="scripted")
        return "ok"

    llm = ScriptedLLM(script(plan=[PARALLEL_HALVES], step=step))
    run = await session_for(llm).run("goal")
    assert run.status == "done" and {s.id: s.status for s in run.plan.steps} == {"s1": "completed", "s2": "failed"}


async def test_a_missing_provider_key_fails_the_run_before_any_call(monkeypatch: pytest.MonkeyPatch) -> None:
    from dagmagic import DagSession, ModelRegistry

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    registry = ModelRegistry().register("gpt", "openai/gpt-4.1-mini")
    run = await DagSession(registry, DagSettings(store="none")).run("goal")
    assert run.status == "failed" and run.calls == []
    assert run.error is not None and "'gpt' needs OPENAI_API_KEY" in run.error and "api_key=" in run.error
    keyed = ModelRegistry().register("gpt", "openai/gpt-4.1-mini", api_key="sk-test-not-a-real-key-123")
    assert keyed.missing_credentials() == {}
    local = ModelRegistry().register("ollama", "ollama/qwen3")
    assert local.missing_credentials() == {}


async def test_a_call_that_never_answers_is_bounded_and_the_run_still_answers() -> None:
    async def never(request: ScriptedRequest) -> str:
        await asyncio.sleep(3600)
        return "too late"

    llm = ScriptedLLM(script(step=never, analyze=[verdict(False, 0.3, "the steps timed out")]))
    run = await session_for(
        llm,
        llm_timeout=0.1,
        llm_retries=1,
        llm_retry_backoff=0.01,
        max_replan_rounds=1,
        step_immediate_retries=0,
        step_retry_delays=(),
    ).run("g")
    assert run.status == "done" and run.answer.startswith(NOT_ACHIEVED)
    step = run.rounds[0].plan.step("s1")
    assert (
        step.status == "failed" and step.error is not None and "no reply within 0.1 s (DAG_LLM_TIMEOUT)" in step.error
    )
    timed_out = [c for c in run.calls if c.purpose == "step"]
    assert timed_out and all(c.status == "failed" and c.retries == 1 for c in timed_out)


async def test_a_stream_that_stops_sending_is_bounded_too() -> None:
    llm = ScriptedLLM(script(), chunk_delay=3600)
    run = await session_for(llm, llm_timeout=0.1, llm_retries=0).run("goal")
    assert run.status == "done" and run.answer == "The answer."  # the verdict's, asked for again whole
    streamed, whole = [c for c in run.calls if c.purpose == "analyze"]
    assert streamed.stream and streamed.status == "failed" and "DAG_LLM_TIMEOUT" in (streamed.error or "")
    assert not whole.stream and whole.status == "ok"


def test_a_key_set_on_litellm_itself_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    import litellm

    from dagmagic import ModelRegistry

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    registry = ModelRegistry().register("gpt", "openai/gpt-4.1-mini")
    assert registry.missing_credentials() == {"gpt": ["OPENAI_API_KEY"]}
    monkeypatch.setattr(litellm, "openai_key", "sk-set-on-litellm-0000000000", raising=False)
    assert registry.missing_credentials() == {}


async def test_a_whole_plan_whose_stream_ends_without_a_finish_reason_is_used() -> None:
    """llama.cpp's server ends a streamed tool call without a finish reason; litellm reports a broken stream
    ("Stream ended before a finish_reason was received") after the whole plan came through.
    """
    from dagmagic.errors import ServerError

    ended = ServerError("MidStreamFallbackError: Stream ended before a finish_reason was received")
    whole = [*plan_chunks(S1, S2), '{"id": "s3", "task": "combine", "dependencies": ["s1", "s2"]}]}', ended]
    llm = ScriptedLLM(script(plan=[whole]))
    run = await session_for(llm, llm_retries=0).run("goal")
    assert run.status == "done" and len(llm.requests_for("plan")) == 1  # not planned a second time
    assert [s.id for s in run.plan.steps] == ["s1", "s2", "s3"] and run.rounds[0].warnings == []


async def test_a_step_failed_for_good_stops_only_its_branch_and_the_analyzer_hears_the_round_is_partial() -> None:
    def rate_limited_s1(request: ScriptedRequest) -> str:
        if request.step_id == "s1":
            raise errors.RateLimitError("429 slow down", model="scripted")
        return f"result of {request.step_id}"

    plan = plan_reply(("s1", []), ("s2", ["s1"]), ("s3", []), ("s4", ["s3"]))
    llm = ScriptedLLM(script(plan=[plan], step=rate_limited_s1, analyze=[verdict(False, 0.9, "half of it")]))
    settings = {"llm_retries": 0, "step_immediate_retries": 1, "step_retry_delays": (0.02, 0.02)}
    run = await session_for(llm, max_replan_rounds=1, **settings).run("goal")

    steps = run.rounds[0].plan
    assert {s.id: s.status for s in steps.steps} == {
        "s1": "failed",
        "s2": "skipped",
        "s3": "completed",
        "s4": "completed",
    }
    assert [r.step_id for r in llm.requests_for("step")].count("s1") == 4  # the try, once at once, twice delayed
    (judged,) = llm.requests_for("analyze")
    assert "These results are partial: 2 of 4 steps did not complete" in judged.prompt
    assert "Failed for good after 4 tries: RateLimitError" in judged.prompt
    assert "Skipped — dependency s1 failed" in judged.prompt

    whole = ScriptedLLM(script())
    await session_for(whole).run("goal")
    assert "partial" not in whole.requests_for("analyze")[0].prompt  # only when something did not complete


async def test_a_streamed_step_gets_the_same_hints_as_the_whole_plans_validation() -> None:
    # Qwen2.5-Coder-0.5B wrote {"tool_hint": "fast"}: the validated plan moved it to model_hint, but the step
    # that had started while the plan streamed kept the raw hint (and was told "Suggested tool: fast")
    plan = {"steps": [{"id": "s1", "task": "look up", "tool_hint": "fast"}, {"id": "s2", "task": "compare"}]}
    llm = ScriptedLLM(script(plan=[json.dumps(plan)]))  # JSON as it wrote it, not plan lines
    run = await session_for(llm).run("goal")
    assert llm.requests_for("plan")[0].stream  # the streaming path
    assert (run.steps["s1"].tool_hint, run.steps["s1"].model_hint) == (None, "fast")
    assert "Suggested tool" not in llm.requests_for("step")[0].prompt
    assert run.rounds[0].warnings == [
        "Step s1: the planner named 'fast' as its tool, but that is a model role, not a tool: the step runs on the "
        "fast model."
    ]


async def test_a_plan_whose_step_is_named_after_the_planners_function_and_needs_a_tool_still_runs() -> None:
    # met with Qwen2.5-Coder-0.5B on "Which has more people, France or Germany? Use the population tool.": one step
    # named after the function it was asked to call, depending on the tool, with a role as its tool hint
    quirky = {
        "steps": [
            {
                "id": "submit_plandraft",
                "task": "Submit the PlanDraft.",
                "dependencies": ["population"],
                "tool_hint": "fast",
            }
        ]
    }

    def population(country: str) -> int:
        """The population of a country."""
        return {"france": 68_400_000, "germany": 84_500_000}.get(country.lower(), 0)

    llm = ScriptedLLM(  # JSON as it wrote it, not plan lines
        script(plan=[json.dumps(quirky)], analyze=[verdict(True, 0.9, "Germany")]), capabilities=("tool_call",)
    )
    from dagmagic import DagSession, DagSettings, ModelRegistry

    session = DagSession(ModelRegistry().register("qwen", llm), DagSettings(store="none"), tools=[population])
    run = await session.run("Which has more people, France or Germany? Use the population tool.")
    step = run.steps["s1"]  # the form's name is no step id
    assert run.status == "done" and step.status == "completed" and step.dependencies == []
    assert step.model_hint == "fast" and step.tool_hint is None
    warnings = [e.message for e in run.events if isinstance(e, RunWarning)]
    assert any("'population', which is no step of the plan" in w for w in warnings)
    assert any("'fast' as its tool, but that is a model role" in w for w in warnings)
    assert not any("submit_plandraft" in w for w in warnings)


async def test_a_plan_cut_to_plan_max_steps_says_so_on_its_round_as_data(tmp_path: Any) -> None:
    from dagmagic import DagSession, DagSettings, ModelRegistry, load_run
    from dagmagic.models import PlanCut

    fourteen = plan_reply(*((f"s{i}", [], f"task number {i}") for i in range(1, 15)))
    llm = ScriptedLLM(script(plan=[fourteen]))  # asked again, the model writes 14 steps again
    store = str(tmp_path / "runs.sqlite")
    session = DagSession(ModelRegistry().register("scripted", llm), DagSettings(store=store, plan_max_steps=6))
    run = await session.run("goal")
    record = run.rounds[0]
    assert len(record.plan.steps) == 6
    assert record.plan_cut == PlanCut(
        planned=14, kept=6, dropped=[f"task number {i}" for i in range(7, 15)]
    )  # what the views say, with how to allow more
    cut = [e for e in run.events if isinstance(e, RunWarning) and e.plan_cut is not None]
    assert len(cut) == 1 and "the first 6 run" in cut[0].message  # the terminal's line says it too
    assert not any("the first 6 run" in w for w in record.warnings)  # shown once, as the cut, not as a small note
    assert load_run(run.run_id, store=store).rounds[0].plan_cut == record.plan_cut  # saved with the round
    session.close()
