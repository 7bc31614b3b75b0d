"""``%%dag eval``: its options, the cases a template makes, the scorers it finds, and the grid it shows."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from dagmagic.evaluation import Case, Experiment
from dagmagic.evaluation.experiment import Cell, ExperimentDefinition
from dagmagic.notebook import magics
from dagmagic.notebook.evaluation_cell import eval_cases, eval_scorers, parse_eval
from dagmagic.notebook.experiment_view import experiment_html, experiment_markdown, progress_line
from dagmagic.testing import ScriptedLLM

HOSTILE = "<img src=x onerror=alert(1)>"
PLAN = {"steps": [{"id": "s1", "task": "look it up"}]}


def scripted(answer: str) -> ScriptedLLM:
    verdict = {"achieved": True, "confidence": 0.8, "reasoning": "ok"}
    return ScriptedLLM({"plan": [PLAN], "step": ["found"], "analyze": [verdict], "synthesize": [answer]})


@pytest.fixture
def evaluating(ip: InteractiveShell) -> Iterator[InteractiveShell]:
    ip.user_ns["small"], ip.user_ns["big"] = scripted("Lyon"), scripted("Paris")
    ip.user_ns["configs"] = {
        "small": {"models": {"smart": ip.user_ns["small"]}},
        "big": {"models": {"smart": ip.user_ns["big"]}},
    }
    assert ip.run_cell("def says_paris(case, run):\n    return 'Paris' in run.answer").success
    yield ip
    for name in ("small", "big", "configs", "says_paris", "cases", "exp"):
        ip.user_ns.pop(name, None)


def test_the_options_parse_with_their_types() -> None:
    args = parse_eval(
        "--cases qs --configs cf --models m --scorers a,b --repeat 3 --max-cost $0.5 --concurrency 2 --name x -o e"
    )
    assert args.models == "m"
    assert (args.cases, args.configs, args.scorers, args.repeat) == ("qs", "cf", "a,b", 3)
    assert (args.max_cost, args.concurrency, args.name, args.output) == (0.5, 2, "x", "e")
    assert parse_eval("--cases qs").repeat == 1


@pytest.mark.parametrize(
    ("line", "told"),
    [
        ("", "needs --cases VAR"),
        ("--cases qs --repeat 0", "--repeat takes a whole number of at least 1"),
        ("--cases qs --concurrency 0", "--concurrency takes a whole number"),
        ("--cases qs --max-cost lots", "bad %%dag eval options"),
        ("--cases qs --colour red", "bad %%dag eval options"),
    ],
)
def test_bad_options_are_one_line_usage_errors(line: str, told: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_eval(line)
    assert told in str(caught.value) and "\n" not in str(caught.value)


def test_a_template_fills_from_dicts_and_keeps_id_expected_and_the_rest_as_metadata() -> None:
    cases, goal = eval_cases([{"a": "tea", "b": "coffee", "expected": "tea", "id": "drinks"}], "Compare {a} and {b}\n")
    assert goal is None
    assert cases == [
        {"goal": "Compare tea and coffee", "id": "drinks", "expected": "tea", "metadata": {"a": "tea", "b": "coffee"}}
    ]
    assert eval_cases(["x?"], "Answer: {goal}")[0][0]["goal"] == "Answer: x?"
    assert eval_cases(["x?", "y?"], "  ") == (["x?", "y?"], None)  # an empty body: the goals as they are


def test_cases_that_do_not_fit_are_usage_errors() -> None:
    with pytest.raises(UsageError, match="the goal template names b, which case 2 lacks; it has a"):
        eval_cases([{"a": 1, "b": 2}, {"a": 3}], "Compare {a} and {b}")
    with pytest.raises(UsageError, match="holds no cases"):
        eval_cases([], "")
    with pytest.raises(UsageError, match="holds a str"):
        eval_cases("just one goal", "")
    with pytest.raises(UsageError, match="has no rows"):
        eval_cases(pd.DataFrame({"a": []}), "{a}")
    frame = pd.DataFrame({"a": [1]})
    assert eval_cases(frame, "Double {a}")[1] == "Double {a}"  # a DataFrame's template goes to session.evaluate


def test_scorers_are_notebook_functions_or_built_ins_without_arguments(ip: InteractiveShell) -> None:
    notebook = magics._magics().notebook
    ip.user_ns["mine"] = lambda case, run: 1.0
    try:
        found = eval_scorers(notebook, "mine,no_failed_steps")
        assert found[0] is ip.user_ns["mine"] and repr(found[1]).startswith("no_failed_steps")
        with pytest.raises(UsageError, match=r"no variable named 'nope'.*nor a built-in scorer"):
            eval_scorers(notebook, "nope")
        ip.user_ns["mine"] = 3
        with pytest.raises(UsageError, match="'mine' holds a int, not a function"):
            eval_scorers(notebook, "mine")
    finally:
        ip.user_ns.pop("mine", None)


def test_an_unknown_variable_fails_the_cell_in_one_line(evaluating: InteractiveShell) -> None:
    result = evaluating.run_cell("%%dag eval --cases nowhere\nCompare {a}")
    assert isinstance(result.error_in_exec, UsageError)
    assert "--cases: there is no variable named 'nowhere'" in str(result.error_in_exec)


def test_the_cell_runs_every_case_with_every_config_and_binds_the_experiment(evaluating: InteractiveShell) -> None:
    evaluating.user_ns["cases"] = [{"city": "Paris"}, {"city": "Lyon"}]
    result = evaluating.run_cell(
        "%%dag eval --cases cases --configs configs --models small --scorers says_paris --name towns -o exp\n"
        "Where is {city}?"
    )
    assert result.success, result.error_in_exec
    assert result.result is None  # the grid shows already: no second copy as the cell's value
    experiment = evaluating.user_ns["exp"]
    assert isinstance(experiment, Experiment) and experiment.name == "towns"
    assert [case.goal for case in experiment.cases] == ["Where is Paris?", "Where is Lyon?"]
    assert sorted(cell.status for cell in experiment.cells) == ["done"] * 4
    assert {cell.config: cell.scores["says_paris"] for cell in experiment.cells} == {"small": False, "big": True}
    shown, _ = evaluating.display_formatter.format(experiment)  # displayed again later: the same grid
    assert "4 of 4 cells done" in shown["text/html"] and "4 of 4 cells done" in shown["text/markdown"]
    assert shown["text/plain"] == "Experiment('towns', 4 cells: 4 done)"


def test_models_gives_the_models_of_each_cell_even_once_the_session_exists(evaluating: InteractiveShell) -> None:
    """The kernel's session is made by its first cell: a later cell's --models must still be the one answering."""
    small, big = evaluating.user_ns["small"], evaluating.user_ns["big"]
    evaluating.user_ns["cases"] = ["Where is the Louvre?"]
    first = evaluating.run_cell("%%dag eval --cases cases --models small --scorers says_paris -o exp")
    assert first.success, first.error_in_exec
    asked_small = len(small.requests)
    second = evaluating.run_cell("%%dag eval --cases cases --models big --scorers says_paris -o exp")
    assert second.success, second.error_in_exec
    assert len(small.requests) == asked_small and big.requests  # the second cell asked big alone
    assert [cell.scores["says_paris"] for cell in evaluating.user_ns["exp"].cells] == [True]
    mixed = {"named": {"models": {"smart": small}}, "unnamed": {"settings": {"max_replan_rounds": 1}}}
    evaluating.user_ns["mixed"] = mixed
    third = evaluating.run_cell("%%dag eval --cases cases --configs mixed --models big --scorers says_paris -o exp")
    assert third.success, third.error_in_exec
    scores = {cell.config: cell.scores["says_paris"] for cell in evaluating.user_ns["exp"].cells}
    assert scores == {"named": False, "unnamed": True}  # a config that names no models takes --models's


# --- the grid ---------------------------------------------------------------------------------------------------


def experiment_of(cells: list[Cell], goals: list[str], configs: list[str]) -> Experiment:
    definition = ExperimentDefinition(
        id="e1",
        name="probe",
        created_at=0.0,
        cases=[Case(id=f"c{n}", goal=goal) for n, goal in enumerate(goals, start=1)],
        configs=configs,
        scorers=["score"],
        repeat=1,
    )
    return Experiment(definition, cells)


def cell(index: int, case_id: str, config: str, **values: Any) -> Cell:
    return Cell(index=index, case_id=case_id, config=config, repetition=1, **values)


def finished() -> Experiment:
    return experiment_of(
        [
            cell(0, "c1", "a", status="done", scores={"score": 1.0}, cost=0.01, latency=2.0, answer=HOSTILE),
            cell(1, "c1", "b", status="failed", error="boom", latency=1.0),
            cell(2, "c2", "a", status="done", scores={"score": 0.5}, cost=0.02, latency=4.0),
            cell(3, "c2", "b", status="done", scores={"score": 0.0}, latency=3.0),
        ],
        [HOSTILE, "Compare | pipes and *stars*"],
        ["a", "b"],
    )


def test_the_html_grid_shows_status_score_cost_latency_and_the_summary_with_every_string_escaped() -> None:
    page = experiment_html(finished())
    assert "<img" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "✓ done · 1.00 · $0.0100 · 2.0 s" in page and "✗ failed · 1.0 s" in page
    assert "4 of 4 cells done · 1 failed · $0.0300" in page
    assert "<td>a</td><td>2/2</td><td>0</td><td>0.75 [0.26, 1.24]</td><td>$0.0300</td><td>3.0 s</td>" in page
    assert page.count(HOSTILE) == 0


def test_the_markdown_grid_is_a_table_whose_cells_stay_inert() -> None:
    text = experiment_markdown(finished())
    assert "<img" not in text and "&lt;img src=x onerror=alert\\(1\\)\\&gt;" in text
    assert "\\$0\\.0300" in text and "$0" not in text.replace("\\$0", "")  # no math between two costs
    assert "Compare \\| pipes and \\*stars\\*" in text
    rows = [line for line in text.splitlines() if line.startswith("| c1") or line.startswith("| c2")]
    assert len(rows) == 2 and all(row.count(" | ") == 2 for row in rows)  # one column per config, pipes escaped


def test_the_progress_line_counts_running_cells_and_says_how_to_resume_an_interrupted_one() -> None:
    stopped = experiment_of(
        [cell(0, "c1", "a", status="done", latency=1.0), cell(1, "c1", "b", status="cancelled")], ["g"], ["a", "b"]
    )
    line = progress_line(stopped, resume_hint="`%%dag eval --resume probe`")
    assert line == "1 of 2 cells done · stopped with 1 not run · continue with `%%dag eval --resume probe`"
    assert 'await session.resume_evaluation("probe")' in progress_line(stopped)
    assert repr(stopped) == "Experiment('probe', 2 cells: 1 done, 1 cancelled)"  # unchanged: nbval compares it


def test_on_runs_the_cells_on_temporal_workers_and_the_grid_fills_in(
    evaluating: InteractiveShell, temporal: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import uuid

    from tests.temporal.workers import Worker, calls_in

    store, queue = tmp_path / "runs.sqlite", f"magic-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("DAG_STORE", str(store))
    worker = Worker(tmp_path, temporal.address, queue, str(store))
    try:
        evaluating.user_ns["cases"] = ["look up case 1", "look up case 2"]
        result = evaluating.run_cell(
            f"%%dag eval --cases cases --models small --name remote --on {temporal.on}?task_queue={queue} -o exp\n"
        )
        assert result.success, result.error_in_exec
        experiment = evaluating.user_ns["exp"]
        assert [cell.status for cell in experiment.cells] == ["done", "done"]
        assert [cell.answer for cell in experiment.cells] == ["the answer", "the answer"]  # the worker's model
        assert evaluating.user_ns["small"].requests == []  # not the notebook's
        assert sorted(item for _, item in calls_in(worker.calls)) == ["q1-a", "q1-b", "q2-a", "q2-b"]
        shown, _ = evaluating.display_formatter.format(experiment)
        assert "2 of 2 cells done" in shown["text/html"]
    finally:
        worker.stop()
    bad = evaluating.run_cell("%%dag eval --cases cases --on temporal://nowhere\n")
    assert not bad.success and "names no HOST:PORT" in str(bad.error_in_exec)
