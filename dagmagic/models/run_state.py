"""A run's state as plain data: its rounds, each a plan of steps, and the run around them.

``PlanStep``, ``ExecutionPlan``, ``RoundRecord`` and ``RunState`` live together because they hold one another: a
step that ran as a subrun keeps that subrun's whole ``RunState``.
"""

from __future__ import annotations

import html
import re
import time
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, Field, PrivateAttr

from dagmagic.models._text import SafeText, cut, html_table, no_math
from dagmagic.models.calls import LLMCall
from dagmagic.models.usage import Usage
from dagmagic.models.verdicts import AnalysisResult, Decision

__all__ = [
    "Exchange",
    "ExecutionPlan",
    "PlanCut",
    "PlanStep",
    "RoundRecord",
    "RunPhase",
    "RunState",
    "RunStatus",
    "StepStatus",
    "ToolCallRecord",
    "natural_key",
    "split_round_reference",
]

StepStatus = Literal[
    "pending", "queued", "paused", "running", "retrying", "completed", "failed", "skipped", "cancelled"
]
"""A step's life: pending -> queued (ready, waiting for a slot) -> running -> one of the final states;
``paused`` at a breakpoint before it runs, ``retrying`` between tries."""

RunStatus = Literal["running", "done", "failed", "cancelled"]

RunPhase = Literal["starting", "planning", "awaiting_approval", "executing", "analyzing", "synthesizing", "finished"]
"""What a run is doing now; what a user action does depends on it (``dagmagic.engine.run.inbox``)."""

_EARLIER_ROUND_REF = re.compile(r"^r(\d+)\.(.+)$")
_DIGITS = re.compile(r"(\d+)")


