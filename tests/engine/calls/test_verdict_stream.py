"""Verdict and answer in one call: the verdict streams, and when the goal is reached its ``final_answer`` is the
run's answer, shown while it is written (``engine/verdict_stream.py``, ``Analyzer.analyze``, ``Drive.act``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dagmagic import DagSession, DagSettings, ModelRegistry
from dagmagic.engine.calls.analyzer import Analyzer
from dagmagic.errors import ServerError
from dagmagic.events import (
    AnalysisReady,
    AnswerCleared,
    AnswerDelta,
    AnswerReady,
    Event,
    Replanning,
    RunWarning,
)
from dagmagic.llm import ChatModel
from dagmagic.llm.protocol import StreamChunk, ToolCallDelta
from dagmagic.models import AnalysisResult, PlanStep
from dagmagic.store import RunStore
from dagmagic.testing import ScriptedLLM
from tests.engine.conftest import plan_reply, session_for, verdict

ANSWER = "Paris has about **2.1 million** people (INSEE, 2024)."
TWO_STEPS = plan_reply(("s1", []), ("s2", ["s1"]))


def script(**overrides: Any) -> dict[str, Any]:
    """No "synthesize" reply unless a test gives one: a synthesis call where none belongs fails the run."""
    base: dict[str, Any] = {
        "route": [{"domain": None}],
        "plan": [TWO_STEPS],
        "step": lambda r: f"result of {r.step_id} in round {r.round}: 2.1 million (INSEE, 2024)",  # ANSWER's figure
        "analyze": [verdict(True, 0.9, "both sources agree", ANSWER)],
    }
    return {**base, **overrides}


def kinds(run: Any, *types: type[Event]) -> list[Event]:
    return [event for event in run.events if isinstance(event, types)]


def deltas(run: Any) -> str:
    return "".join(event.text for event in kinds(run, AnswerDelta))


def text_pieces(*pieces: str) -> list[str]:
    """A verdict written as text, in the given pieces (a chunk list: delivered as content at any level)."""
    return list(pieces)


# --- the answer comes from the verdict ---------------------------------------------------------------------


async def test_the_answer_streams_from_the_verdict_call_and_no_synthesis_is_made() -> None:
    llm = ScriptedLLM(script())
    run = await session_for(llm).run("How many people live in Paris?")

    assert run.status == "done" and run.answer == ANSWER and run.achieved
    (judged,) = llm.requests_for("analyze")
    assert judged.stream and judged.level == "text"  # verdict lines, as the non-streamed call asks for them
    assert llm.requests_for("synthesize") == []
    pieces = kinds(run, AnswerDelta)
    assert len(pieces) > 1 and deltas(run) == ANSWER  # written piece by piece
    order = [type(event) for event in kinds(run, AnswerDelta, AnalysisReady, AnswerReady)]
    assert order.index(AnalysisReady) > order.index(AnswerDelta)  # shown while the verdict is still written
    assert order[-1] is AnswerReady and all(t is AnswerDelta for t in order[: order.index(AnalysisReady)])
    (ready,) = kinds(run, AnswerReady)
    assert (ready.answer, ready.fallback, ready.partial) == (ANSWER, False, False)
    assert kinds(run, AnswerCleared) == []
    assert [call.stream for call in run.calls if call.purpose == "analyze"] == [True]


async def test_the_verdict_streams_as_lines_whatever_the_model_can_do() -> None:
    for capabilities, level in ((("json_mode", "stream"), "text"), (("stream",), "text")):
        llm = ScriptedLLM(script(), capabilities=capabilities)
        run = await session_for(llm).run("goal")
        (judged,) = llm.requests_for("analyze")
        assert (judged.level, judged.stream) == (level, True)
        assert run.answer == ANSWER and deltas(run) == ANSWER and llm.requests_for("synthesize") == []


async def test_the_analyzer_asks_for_the_answer_written_for_the_user() -> None:
    llm = ScriptedLLM(script())
    await session_for(llm).run("goal")
    prompt = llm.requests_for("analyze")[0].prompt
    assert 'never "based on the results"' in prompt and "in the goal's language" in prompt and "Markdown" in prompt
    # a 0.5B model's verdict answered "Paris" to "the capital of France and its population": no synthesis follows
    # to complete it, so the verdict is asked for every part
    assert "every part of the goal" in prompt


async def test_the_verdict_ends_with_its_answer_so_the_run_ends_when_the_answer_is_written() -> None:
    """The verdict's first line, then the answer, last: nothing the user waits for is written after it, and what
    comes before it is as short as the decision needs ("yes 0.9").
    """
    llm = ScriptedLLM(script(analyze=[verdict(True, 0.9, "", ANSWER)]))
    run = await session_for(llm).run("goal")
    (judged,) = llm.requests_for("analyze")
    assert judged.tools == [] and "First line: yes or no" in judged.prompt
    (call,) = [call for call in run.calls if call.purpose == "analyze"]
    assert call.reply == f"yes 0.9\n{ANSWER}" and run.answer == ANSWER
    assert run.calls[-1] is call and run.state.finished_at is not None
    assert run.state.finished_at - (call.started_at + call.latency) < 0.5  # the run ends with the answer


async def test_escapes_split_across_pieces_stream_as_the_text_they_stand_for() -> None:
    written = json.dumps(verdict(True, 0.9, "ok", 'Line one\n"quoted" \\ é 😀 end'))
    llm = ScriptedLLM(script(analyze=[[written[i : i + 3] for i in range(0, len(written), 3)]]))
    run = await session_for(llm).run("goal")
    assert deltas(run) == run.answer == 'Line one\n"quoted" \\ é 😀 end'


# --- a streamed answer that is not the answer ----------------------------------------------------------------


async def test_a_verdict_that_turns_out_not_achieved_clears_what_it_wrote_and_replans() -> None:
    undecided = text_pieces(
        '{"final_answer": "Paris ', 'is big", "achieved": false, ', '"confidence": 0.2, "reasoning": "no source"}'
    )
    llm = ScriptedLLM(script(analyze=[undecided, verdict(True, 0.9, "found", ANSWER)]))
    run = await session_for(llm).run("goal")

    assert len(run.rounds) == 2 and run.answer == ANSWER and llm.requests_for("synthesize") == []
    sequence = kinds(run, AnswerDelta, AnswerCleared, AnalysisReady, Replanning)
    first_clear = next(i for i, e in enumerate(sequence) if isinstance(e, AnswerCleared))
    shown = "".join(e.text for e in sequence[:first_clear] if isinstance(e, AnswerDelta))
    assert shown == "Paris "  # not the piece that says "achieved": false
    (cleared,) = kinds(run, AnswerCleared)
    assert "not reached" in cleared.reason
    assert isinstance(sequence[first_clear + 1], Replanning)  # dropped, then the next round is announced
    assert run.rounds[0].decision is not None and run.rounds[0].decision.action == "replan"


async def test_a_confident_wrong_comparison_is_caught_twice_so_the_run_replans_with_the_reason() -> None:
    wrong = "France has more people than Germany, with 68,401,997 compared to Germany's 84,482,267."
    right = "Germany has more people than France: 84,482,267 against 68,401,997."
    populations = {"s1": "France: 68,401,997", "s2": "Germany: 84,482,267"}
    llm = ScriptedLLM(
        script(
            step=lambda r: populations[r.step_id],
            analyze=[verdict(True, 1.0, "", wrong), verdict(True, 1.0, "", wrong), verdict(True, 0.9, "", right)],
        )
    )
    run = await session_for(llm).run("Which has more people, France or Germany?")

    assert len(run.rounds) == 2 and run.answer == right and run.achieved
    assert [request.stream for request in llm.requests_for("analyze")] == [True, False, True]
    first = run.rounds[0].analysis
    assert first is not None and not first.achieved and first.confidence == 0.0
    said = "it says France has more people than Germany, but the results give France 68,401,997 and Germany 84,482,267"
    assert said in first.reasoning
    (replanning,) = kinds(run, Replanning)
    assert said in replanning.reason
    assert said in llm.requests_for("plan")[1].prompt  # the replan context gets the reason
    assert "does not check against the step results" in kinds(run, AnswerCleared)[0].reason
    assert any("did not check against the step results" in e.message for e in kinds(run, RunWarning))


async def test_a_verdict_that_says_not_achieved_first_streams_nothing() -> None:
    no = verdict(False, 0.2, "no source", "a guess")
    llm = ScriptedLLM(script(analyze=[no, verdict(True, 0.9, "found", ANSWER)]))
    run = await session_for(llm).run("goal")
    assert deltas(run) == ANSWER and kinds(run, AnswerCleared) == []


async def test_a_confidence_stop_drops_the_streamed_answer_for_one_saying_what_is_missing() -> None:
    undecided = text_pieces(
        '{"final_answer": "a guess', '", "achieved": false, "confidence": 0.9, "reasoning": "partly"}'
    )
    llm = ScriptedLLM(script(analyze=[undecided], synthesize=[["Not reached: ", "s2 is missing."]]))
    run = await session_for(llm).run("goal")
    assert run.rounds[0].decision is not None and run.rounds[0].decision.action == "stop"
    assert run.answer.endswith("\n\nNot reached: s2 is missing.") and len(kinds(run, AnswerCleared)) == 1
    assert run.answer.startswith("**Not fully answered.** ")  # what is missing, said by the run
    assert [e.fallback for e in kinds(run, AnswerReady)] == [False] and len(llm.requests_for("synthesize")) == 1


async def test_a_stop_whose_answer_cannot_be_written_lists_the_results_not_the_verdicts_guess() -> None:
    no = verdict(False, 0.9, "partly", "a guess")
    llm = ScriptedLLM(script(analyze=[no], synthesize=[RuntimeError("down")]))
    run = await session_for(llm).run("goal")
    assert "a guess" not in run.answer and "The goal was not reached: partly" in run.answer
    assert "**s1**: result of s1 in round 1" in run.answer and [e.fallback for e in kinds(run, AnswerReady)] == [True]


# --- where a separate synthesis still runs -----------------------------------------------------------------------


async def test_a_stopped_run_still_gets_its_partial_answer_from_a_synthesis() -> None:
    holder: dict[str, Any] = {}

    def step(request: Any) -> str:
        if request.step_id == "s1":
            holder["run"].stop()
        return f"result of {request.step_id}"

    llm = ScriptedLLM(
        script(step=step, analyze=[verdict(False, 0.4, "s2 is missing", "half")], synthesize=[["Partial: ", "s1."]])
    )
    run = session_for(llm, streaming_planner=False).start("goal")
    holder["run"] = run
    await run
    assert run.partial and run.answer == "Partial: s1." and len(llm.requests_for("synthesize")) == 1
    assert deltas(run) == "Partial: s1."


async def test_a_model_that_cannot_stream_judges_whole_then_synthesizes() -> None:
    llm = ScriptedLLM(script(synthesize=["Whole answer."]), capabilities=("tool_call", "json_mode"))
    run = await session_for(llm).run("goal")
    (judged,) = llm.requests_for("analyze")
    assert not judged.stream and run.answer == "Whole answer." and len(llm.requests_for("synthesize")) == 1
    assert kinds(run, AnswerCleared) == []


async def test_an_achieved_verdict_without_an_answer_is_answered_by_a_synthesis() -> None:
    for empty in (None, "  "):
        llm = ScriptedLLM(script(analyze=[verdict(True, 0.9, "ok", empty)], synthesize=[["Written ", "apart."]]))
        run = await session_for(llm).run("goal")
        assert run.answer == "Written apart." and len(llm.requests_for("synthesize")) == 1


async def test_a_rerun_not_achieved_is_answered_by_a_synthesis_and_an_achieved_one_by_its_verdict() -> None:
    llm = ScriptedLLM(
        script(
            analyze=[
                verdict(True, 0.9, "ok", ANSWER),
                verdict(False, 0.3, "s2 changed", "not this"),
                verdict(True, 0.9, "ok again", "Third answer."),
            ],
            synthesize=[["Re-run ", "answer."]],
        )
    )
    run = await session_for(llm).run("goal")
    await run.rerun("s2")
    assert run.answer.endswith("\n\nRe-run answer.") and len(llm.requests_for("synthesize")) == 1
    assert "Write only what these results do establish" in llm.requests_for("synthesize")[0].prompt  # it says so
    await run.rerun("s2")
    assert run.answer == "Third answer." and len(llm.requests_for("synthesize")) == 1


# --- a stream that fails ----------------------------------------------------------------------------------------


async def test_a_broken_verdict_stream_clears_its_answer_and_judges_again_without_streaming() -> None:
    written = json.dumps(verdict(True, 0.9, "ok", ANSWER))
    broken = [written[:80], ServerError("connection reset", model="scripted")]
    llm = ScriptedLLM(script(analyze=[broken, verdict(True, 0.9, "ok", ANSWER)]))
    run = await session_for(llm, llm_retries=0).run("goal")

    assert [request.stream for request in llm.requests_for("analyze")] == [True, False]
    assert run.answer == ANSWER and llm.requests_for("synthesize") == []
    (cleared,) = kinds(run, AnswerCleared)
    assert "stream broke" in cleared.reason
    assert any("stream broke" in event.message for event in kinds(run, RunWarning))
    assert [e.fallback for e in kinds(run, AnswerReady)] == [False]


async def test_an_unreadable_verdict_is_asked_for_again_without_streaming() -> None:
    llm = ScriptedLLM(script(analyze=["I think it went well.", verdict(True, 0.9, "ok", ANSWER)]))
    run = await session_for(llm).run("goal")
    levels = [(request.level, request.stream) for request in llm.requests_for("analyze")]
    assert levels == [("text", True), ("text", False)]
    assert run.answer == ANSWER and llm.requests_for("synthesize") == []


async def test_a_whole_verdict_whose_stream_ends_without_a_finish_reason_is_used() -> None:
    written = json.dumps(verdict(True, 0.9, "ok", ANSWER))
    llm = ScriptedLLM(script(analyze=[[written, ServerError("stream ended early", model="scripted")]]))
    run = await session_for(llm, llm_retries=0).run("goal")
    assert len(llm.requests_for("analyze")) == 1 and run.answer == ANSWER and kinds(run, AnswerCleared) == []


async def test_the_analyzer_reads_final_answer_from_tool_call_argument_deltas() -> None:
    written = json.dumps(verdict(True, 0.9, "ok", ANSWER))
    chunks = [StreamChunk(tool_calls=[ToolCallDelta(index=0, id="c", name="submit_verdict")])]
    chunks += [
        StreamChunk(tool_calls=[ToolCallDelta(index=0, arguments=written[i : i + 7])])
        for i in range(0, len(written), 7)
    ]
    llm = ScriptedLLM({"analyze": [chunks]})
    model = ChatModel(ModelRegistry().register("m", llm).get("m"), settings=DagSettings())
    written_out: list[str] = []
    step = PlanStep(id="s1", task="look", status="completed", result="2.1 million")
    result = await Analyzer(model, DagSettings()).analyze("goal", [("s1", step)], round=1, on_delta=written_out.append)
    assert result == AnalysisResult(achieved=True, confidence=0.9, reasoning="ok", final_answer=ANSWER)
    assert "".join(written_out) == ANSWER and len(written_out) > 1


# --- the user meanwhile -----------------------------------------------------------------------------------------


async def test_a_follow_up_while_the_verdict_streams_clears_it_and_the_round_is_judged_again() -> None:
    written = json.dumps(verdict(True, 0.9, "ok", "Paris only."))
    first = [written[i : i + 8] for i in range(0, len(written), 8)]
    llm = ScriptedLLM(script(analyze=[first, verdict(True, 0.9, "ok", "Paris and Madrid.")]), chunk_delay=0.001)
    run = session_for(llm).start("goal")

    def on_event(event: Event) -> None:
        if isinstance(event, AnswerDelta) and not run.follow_ups_so_far:
            run.follow_up("and Madrid")

    run.subscribe(on_event)
    await run
    assert run.answer == "Paris and Madrid." and len(run.rounds) == 1 and run.follow_ups == ["and Madrid"]
    judged = llm.requests_for("analyze")
    assert len(judged) == 2 and "[User follow-up]: and Madrid" in judged[1].prompt
    (cleared,) = kinds(run, AnswerCleared)
    assert "judged again" in cleared.reason
    after = run.events[run.events.index(cleared) :]
    assert "".join(e.text for e in after if isinstance(e, AnswerDelta)) == "Paris and Madrid."
    assert llm.requests_for("synthesize") == []


async def test_a_run_interrupted_while_its_verdict_streams_is_judged_again_on_resume(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    written = json.dumps(verdict(True, 0.9, "ok", "Draft that never ended."))
    llm = ScriptedLLM(script(analyze=[[written[i : i + 8] for i in range(0, len(written), 8)]]), chunk_delay=0.001)
    session = DagSession(ModelRegistry().register("m", llm), DagSettings(store=str(path)))
    run = session.start("goal")

    def on_event(event: Event) -> None:
        if isinstance(event, AnswerDelta) and "Draft" in run.answer:
            run.cancel()

    run.subscribe(on_event)
    await run
    assert run.status == "cancelled" and run.answer.startswith("Draft")

    again = ScriptedLLM(script())
    resumed = await DagSession(ModelRegistry().register("m", again), DagSettings(store=str(path))).resume(run.run_id)
    assert resumed.status == "done" and resumed.answer == ANSWER
    assert len(again.requests_for("analyze")) == 1 and again.requests_for("synthesize") == []
    assert deltas(resumed) == ANSWER  # the draft is not kept: the resumed run starts its answer afresh
    assert RunStore.open(path).load(run.run_id).state.answer == ANSWER


# --- a server whose streaming is broken: one role chunk, then [DONE] ----------------------------------------------

EMPTY_STREAM = [StreamChunk(text="")]
"""What llama.cpp's server streamed here: a chunk with the role and no text, then the end."""


