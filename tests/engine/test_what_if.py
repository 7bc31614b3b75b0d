"""What if a step had said something else: ``run.what_if(step, result=...)`` continues from the user's text."""

from __future__ import annotations

from pathlib import Path

import pytest

import dagmagic
from dagmagic import DagError, DagSession, DagSettings, ModelRegistry
from dagmagic.events import ResultEdited
from dagmagic.testing import ScriptedLLM

from .conftest import session_for
from .test_debugging import script, step_calls


async def test_a_what_if_runs_only_the_dependents_of_the_edited_step_and_records_the_edit() -> None:
    llm = ScriptedLLM(script())
    run = await session_for(llm).run("goal")
    first = run.rounds[0]
    before, judged_before = len(llm.requests_for("step")), len(llm.requests_for("analyze"))
    cleared: list[str] = []
    run.subscribe(lambda event: cleared.append(event.reason) if event.type == "answer_cleared" else None)

    again = await run.what_if("s2", result="s2=forty-two")

    assert again is run and run.status == "done" and len(run.rounds) == 2
    assert step_calls(llm, before) == {"s3": 1}  # s2 did not run, s1 and s4 kept: only what depends on s2
    assert len(llm.requests_for("analyze")) == judged_before + 1  # judged again
    assert "s2<forty-two>" in (run.steps["s3"].result or "")  # s3 read the edited result
    edited = run.steps["s2"]
    assert (edited.result, edited.edited, edited.status, edited.usage.total_tokens) == (
        "s2=forty-two",
        True,
        "completed",
        0,
    )
    assert not first.plan.step("s2").edited and first.plan.step("s2").result != "s2=forty-two"  # kept as it was
    assert run.steps["s1"].result == first.plan.step("s1").result and not run.steps["s1"].edited
    redo = run.rounds[1]
    assert (redo.rerun_of, redo.rerun_step, redo.what_if, redo.free) == (1, "s2", True, True)
    assert redo.decision is not None and "s2's result edited by you" in redo.decision.reason
    assert cleared == ["s2's result was edited by you: the answer is written again from what follows from it."]
    edits = [event for event in run.events if isinstance(event, ResultEdited)]
    assert [(e.round, e.step_id, e.result) for e in edits] == [(2, "s2", "s2=forty-two")]
    assert "forty-two" in run.answer
    diff = run.diff(1, 2)
    assert {change.id: change.fields for change in diff.changes} == {
        "s2": ["model", "result"],
        "s3": ["result"],
    }  # no model wrote it


async def test_a_what_if_is_stored_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    run = await DagSession(ModelRegistry().register("m", ScriptedLLM(script())), DagSettings(store=str(path))).run("g")
    await run.what_if("s1", result="s1=seven")
    stored = dagmagic.load_run(run.run_id, store=str(path))
    assert [(r.index, r.rerun_of, r.rerun_step, r.what_if) for r in stored.rounds] == [
        (1, None, None, False), (2, 1, "s1", True)
    ]  # fmt: skip
    assert stored.steps["s1"].edited and stored.steps["s1"].result == "s1=seven"
    assert [e.step_id for e in stored.events if isinstance(e, ResultEdited)] == ["s1"]
    assert stored.answer == run.answer


async def test_what_cannot_continue_from_an_edited_result_says_why(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    run = await DagSession(ModelRegistry().register("m", ScriptedLLM(script())), DagSettings(store=str(path))).run("g")
    with pytest.raises(DagError, match=r"no step 's9' in the latest round \(its steps: s1, s2, s3, s4\)"):
        run.start_what_if("s9", result="x")
    with pytest.raises(TypeError, match="takes the step's new result as text, got int"):
        run.start_what_if("s2", result=42)  # type: ignore[arg-type]
    stored = dagmagic.load_run(run.run_id, store=str(path))
    with pytest.raises(
        DagError, match=r"take it back with `session.reopen\('\w+'\)` to re-run a step or edit a result, or fork it"
    ):
        stored.start_what_if("s2", result="x")
