"""Every LLM call site under every fault: the outcome each cell of ``MATRIX`` documents, checked cell by cell.

One scenario reaches all eight purposes (a long history to summarize, a plan, 13 tools to select from, a step
whose long result must be compacted for its dependent, a result with a citation, a verdict, a streamed
answer). Its verdict reaches the goal but writes no answer, so a synthesis writes it (a verdict that writes the
answer makes no synthesis call: ``tests/engine/calls/test_verdict_stream.py``). One purpose at a time then meets one
fault on *every* call it makes; the rest of the script stays healthy. Whatever the cell, the run ends (nothing hangs), every completed step result is in
``run.steps`` and in the store, and the answer is never empty.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dagmagic import DagSession, DagSettings, ModelRegistry, errors, load_run, tool
from dagmagic.engine.run.dag_run import DagRun
from dagmagic.engine.tools.functions import Tool
from dagmagic.events import RunWarning
from dagmagic.models import Exchange
from dagmagic.notebook.fallbacks import run_mimebundle
from dagmagic.notebook.widget import widget_state
from dagmagic.testing import ScriptedLLM, ScriptedRequest

# fmt: off
MATRIX = """
purpose         | rate_limit   | timeout      | server_500   | connection_reset | auth       | broken_stream | empty_stream | empty_reply  | huge_reply | never
history_summary | tail         | tail         | tail         | tail             | FAILED     | tail          | tail         | tail         | kept       | tail
plan            | one-step     | silent       | one-step     | silent           | FAILED     | one-step      | one-step     | one-step     | one-step   | silent
tool_selection  | all-tools    | silent       | all-tools    | silent           | FAILED     | silent        | all-tools    | all-tools    | all-tools  | silent
step            | step-failed  | step-failed  | step-failed  | step-failed      | FAILED     | step-failed   | step-failed  | step-failed  | kept       | step-failed
compaction      | cut          | cut          | cut          | cut              | FAILED     | cut           | cut          | cut          | cut        | cut
analyze         | not-judged   | silent       | not-judged   | silent           | FAILED     | not-judged    | not-judged   | not-judged   | not-judged | silent
synthesize      | listing      | listing      | listing      | listing          | FAILED     | listing       | listing      | listing      | kept       | listing
citation_check  | unverified   | silent       | unverified   | silent           | unverified | silent        | unverified   | unverified   | unverified | silent
"""
# fmt: on
"""The documented outcome of each purpose (row) meeting each fault on every call (column):

- ``FAILED``: the run fails with the provider's message and what to do (a wrong key ends the run wherever it
  is met: every later call would meet it too), and still answers with what completed — except in the
  citation check, which runs once the step's result exists: it never costs the step its result, so the
  result stands, unverified, and the run's next call meets the key;
- ``tail``: the history is not summarized, the planner sees its last characters (a warning says so);
- ``one-step``: no readable plan, the goal is planned as one step (a warning says so);
- ``all-tools``: the step is given every tool instead of a selection (a warning says so);
- ``step-failed``: that step fails with the error, the others keep their results, the run answers;
- ``cut``: a text that could not be compacted is cut to fit, head and tail kept (a warning says so);
- ``not-judged``: the round counts as not achieved ("The model's verdict could not be read, so whether the goal was reached is not known"), so the loop replans;
- ``listing``: the answer falls back to the analyzer's reasoning and the completed steps' results (a warning
  says so);
- ``unverified``: the step keeps its result, marked "citations not verified";
- ``kept``: the megabyte is used as it is (the views cap it);
- ``silent``: the model gave no answer ``llm_unanswered_limit`` tries in a row (a structured purpose tries each
  of its levels in turn), so the run stops calling it: the run fails with a message naming the model and saying
  that it did not answer (here one model plays every role: nothing else could go on), and still answers with
  what completed. Where other purposes' answers come between the faulted tries, the count starts again and the
  purpose's own outcome holds.