def natural_key(text: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that orders numbers by value: ``s2`` before ``s10``."""
    return tuple((0, int(part)) if part.isdigit() else (1, part) for part in _DIGITS.split(text) if part)


@dataclass(frozen=True)
class Exchange:
    """One earlier run of a session: its goal and its answer."""

    goal: str
    answer: str


class ToolCallRecord(BaseModel):
    """One tool call a step made."""

    name: str
    """The tool's name."""
    arguments: dict[str, Any] = Field(default_factory=dict)
    """The arguments the model passed."""
    observation: str = ""
    """What the model was shown back (capped)."""
    error: str | None = None
    """``Type: message`` when the tool raised or its arguments were invalid."""
    started_at: float | None = None
    """Epoch seconds."""
    duration: float | None = None
    """Seconds."""
    turn: int | None = None
    """The step's model turn that asked for it (1: its first reply): a step tried again or resumed rebuilds
    its conversation from these records and goes on from them, so no call that returned is made again."""


class PlanStep(BaseModel):
    """One node of a plan, with its execution state."""

    id: str
    """Unique within its plan, e.g. ``s1``."""
    task: str
    """What the step must do, in the goal's language."""
    dependencies: list[str] = Field(default_factory=list)
    """Ids this step needs first; ``rN.id`` names a completed step of an earlier round."""
    tool_hint: str | None = None
    """A tool the planner expects the step to use (a hint, never fatal)."""
    model_hint: str | None = None
    """A role: ``fast``, ``reasoning``, a custom role, or None for ``general``."""
    tool_args: dict[str, Any] | None = None
    """The arguments of a *tool step*, one call of its ``tool_hint`` tool made without a model; None: the step
    runs as an agent. ``"$s1"`` as a whole value is s1's result (``"$r1.s2"``: an earlier round's), coerced by
    the tool's schema; inside a longer string it is substituted as text."""
    status: StepStatus = "pending"
    """Where the step is in its life."""
    result: str | None = None
    """The step's answer (or its partial notes when it failed)."""
    edited: bool = False
    """The user wrote ``result`` (``run.what_if``, a fork with ``result=``): the step did not run for it."""
    error: str | None = None
    """Why it failed or was skipped."""
    attempts: int = 0
    """Times the step was started."""
    model: str | None = None
    """The registry entry that ran it."""
    queued_at: float | None = None
    """Epoch seconds when it became ready."""
    started_at: float | None = None
    """Epoch seconds when it acquired a concurrency slot."""
    completed_at: float | None = None
    """Epoch seconds when it reached a final state."""
    usage: Usage = Field(default_factory=Usage)
    """Tokens and cost of its LLM calls."""
    tool_calls: list[ToolCallRecord] = Field(default_factory=list)
    """Every tool call it made, in order."""
    warnings: list[str] = Field(default_factory=list)
    """What the user should know about its result (e.g. its citations could not be verified)."""
    failures: int = 0
    """Transient failures so far (rate limit, timeout, 5xx, connection): they pick the retry tier."""
    retry_at: float | None = None
    """Epoch seconds of the next try while the step is ``retrying``."""
    subrun_state: RunState | None = Field(default=None, validation_alias=AliasChoices("subrun_state", "nested"))
    """The state of the step's subrun when the planner marked it ``subplan`` (a DAG of its own); ``subrun``
    is the same as a ``DagRun``. (Stores written before it had this name call it ``nested``.)"""
    _subrun: Any = PrivateAttr(default=None)

    @property
    def subrun(self) -> Any:
        """The step's subrun as a ``DagRun`` (live while it runs), None for an ordinary step."""
        return self._subrun

    def attach_subrun(self, run: Any) -> None:
        """Make ``run`` (a ``DagRun``) this step's subrun: the engine calls it when the subrun starts, and a
        run read back from the store for each step that had one.
        """
        self.subrun_state, self._subrun = run.state, run

    def said(self, result: str) -> PlanStep:
        """The step as the user says it ended: completed with ``result``, which no model (nor tool) wrote."""
        now = time.time()
        return self.model_copy(
            update={
                "status": "completed", "result": result, "error": None, "edited": True, "usage": Usage(),
                "tool_calls": [], "warnings": [], "queued_at": now, "started_at": now, "completed_at": now,
                "subrun_state": None, "attempts": 0, "failures": 0, "retry_at": None, "model": None,
            },
            deep=True,
        )  # fmt: skip

    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> PlanStep:
        memo = {} if memo is None else memo
        if self._subrun is not None:  # a live run is shared, never copied (it holds tasks and listeners)
            memo[id(self._subrun)] = self._subrun
        return super().__deepcopy__(memo)

    def __repr__(self) -> str:
        seconds = f" {self.run_time:.1f}s" if self.run_time is not None else ""
        outcome = self.result if self.status == "completed" else self.error
        arrow = f" → {cut(outcome, 40)!r}" if outcome else ""
        return f"PlanStep({self.id} {self.status}{seconds} {cut(self.task, 40)!r}{arrow})"

    __str__ = __repr__

    def _repr_html_(self) -> str:
        e = html.escape
        rows = [
            ("step", f"<b>{e(self.id)}</b> · {e(self.status)}"),
            ("task", e(self.task)),
            ("needs", e(", ".join(self.dependencies)) or "nothing"),
        ]
        if self.model:
            rows.append(("model", e(self.model)))
        if self.run_time is not None:
            rows.append(("ran", f"{self.run_time:.1f}s · {self.attempts} attempt{'' if self.attempts == 1 else 's'}"))
        rows.append(("usage", e(self.usage.describe())))
        if self.result:
            rows.append(("result", f"<pre style='white-space:pre-wrap'>{e(self.result[:4000])}</pre>"))
        if self.error:
            rows.append(("why" if self.status in ("skipped", "cancelled") else "error", e(self.error)))
        return html_table(rows)

    @property
    def queue_time(self) -> float | None:
        """Seconds between ready and started."""
        if self.queued_at is None or self.started_at is None:
            return None
        return self.started_at - self.queued_at

    @property
    def run_time(self) -> float | None:
        """Seconds between started and completed."""
        if self.started_at is None or self.completed_at is None:
            return None
        return self.completed_at - self.started_at


def split_round_reference(dependency: str) -> tuple[int, str] | None:
    """``"r1.s2"`` -> ``(1, "s2")``; None for a dependency inside the same plan."""
    match = _EARLIER_ROUND_REF.match(dependency)
    return (int(match.group(1)), match.group(2)) if match else None


class ExecutionPlan(BaseModel):
    """A goal broken into steps that form a DAG."""

    goal: str
    """The goal the plan was made for, with the user's follow-ups it saw."""
    steps: list[PlanStep]
    """The nodes; dependencies name other steps' ids."""
    round: int = 1
    """The round (1-based) this plan belongs to."""
    query: str = ""
    """What the planner was asked: the conversation so far, the goal and its follow-ups."""

    def __repr__(self) -> str:
        steps = ", ".join(f"{step.id} {step.status}" for step in self.steps)
        return f"ExecutionPlan(round {self.round}, {len(self.steps)} steps: {steps})"

    __str__ = __repr__

    def _repr_html_(self) -> str:
        e = html.escape
        # text reads from the left; JupyterLab right-aligns the cells of an HTML output's tables
        th, td = "<th style='text-align:left'>", "<td style='text-align:left'>"
        head = "<tr>" + "".join(f"{th}{name}</th>" for name in ("step", "status", "task", "needs", "result")) + "</tr>"
        rows = "".join(
            f"<tr>{td}{e(s.id)}</td>{td}{e(s.status)}</td>{td}{e(cut(s.task, 80))}</td>"
            f"{td}{e(', '.join(s.dependencies))}</td>{td}{e(cut(s.result or s.error, 80))}</td></tr>"
            for s in self.steps
        )
        return no_math(f"<b>Round {self.round}</b><table>{head}{rows}</table>")

    def step(self, step_id: str) -> PlanStep:
        """The step with this id (KeyError naming the known ids otherwise)."""
        for step in self.steps:
            if step.id == step_id:
                return step
        raise KeyError(f"no step {step_id!r} in round {self.round}; steps are {[s.id for s in self.steps]}")

    def downstream(self, step_id: str) -> set[str]:
        """``step_id`` and every step of the plan that needs it, directly or not."""
        found = {step_id}
        grew = True
        while grew:
            grew = False
            for step in self.steps:
                if step.id not in found and found.intersection(step.dependencies):
                    found.add(step.id)
                    grew = True
        return found

    def again(self, step_id: str, *, task: str | None = None, model: str | None = None) -> PlanStep:
        """Step ``step_id`` as it is before it runs, to run again (with ``task`` or ``model`` instead of its own:
        arguments written for the old task may no longer fit an edited one, so its agent runs instead).
        """
        step = self.step(step_id)
        return PlanStep(
            id=step.id,
            task=task or step.task,
            dependencies=list(step.dependencies),
            tool_hint=step.tool_hint,
            model_hint=model or step.model_hint,
            tool_args=None if task and task != step.task else step.tool_args,
        )

    def layers(self) -> list[list[str]]:
        """Topological levels of step ids, each in natural order: level 0 has no dependencies inside the plan.

        A step's level is 1 + the highest level of its dependencies. References to earlier rounds
        (``r1.s2``) are already satisfied and do not count. Raises ``ValueError`` naming the steps
        when a dependency is unknown or the steps form a cycle.
        """
        ids = {step.id for step in self.steps}
        inner = {
            step.id: [d for d in step.dependencies if split_round_reference(d) is None or d in ids]
            for step in self.steps
        }
        unknown = sorted(f"{sid} -> {d}" for sid, deps in inner.items() for d in deps if d not in ids)
        if unknown:
            raise ValueError(f"unknown dependencies: {', '.join(unknown)}")
        dependents: dict[str, list[str]] = {sid: [] for sid in inner}
        waiting = {sid: len(set(deps)) for sid, deps in inner.items()}
        for sid, deps in inner.items():
            for dep in set(deps):
                dependents[dep].append(sid)
        level = {sid: 0 for sid, count in waiting.items() if count == 0}
        frontier = list(level)
        while frontier:  # Kahn's algorithm, carrying the longest path to each step
            sid = frontier.pop()
            for child in dependents[sid]:
                level[child] = max(level.get(child, 0), level[sid] + 1)
                waiting[child] -= 1
                if waiting[child] == 0:
                    frontier.append(child)
        if len(level) < len(inner) or any(waiting.values()):
            stuck = sorted(sid for sid, count in waiting.items() if count)
            raise ValueError(f"the steps {', '.join(stuck)} form a cycle")
        layers: list[list[str]] = [[] for _ in range(max(level.values(), default=-1) + 1)]
        for sid, depth in level.items():
            layers[depth].append(sid)
        return [sorted(layer, key=natural_key) for layer in layers]


class PlanCut(BaseModel):
    """A plan longer than ``plan_max_steps``, even when asked again: only its first steps ran."""

    planned: int
    """How many steps the planner wrote."""
    kept: int
    """How many ran: the first ``plan_max_steps``."""
    dropped: list[str] = Field(default_factory=list)
    """The tasks of the steps that were dropped, in plan order."""

    def describe(self) -> str:
        """The cut in one sentence."""
        return f"The plan had {self.planned} steps: only the first {self.kept} ran (plan_max_steps)."


class RoundRecord(BaseModel):
    """One plan-execute-analyze round."""

    index: int
    """1-based."""
    plan: ExecutionPlan
    """The round's plan with its steps' final states."""
    analysis: AnalysisResult | None = None
    """The analyzer's verdict (None if the round ended before analysis)."""
    decision: Decision | None = None
    """What came next."""
    error: str | None = None
    """Why the round failed, when it could not plan."""
    warnings: list[str] = Field(default_factory=list)
    """What was fixed on the way (a dependency dropped, a plan repaired), for the user to see."""
    free: bool = False
    """Planned at the user's request (a follow-up, a re-run, a rejected plan): it uses none of the budget."""
    rerun_of: int | None = None
    """The round this one re-ran a step of (``run.rerun``): its other steps are that round's, kept."""
    rerun_step: str | None = None
    """The step the user re-ran."""
    what_if: bool = False
    """The user wrote ``rerun_step``'s result (``run.what_if``): it did not run again, only what depends on it did."""
    approval: Literal["pending", "approved", "rejected"] | None = None
    """Where the plan stands when plans wait for the user's approval (None when they do not)."""
    follow_ups: list[str] = Field(default_factory=list)
    """The user's follow-ups this round's plan was the first to see."""
    answered_follow_ups: list[str] = Field(default_factory=list)
    """The user's follow-ups that came after this round's plan and that its verdict and answer took into account,
    no new round following (a new round's plan sees the others: its ``follow_ups``)."""
    plan_cut: PlanCut | None = None
    """The planner wrote more steps than ``plan_max_steps`` allows, twice: what was cut."""


class RunState(BaseModel):
    """Everything a run knows, as plain data (what ``DagRun`` exposes and the store keeps)."""

    run_id: str
    """Unique id of the run."""
    goal: SafeText
    """The user's goal, as written (made safe: ``safe_text``)."""
    status: RunStatus = "running"
    """running, done, failed or cancelled."""
    phase: RunPhase = "starting"
    """What the run is doing now: planning, executing, analyzing, synthesizing; finished at the end."""
    rounds: list[RoundRecord] = Field(default_factory=list)
    """Every round so far."""
    answer: str = ""
    """The answer being written now (it grows while it streams; a superseded one is cleared)."""
    follow_ups: list[str] = Field(default_factory=list)
    """User follow-ups a plan or the final answer has seen (one still waiting for that is not here yet)."""
    pending_follow_ups: list[str] = Field(default_factory=list)
    """Follow-ups no plan and no final answer has seen yet, oldest first."""
    domain: str | None = None
    """The goal's domain (legal, medical, financial), as the run's first plan said it."""
    routed: bool = False
    """Whether a plan has said the goal's domain (later plans, and a resumed run's, are not asked again)."""
    calls: list[LLMCall] = Field(default_factory=list)
    """Every LLM call, in order."""
    error: str | None = None
    """Why the run failed."""
    started_at: float = 0.0
    """Epoch seconds."""
    finished_at: float | None = None
    """Epoch seconds."""
    replay_of: str | None = None
    """The run this one replays (``session.replay``): its model calls were answered from that run's recording."""
    forked_from: str | None = None
    """The run this one was forked from (``run.fork``): it started from that run's state."""
    forked_at: str | None = None
    """Where: the step it was forked at, as ``rN.id``."""
    detached_on: str | None = None
    """The Temporal address (``temporal://…``) whose workers drive this run (``on=``), None when the process that
    started it drives it."""

    @property
    def usage(self) -> Usage:
        """Totals over every call."""
        return Usage.total(call.usage for call in self.calls)


PlanStep.model_rebuild()  # a step may hold a subrun's state (RunState, defined after it)
