from __future__ import annotations

import pytest
from pydantic import BaseModel

from dagmagic.diff import RoundDiff
from dagmagic.models import (
    AnalysisResult,
    Decision,
    ExecutionPlan,
    LLMCall,
    PlanStep,
    RoundRecord,
    RunState,
    ToolCallRecord,
    Usage,
)


def plan(*steps: tuple[str, list[str]]) -> ExecutionPlan:
    return ExecutionPlan(goal="g", steps=[PlanStep(id=i, task=f"do {i}", dependencies=d) for i, d in steps])


def test_layers_are_longest_path_levels_sorted_by_id() -> None:
    p = plan(("s4", ["s2", "s3"]), ("s3", ["s1"]), ("s2", []), ("s1", []), ("s5", ["s1", "s4"]))
    assert p.layers() == [["s1", "s2"], ["s3"], ["s4"], ["s5"]]


def test_layers_ignore_references_to_earlier_rounds() -> None:
    assert plan(("s1", ["r1.s2"]), ("s2", ["s1", "r1.s3"])).layers() == [["s1"], ["s2"]]


@pytest.mark.parametrize(
    ("steps", "named"),
    [
        ((("a", ["a"]),), "a"),
        ((("a", ["b"]), ("b", ["a"]), ("c", [])), "a, b"),
        ((("a", ["c"]), ("b", ["a"]), ("c", ["b"]), ("d", ["a"])), "a, b, c, d"),
    ],
)
def test_layers_name_the_steps_of_a_cycle(steps: tuple[tuple[str, list[str]], ...], named: str) -> None:
    with pytest.raises(ValueError, match=f"the steps {named} form a cycle"):
        plan(*steps).layers()


def test_layers_name_unknown_dependencies() -> None:
    with pytest.raises(ValueError, match="s1 -> s9"):
        plan(("s1", ["s9"])).layers()


def test_layers_of_a_long_chain_are_fast_enough_to_be_linear() -> None:
    chain = plan(*[(f"s{i:05d}", [f"s{i - 1:05d}"] if i else []) for i in range(5000)])
    assert len(chain.layers()) == 5000


def test_step_lookup_names_the_known_ids() -> None:
    with pytest.raises(KeyError, match=r"\['s1'\]"):
        plan(("s1", [])).step("s2")


def test_usage_adds_and_sums_known_costs() -> None:
    a = Usage(input_tokens=10, output_tokens=5, requests=1, cost=0.5)
    b = Usage(input_tokens=1, output_tokens=2, requests=2)
    total = a + b
    assert (total.input_tokens, total.output_tokens, total.total_tokens, total.requests) == (11, 7, 18, 3)
    assert total.cost == 0.5
    assert (Usage() + Usage()).cost is None
    assert Usage.total([a, a, b]).cost == 1.0
    assert Usage.total([]) == Usage()


def test_usage_counts_cached_requests_and_what_they_saved() -> None:
    paid = Usage(input_tokens=100, output_tokens=20, requests=1, cost=0.0012)
    hit = Usage(requests=1, cost=0.0, cached_requests=1, saved_cost=0.0061)
    total = Usage.total([paid, hit, hit])
    assert (total.requests, total.cached_requests, total.cost) == (3, 2, 0.0012)
    assert total.saved_cost == pytest.approx(0.0122)
    assert total.describe() == "100 in · 20 out · 3 requests (2 cached, saved $0.0122) · $0.0012"
    assert paid.describe() == "100 in · 20 out · 1 request · $0.0012"  # nothing cached: nothing said
    unpriced = Usage(requests=1, cost=0.0, cached_requests=1)
    assert unpriced.describe() == "0 in · 0 out · 1 request (1 cached, saving unknown: no price) · $0"
    assert Usage.model_validate_json('{"input_tokens": 1, "requests": 1, "cost": 0.1}').cached_requests == 0


def test_an_echoed_schema_is_not_a_verdict() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="achieved must be true or false"):
        AnalysisResult.model_validate({"achieved": {"type": "boolean", "description": "True only if..."}})


@pytest.mark.parametrize(
    ("raw", "achieved", "confidence"),
    [
        ({"achieved": "false", "confidence": 0.4}, False, 0.4),
        ({"achieved": "no", "confidence": "0.5"}, False, 0.5),
        ({"achieved": 0, "confidence": 5.0}, False, 0.05),  # above 1: a percentage
        ({"achieved": 0, "confidence": "5%"}, False, 0.05),
        ({"achieved": 0, "confidence": "85 %"}, False, 0.85),
        ({"achieved": 0, "confidence": 85}, False, 0.85),
        ({"achieved": 0, "confidence": 1}, False, 1.0),
        ({"achieved": 0, "confidence": 150}, False, 1.0),
        ({"achieved": 0, "confidence": "0.5%"}, False, 0.005),
        ({"achieved": "true", "confidence": -0.5}, True, 0.0),
        ({"achieved": True, "confidence": "abc"}, True, 0.0),
        ({"achieved": "yes", "confidence": None}, True, 0.0),
        ({"achieved": True, "confidence": float("nan")}, True, 0.0),
    ],
)
def test_analysis_coerces_what_models_write(raw: dict[str, object], achieved: bool, confidence: float) -> None:
    result = AnalysisResult.model_validate({**raw, "reasoning": None})
    assert (result.achieved, result.confidence, result.reasoning) == (achieved, confidence, "")


def test_step_timings() -> None:
    step = PlanStep(id="s1", task="t", queued_at=10.0, started_at=12.5, completed_at=15.0)
    assert (step.queue_time, step.run_time) == (2.5, 2.5)
    assert PlanStep(id="s2", task="t").queue_time is None