Transient faults (rate limit, timeout, 5xx, connection, a broken stream, no reply) are retried
``llm_retries`` times first; ``test_a_transient_fault_met_once_is_retried_away`` shows the retry succeeding.
"""

PURPOSES = ("history_summary", "plan", "tool_selection", "step", "compaction", "analyze", "synthesize",
            "citation_check")  # fmt: skip
TRANSIENT = ("rate_limit", "timeout", "server_500", "connection_reset", "broken_stream", "never")
GOAL = "What does a 404 status mean?"
LONG_RESULT = "Measured value: 42. " * 2500  # 50,000 characters: s2's dependency context must be compacted
CITED = "Per RFC 9110 section 15.5.5, a 404 status means the resource was not found."


def parse_matrix(text: str) -> dict[tuple[str, str], str]:
    header, *rows = (line for line in text.strip().splitlines())
    faults = [cell.strip() for cell in header.split("|")[1:]]
    cells: dict[tuple[str, str], str] = {}
    for row in rows:
        purpose, *outcomes = (cell.strip() for cell in row.split("|"))
        cells.update({(purpose, fault): outcome for fault, outcome in zip(faults, outcomes, strict=True)})
    return cells


CELLS = parse_matrix(MATRIX)
FAULTS = tuple(dict.fromkeys(fault for _, fault in CELLS))


def healthy_script() -> dict[str, Any]:
    return {
        "history_summary": ["Earlier the user asked what HTTP status codes are."],
        "plan": [
            {
                "steps": [
                    {"id": "s1", "task": "gather the measurements"},
                    {"id": "s2", "task": "explain it with a citation", "dependencies": ["s1"]},
                ]
            }
        ],
        "tool_selection": [{"tools": ["lookup_0"]}],
        "step:s1": [LONG_RESULT],
        "step:s2": [CITED],
        "compaction": ["Digest: the measured value is 42."],
        "citation_check": [{"valid": True, "feedback": ""}],
        "analyze": [{"achieved": True, "confidence": 0.9, "reasoning": "Both answer it.", "final_answer": None}],
        "synthesize": [["A 404 ", "means not found."]],
    }


def never_answers() -> Callable[[ScriptedRequest], Any]:
    async def hang(request: ScriptedRequest) -> str:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    return hang


def fault(name: str) -> Any:
    """A reply that is the fault (a fresh one per cell: exceptions carry state)."""
    made: dict[str, Callable[[], Any]] = {
        "rate_limit": lambda: errors.RateLimitError("429 Too Many Requests", model="m"),
        "timeout": lambda: errors.ProviderTimeoutError("Request timed out", model="m"),
        "server_500": lambda: errors.ServerError("500 Internal Server Error", model="m"),
        "connection_reset": lambda: errors.ProviderConnectionError("Connection reset by peer", model="m"),
        "auth": lambda: errors.AuthenticationError("Incorrect API key provided", model="m"),
        "broken_stream": lambda: ["A partial ", errors.ProviderConnectionError("the stream ended mid-way", model="m")],
        "empty_stream": lambda: [""],
        "empty_reply": lambda: "",
        "huge_reply": lambda: "x" * 1_000_000,
        "never": never_answers,
    }
    return made[name]()


def lookup_tools() -> list[Tool]:
    """13 tools: one more than the threshold at which a step's model selects among them."""

    def make(index: int) -> Tool:
        def lookup(query: str) -> str:
            """Look something up."""
            return f"nothing found for {query}"

        lookup.__name__ = f"lookup_{index}"
        return tool(lookup)

    return [make(index) for index in range(13)]


async def run_cell(tmp_path: Path, script: dict[str, Any]) -> tuple[DagRun, ScriptedLLM, Path]:
    llm = ScriptedLLM(script, context_window=6000)
    registry = ModelRegistry().register("m", llm, roles=["smart", "general", "fast", "reasoning"])
    store = tmp_path / "runs.sqlite"
    settings = DagSettings(
        store=str(store),
        llm_retries=1,
        llm_retry_backoff=0,
        llm_timeout=0.3,  # "never": each try gives up after this
        step_retry_delays=(),
        planner_input_tokens=2000,
        max_replan_rounds=2,
    )
    session = DagSession(registry, settings, tools=lookup_tools())
    session.history = [Exchange(goal="What do HTTP codes mean? " * 200, answer="They classify responses. " * 400)]
    run = await asyncio.wait_for(session.run(GOAL), 60)  # a hang would be a defect: never wait forever
    return run, llm, store


