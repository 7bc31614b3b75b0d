"""A new run from another's state: ``run.fork(at=...)`` keeps what does not depend on the step, asks again only
what changed (the rest answered from the original's recording), and knows its parent.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import dagmagic
from dagmagic import DagError, DagSession, DagSettings, ModelRegistry
from dagmagic.testing import ScriptedLLM

from .conftest import session_for
from .test_debugging import script, step_calls


async def test_a_fork_with_a_result_runs_only_what_depends_on_the_step_and_knows_its_parent() -> None:
    llm = ScriptedLLM(script())
    session = session_for(llm)
    run = await session.run("goal")
    original = run.state.model_dump(mode="json")
    asked = len(llm.requests)

    forked = await run.fork(at="s2", result="s2=forty-two")

    assert forked is not run and forked.run_id != run.run_id and forked.status == "done"
    assert (forked.forked_from, forked.forked_at) == (run.run_id, "r1.s2")
    assert step_calls(llm, len(llm.requests_for("step")) - 1) == {"s3": 1}
    made = [request.purpose for request in llm.requests[asked:]]
    assert "plan" not in made and sorted(set(made)) == ["analyze", "step", "synthesize"]
    assert [r.step_id for r in llm.requests[asked:] if r.purpose == "step"] == ["s3"]  # s1, s2, s4 kept
    assert forked.steps["s2"].edited and forked.steps["s2"].result == "s2=forty-two"
    assert forked.steps["s1"].result == run.steps["s1"].result and forked.steps["s4"].result == run.steps["s4"].result
    assert "s2<forty-two>" in (forked.steps["s3"].result or "") and "forty-two" in forked.answer
    assert run.state.model_dump(mode="json") == original  # the original is untouched
    assert forked in session.runs and len(session.history) == 1  # a run of its own, outside the conversation


async def test_a_fork_that_changes_nothing_is_answered_wholly_from_the_recording() -> None:
    llm = ScriptedLLM(script())
    run = await session_for(llm).run("goal")
    asked = len(llm.requests)
    forked = await run.fork(at="s2")
    assert forked.status == "done" and len(llm.requests) == asked  # every call the same: none reached the model
    assert forked.answer == run.answer and forked.steps["s3"].result == run.steps["s3"].result
    assert not forked.steps["s2"].edited


async def test_a_fork_with_an_edited_task_diverges_there_and_its_dependents_follow() -> None:
    llm = ScriptedLLM(script())
    run = await session_for(llm).run("goal")
    before = len(llm.requests_for("step"))
    forked = await run.fork(at="s2", task="triple it")
    assert step_calls(llm, before) == {"s2": 1, "s3": 1}
    assert forked.steps["s2"].task == "triple it" and (forked.steps["s2"].result or "").startswith("s2=triple it")
    assert run.steps["s2"].task == "double it"
    assert "triple it" in forked.answer and "triple it" not in run.answer


async def test_a_fork_on_other_models_asks_them_from_the_step_on() -> None:
    llm, other = ScriptedLLM(script()), ScriptedLLM(script())
    run = await session_for(llm).run("goal")
    asked = len(llm.requests)
    forked = await run.fork(at="s2", models=ModelRegistry().register("other", other))
    assert len(llm.requests) == asked  # nothing of the fork reached the first model
    assert sorted(r.step_id for r in other.requests_for("step")) == ["s2", "s3"]
    assert forked.steps["s2"].model == "other" and forked.steps["s1"].model == run.steps["s1"].model


async def test_a_stored_run_is_forked_from_its_id_and_the_fork_is_stored_with_its_parent(tmp_path: Path) -> None:
    path = str(tmp_path / "runs.sqlite")
    llm = ScriptedLLM(script())
    run = await DagSession(ModelRegistry().register("m", llm), DagSettings(store=path)).run("goal")
    later = DagSession(ModelRegistry().register("m", llm), DagSettings(store=path))  # another session, as a new kernel
    read_back = dagmagic.load_run(run.run_id, store=path)
    with pytest.raises(DagError, match=r"no session drives it here: fork it through one"):
        read_back.start_fork("s2")
    forked = await read_back.fork(at="s2", result="s2=seven", session=later)
    by_id = await later.fork(run.run_id, "r1.s4", result="s4=four")
    for fork, at in ((forked, "r1.s2"), (by_id, "r1.s4")):
        stored = dagmagic.load_run(fork.run_id, store=path)
        assert (stored.forked_from, stored.forked_at, stored.status) == (run.run_id, at, "done")
        assert [r.index for r in stored.rounds] == [1] and stored.answer == fork.answer
    assert dagmagic.load_run(forked.run_id, store=path).steps["s2"].edited


async def test_what_cannot_be_forked_says_why() -> None:
    run = await session_for(ScriptedLLM(script())).run("goal")
    with pytest.raises(DagError, match=r"no step 's9' in run \w+ \(its latest round's steps: s1, s2, s3, s4\)"):
        run.start_fork("s9")
    with pytest.raises(DagError, match=r"no round 3 in run \w+: it has rounds 1 to 1"):
        run.start_fork("r3.s1")
    with pytest.raises(TypeError, match=r"a new task for the step .* or its result .*, not both"):
        run.start_fork("s2", task="x", result="y")


# --- through litellm, against a provider on loopback


def _kind(body: dict[str, Any]) -> str:
    system = str(body["messages"][0].get("content") or "")
    for kind, start in (
        ("plan", "Plan how to reach"),
        ("analyze", "Judge whether"),
        ("step", "You carry out one step"),
    ):
        if system.startswith(kind) or system.startswith(start):
            if kind == "step":
                city = "Paris" if "Paris" in json.dumps(body["messages"]).split("population of")[-1][:20] else "Berlin"
                return f"step {city}"
            return kind
    return "synthesize"


async def test_a_fork_through_litellm_makes_no_request_for_the_unchanged_prefix(tmp_path: Path) -> None:
    from tests.fake_provider import Provider

    asked: list[str] = []

    def answer(body: dict[str, Any]) -> str:
        kind = _kind(body)
        asked.append(kind)
        berlin = "9.9" if "9.9 million" in json.dumps(body["messages"]) else "3.7"
        answer = f"Berlin ({berlin} million) has more people than Paris (2.1 million)."
        return {
            "plan": "1. population of Paris\n2. population of Berlin",
            "analyze": f"yes 0.9: both figures are known\n{answer}",
            "step Paris": "Paris: 2.1 million.",
            "step Berlin": "Berlin: 3.7 million.",
        }.get(kind, answer)

    server = Provider()
    server.answer = answer
    try:
        models = ModelRegistry().register("real", "openai/m", roles=["smart"], api_base=server.base, api_key="sk-x")
        session = DagSession(models, DagSettings(store=str(tmp_path / "runs.sqlite"), domain_routing=False))
        run = await session.run("Compare the populations of Paris and Berlin")
        assert run.status == "done", run.error
        assert sorted(set(asked)) == ["analyze", "plan", "step Berlin", "step Paris"], asked
        recorded = len(asked)

        forked = await run.fork(at="s2", result="Berlin: 9.9 million.")
        live = asked[recorded:]
        assert "plan" not in live and not any(kind.startswith("step") for kind in live), live  # s1 kept, s2 edited
        assert live and set(live) <= {"analyze", "synthesize"}  # the verdict on the new result only
        assert forked.status == "done" and forked.steps["s2"].result == "Berlin: 9.9 million."

        again = await run.fork(at="s2")  # nothing changed: every call answered from the recording
        assert len(asked) == recorded + len(live) and again.answer == run.answer
    finally:
        server.close()


async def test_a_fork_compared_alone_is_compared_with_its_parent_from_the_store(tmp_path: Path) -> None:
    path = str(tmp_path / "runs.sqlite")
    session = DagSession(ModelRegistry().register("m", ScriptedLLM(script())), DagSettings(store=path))
    run = await session.run("goal")
    forked = await run.fork(at="s2", result="s2=seven")
    comparison = dagmagic.compare(forked, store=path)
    assert (comparison.a.run_id, comparison.b.run_id) == (run.run_id, forked.run_id)
    assert {pair.b.ref for pair in comparison.changed_steps if pair.b} == {"s2", "s3"}
    assert dagmagic.compare(run, forked).changed_steps == comparison.changed_steps
    with pytest.raises(DagError, match=r"forked from run \w+, which no run store here holds: compare the two as"):
        dagmagic.compare(forked, store=str(tmp_path / "other.sqlite"))


async def test_a_fork_runs_with_its_own_settings_and_the_original_keeps_its_own(tmp_path: Path) -> None:
    llm = ScriptedLLM(script())
    run = await session_for(llm).run("goal")
    path = str(tmp_path / "fork.sqlite")
    forked = await run.fork(at="s3", result="s3=done", settings=DagSettings(store=path, max_concurrency=1))
    stored = dagmagic.load_run(forked.run_id, store=path)  # the fork's store is its own settings'
    assert stored.forked_from == run.run_id and stored.steps["s3"].edited
    assert forked.status == "done" and not run.steps["s3"].edited
