from __future__ import annotations

import typing

import pytest

from dagmagic import events
from dagmagic.models import AnalysisResult, Decision, ExecutionPlan, LLMCall, ModelCard, PlanStep

SAMPLES: list[events.Event] = [
    events.RunStarted(run_id="r1", goal="g"),
    events.ModelsReady(models=[ModelCard(name="m", model="openai/m", roles=["smart"], capabilities=["stream"])]),
    events.PhaseChanged(phase="planning", round=1),
    events.RoundStarted(round=1),
    events.PlanReady(round=1, plan=ExecutionPlan(goal="g", steps=[PlanStep(id="s1", task="t")])),
    events.StepPlanned(round=1, step=PlanStep(id="s1", task="t")),
    events.StepQueued(round=1, step_id="s1"),
    events.StepStarted(round=1, step_id="s1", model="m"),
    events.StepIteration(round=1, step_id="s1", iteration=1, tool="search", arguments={"q": "x"}),
    events.Verifying(round=1, step_id="s1"),
    events.Verification(round=1, step_id="s1", passed=False, feedback="Art. 99 does not exist"),
    events.StepRetrying(round=1, step_id="s1", failures=2, retry_at=1.5, error="RateLimitError: 429"),
    events.StepPaused(round=1, step_id="s2", messages=[{"role": "system", "content": "You are"}], tools=["search"]),
    events.ApprovalRequested(round=1),
    events.StepCompleted(round=1, step_id="s1", status="failed", error="TimeoutError: x"),
    events.ResultEdited(round=2, step_id="s1", result="what the user wrote"),
    events.AnalysisReady(round=1, analysis=AnalysisResult(), decision=Decision(action="replan", reason="low")),
    events.Replanning(round=1, reason="missing data", follow_up="also Spain"),
    events.AnswerDelta(text="Par"),
    events.AnswerCleared(reason="a follow-up arrived"),
    events.AnswerReady(answer="Paris", fallback=True, partial=True),
    events.RunFinished(status="done", achieved=True, confidence=0.9),
    events.LLMCallRecorded(call=LLMCall(purpose="analyze", model="m")),
    events.CallProgress(purpose="plan", model="m", round=1, started_at=1.5, pieces=40, stream=True),
    events.UserAction(action="follow_up", text="also Spain"),
    events.RunWarning(message="dropped dependency s9"),
]


def test_every_event_type_has_a_sample() -> None:
    members = typing.get_args(typing.get_args(events.Event)[0])
    assert {type(e) for e in SAMPLES} == set(members)


@pytest.mark.parametrize("event", SAMPLES, ids=lambda e: e.type)
def test_events_round_trip_through_the_union(event: events.Event) -> None:
    assert events.parse_event(event.model_dump_json()) == event
    assert events.parse_event(event.model_dump(mode="json")) == event


def test_event_types_are_unique() -> None:
    assert len({e.type for e in SAMPLES}) == len(SAMPLES)


def test_a_warning_never_carries_a_key() -> None:
    from dagmagic.events import RunWarning

    warning = RunWarning(message="The route failed (AuthenticationError: key sk-proj-abcdefghijklmnopqrstuvwxyz012345)")
    assert "sk-proj-abcdefghijklmnopqrstuvwxyz012345" not in warning.message and "***" in warning.message