def faulted_calls(run: DagRun, purpose: str) -> list[Any]:
    return [call for call in run.calls if call.purpose == purpose and (purpose != "step" or call.step_id == "s2")]


def warnings_of(run: DagRun) -> list[str]:
    return [event.message for event in run.events if isinstance(event, RunWarning)]


def check_outcome(outcome: str, purpose: str, run: DagRun, llm: ScriptedLLM) -> None:
    said = "\n".join(warnings_of(run))
    if outcome == "FAILED":
        assert run.status == "failed"
        assert run.error is not None and run.error.startswith("AuthenticationError: Authentication failed for model")
        assert "Hint:" in run.error and "Traceback" not in run.error
        return
    assert run.status == "done", run.error
    if outcome == "tail":
        assert "could not be summarized" in said
        assert "Previous conversation (last part)" in llm.requests_for("plan")[0].prompt
    elif outcome == "one-step":
        assert "no usable plan" in said
        assert [(step.id, step.task) for step in run.rounds[0].plan.steps] == [("s1", GOAL)]
    elif outcome == "all-tools":
        assert "Tool selection for s1 failed" in said and "all 13 tools" in said
        assert {len(request.tools) for request in llm.requests_for("step", "s1")} == {13}
    elif outcome == "step-failed":
        s1, s2 = run.rounds[0].plan.steps
        assert (s1.status, s2.status) == ("completed", "failed") and s2.error
    elif outcome == "cut":
        assert "could not be compacted" in said and "cut to fit" in said
        assert "Digest" not in llm.requests_for("step", "s2")[0].prompt
    elif outcome == "not-judged":
        first = run.rounds[0]
        assert first.analysis is not None and first.analysis.reasoning.startswith(
            "The model's verdict could not be read, so whether the goal was reached is not known"
        )
        assert first.decision is not None and first.decision.action == "replan" and len(run.rounds) == 2
    elif outcome == "listing":
        assert "The answer could not be written" in said and run.answer.startswith("*The answer could not be written (")
        assert "completed.*\n\nBoth answer it.\n\n---\n\n**s1**" in run.answer  # why it is a listing, then the listing
    elif outcome == "unverified":
        s2 = run.rounds[0].plan.steps[1]
        assert s2.status == "completed" and s2.result == CITED
        assert any(note.startswith("citations not verified") for note in s2.warnings)
    elif outcome == "kept":  # the megabyte went where that purpose's reply goes
        used = {
            "history_summary": llm.requests_for("plan")[0].prompt,
            "step": run.rounds[0].plan.steps[1].result or "",
            "synthesize": run.answer,
        }
        assert "x" * 1000 in used[purpose] and "could not" not in said
    else:
        raise AssertionError(f"no check for the outcome {outcome!r}")


def check_silent(purpose: str, run: DagRun) -> None:
    said = "\n".join(warnings_of(run))
    assert run.status == "failed"
    assert run.error is not None and run.error.startswith("ProviderUnavailableError: Model 'm' did not answer")
    assert "Hint:" in run.error and "Traceback" not in run.error
    assert "Model 'm' did not answer 4 tries in a row" in said
    faulted = [call for call in run.calls if call.purpose == purpose]
    assert sum(call.retries + 1 for call in faulted if call.status == "failed") <= 4  # then no more tries


