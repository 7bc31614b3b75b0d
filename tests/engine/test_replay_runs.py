"""Debugging by replaying: ``session.replay(run)`` re-executes a stored run with the code of now, its model calls
answered from the run's recording, and ``replayed.diff(original)`` says what changed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import dagmagic
from dagmagic import DagRun, DagSession, DagSettings, ModelRegistry, tool
from dagmagic.diff import Divergence, RunDiff
from dagmagic.errors import DagError, ReplayMismatch
from dagmagic.testing import ScriptedLLM
from tests.engine.conftest import plan_reply, verdict
from tests.llm.test_replay import GOAL, lookup, provider, shape


@tool(name="lookup")
def lookup_reworded(city: str) -> str:
    """The number of people living in a city, from the latest census."""
    return {"Paris": "2.1 million", "Berlin": "3.7 million"}.get(city, "unknown")


def models_of(llm: ScriptedLLM) -> ModelRegistry:
    return ModelRegistry().register("scripted", llm, roles=["smart", "general"])


def session(
    llm: ScriptedLLM, store: Path | str = "none", tools: list[Any] | None = None, **settings: Any
) -> DagSession:
    return DagSession(
        models_of(llm), DagSettings(store=str(store), **settings), tools=[lookup] if tools is None else tools
    )


async def recorded(store: Path) -> tuple[DagRun, ScriptedLLM]:
    llm = provider()
    run = await session(llm, store).run(GOAL)
    assert run.status == "done", run.error
    return run, llm


async def test_a_stored_run_replayed_by_id_gives_the_same_run_without_a_provider_request(tmp_path: Path) -> None:
    store = tmp_path / "runs.sqlite"
    original, _ = await recorded(store)
    llm = provider()  # a new kernel: the session's own models are never asked
    later = session(llm, store)

    replayed = await later.replay(original.run_id)

    assert llm.requests == []
    assert shape(replayed) == shape(original)
    assert replayed.run_id != original.run_id and replayed.replay_of == original.run_id
    assert replayed in later.runs and later.history == []  # kept as a run, outside the conversation
    back = dagmagic.load_run(replayed.run_id, store=str(store))  # saved like any run, knowing what it replays
    assert back.replay_of == original.run_id and back.answer == original.answer
    assert dagmagic.load_run(original.run_id, store=str(store)).replay_of is None
    difference = replayed.diff(original)
    assert isinstance(difference, RunDiff) and difference.identical and difference.replay
    assert "identical" in str(difference)


async def test_a_run_of_this_session_and_a_run_read_back_replay_too(tmp_path: Path) -> None:
    store = tmp_path / "runs.sqlite"
    llm = provider()
    here = session(llm, store)
    original = await here.run(GOAL)
    asked = len(llm.requests)
    again = await here.replay(original)
    from_store = await here.replay(dagmagic.load_run(original.run_id, store=str(store)))
    assert len(llm.requests) == asked
    assert shape(again) == shape(original) == shape(from_store)
    assert len(here.history) == 1  # only the original's answer joined the conversation


async def test_a_changed_tool_docstring_diverges_at_the_plan_and_shows_the_change(tmp_path: Path) -> None:
    store = tmp_path / "runs.sqlite"
    original, _ = await recorded(store)
    llm = provider()

    replayed = await session(llm, store, tools=[lookup_reworded]).replay(original.run_id)

    assert llm.requests == []
    assert replayed.status == "failed"
    error = replayed.exception
    assert isinstance(error, ReplayMismatch) and error.purpose == "plan" and error.step_id is None
    divergence = replayed.divergence
    assert divergence is not None and (divergence.purpose, divergence.step_id, divergence.round) == ("plan", None, 1)
    assert divergence.headline == "diverged from the recording at the 'plan' call in round 1"
    assert "-  lookup(city: string) — The population of a city." in divergence.reason
    assert "+  lookup(city: string) — The number of people living in a city" in divergence.reason
    assert "Hint:" not in divergence.reason
    assert replayed.answer == ""  # no "(goal not achieved)" fallback: where it diverged is what it says
    difference = replayed.diff(original)
    assert not difference.identical and difference.diverged == divergence
    assert {change.change for change in difference.rounds[0].steps.changes} == {"removed"}  # it never planned
    assert "diverged from the recording at the 'plan' call in round 1" in str(difference)
    back = dagmagic.load_run(replayed.run_id, store=str(store))  # read back, it still says where
    assert back.divergence == divergence


async def test_a_setting_that_changes_the_planner_prompt_diverges_at_the_plan(tmp_path: Path) -> None:
    store = tmp_path / "runs.sqlite"
    original, _ = await recorded(store)
    replayed = await session(provider(), store, plan_max_steps=4).replay(original.run_id)
    divergence = replayed.divergence
    assert divergence is not None and divergence.purpose == "plan"
    assert "-" in divergence.first_change and "+" in divergence.first_change
    assert divergence.first_change.count("4") > divergence.first_change.split("/")[0].count("4")


async def test_not_strict_a_fallback_answers_what_changed_and_the_diff_shows_it(tmp_path: Path) -> None:
    store = tmp_path / "runs.sqlite"
    original, _ = await recorded(store)
    # the tool reworded: the planner, told of it, now plans one census lookup per city and no comparison step
    fallback = ScriptedLLM(
        {
            "plan": [plan_reply(("s1", [], "census count of Paris"), ("s2", [], "census count of Berlin"))],
            "step:s1": ["Paris: 2.1 million."],
            "step:s2": ["Berlin: 3.7 million."],
            "analyze": [verdict(True, 0.8, "both counts found")],
            "synthesize": [["Berlin (3.7 M) has more people than Paris (2.1 M)."]],
        }
    )
    later = session(provider(), store, tools=[lookup_reworded])

    replayed = await later.replay(original.run_id, strict=False, fallback=models_of(fallback))

    assert replayed.status == "done" and replayed.divergence is None
    assert fallback.requests_for("plan") and fallback.requests_for("analyze")
    difference = replayed.diff(original)
    assert not difference.identical and difference.answer_changed
    assert difference.answer_after == "Berlin (3.7 M) has more people than Paris (2.1 M)."
    changes = {change.id: change for change in difference.rounds[0].steps.changes}
    assert changes["s1"].change == "changed" and "task" in changes["s1"].fields
    assert changes["s3"].change == "removed"
    assert difference.rounds[0].verdict_changed
    text = str(difference)
    assert "s1 changed (task, result)" in text and "s3 removed" in text and "answer changed" in text
    markdown = difference._repr_markdown_()
    assert "| 1 | s3 | removed |" in markdown and "**Answer after**" in markdown


async def test_a_run_planned_after_another_replays_in_the_conversation_it_was_planned_in(tmp_path: Path) -> None:
    store = tmp_path / "runs.sqlite"
    llm = ScriptedLLM(
        {
            "plan": [plan_reply(("s1", [], "find it"))],
            "step": ["Paris: 2.1 million people"],  # the answer's figure is a result's
            "analyze": [verdict(True, 0.9, "fine", final_answer="Paris has 2.1 million people.")],
        }
    )
    here = session(llm, store)
    await here.run("How many people live in Paris?")
    second = await here.run("And in Berlin?")
    assert "How many people live in Paris?" in llm.requests_for("plan")[1].prompt  # planned in the conversation
    await here.run("And in Rome?")  # the conversation goes on: the replay must not plan in this one

    same_session = await here.replay(second)
    new_kernel = await session(ScriptedLLM({}), store).replay(second.run_id)

    for replayed in (same_session, new_kernel):
        assert replayed.status == "done", replayed.error
        assert replayed.diff(second).identical
    assert len(here.history) == 3


async def test_the_sessions_cassette_does_not_wrap_a_replay(tmp_path: Path) -> None:
    store = tmp_path / "runs.sqlite"
    original, _ = await recorded(store)
    # a cassette that does not exist, and record=none: any run of the session would be refused at once
    later = session(provider(), store, cassette=str(tmp_path / "missing.jsonl"), record="none")
    replayed = await later.replay(original.run_id)
    assert replayed.status == "done" and shape(replayed) == shape(original)


async def test_the_sessions_response_cache_does_not_answer_a_replay(tmp_path: Path) -> None:
    store, cache = tmp_path / "runs.sqlite", str(tmp_path / "cache.sqlite")
    llm = provider()
    original = await session(llm, store, cache=cache).run(GOAL)  # every answer is in the cache now
    replayed = await session(provider(), store, cache=cache).replay(original.run_id)
    assert shape(replayed) == shape(original)
    assert replayed.usage.cached_requests == 0  # each call answered from the recording, as recorded


async def test_what_cannot_be_replayed_says_why(tmp_path: Path) -> None:
    store = tmp_path / "runs.sqlite"
    later = session(provider(), store)
    with pytest.raises(DagError, match=r"no run 'ffffffffffff' in the run store .*%dag history"):
        later.start_replay("ffffffffffff")
    with pytest.raises(DagError, match=r"no run store to replay run 'abc' from \(DAG_STORE is none\)"):
        session(provider()).start_replay("abc")
    with pytest.raises(TypeError, match="fallback="):
        later.start_replay("abc", models=models_of(provider()))  # type: ignore[call-arg]
    slow = ScriptedLLM({"plan": [plan_reply(("s1", []))], "step": ["x"], "analyze": [verdict(True, 0.9)]}, latency=5)
    running = session(slow, store).start(GOAL)
    try:
        with pytest.raises(DagError, match="has not ended"):
            later.start_replay(running)
    finally:
        running.cancel()
        await running


def test_a_divergence_is_read_from_every_way_a_replay_words_one() -> None:
    step = Divergence.of_error(
        "ReplayMismatch: Replay mismatch: The 'step' call of step s2 in round 3 was asked more often than recorded "
        "(2 time(s)).\nHint: record again"
    )
    assert step is not None and (step.purpose, step.step_id, step.round) == ("step", "s2", 3)
    assert step.why == "it was asked more often than recorded (2 time(s))"
    cancelled = Divergence.of_error(
        "ReplayMismatch: Replay mismatch: analyze · round 2 · model 'm': the recorded run moved on before this "
        "call's reply came (it was cancelled); this replay did not."
    )
    assert cancelled is not None and (cancelled.purpose, cancelled.round) == ("analyze", 2)
    refused = "ReplayMismatch: Replay mismatch: The 'plan' call in round 1 would call the provider of model 'x'"
    assert Divergence.of_error(refused) is None  # no recording was left: DAG_RECORD=none refused a live call
    assert Divergence.of_error("RateLimitError: slow down") is None and Divergence.of_error(None) is None
