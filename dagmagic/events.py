"""The typed events of a run: the one stream every view (widget, text progress, trace, store) reads.

``Event`` is a discriminated union on ``type``; ``parse_event`` and ``EVENTS`` turn JSON back into it.
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, TypeAdapter, field_validator

from dagmagic.messages import ActionKind
from dagmagic.models import (
    AnalysisResult,
    Decision,
    ExecutionPlan,
    LLMCall,
    ModelCard,
    PlanCut,
    PlanStep,
    Purpose,
    RunPhase,
    RunStatus,
    StepStatus,
)

__all__ = [
    "EVENTS",
    "AnalysisReady",
    "AnswerCleared",
    "AnswerDelta",
    "AnswerReady",
    "ApprovalRequested",
    "CallProgress",
    "Event",
    "LLMCallRecorded",
    "ModelsReady",
    "PhaseChanged",
    "PlanReady",
    "Replanning",
    "ResultEdited",
    "RoundStarted",
    "RunFinished",
    "RunStarted",
    "RunWarning",
    "StepCompleted",
    "StepIteration",
    "StepPaused",
    "StepPlanned",
    "StepQueued",
    "StepRetrying",
    "StepStarted",
    "UserAction",
    "Verification",
    "Verifying",
    "parse_event",
]


class _Event(BaseModel):
    at: float = Field(default_factory=time.time)
    """Epoch seconds when it happened."""
    depth: int = 0
    """0 for the run's own events; 1 for those of a step's subrun, and so on."""
    scope: str | None = None
    """For a subrun's event: the path of the step it belongs to (``s2``, or ``s2/s1`` deeper)."""


class RunStarted(_Event):
    """A run began."""

    type: Literal["run_started"] = "run_started"
    run_id: str
    goal: str
    replay_of: str | None = None
    """The run this one replays (``session.replay``), None for a run of its own."""
    forked_from: str | None = None
    """The run this one was forked from (``run.fork``), None for a run of its own."""
    forked_at: str | None = None
    """The step it was forked at, as ``rN.id``."""
    detached_on: str | None = None
    """The Temporal address whose workers drive it (``on=``), None when its own process does."""
    notebook: str | None = None
    """The notebook whose kernel started it (Jupyter's ``JPY_SESSION_NAME``, its path), None outside one:
    ``%dag history`` lists a notebook's own runs from a store that the folder's notebooks share."""
    settings: dict[str, Any] = Field(default_factory=dict)
    """The run's settings that are not the defaults, as JSON with every secret masked (``dagmagic.compare`` says
    what differs between two runs' settings)."""


class ModelsReady(_Event):
    """The run's models are ready for its first call: what each is and supports (a replay answers as they did)."""

    type: Literal["models_ready"] = "models_ready"
    models: list[ModelCard] = Field(default_factory=list)


class RoundStarted(_Event):
    """A plan-execute-analyze round began."""

    type: Literal["round_started"] = "round_started"
    round: int


class PhaseChanged(_Event):
    """The run moved to another phase (planning, executing, analyzing, synthesizing, finished)."""

    type: Literal["phase_changed"] = "phase_changed"
    phase: RunPhase
    round: int | None = None


class PlanReady(_Event):
    """The planner produced a valid plan for the round."""

    type: Literal["plan_ready"] = "plan_ready"
    round: int
    plan: ExecutionPlan


class StepPlanned(_Event):
    """A step arrived from a plan that is still streaming (it may run before the plan is whole)."""

    type: Literal["step_planned"] = "step_planned"
    round: int
    step: PlanStep


class StepQueued(_Event):
    """A step's dependencies are done; it waits for a concurrency slot."""

    type: Literal["step_queued"] = "step_queued"
    round: int
    step_id: str


class StepStarted(_Event):
    """A step acquired a slot and began."""

    type: Literal["step_started"] = "step_started"
    round: int
    step_id: str
    model: str | None = None


class StepIteration(_Event):
    """A step called a tool."""

    type: Literal["step_iteration"] = "step_iteration"
    round: int
    step_id: str
    iteration: int
    tool: str
    arguments: dict[str, object] = Field(default_factory=dict)
    observation_preview: str = ""
    duration: float = 0.0


class Verifying(_Event):
    """A step's citations are being checked."""

    type: Literal["verifying"] = "verifying"
    round: int
    step_id: str


class Verification(_Event):
    """The verdict on a step's citations."""

    type: Literal["verification"] = "verification"
    round: int
    step_id: str
    passed: bool
    feedback: str = ""


class StepRetrying(_Event):
    """A step failed with a transient error and will be tried again at ``retry_at`` (its slot is free meanwhile)."""

    type: Literal["step_retrying"] = "step_retrying"
    round: int
    step_id: str
    failures: int
    """Transient failures so far."""
    retry_at: float
    """Epoch seconds of the next try."""
    error: str


class StepPaused(_Event):
    """A step stopped at a breakpoint before it runs: what it is about to send, for the user to look at."""

    type: Literal["step_paused"] = "step_paused"
    round: int
    step_id: str
    messages: list[dict[str, str]]
    """The exact messages of its first request: system prompt, then the task with its dependency context."""
    tools: list[str]
    """The tools it will be offered."""


