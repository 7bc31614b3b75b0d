"""Runs built by hand for the views' tests: what the engine records, without running it."""

from __future__ import annotations

from dagmagic.engine.run import DagRun
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
