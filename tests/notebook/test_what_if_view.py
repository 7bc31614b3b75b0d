"""What if a step had said something else, as the notebook shows it: the widget's ``what_if`` request starts
``run.start_what_if``, its state marks the edited step and the round, the static views say "result edited by you",
and ``compare_rounds`` opens the compare widget of the two rounds under the round (or says why it cannot).
"""

from __future__ import annotations

import asyncio
import sys
import types
from typing import Any

import pytest

from dagmagic import DagSession, DagSettings, ModelRegistry
from dagmagic.notebook.compare_widget import CompareWidget
from dagmagic.notebook.fallbacks import run_html, run_markdown, svg
from dagmagic.notebook.widget import DagWidget, widget_state
from dagmagic.testing import ScriptedLLM

from .test_widget import FrontEnd

THREE_STEPS = {
    "steps": [
        {"id": "s1", "task": "look up the first half"},
        {"id": "s2", "task": "look up the second half"},
        {"id": "s3", "task": "multiply both halves", "dependencies": ["s1", "s2"]},
    ]
}


def _step(request: Any) -> str:
    if request.step_id == "s3":  # from what its dependencies said
        return "forty-eight" if "eight" in request.prompt else "forty-two"
    return {"s1": "six", "s2": "seven"}.get(str(request.step_id), "done")


def _verdict(request: Any) -> dict[str, Any]:
    product = "forty-eight" if "forty-eight" in request.prompt else "forty-two"
    return {"achieved": True, "confidence": 0.9, "reasoning": "ok", "final_answer": f"The product is {product}."}


def llm() -> ScriptedLLM:
    return ScriptedLLM({"plan": [THREE_STEPS], "step": _step, "analyze": _verdict, "synthesize": [["The product."]]})


def session(model: ScriptedLLM | None = None) -> DagSession:
    return DagSession(ModelRegistry().register("m", model or llm()), DagSettings(store="none"))


async def test_the_state_marks_the_edited_step_and_the_round_that_continued_from_it() -> None:
    run = await session().run("What is six times seven?")
    await run.what_if("s2", result="eight")
    state = widget_state(run)
    first, second = state["rounds"]
    assert (first["what_if"], second["what_if"]) == (False, True)
    assert (second["rerun_of"], second["rerun_step"]) == (1, "s2")
    nodes = {node["id"]: node for node in second["nodes"]}
    assert (nodes["s2"]["edited"], nodes["s2"]["result"], nodes["s2"]["status"]) == (True, "eight", "completed")
    assert nodes["s2"]["reused_from"] is None  # the user's result, not carried over
    assert (nodes["s1"]["edited"], nodes["s1"]["reused_from"]) == (False, 1)  # kept
    assert (nodes["s3"]["edited"], nodes["s3"]["reused_from"], nodes["s3"]["result"]) == (False, None, "forty-eight")
    assert not any(node["edited"] for node in first["nodes"])
    changed = {entry["id"]: (entry["change"], entry["fields"]) for entry in second["diff"]}
    assert changed == {"s2": ("changed", ["result"]), "s3": ("changed", ["result"])}  # s2's missing model is no change
    assert state["answer"] == "The product is forty-eight."


async def test_a_what_if_giving_the_same_result_says_the_user_edited_it() -> None:
    run = await session().run("What is six times seven?")
    await run.what_if("s2", result="seven")
    diff = widget_state(run)["rounds"][1]["diff"]
    assert diff[0] == {"id": "s2", "change": "edited", "fields": [], "round": 2, "was": None}, diff


async def test_the_widgets_what_if_request_starts_it_and_refusals_say_why() -> None:
    model = llm()
    run = session(model).start("What is six times seven?")
    widget = DagWidget(run)
    front = FrontEnd(widget)
    running = front.refused("what_if", step="s2", result="eight")  # not ended yet
    assert running == "a step's result can be edited (what_if) once the run has ended: wait for it, or stop() it first"
    await run
    widget.sync()
    assert widget.can_rerun
    assert "it is empty" in front.refused("what_if", step="s2", result="  ")
    assert "no step 's9'" in front.refused("what_if", step="s9", result="eight")
    steps_before = len(model.requests_for("step"))

    assert front.ask("what_if", step="s2", result="eight") == {"ok": True, "value": None}
    await asyncio.sleep(0)
    assert run.status == "running"
    await run
    widget.sync()
    assert [r.step_id for r in model.requests_for("step")[steps_before:]] == ["s3"]  # only what depends on s2
    second = widget.rounds[1]
    assert second["what_if"] and second["nodes"][1]["edited"] and second["nodes"][1]["result"] == "eight"
    assert widget.answer == "The product is forty-eight."
    widget.close()