async def test_an_empty_verdict_stream_is_judged_again_whole_at_the_same_level() -> None:
    whole = verdict(True, 0.9, "ok", ANSWER)
    llm = ScriptedLLM(script(analyze=lambda r: EMPTY_STREAM if r.stream else whole))
    run = await session_for(llm).run("goal")
    levels = [(request.level, request.stream) for request in llm.requests_for("analyze")]
    assert levels == [("text", True), ("text", False)]  # asked again, whole
    assert run.answer == ANSWER and [e.fallback for e in kinds(run, AnswerReady)] == [False]
    assert any("stream was empty" in event.message for event in kinds(run, RunWarning))


async def test_an_empty_answer_stream_is_asked_for_again_without_streaming() -> None:
    llm = ScriptedLLM(
        script(
            analyze=[verdict(True, 0.9, "found", None)],  # no answer in the verdict: a synthesis writes it
            synthesize=lambda r: EMPTY_STREAM if r.stream else "Whole answer.",
        )
    )
    run = await session_for(llm).run("goal")
    assert [request.stream for request in llm.requests_for("synthesize")] == [True, False]
    assert run.answer == "Whole answer." and [e.fallback for e in kinds(run, AnswerReady)] == [False]
    assert deltas(run) == "Whole answer."
    assert any("stream was empty" in event.message for event in kinds(run, RunWarning))


