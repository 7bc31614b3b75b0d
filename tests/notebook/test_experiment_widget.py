"""``ExperimentWidget``: the compact grid state, opening a cell's run (its own run widget), the score shown, and
how an experiment displays as a cell's value.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from dagmagic import DagSession, DagSettings, ModelRegistry
from dagmagic.engine.run.dag_run import DagRun
from dagmagic.evaluation import Case, Experiment, contains
from dagmagic.notebook.answering import AnsweringWidget
from dagmagic.notebook.display import WIDGET_VIEW, widget_for
from dagmagic.notebook.experiment_widget import ExperimentWidget, experiment_display, experiment_state
from dagmagic.testing import ScriptedLLM

PLAN = {"steps": [{"id": "s1", "task": "look it up"}]}
VERDICT = {"achieved": True, "confidence": 0.8, "reasoning": "ok"}


def scripted(answer: str, latency: float = 0.0) -> ScriptedLLM:
    return ScriptedLLM(
        {"plan": [PLAN], "step": ["found"], "analyze": [VERDICT], "synthesize": [answer]}, latency=latency
    )


def session_over(llm: ScriptedLLM, store: Path | None = None) -> DagSession:
    settings = DagSettings(store=str(store) if store is not None else "none")
    return DagSession(ModelRegistry().register("scripted", llm), settings)


def says_paris(case: Case, run: DagRun) -> float:
    return 1.0 if "Paris" in run.answer else 0.0


SESSIONS: list[DagSession] = []


async def two_by_two(store: Path | None = None, repeat: int = 1) -> Experiment:
    small, big = scripted("Lyon"), scripted("Paris")
    session = session_over(small, store)
    SESSIONS[:] = [session]
    configs = {"small": {"models": {"smart": small}}, "big": {"models": {"smart": big}}}
    cases = [{"goal": "Where is the Louvre?", "id": "louvre", "expected": "Paris"}, {"goal": "<b>Lyon?</b>", "id": "b"}]
    return await session.evaluate(cases, configs=configs, scorers=[says_paris, contains()], repeat=repeat, name="towns")


class FrontEnd:
    """What a front end sends to the widget and what the kernel answers."""

    def __init__(self, widget: AnsweringWidget) -> None:
        self.widget = widget
        self.sent: list[Any] = []
        widget.send = lambda content, buffers=None: self.sent.append(content)  # type: ignore[method-assign]
        self.asked = 0

    def ask(self, name: str, **msg: Any) -> dict[str, Any]:
        self.asked += 1
        self.widget._handle_custom_msg({"kind": "anywidget-command", "id": self.asked, "name": name, "msg": msg}, [])
        answer = self.sent[-1]
        assert answer["id"] == self.asked and answer["kind"] == "anywidget-command-response"
        return dict(answer["response"])


async def test_the_state_is_compact_one_short_list_per_cell_in_grid_order() -> None:
    experiment = await two_by_two(repeat=2)
    state = experiment_state(experiment)
    assert state["configs"] == ["small", "big"]
    assert state["cases"] == [["louvre", "Where is the Louvre?"], ["b", "<b>Lyon?</b>"]]  # text: the front end escapes
    assert state["score_columns"] == ["says_paris", "contains"] and state["score_column"] == "says_paris"
    assert [cell[:4] for cell in state["cells"]] == [
        [0, 0, "done", 0.0],
        [0, 0, "done", 0.0],
        [0, 1, "done", 1.0],
        [0, 1, "done", 1.0],
        [1, 0, "done", 0.0],
        [1, 0, "done", 0.0],
        [1, 1, "done", 1.0],
        [1, 1, "done", 1.0],
    ]
    assert all(isinstance(cell[5], float) for cell in state["cells"])  # latency, seconds
    assert state["counts"] == {"total": 8, "ended": 8, "failed": 0, "running": 0} and state["running"] is False
    assert state["progress"].startswith("8 of 8 cells done")
    assert state["summary_header"][:3] == ["config", "done", "failed"]
    assert [row[0] for row in state["summary_rows"]] == ["small", "big"]
    assert experiment_state(experiment, "contains")["cells"][0][3] == 0.0  # a bool as 0 or 1
    json.dumps(state)  # the whole state travels as JSON
    per_cell = len(json.dumps(state["cells"])) / len(state["cells"])
    assert per_cell < 60, f"{per_cell:.0f} characters a cell: the grid of thousands of cells must stay small"


async def test_opening_a_cell_shows_its_runs_own_widget_and_closing_it_empties_the_panel() -> None:
    experiment = await two_by_two()
    widget = ExperimentWidget(experiment)
    front = FrontEnd(widget)
    answer = front.ask("open", cell=1)
    run = experiment.run_of(1)
    assert answer == {"ok": True, "value": {"run_id": run.run_id}}
    assert widget.opened is widget_for(run) and widget.opened_cell == 1
    assert widget.opened_label == f"louvre × big · run {run.run_id}"
    assert run.answer == "Paris"
    assert front.ask("close") == {"ok": True, "value": None}
    assert widget.opened is None and widget.opened_cell == -1 and widget.opened_label == ""


async def test_a_cell_without_a_run_and_a_bad_request_are_refused_in_words() -> None:
    experiment = await two_by_two()
    experiment.cells[2].run_id = None
    experiment.cells[2].status = "not_started"
    widget = ExperimentWidget(experiment)
    front = FrontEnd(widget)
    assert front.ask("open", cell=2) == {
        "ok": False,
        "error": "cell 2 (b × small) has not started: it has no run yet",
    }
    assert front.ask("open", cell=9)["error"] == "there is no cell 9 in experiment 'towns'"
    assert front.ask("open", cell="1")["error"] == "the request's cell must be a whole number, not '1'"
    assert front.ask("show_score", column="nope")["error"] == "experiment 'towns' has no score 'nope'"
    assert widget.opened is None


async def test_choosing_the_score_shown_sends_that_column() -> None:
    experiment = await two_by_two()
    widget = ExperimentWidget(experiment)
    front = FrontEnd(widget)
    assert front.ask("show_score", column="contains")["ok"]
    assert widget.score_column == "contains" and [cell[3] for cell in widget.cells] == [
        0.0,
        1.0,
        None,
        None,
    ]  # case b has no expected
    widget.sync()  # a later sync keeps the choice
    assert widget.score_column == "contains"


async def test_a_cells_run_is_read_back_from_the_store_once_out_of_memory(tmp_path: Path) -> None:
    experiment = await two_by_two(tmp_path / "runs.sqlite")
    live = experiment.run_of(experiment.cells[3])
    assert not live.read_only
    experiment._runs.clear()
    SESSIONS[0].runs.clear()  # as runs_in_memory drops the oldest finished runs
    read = experiment.run_of(3)
    assert read.read_only and read.run_id == live.run_id and read.answer == "Paris"
    with pytest.raises(KeyError, match="has no cell 8"):
        experiment.run_of(8)


async def test_without_a_store_a_run_dropped_from_memory_says_so() -> None:
    experiment = await two_by_two()
    experiment._runs.clear()
    SESSIONS[0].runs.clear()
    with pytest.raises(KeyError, match="no longer in memory and there is no run store"):
        experiment.run_of(0)


async def test_as_a_value_an_ended_experiment_brings_its_grid_widget_where_a_front_end_draws(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    experiment = await two_by_two()
    monkeypatch.setattr(AnsweringWidget, "front_end_seen", False)
    bundle, metadata = experiment_display(experiment)
    assert WIDGET_VIEW not in bundle and "text/html" in bundle and "text/markdown" in bundle
    assert metadata == {"dagmagic": {"experiment_id": experiment.id}}  # the server extension drops its widget
    monkeypatch.setattr(AnsweringWidget, "front_end_seen", True)
    first, _ = experiment_display(experiment)
    again, _ = experiment_display(experiment)
    assert first[WIDGET_VIEW] == again[WIDGET_VIEW]  # one widget per experiment
    assert bundle["text/plain"] == first["text/plain"] == "Experiment('towns', 4 cells: 4 done)"


async def test_a_running_experiment_shows_as_it_is_now_without_a_widget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(AnsweringWidget, "front_end_seen", True)
    session = session_over(scripted("Paris", latency=0.05))
    experiment = session.start_evaluation(["a?", "b?"])
    bundle, _ = experiment_display(experiment)
    assert WIDGET_VIEW not in bundle and "running" in bundle["text/html"]
    await experiment.wait()
    await asyncio.sleep(0)


async def test_two_cells_or_two_configs_open_their_comparison_under_the_grid() -> None:
    from dagmagic.notebook.compare_widget import CompareWidget

    experiment = await two_by_two()
    widget = ExperimentWidget(experiment)
    front_end = FrontEnd(widget)
    assert front_end.ask("compare", cells=[0, 1]) == {"ok": True, "value": None}
    view = widget.comparison
    assert isinstance(view, CompareWidget) and widget.comparison_label == "louvre × small vs louvre × big"
    (entry,) = view.comparisons
    compared = entry["comparison"]
    assert (compared["a"]["label"], compared["b"]["label"]) == ("config small", "config big")
    assert not view.following  # both cells had ended
    assert WIDGET_VIEW not in json.dumps(widget.get_state())  # a reference to the child widget, not its view

    assert front_end.ask("compare", configs=["small", "big"])["ok"] is True
    assert view.comm is None  # the earlier comparison's widget is closed
    view = widget.comparison
    assert isinstance(view, CompareWidget)
    assert [entry["title"] for entry in view.comparisons] == ["louvre", "b"]
    assert view.title == "towns: config small vs config big"
    assert widget.comparison_label == "config small vs config big, case by case"

    assert "no config 'huge'" in front_end.ask("compare", configs=["small", "huge"])["error"]
    assert front_end.ask("compare", cells=[0, 0])["error"] == "choose two different cells to compare"
    assert "two cells or two configs" in front_end.ask("compare", cells=[0])["error"]
    assert front_end.ask("close_comparison") == {"ok": True, "value": None}
    assert widget.comparison is None and widget.comparison_label == ""
    widget.close()


async def test_a_comparison_of_cells_still_running_fills_in_until_both_have_ended() -> None:
    small, big = scripted("Lyon", latency=0.1), scripted("Paris", latency=0.15)
    session = session_over(small)
    SESSIONS[:] = [session]
    configs = {"small": {"models": {"smart": small}}, "big": {"models": {"smart": big}}}
    experiment = session.start_evaluation([{"goal": "Where is the Louvre?", "id": "louvre"}], configs=configs)
    while not all(cell.run_id is not None for cell in experiment.cells):
        await asyncio.sleep(0.01)
    widget = ExperimentWidget(experiment)
    view = widget.compare_cells(0, 1)
    assert view.following and view.live
    await experiment
    await asyncio.sleep(0.05)
    assert not view.following and view.live is False
    compared = view.comparisons[0]["comparison"]
    assert (compared["a"]["status"], compared["b"]["status"]) == ("done", "done")
    assert any(piece["op"] == "added" and "Paris" in piece["text"] for piece in compared["answer"])
    widget.close()