async def test_compare_rounds_opens_the_compare_widget_under_the_round_or_says_why_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run = await session().run("What is six times seven?")
    await run.what_if("s2", result="eight")
    widget = DagWidget(run)
    front = FrontEnd(widget)
    assert front.refused("compare_rounds", a=1, b=5) == "there is no round 5 in this run"
    assert "must be a whole number" in front.refused("compare_rounds", a="1", b=2)
    assert widget.comparison is None

    answer = front.ask("compare_rounds", a=1, b=2)
    assert answer["ok"], answer
    view = widget.comparison
    assert isinstance(view, CompareWidget)
    assert (widget.comparison_round, widget.comparison_label) == (2, "round 1 vs round 2")
    (entry,) = view.comparisons
    pairs = {pair["b"]["ref"]: pair for r in entry["comparison"]["rounds"] for pair in r["steps"]}
    assert pairs["s2"]["change"] == "changed" and pairs["s3"]["change"] == "changed"
    assert pairs["s1"]["change"] == "same"
    # the Markdown too, for a front end that cannot draw a widget inside another
    assert answer["value"]["a"] == 1 and answer["value"]["b"] == 2
    assert "forty-eight" in answer["value"]["markdown"] and "round 1 vs round 2" in answer["value"]["markdown"]

    # asked again: a new compare widget, the earlier one closed
    assert front.ask("compare_rounds", a=1, b=2)["ok"]
    assert widget.comparison is not view and view.comm is None
    again = widget.comparison
    assert front.ask("close_comparison") == {"ok": True, "value": None}
    assert (widget.comparison, widget.comparison_round, widget.comparison_label) == (None, 0, "")
    assert again.comm is None

    # without dagmagic.compare, the view says so
    monkeypatch.setitem(sys.modules, "dagmagic.side_by_side", types.ModuleType("dagmagic.side_by_side"))
    assert "needs dagmagic.compare" in front.refused("compare_rounds", a=1, b=2)
    assert widget.comparison is None
    widget.close()


async def test_closing_the_run_widget_closes_its_comparison() -> None:
    run = await session().run("What is six times seven?")
    await run.what_if("s2", result="eight")
    widget = DagWidget(run)
    assert FrontEnd(widget).ask("compare_rounds", a=1, b=2)["ok"]
    view = widget.comparison
    widget.close()
    assert view.comm is None


async def test_the_static_views_say_the_result_was_edited_by_you_and_keep_it_inert() -> None:
    run = await session().run("What is six times seven?")
    await run.what_if("s2", result="<img src=x onerror=alert(1)> eight")
    html = run_html(run)
    assert "continued from round 1 with s2&#x27;s result edited by you" in html
    assert "<i>What if s2 had said “&lt;img src=x onerror=alert(1)&gt; eight”: the steps that use its result" in html
    assert "<b>s2</b> · completed · result edited by you · look up the second half" in html  # no time: it did not run
    assert "<img src=x" not in html  # (the picture of the DAG is an <img> of our own)
    markdown = run_markdown(run)
    assert "completed, result edited by you" in markdown  # the step table's s2
    assert (
        "- Round 2: what if s2 had said “&lt;img src=x onerror=alert(1)&gt; eight” (continued from round 1" in markdown
    )
    assert "with s2&#x27;s result edited by you)" in markdown
    assert "| s2 | completed, result edited by you | look up the second half |  |  |" in markdown  # no model, no time
    assert "<img src=x" not in markdown
    assert "edited" not in run_markdown(await session().run("What is six times seven?"))  # only when it was
    drawn = svg(run.rounds[1].plan)  # the picture of the round: its box says so, and its tooltip
    assert "s2 · edited" in drawn and "s2 (completed, result edited by you)" in drawn
    assert "s3 · edited" not in drawn and "· edited" not in svg(run.rounds[0].plan)
