"""Runs built by hand for the views' tests: what the engine records, without running it."""

from __future__ import annotations

from dagmagic.engine.run.dag_run import DagRun
from dagmagic.models import (
    AnalysisResult,
    ExecutionPlan,
    LLMCall,
    PlanStep,
    RoundRecord,
    RunState,
    ToolCallRecord,
    Usage,
)

T0 = 1_700_000_000.0
FALLBACK_ERROR = "ValidationError: limit: not an integer"
FALLBACK_WARNING = f"the direct call of search failed ({FALLBACK_ERROR}); an agent ran the step"


def tool_step_run() -> DagRun:
    """A finished run with two tool steps: s2 called directly (``add(a=$s1 → 68.4, b=12)``, no LLM call), and s3,
    whose direct call failed on its arguments, so an agent ran it. s1 is an agent step.
    """
    steps = [
        PlanStep(
            id="s1",
            task="Find France's population in millions",
            status="completed",
            result="68.4",
            model="m",
            attempts=1,
            started_at=T0,
            completed_at=T0 + 2,
        ),
        PlanStep(
            id="s2",
            task="Add the two figures",
            dependencies=["s1"],
            tool_hint="add",
            tool_args={"a": "$s1", "b": 12},
            status="completed",
            result="80.4",
            attempts=1,
            started_at=T0 + 2,
            completed_at=T0 + 2.25,
            tool_calls=[
                ToolCallRecord(
                    name="add",
                    arguments={"a": "68.4", "b": 12},
                    observation="80.4",
                    started_at=T0 + 2,
                    duration=0.25,
                    turn=0,
                )
            ],
        ),
        PlanStep(
            id="s3",
            task="Search for the source",
            dependencies=["s1"],
            tool_hint="search",
            tool_args={"query": "population of $s1 million", "limit": "many"},
            status="completed",
            result="INSEE",
            model="m",
            attempts=1,
            started_at=T0 + 2,
            completed_at=T0 + 5,
            warnings=[FALLBACK_WARNING],
            tool_calls=[
                ToolCallRecord(
                    name="search",
                    arguments={"query": "population of 68.4 million", "limit": "many"},
                    error=FALLBACK_ERROR,
                    started_at=T0 + 2,
                    duration=0.01,
                    turn=0,
                ),
                ToolCallRecord(
                    name="search",
                    arguments={"query": "population of 68.4 million", "limit": 3},
                    observation="INSEE",
                    started_at=T0 + 3,
                    turn=1,
                ),
            ],
        ),
    ]
    calls = [
        LLMCall(purpose="plan", model="m", round=1, started_at=T0 - 2, usage=Usage(input_tokens=100, requests=1)),
        LLMCall(
            purpose="step", model="m", round=1, step_id="s1", started_at=T0, usage=Usage(input_tokens=10, requests=1)
        ),
        LLMCall(
            purpose="step",
            model="m",
            round=1,
            step_id="s3",
            started_at=T0 + 2.5,
            usage=Usage(input_tokens=20, requests=1),
        ),
        LLMCall(
            purpose="step",
            model="m",
            round=1,
            step_id="s3",
            started_at=T0 + 4,
            usage=Usage(input_tokens=30, requests=1),
        ),
        LLMCall(purpose="analyze", model="m", round=1, started_at=T0 + 6, usage=Usage(input_tokens=40, requests=1)),
    ]
    record = RoundRecord(
        index=1,
        plan=ExecutionPlan(goal="France plus twelve", steps=steps),
        analysis=AnalysisResult(achieved=True, confidence=0.9, reasoning="fine"),
    )
    state = RunState(
        run_id="tools",
        goal="France plus twelve",
        status="done",
        rounds=[record],
        calls=calls,
        answer="80.4",
        started_at=T0 - 3,
        finished_at=T0 + 7,
    )
    return DagRun(state, read_only=True)


CITIES = ["Paris", "Berlin", "Zürich", "Kraków", "São Paulo", "Reykjavík", "Łódź", "Malmö", "Genève", "Köln"]
WIDE_TOOL = "search_statistics_office_database"


def wide_run() -> DagRun:
    """A finished run of 14 steps: s1 lists the cities, s2–s11 (ten siblings) look one up each, s5 with a tool
    whose name is wide, s12 ranks them, s13 and s14 (siblings again) write it up. Every step cost something.
    """
    lookups = [
        PlanStep(
            id=f"s{i + 2}",
            task=f"Find the population of {city} in 2023 from its national statistics office",
            dependencies=["s1"],
            tool_hint=WIDE_TOOL if i == 3 else None,
            status="completed",
            result=f"{city}: about a million",
            model="m",
            attempts=1,
            queued_at=T0 + 2,
            started_at=T0 + 2 + i * 0.2,
            completed_at=T0 + 4 + i * 0.3,
            usage=Usage(input_tokens=1200, output_tokens=80, requests=1, cost=0.0123),
        )
        for i, city in enumerate(CITIES)
    ]
    first = PlanStep(
        id="s1",
        task="List the ten cities to compare, with the country each belongs to",
        status="completed",
        result=", ".join(CITIES),
        model="m",
        attempts=1,
        queued_at=T0,
        started_at=T0,
        completed_at=T0 + 2,
        usage=Usage(input_tokens=300, output_tokens=40, requests=1, cost=0.002),
    )
    rank = PlanStep(
        id="s12",
        task="Rank the ten cities by population, largest first",
        dependencies=[step.id for step in lookups],
        status="completed",
        result="Paris first",
        model="m",
        attempts=1,
        queued_at=T0 + 7,
        started_at=T0 + 7,
        completed_at=T0 + 9,
        usage=Usage(input_tokens=900, output_tokens=90, requests=1, cost=0.004),
    )
    ends = [
        PlanStep(
            id=step_id,
            task=task,
            dependencies=["s12"],
            status="completed",
            result="done",
            model="m",
            attempts=1,
            queued_at=T0 + 9,
            started_at=T0 + 9,
            completed_at=T0 + 10,
            usage=Usage(input_tokens=500, output_tokens=200, requests=1, cost=0.003),
        )
        for step_id, task in (("s13", "Write the ranking as a table"), ("s14", "Explain what the ranking shows"))
    ]
    steps = [first, *lookups, rank, *ends]
    calls = [LLMCall(purpose="plan", model="m", round=1, started_at=T0 - 2, latency=2.0, usage=Usage(requests=1))]
    calls += [
        LLMCall(
            purpose="step", model="m", round=1, step_id=step.id, started_at=step.started_at, usage=Usage(requests=1)
        )
        for step in steps
    ]
    calls.append(
        LLMCall(purpose="analyze", model="m", round=1, started_at=T0 + 10, latency=1.5, usage=Usage(requests=1))
    )
    record = RoundRecord(
        index=1,
        plan=ExecutionPlan(goal="Rank ten cities", steps=steps),
        analysis=AnalysisResult(achieved=True, confidence=0.9, reasoning="Every city was found."),
    )
    state = RunState(
        run_id="wide",
        goal="Rank ten cities by population",
        status="done",
        rounds=[record],
        calls=calls,
        answer="Paris first.",
        started_at=T0 - 3,
        finished_at=T0 + 12,
    )
    return DagRun(state, read_only=True)
