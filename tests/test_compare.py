"""``dagmagic.compare``: two runs, two rounds, two configs of an experiment, side by side."""

from __future__ import annotations

import pytest

import dagmagic
from dagmagic import DagSettings
from dagmagic.compare import Piece, RunComparison
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


def test_dagmagic_compare_is_callable_even_after_its_module_was_imported() -> None:
    import dagmagic.compare as module

    assert callable(module) and callable(dagmagic.compare)
    with pytest.raises(TypeError, match="give runs"):
        module(1, 2)