class ApprovalRequested(_Event):
    """The round's plan waits for the user: ``run.approve()`` (perhaps edited) or ``run.reject(why)``."""

    type: Literal["approval_requested"] = "approval_requested"
    round: int


class StepCompleted(_Event):
    """A step reached a final state."""

    type: Literal["step_completed"] = "step_completed"
    round: int
    step_id: str
    status: StepStatus
    error: str | None = None


class ResultEdited(_Event):
    """The user wrote a step's result (``run.what_if``): the round ``round`` continues from it."""

    type: Literal["result_edited"] = "result_edited"
    round: int
    step_id: str
    result: str


class AnalysisReady(_Event):
    """The analyzer judged the round."""

    type: Literal["analysis_ready"] = "analysis_ready"
    round: int
    analysis: AnalysisResult
    decision: Decision


class Replanning(_Event):
    """Another round will be planned, and why."""

    type: Literal["replanning"] = "replanning"
    round: int
    reason: str
    follow_up: str | None = None


class AnswerDelta(_Event):
    """A piece of the streamed answer."""

    type: Literal["answer_delta"] = "answer_delta"
    text: str


class AnswerCleared(_Event):
    """The answer being written was dropped (a follow-up superseded it); the next one starts afresh."""

    type: Literal["answer_cleared"] = "answer_cleared"
    reason: str


class AnswerReady(_Event):
    """The whole answer."""

    type: Literal["answer_ready"] = "answer_ready"
    answer: str
    fallback: bool = False
    """True when the answer came from a fallback rather than the synthesis stream."""
    partial: bool = False
    """True when the run was stopped before it finished (by the user, or a model that stopped answering) and
    the answer covers only what completed."""
    round: int | None = None
    """The round it answers (the last; None when no round began)."""


class RunFinished(_Event):
    """The run ended."""

    type: Literal["run_finished"] = "run_finished"
    status: RunStatus
    achieved: bool = False
    confidence: float = 0.0
    error: str | None = None
    stopped_by_user: bool = False
    """The user's Stop ended it: its last word was a Stop (a later follow-up or re-run overrides one). Its
    status is ``done``; the views say "stopped by you"."""


class LLMCallRecorded(_Event):
    """An LLM call finished (successfully or not)."""

    type: Literal["llm_call"] = "llm_call"
    call: LLMCall


class CallProgress(_Event):
    """An LLM call under way: sent, and how much of its reply has arrived (a stream's pieces, told at most every
    ``dagmagic.llm.client.PROGRESS_SECONDS``), so a long call reads as work, not a hang. Not saved: the call's
    record (``llm_call``) follows it.
    """

    type: Literal["call_progress"] = "call_progress"
    purpose: Purpose
    model: str
    round: int | None = None
    step_id: str | None = None
    started_at: float
    """When the call was sent: its ``LLMCall.started_at`` once it ends."""
    pieces: int = 0
    """Pieces of the reply so far (a provider streams about one token a piece)."""
    stream: bool = False
    """Whether pieces will come: a call that is not streamed only ends."""


class UserAction(_Event):
    """The run took one of the user's messages (``dagmagic.messages``): recorded once, by its inbox."""

    type: Literal["user_action"] = "user_action"
    action: ActionKind
    text: str = ""
    """The follow-up, the step acted on, the reason for a rejection, the breakpoints set."""


class RunWarning(_Event):
    """Something the user should know that did not stop the run (a dropped dependency, say). Its message
    often quotes an error, so it is masked here, once for every place that warns: no key reaches a view.
    """

    type: Literal["warning"] = "warning"
    message: str
    round: int | None = None
    step_id: str | None = None
    plan_cut: PlanCut | None = None
    """The round's plan was cut to ``plan_max_steps``: the views say so where the user looks, not as a note."""

    @field_validator("message")
    @classmethod
    def _masked(cls, message: str) -> str:
        from dagmagic._secrets import mask_secrets  # here: dagmagic.llm imports this module

        return mask_secrets(message)


Event = Annotated[
    RunStarted
    | ModelsReady
    | PhaseChanged
    | RoundStarted
    | PlanReady
    | StepPlanned
    | StepQueued
    | StepStarted
    | StepIteration
    | Verifying
    | Verification
    | StepRetrying
    | StepPaused
    | ApprovalRequested
    | StepCompleted
    | ResultEdited
    | AnalysisReady
    | Replanning
    | AnswerDelta
    | AnswerCleared
    | AnswerReady
    | RunFinished
    | LLMCallRecorded
    | CallProgress
    | UserAction
    | RunWarning,
    Field(discriminator="type"),
]

EVENTS: TypeAdapter[Event] = TypeAdapter(Event)


def parse_event(data: str | bytes | dict[str, object]) -> Event:
    """An event from its JSON text or dict."""
    if isinstance(data, dict):
        return EVENTS.validate_python(data)
    return EVENTS.validate_json(data)