async def test_an_answer_empty_streamed_and_whole_falls_back_and_says_why() -> None:
    llm = ScriptedLLM(
        script(analyze=[verdict(True, 0.9, "found", None)], synthesize=lambda r: EMPTY_STREAM if r.stream else "")
    )
    run = await session_for(llm).run("goal")
    assert [request.stream for request in llm.requests_for("synthesize")] == [True, False]
    assert "the reply was empty" in run.answer and [e.fallback for e in kinds(run, AnswerReady)] == [True]


async def test_a_streamed_verdict_that_contradicts_itself_clears_its_answer_and_is_asked_again() -> None:
    contradicting = verdict(True, 1.0, "The goal is not reached.", "A guess.")
    llm = ScriptedLLM(script(analyze=[contradicting, verdict(True, 0.9, "found", ANSWER)]))
    run = await session_for(llm).run("goal")
    assert [request.stream for request in llm.requests_for("analyze")] == [True, False]
    assert run.answer == ANSWER and run.achieved and len(run.rounds) == 1
    (cleared,) = kinds(run, AnswerCleared)
    assert "contradicts itself" in cleared.reason


async def test_an_answer_stream_that_breaks_before_any_text_is_asked_for_again_without_streaming() -> None:
    """litellm may report such a server's stream as broken (no finish reason) rather than as empty."""
    broken = [ServerError("stream ended early", model="scripted")]
    llm = ScriptedLLM(
        script(
            analyze=[verdict(True, 0.9, "found", None)],
            synthesize=lambda r: broken if r.stream else "Whole answer.",
        )
    )
    run = await session_for(llm, llm_retries=0).run("goal")
    assert [request.stream for request in llm.requests_for("synthesize")] == [True, False]
    assert run.answer == "Whole answer." and [e.fallback for e in kinds(run, AnswerReady)] == [False]
    assert any("stream broke before any text" in event.message for event in kinds(run, RunWarning))