def _samples() -> list[BaseModel]:
    step = PlanStep(
        id="s1",
        task="look up",
        dependencies=["r1.s2"],
        tool_hint="search",
        model_hint="fast",
        status="completed",
        result="Paris",
        attempts=1,
        model="gpt",
        queued_at=1.0,
        started_at=2.0,
        completed_at=3.0,
        usage=Usage(input_tokens=3, output_tokens=4, requests=1, cost=0.01),
        tool_calls=[ToolCallRecord(name="search", arguments={"q": "x"}, observation="found", duration=0.1)],
    )
    p = ExecutionPlan(goal="g", steps=[step], round=2)
    analysis = AnalysisResult(achieved=True, confidence=0.9, reasoning="ok", final_answer="Paris")
    call = LLMCall(purpose="plan", model="gpt", round=1, messages=[{"role": "user", "content": "hi"}], reply="{}")
    record = RoundRecord(index=1, plan=p, analysis=analysis, decision=Decision(action="synthesize", reason="done"))
    return [step, p, analysis, call, record, RunState(run_id="r", goal="g", rounds=[record], calls=[call])]


@pytest.mark.parametrize("instance", _samples(), ids=lambda m: type(m).__name__)
def test_every_model_round_trips_through_json(instance: BaseModel) -> None:
    assert type(instance).model_validate_json(instance.model_dump_json()) == instance


def test_run_usage_is_the_sum_of_its_calls() -> None:
    calls = [
        LLMCall(purpose="plan", model="m", usage=Usage(input_tokens=5, output_tokens=1, requests=1, cost=0.1)),
        LLMCall(purpose="step", model="m", usage=Usage(input_tokens=7, output_tokens=2, requests=1, cost=0.2)),
    ]
    usage = RunState(run_id="r", goal="g", calls=calls).usage
    assert (usage.input_tokens, usage.output_tokens, usage.requests) == (12, 3, 2)
    assert usage.cost == pytest.approx(0.3)


def _round(index: int, *steps: PlanStep, rerun_of: int | None = None) -> RoundRecord:
    return RoundRecord(index=index, plan=ExecutionPlan(goal="g", steps=list(steps), round=index), rerun_of=rerun_of)


def _done(sid: str, task: str, *dependencies: str, result: str = "r") -> PlanStep:
    return PlanStep(id=sid, task=task, dependencies=list(dependencies), status="completed", result=result)


def test_a_diff_matches_steps_by_what_they_are_not_by_their_ids() -> None:
    first = _round(
        1,
        _done("s1", "Find the population", result="2.1M"),
        _done("s2", "Find the area", result="105 km2"),
        PlanStep(id="s3", task="Divide them", dependencies=["s1", "s2"], status="skipped"),
    )
    # a follow-up's round: its s1 is round 1's s2 again, its s2 a new step on round 1's s1 (reused, not redone)
    second = _round(
        2,
        _done("s1", "find the  area", result="105 km2"),
        _done("s2", "Give the density in base 13", "r1.s1", "s1"),
    )
    diff = RoundDiff.between(first, second)
    changes = {(c.round, c.id): (c.change, c.was) for c in diff.changes}
    assert changes == {
        (2, "s2"): ("added", None),
        (1, "s1"): ("reused", None),  # round 2 depends on r1.s1: its result is used, not removed
        (1, "s3"): ("removed", None),  # really gone
    }
    assert diff.unchanged == ["s1"] and diff.renamed == {"s1": "s2"}  # the same step, renumbered
    assert str(diff) == "round 1 -> 2: s2 added; r1.s1 reused; s3 removed"
    markdown = diff._repr_markdown_()
    assert "| r1.s1 | reused |" in markdown and "| s3 | removed |" in markdown and "s1 (was s2)" in markdown


def test_a_rerun_with_an_edited_task_is_the_same_step_changed() -> None:
    first = _round(1, _done("s1", "a"), _done("s2", "double it", "s1"), _done("s3", "report", "s2"))
    second = _round(
        2, _done("s1", "a"), _done("s2", "triple it", "s1", result="t"), _done("s3", "report", "s2", result="u"),
        rerun_of=1,
    )  # fmt: skip
    diff = RoundDiff.between(first, second)
    assert [(c.id, c.change, c.fields) for c in diff.changes] == [
        ("s2", "changed", ["task", "result"]),
        ("s3", "changed", ["result"]),
    ]
    assert diff.unchanged == ["s1"]


def test_a_renumbered_step_whose_dependencies_were_renumbered_too_is_unchanged() -> None:
    first = _round(1, _done("s1", "x"), _done("s2", "y", "s1"))
    second = _round(2, _done("s1", "z"), _done("s2", "x"), _done("s3", "y", "s2"))
    diff = RoundDiff.between(first, second)
    assert [(c.id, c.change) for c in diff.changes] == [("s1", "added")]
    assert diff.unchanged == ["s2", "s3"] and diff.renamed == {"s2": "s1", "s3": "s2"}


def test_usage_counts_prompt_cache_reads_and_reasoning_tokens() -> None:
    first = Usage(input_tokens=1000, output_tokens=100, cached_input_tokens=800, reasoning_tokens=30, requests=1)
    second = Usage(input_tokens=10, output_tokens=5, requests=1, cost=0.001)
    total = first + second
    assert (total.cached_input_tokens, total.reasoning_tokens) == (800, 30)
    assert total.describe() == "1,010 in (800 cached) · 105 out (30 reasoning) · 2 requests · $0.0010"
    assert Usage.model_validate_json(total.model_dump_json()) == total
    assert Usage.model_validate_json('{"input_tokens": 1, "requests": 1}').reasoning_tokens == 0  # older records
