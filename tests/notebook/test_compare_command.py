"""``%dag compare``: two runs, a re-run round against the round it re-ran, rounds, and what it says when misused."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from dagmagic import DagSession, DagSettings, ModelRegistry
from dagmagic.notebook import magics
from dagmagic.notebook.commands import comparison
from dagmagic.side_by_side import ExperimentComparison, RunComparison
from tests.notebook.conftest import scripted
from tests.notebook.test_magics import run_cell


def test_compare_two_runs_by_name_number_or_id_and_a_rerun_alone(ip: InteractiveShell) -> None:
    ip.user_ns["llm"] = scripted(step=["a result"])
    first = run_cell(ip, "%%dag --models llm -o run\nthe goal")
    ip.user_ns["llm"] = scripted(step=["another result"])
    second = run_cell(ip, "%%dag --models llm -o myrun\nthe goal")

    by_name = run_cell(ip, "%dag compare run myrun")
    assert isinstance(by_name, RunComparison)
    assert (by_name.a.run_id, by_name.b.run_id) == (first.run_id, second.run_id)  # type: ignore[attr-defined]
    assert [pair.fields for pair in by_name.changed_steps] == [["result"], ["result"]]
    by_number = run_cell(ip, f"%dag compare 1 {second.run_id}")  # type: ignore[attr-defined]
    assert isinstance(by_number, RunComparison) and by_number.b.run_id == by_name.b.run_id

    instance = magics._active
    assert instance is not None
    rounds = comparison(instance.notebook, "myrun --rounds 1 1")  # what the notebook calls, the widget wraps
    assert isinstance(rounds, RunComparison) and (rounds.a.label, rounds.b.label) == ("round 1", "round 1")

    run_cell(ip, "%dag rerun s2 --run 2")
    rerun = run_cell(ip, "%dag compare myrun")
    assert isinstance(rerun, RunComparison) and (rerun.a.label, rerun.b.label) == ("round 1", "round 2")


def test_compare_says_what_to_give(ip: InteractiveShell) -> None:
    ip.user_ns["llm"] = scripted()
    run_cell(ip, "%%dag --models llm -o run\nthe goal")
    with pytest.raises(UsageError, match="usage: %dag compare"):
        run_cell(ip, "%dag compare")
    with pytest.raises(UsageError, match=r"latest round did not re-run.*compare\(run, rounds=\(1, 2\)\)"):
        run_cell(ip, "%dag compare run")
    with pytest.raises(UsageError, match="three words are for an experiment"):
        run_cell(ip, "%dag compare run run run")
    with pytest.raises(UsageError, match="usage: %dag compare"):
        run_cell(ip, "%dag compare run --rounds 1 x")


def test_compare_two_configs_of_an_experiment_held_in_a_variable(ip: InteractiveShell, tmp_path: Path) -> None:
    small, large = scripted(step=["small result"]), scripted(step=["large result"])
    session = DagSession(ModelRegistry().register("m", small), DagSettings(store=str(tmp_path / "runs.sqlite")))
    configs = {"small": {"models": {"general": small}}, "large": {"models": {"general": large}}}
    ip.user_ns["exp"] = asyncio.run(session.evaluate(["goal one"], configs=configs))
    try:
        by_config = run_cell(ip, "%dag compare exp small large")
        assert isinstance(by_config, ExperimentComparison) and len(by_config.cases) == 1
        [case] = by_config.cases.values()
        assert (case.a.label, case.b.label) == ("config small", "config large")
        assert run_cell(ip, "%dag compare exp 0 1").b.label == "config large"  # type: ignore[attr-defined]
        with pytest.raises(UsageError, match="needs two configs"):
            run_cell(ip, "%dag compare exp small")
    finally:
        ip.user_ns.pop("exp")
