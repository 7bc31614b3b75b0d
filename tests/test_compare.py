"""``dagmagic.compare``: two runs, two rounds, two configs of an experiment, side by side."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

import dagmagic
from dagmagic import DagError, DagSession, DagSettings, ModelRegistry, comparison_views
from dagmagic.side_by_side import ExperimentComparison, Piece, RunComparison, word_pieces
from dagmagic.testing import ScriptedLLM
from tests.engine.conftest import plan_reply, session_for, verdict

PLAN = plan_reply(("s1", [], "Find the population of Paris"), ("s2", ["s1"], "Find its area"))


def scripted(area: str, *, latency: float = 0.0) -> ScriptedLLM:
    """A run of PLAN whose s2 finds ``area``; the answer says it."""
    results = {"s1": "Paris has 2.1 million people", "s2": area}
    return ScriptedLLM(
        {
            "plan": [PLAN],
            "step": lambda request: results[request.step_id],
            "analyze": [verdict(True, 0.9)],
            "synthesize": [f"Paris: 2.1 million people on {area}."],
        },
        latency=latency,
    )


async def test_two_runs_differing_in_one_result_pair_their_steps_and_mark_the_words() -> None:
    a = await session_for(scripted("an area of 105 km2")).run("Density of Paris")
    b = await session_for(scripted("an area of 106 square km"), max_replan_rounds=2).run("Density of Paris")

    comparison = dagmagic.compare(a, b)

    assert isinstance(comparison, RunComparison)
    assert (comparison.a.label, comparison.b.label) == (f"run {a.run_id}", f"run {b.run_id}")
    assert comparison.a.status == comparison.b.status == "done" and not comparison.live
    assert comparison.differences == {"max_replan_rounds": (DagSettings.model_fields["max_replan_rounds"].default, 2)}
    [pair] = comparison.rounds
    assert (pair.a, pair.b) == (1, 1)
    changes = {(step.a.ref if step.a else None): step for step in pair.steps}
    assert changes["s1"].change == "same" and changes["s1"].fields == []
    s2 = changes["s2"]
    assert s2.change == "changed" and s2.fields == ["result"]
    assert s2.result == [
        Piece(op="same", text="an area of "),
        Piece(op="removed", text="105 km2"),
        Piece(op="added", text="106 square km"),
    ]
    assert s2.a is not None and s2.b is not None
    assert (
        s2.tokens_delta
        == s2.b.tokens - s2.a.tokens
        == b.steps["s2"].usage.total_tokens - a.steps["s2"].usage.total_tokens
    )
    assert s2.seconds_delta == pytest.approx((b.steps["s2"].run_time or 0) - (a.steps["s2"].run_time or 0))
    assert comparison.changed_steps == [s2]
    assert comparison.a.usage == a.usage and comparison.b.usage.total_tokens == b.usage.total_tokens
    assert comparison.a.calls == {"plan": 1, "step": 2, "analyze": 1, "synthesize": 1}
    assert comparison.a.models == ["scripted"]
    assert comparison.answer_changed
    assert [p.op for p in comparison.answer] == ["same", "removed", "added"]
    assert "".join(p.text for p in comparison.answer if p.op != "added") == a.answer
    # the views: a deterministic repr, a text table, Markdown and HTML with the words marked
    assert repr(comparison) == (
        f"RunComparison(run {a.run_id} vs run {b.run_id}: 1 round; steps: 1 same, 1 changed; answer changed)"
    )
    assert "s2" in str(comparison) and "changed (result)" in str(comparison)
    assert "<del" in comparison._repr_markdown_() and ">105 km2</del>" in comparison._repr_html_()
    assert ">106 square km</ins>" in comparison._repr_html_()


async def test_a_run_compared_with_itself_has_the_same_steps_and_zero_deltas() -> None:
    run = await session_for(scripted("105 km2")).run("Density of Paris")
    comparison = RunComparison.between(run, run)
    assert {step.change for step in comparison.rounds[0].steps} == {"same"}
    assert all(step.tokens_delta == 0 and step.seconds_delta == 0 for step in comparison.rounds[0].steps)
    assert comparison.differences == {} and not comparison.answer_changed


def test_the_settings_a_run_records_are_those_not_the_defaults_with_secrets_masked() -> None:
    settings = DagSettings(max_replan_rounds=5, store="postgresql://me:hunter2secret@db/runs")
    assert settings.non_defaults() == {"max_replan_rounds": 5, "store": "postgresql://me:***@db/runs"}


def test_bad_input_says_what_to_give() -> None:
    with pytest.raises(TypeError, match="give runs"):
        dagmagic.compare(42, 43)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="three arguments are for an experiment"):
        dagmagic.compare("a", "b", "c")


def test_dagmagic_compare_says_what_it_takes() -> None:
    with pytest.raises(TypeError, match="give runs"):
        dagmagic.compare(1, 2)  # type: ignore[arg-type]


async def test_a_rerun_round_compares_with_the_round_it_came_from() -> None:
    run = await session_for(scripted("105 km2")).run("Density of Paris")
    await run.rerun("s2", task="Find its area in square miles")

    comparison = dagmagic.compare(run)  # the latest round against the one it re-ran

    assert isinstance(comparison, RunComparison)
    assert (comparison.a.label, comparison.b.label) == ("round 1", "round 2")
    [pair] = comparison.rounds
    by_id = {step.b.ref: step for step in pair.steps if step.b is not None}
    assert by_id["s1"].change == "same" and by_id["s1"].tokens_delta == 0
    assert by_id["s2"].change == "changed" and by_id["s2"].fields == ["task"]  # ids keep their meaning in a re-run
    assert comparison.b.calls.get("plan") is None and comparison.b.calls["step"] == 1  # only s2 ran again
    assert comparison.a.answer == "Paris: 2.1 million people on 105 km2." == comparison.b.answer
    assert dagmagic.compare(run, rounds=(2, 1)).a.label == "round 2"
    with pytest.raises(DagError, match="has no round 3: it has rounds 1 to 2"):
        dagmagic.compare(run, rounds=(1, 3))


async def test_a_run_whose_last_round_came_from_none_says_what_to_compare_instead() -> None:
    run = await session_for(scripted("105 km2")).run("Density of Paris")
    with pytest.raises(DagError, match=r"compare\(run, rounds=\(1, 2\)\), or another run"):
        dagmagic.compare(run)


async def test_a_live_run_is_compared_as_it_stands_and_fills_in_when_compared_again() -> None:
    done = await session_for(scripted("105 km2")).run("Density of Paris")
    going = session_for(scripted("106 km2", latency=0.2)).start("Density of Paris")
    await asyncio.sleep(0.05)

    early = dagmagic.compare(done, going)
    assert isinstance(early, RunComparison)
    assert early.b.live and early.live and early.b.status == "running" and repr(early).endswith(", live)")
    assert early.b.answer == "" and early.b.seconds is not None and early.b.seconds > 0

    await going
    later = dagmagic.compare(done, going)
    assert isinstance(later, RunComparison)
    assert not later.live and later.b.status == "done"
    assert [step.change for step in later.rounds[0].steps] == ["same", "changed"]
    assert later.b.answer == "Paris: 2.1 million people on 106 km2."


async def test_runs_read_back_from_a_sqlite_store_compare_by_id(tmp_path: Path) -> None:
    store = str(tmp_path / "runs.sqlite")

    async def stored(area: str, **settings: object) -> str:
        registry = ModelRegistry().register("scripted", scripted(area))
        async with DagSession(registry, DagSettings(store=store, **settings)) as session:  # type: ignore[arg-type]
            return (await session.run("Density of Paris")).run_id

    first, second = await stored("105 km2"), await stored("106 km2", plan_max_steps=9)

    comparison = dagmagic.compare(first, second, store=store)

    assert isinstance(comparison, RunComparison)
    assert (comparison.a.run_id, comparison.b.run_id) == (first, second)
    assert comparison.a.status == "done" and comparison.differences["plan_max_steps"][1] == 9
    assert "store" not in comparison.differences  # the same store, recorded with the run
    assert comparison.changed_steps[0].fields == ["result"]
    assert dagmagic.compare(dagmagic.load_run(first, store=store), second, store=store).b.run_id == second
    with pytest.raises(DagError, match="no run 'nope' in the run store"):
        dagmagic.compare(first, "nope", store=store)


async def test_the_static_views_escape_what_a_model_wrote() -> None:
    a = await session_for(scripted("<script>alert(1)</script> [105 km2](javascript:alert(3))")).run(
        "Density <b>of</b> Paris"
    )
    b = await session_for(scripted("<img src=x onerror=alert(2)> 106 km2")).run("Density <b>of</b> Paris")
    comparison = dagmagic.compare(a, b)
    assert isinstance(comparison, RunComparison)
    for view in (comparison._repr_html_(), comparison._repr_markdown_()):
        assert "<script" not in view and "<img" not in view and "<b>of" not in view
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in view and "&lt;img src=x onerror=alert(2)&gt;" in view
    markdown = comparison._repr_markdown_()
    assert not re.search(r"(?<!\\)\]\(javascript", markdown) and "\\[105 km2\\](javascript" in markdown  # no link
    assert "var(--jp-" in comparison._repr_html_()


async def test_two_configs_of_an_experiment_compare_case_by_case(tmp_path: Path) -> None:
    small, big = scripted("105 km2"), scripted("106 km2")
    session = DagSession(ModelRegistry().register("scripted", small), DagSettings(store=str(tmp_path / "runs.sqlite")))
    configs = {
        "small": {"models": {"smart": small, "general": small}},
        "big": {"models": {"smart": big, "general": big}, "settings": {"plan_max_steps": 9}},
    }
    experiment = await session.evaluate(["Density of Paris", "Density of Lyon"], configs=configs, repeat=2)

    by_config = dagmagic.compare(experiment, "small", "big")

    assert isinstance(by_config, ExperimentComparison)
    assert list(by_config.cases) == [case.id for case in experiment.cases] and by_config.missing == {}
    one = by_config.cases[experiment.cases[0].id]
    assert (one.a.label, one.b.label) == ("config small", "config big")
    assert one.differences["plan_max_steps"][1] == 9
    assert [pair.fields for pair in one.changed_steps] == [["model"], ["model", "result"]]
    assert one.a.models != one.b.models
    assert (
        repr(by_config) == f"ExperimentComparison({experiment.name!r}, config small vs config big: 2 cases, 2 differ)"
    )
    assert "config big" in by_config._repr_html_() and "config big" in by_config._repr_markdown_()
    row = f"| {experiment.cases[0].id} | 2 changed | changed | done |"  # the summary: a row per case
    assert row in by_config._repr_markdown_() and row[2:] in str(by_config)

    cells = [cell for cell in experiment.cells if cell.config == "small" and cell.case_id == experiment.cases[0].id]
    two = dagmagic.compare(experiment, cells[0], cells[1].index)  # two cells: two repetitions of one config
    assert isinstance(two, RunComparison) and not two.changed_steps
    assert two.a.label.startswith("config small · ") and two.a.label != two.b.label
    with pytest.raises(DagError, match="has no cell 99: its cells are 0 to 7"):
        dagmagic.compare(experiment, 0, 99)
    with pytest.raises(DagError, match="no config 'huge'"):
        dagmagic.compare(experiment, "small", "huge")


def test_words_keep_their_spacing_and_a_long_unchanged_stretch_shows_only_near_the_change() -> None:
    before = "The  city\nhas " + "many old streets and " * 30 + "a river."
    after = "The  city\nhas " + "many old streets and " * 30 + "two rivers."
    pieces = word_pieces(before, after)
    assert [p.op for p in pieces] == ["same", "removed", "added"]
    assert "".join(p.text for p in pieces if p.op != "added") == before  # the texts as written
    assert "".join(p.text for p in pieces if p.op != "removed") == after
    shown = comparison_views._pieces_html(pieces, 600)
    assert shown.startswith("… ") and len(shown) < 300 and ">a river.</del>" in shown
    assert word_pieces(None, "new") == [Piece(op="added", text="new")] and word_pieces("", "") == []


async def test_a_round_only_one_run_has_pairs_its_steps_with_nothing() -> None:
    replanned = scripted("105 km2")
    replanned.script["analyze"] = [verdict(False, 0.3, "the area is missing"), verdict(True, 0.9)]
    replanned.script["plan"] = [PLAN, plan_reply(("s1", [], "Find the area of Paris in km2"))]
    a = await session_for(scripted("105 km2")).run("Density of Paris")
    b = await session_for(replanned).run("Density of Paris")
    assert len(b.rounds) == 2

    comparison = dagmagic.compare(a, b)

    assert isinstance(comparison, RunComparison)
    assert [(pair.a, pair.b) for pair in comparison.rounds] == [(1, 1), (None, 2)]
    assert [step.change for step in comparison.rounds[1].steps] == ["added"]
    assert comparison.rounds[0].verdict_b is not None and not comparison.rounds[0].verdict_b.achieved
    assert f"round 2: only in run {b.run_id}" in str(comparison)
    assert "not achieved (0.30)" in comparison._repr_markdown_()