def check_nothing_lost(run: DagRun, store: Path) -> None:
    assert run.answer.strip(), "the user always gets an answer"
    completed = {ref: step.result for ref, step in run.all_steps.items() if step.status == "completed"}
    stored = load_run(run.run_id, store=str(store))
    assert {ref: step.result for ref, step in stored.all_steps.items() if step.status == "completed"} == completed
    assert stored.status == run.status
    # a megabyte from a model is capped where it is shown
    assert len(json.dumps(widget_state(run), default=str)) < 400_000
    assert all(len(text) < 200_000 for text in run_mimebundle(run).values())


@pytest.mark.parametrize(("purpose", "fault_name"), list(CELLS), ids=[f"{p}-{f}" for p, f in CELLS])
async def test_each_purpose_under_each_fault(purpose: str, fault_name: str, tmp_path: Path) -> None:
    script = healthy_script()
    injected = fault(fault_name)
    script["step:s2" if purpose == "step" else purpose] = injected if callable(injected) else [injected]
    run, llm, store = await run_cell(tmp_path, script)

    calls = faulted_calls(run, purpose)
    assert calls, f"the scenario made no {purpose} call"
    if fault_name in TRANSIENT:  # each call retried before it counted as failed (a stream broken mid-way: not)
        for call in calls:
            assert call.status == "failed"
            if (call.error or "").startswith("ProviderUnavailableError"):
                continue  # the try after which the model counts as silent is not retried
            assert call.retries == (0 if fault_name == "broken_stream" and call.stream else 1)
    outcome = CELLS[purpose, fault_name]
    if outcome == "silent":
        check_silent(purpose, run)
    else:
        check_outcome(outcome, purpose, run, llm)
    check_nothing_lost(run, store)


def test_the_matrix_covers_every_purpose_and_fault() -> None:
    assert {purpose for purpose, _ in CELLS} == set(PURPOSES)
    assert set(FAULTS) == {"rate_limit", "timeout", "server_500", "connection_reset", "auth", "broken_stream",
                           "empty_stream", "empty_reply", "huge_reply", "never"}  # fmt: skip
    assert len(CELLS) == len(PURPOSES) * len(FAULTS)


async def test_the_healthy_scenario_reaches_every_purpose(tmp_path: Path) -> None:
    run, _, store = await run_cell(tmp_path, healthy_script())
    assert run.status == "done" and run.answer == "A 404 means not found."
    assert {call.purpose for call in run.calls} == set(PURPOSES)
    assert warnings_of(run) == []
    check_nothing_lost(run, store)


@pytest.mark.parametrize("purpose", PURPOSES)
@pytest.mark.parametrize("fault_name", TRANSIENT)
async def test_a_transient_fault_met_once_is_retried_away(purpose: str, fault_name: str, tmp_path: Path) -> None:
    script = healthy_script()
    key = "step:s2" if purpose == "step" else purpose
    healthy = script[key][0]
    if fault_name == "never":
        answered: list[int] = []

        async def first_never_comes(request: ScriptedRequest) -> Any:
            answered.append(1)
            if len(answered) == 1:
                await asyncio.Event().wait()
            return healthy

        script[key] = first_never_comes
    else:
        script[key] = [fault(fault_name), healthy]
    run, llm, store = await run_cell(tmp_path, script)

    first = faulted_calls(run, purpose)[0]
    if fault_name == "broken_stream" and first.stream:
        # a stream that broke after its first piece is not retried (its text was shown already): the plan and the
        # verdict are asked for again without streaming; the answer falls back to the steps' results
        assert first.status == "failed" and first.retries == 0
        if purpose == "plan":
            assert warnings_of(run) == ["the plan's stream broke (Connection failed): planned again without streaming"]
            assert run.answer == "A 404 means not found."
        elif purpose == "analyze":
            assert warnings_of(run) == [
                "The verdict's stream broke (Connection failed): the round is judged again without streaming."
            ]
            assert run.answer == "A 404 means not found." and run.achieved
        else:
            check_outcome("listing", purpose, run, llm)
    else:
        assert run.status == "done" and run.answer == "A 404 means not found."
        assert warnings_of(run) == []
        assert (first.status, first.retries) == ("ok", 1)
    check_nothing_lost(run, store)
