"""``%dag config models=VAR`` and ``tools=VAR``: a notebook's models and tools, set once for every later cell."""

from __future__ import annotations

import pytest
from IPython.core.interactiveshell import InteractiveShell

from dagmagic import DagRun, ModelRegistry

from .conftest import scripted
from .test_magics import run_cell, usage_error


def test_config_models_is_the_default_of_later_cells_and_models_shows_it(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    ip.user_ns["team"] = ModelRegistry().register("planner", scripted(), roles=["smart", "general"])
    capsys.readouterr()
    run_cell(ip, "%dag config models=team")
    said = capsys.readouterr().out
    assert said.startswith("models = team (a ModelRegistry): from the next %%dag cell on"), said
    assert "smart      planner" in said and "--models" in said, said
    run = run_cell(ip, "%%dag\ngoal")  # no --models: the configured ones
    assert isinstance(run, DagRun) and run.status == "done"
    assert {call.model for call in run.calls} == {"planner"}
    run_cell(ip, "%dag models")
    shown = capsys.readouterr().out
    assert "No model is configured" not in shown
    assert "smart      planner" in shown and "fast       planner   (falls back)" in shown
    assert "%dag config models=team" in shown, shown
    run = run_cell(ip, "%%dag --models llm\ngoal")  # a cell's own still wins for that cell
    assert isinstance(run, DagRun) and {call.model for call in run.calls} == {"llm"}
    run_cell(ip, "%dag config")
    assert "models = team" in capsys.readouterr().out


def test_config_models_takes_one_model_named_after_its_variable(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    run_cell(ip, "%dag config models=llm")
    assert "models = llm (a ScriptedLLM)" in capsys.readouterr().out
    run = run_cell(ip, "%%dag\ngoal")
    assert isinstance(run, DagRun) and {call.model for call in run.calls} == {"llm"}
    run_cell(ip, "%dag config models=none")
    assert "models = none" in capsys.readouterr().out
    assert "No model is configured" in usage_error(ip, "%%dag\ngoal", capsys)


def test_config_tools_are_the_tools_of_later_cells(ip: InteractiveShell) -> None:
    def lookup(q: str) -> str:
        """Look something up."""
        return q

    def other(q: str) -> str:
        """Something else."""
        return q

    ip.user_ns.update(lookup=lookup, other=other)
    run_cell(ip, "%dag config models=llm tools=lookup")
    run_cell(ip, "%%dag\ngoal")
    offered = ip.user_ns["llm"].requests_for("step")[0].tools
    assert [t["function"]["name"] for t in offered] == ["lookup"]
    ip.user_ns["llm"] = llm = scripted()
    run_cell(ip, "%%dag --models llm --tools other\ngoal")  # a cell's own tools win for that cell
    assert [t["function"]["name"] for t in llm.requests_for("step")[0].tools] == ["other"]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("%dag config models=nothing_here", "models=nothing_here: there is no variable named 'nothing_here'"),
        ("%dag config tools=nope", "tools=nope: there is no variable named 'nope'"),
    ],
)
def test_config_models_or_tools_naming_no_variable_is_one_clear_line(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str], line: str, expected: str
) -> None:
    assert expected in usage_error(ip, line, capsys)
