"""The data of a run: plans, steps, verdicts, rounds, usage and LLM call records.

Every model here round-trips through JSON (the run store, widget state and saved notebooks depend on it).
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, PrivateAttr, computed_field, field_validator

__all__ = [
    "AnalysisResult",
    "CallStatus",
    "Decision",
    "Divergence",
    "Exchange",
    "ExecutionPlan",
    "LLMCall",
    "PlanStep",
    "Purpose",
    "RoundComparison",
    "RoundDiff",
    "RoundRecord",
    "RunDiff",
    "RunPhase",
    "RunState",
    "RunStatus",
    "StepChange",
    "StepStatus",
    "StructuredLevel",
    "ToolCallRecord",
    "Usage",
    "natural_key",
]

StepStatus = Literal[
    "pending", "queued", "paused", "running", "retrying", "completed", "failed", "skipped", "cancelled"
]
"""A step's life: pending -> queued (ready, waiting for a slot) -> running -> one of the final states;
``paused`` at a breakpoint before it runs, ``retrying`` between tries."""

RunStatus = Literal["running", "done", "failed", "cancelled"]

RunPhase = Literal["starting", "planning", "awaiting_approval", "executing", "analyzing", "synthesizing", "finished"]
"""What a run is doing now; what a user action does depends on it (``dagmagic.engine.run.inbox``)."""

CallStatus = Literal["ok", "failed", "cancelled"]
"""How an LLM call ended: a reply, an error, or cancelled before its reply (usage then unknown)."""

Purpose = Literal[
    "history_summary",
    "plan",
    "tool_selection",
    "step",
    "compaction",
    "analyze",
    "synthesize",
    "citation_check",
    "route",
    "judge",
]
"""The call site of an LLM call; usage and the trace view are grouped by it. (``route``: the domain
classification runs stored before the plan call said the domain; no call is made for it any more. ``judge``: an
evaluation's LLM-as-judge scorer grading a finished run, ``dagmagic.evaluation.llm_judge``; not a call of the run.)"""

StructuredLevel = Literal["tool_call", "json_mode", "text", "regex", "default"]

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


class Usage(BaseModel):
    """Tokens and money spent; adds with ``+``."""

    model_config = ConfigDict(frozen=True)

    input_tokens: int = 0
    """Prompt tokens."""
    output_tokens: int = 0
    """Completion tokens."""
    cached_input_tokens: int = 0
    """Of ``input_tokens``, those the provider read from its prompt cache (priced at the model's cached-input
    rate, ``cache_read_input_token_cost`` in litellm's price list)."""
    reasoning_tokens: int = 0
    """Of ``output_tokens``, those a reasoning model spent thinking (billed as output, never shown)."""
    requests: int = 0
    """LLM calls counted (retries of one call count once)."""
    cost: float | None = None
    """USD from litellm's price list; None when no call's price is known, else the sum of the known ones."""
    cached_requests: int = 0
    """Of ``requests``, those answered from the response cache (``DAG_CACHE``): no call made, no tokens, cost 0."""
    saved_cost: float | None = None
    """USD the cached requests cost when they were first answered; None when none of their prices is known."""

    @computed_field  # type: ignore[prop-decorator]
    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cached_input_tokens=self.cached_input_tokens + other.cached_input_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
            requests=self.requests + other.requests,
            cost=_known_sum(self.cost, other.cost),
            cached_requests=self.cached_requests + other.cached_requests,
            saved_cost=_known_sum(self.saved_cost, other.saved_cost),
        )

    @classmethod
    def total(cls, usages: Iterable[Usage]) -> Usage:
        """The sum of many usages (an empty sum is zero)."""
        result = cls()
        for usage in usages:
            result = result + usage
        return result

    def describe(self) -> str:
        """``1,234 in · 56 out · 3 requests · $0.0123`` (``cost unknown`` without a price); with cached requests
        ``... · 3 requests (2 cached, saved $0.0123) · $0.0012``; with prompt-cache or reasoning tokens
        ``1,234 in (1,000 cached) · 56 out (40 reasoning) · ...``.
        """
        plural = "" if self.requests == 1 else "s"
        read = f" ({self.cached_input_tokens:,} cached)" if self.cached_input_tokens else ""
        thought = f" ({self.reasoning_tokens:,} reasoning)" if self.reasoning_tokens else ""
        cached = ""
        if self.cached_requests:
            saved = "saving unknown: no price" if self.saved_cost is None else f"saved {money(self.saved_cost)}"
            cached = f" ({self.cached_requests} cached, {saved})"
        return (
            f"{self.input_tokens:,} in{read} · {self.output_tokens:,} out{thought} · "
            f"{self.requests} request{plural}{cached} · {money(self.cost)}"
        )

    def __repr__(self) -> str:
        return f"Usage({self.describe()})"

    __str__ = __repr__

    def _repr_html_(self) -> str:
        return f"<code>{html.escape(self.describe())}</code>"


def _known_sum(first: float | None, second: float | None) -> float | None:
    """The sum of the known amounts; None when neither is known."""
    known = [amount for amount in (first, second) if amount is not None]
    return sum(known) if known else None


def money(cost: float | None) -> str:
    """A cost as people read it: ``$0.0123``, ``$1.25``, ``$0`` or ``cost unknown``."""
    if cost is None:
        return "cost unknown"
    if cost == 0:
        return "$0"
    return f"${cost:.4f}" if cost < 1 else f"${cost:,.2f}"


def _cut(text: str | None, limit: int) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _html_table(rows: Iterable[tuple[str, str]]) -> str:
    """Rows of (label, already escaped HTML) as a two-column table."""
    body = "".join(f"<tr><th style='text-align:left'>{label}</th><td style='text-align:left'>{cell}</td></tr>"
                   for label, cell in rows)  # fmt: skip
    return f"<table>{body}</table>"


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

    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> PlanStep:
        memo = {} if memo is None else memo
        if self._subrun is not None:  # a live run is shared, never copied (it holds tasks and listeners)
            memo[id(self._subrun)] = self._subrun
        return super().__deepcopy__(memo)

    def __repr__(self) -> str:
        seconds = f" {self.run_time:.1f}s" if self.run_time is not None else ""
        outcome = self.result if self.status == "completed" else self.error
        arrow = f" → {_cut(outcome, 40)!r}" if outcome else ""
        return f"PlanStep({self.id} {self.status}{seconds} {_cut(self.task, 40)!r}{arrow})"

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
        return _html_table(rows)

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
            f"<tr>{td}{e(s.id)}</td>{td}{e(s.status)}</td>{td}{e(_cut(s.task, 80))}</td>"
            f"{td}{e(', '.join(s.dependencies))}</td>{td}{e(_cut(s.result or s.error, 80))}</td></tr>"
            for s in self.steps
        )
        return f"<b>Round {self.round}</b><table>{head}{rows}</table>"

    def step(self, step_id: str) -> PlanStep:
        """The step with this id (KeyError naming the known ids otherwise)."""
        for step in self.steps:
            if step.id == step_id:
                return step
        raise KeyError(f"no step {step_id!r} in round {self.round}; steps are {[s.id for s in self.steps]}")

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


class AnalysisResult(BaseModel):
    """The analyzer's verdict on a round. Lenient on input: models answer in many shapes."""

    achieved: bool = False
    """Whether the goal was reached."""
    confidence: float = 0.0
    """0..1; a percentage (``"85%"``, ``85``) is divided by 100, the rest clamped; non-numbers become 0."""
    reasoning: str = ""
    """Why, naming contradictions between sources."""
    final_answer: str | None = None
    """When the goal is reached, the answer written for the user: the run's answer (no synthesis then) when the
    smart model streams, else the fallback when the synthesis yields nothing."""

    @field_validator("achieved", mode="before")
    @classmethod
    def _coerce_achieved(cls, value: Any) -> bool:
        if isinstance(value, str):
            return value.strip().lower() in {"true", "yes", "y", "1", "achieved"}
        if isinstance(value, bool | int | float) or value is None:
            return bool(value)
        # an object here is a schema echoed back ({"type": "boolean", ...}), not a verdict
        raise ValueError(f"achieved must be true or false, not {type(value).__name__}")

    @field_validator("confidence", mode="before")
    @classmethod
    def _clamp_confidence(cls, value: Any) -> float:
        percent = isinstance(value, str) and value.strip().endswith("%")
        try:
            number = float(str(value).strip().rstrip("%").strip()) if isinstance(value, str) else float(value)
        except (TypeError, ValueError):
            return 0.0
        except OverflowError:  # an integer beyond float's range (10**1000): clamped like any other
            return 1.0 if value > 0 else 0.0
        if number != number:  # NaN
            return 0.0
        if percent or 1.0 < number <= 100.0:  # "85%" or 85: a percentage
            number /= 100.0
        return min(1.0, max(0.0, number))

    @field_validator("reasoning", mode="before")
    @classmethod
    def _text_or_empty(cls, value: Any) -> str:
        return "" if value is None else str(value)

    @field_validator("final_answer", mode="before")
    @classmethod
    def _answer_text(cls, value: Any) -> str | None:
        return None if value is None or value == "" else str(value)


class Decision(BaseModel):
    """What the goal loop did after a round's analysis."""

    action: Literal["synthesize", "replan", "stop"]
    """Answer now, plan again, or stop with the best answer so far."""
    reason: str
    """Why, in words shown to the user."""
    counts_against_budget: bool = True
    """False for a replan caused by a user follow-up."""
    partial: bool = False
    """True when the run was stopped before it finished (by the user, because a model of the round stopped
    answering, or because its cost budget was spent): the answer is written from what completed, and says so."""


class ModelCard(BaseModel):
    """A model as a run used it: enough to answer its calls again from a recording (``dagmagic.testing.replay``)."""

    name: str
    """The registry entry's name (what ``LLMCall.model`` says)."""
    model: str
    """What its backend was asked for: a litellm model string, a router group, or the name."""
    roles: list[str] = Field(default_factory=list)
    """The roles it was registered for."""
    capabilities: list[str] = Field(default_factory=list)
    """What it supported (``tool_call``, ``json_mode``, ``stream``): they decide how each call was made."""
    context_window: int | None = None
    """Input tokens it accepted (None: the default of the settings)."""
    counter: Literal["litellm", "approximate"] = "approximate"
    """How its tokens were counted: litellm's counter for litellm models, else ``approximate_tokens``."""


class LLMCall(BaseModel):
    """The record one LLM call leaves in ``run.calls``."""

    purpose: Purpose
    """The call site."""
    model: str
    """The registry entry's name."""
    round: int | None = None
    """The round it belongs to (None before planning)."""
    step_id: str | None = None
    """The step it belongs to, for step-level purposes."""
    messages: list[dict[str, Any]] = Field(default_factory=list)
    """The messages sent."""
    reply: str = ""
    """The text the model answered."""
    tool_calls: list[dict[str, Any]] = Field(default_factory=list)
    """Tool calls the model asked for: ``{"id", "name", "arguments"}``."""
    structured_level: StructuredLevel | None = None
    """The structured-output level this call tried, if any."""
    stream: bool = False
    """Whether the reply was streamed."""
    retries: int = 0
    """Transient failures retried before this call's outcome."""
    pieces: int = 0
    """Pieces of a streamed reply that arrived (a stream that fails after its first piece is not retried: a
    replay breaks off where it did)."""
    usage: Usage = Field(default_factory=Usage)
    """Tokens and cost of this call."""
    started_at: float = 0.0
    """Epoch seconds."""
    latency: float = 0.0
    """Seconds from request to the full reply."""
    error: str | None = None
    """``Type: message`` when the call failed for good."""
    status: CallStatus = "ok"
    """``ok``, ``failed``, or ``cancelled`` (the run moved on before the reply; its usage is unknown)."""
    tools: list[str] = Field(default_factory=list)
    """The names of the tools the request offered."""
    response_model: str | None = None
    """The model the provider says answered (e.g. a dated version of the one asked for); None when unknown."""
    request_digest: str | None = None
    """A digest of what the request asked besides its messages (tool schemas, tool choice, response format,
    temperature), so that a replay can tell a changed tool from an unchanged one."""
    cached: bool = False
    """Answered from the response cache (``DAG_CACHE``): no provider was called, so ``usage`` counts the request
    with no tokens and cost 0, and what the answer first cost as ``saved_cost``."""

    @property
    def cost(self) -> float | None:
        """USD, None when unknown."""
        return self.usage.cost

    def __repr__(self) -> str:
        where = " · ".join(
            part
            for part in (f"round {self.round}" if self.round else "", f"step {self.step_id}" if self.step_id else "")
            if part
        )
        usage = f"{self.usage.input_tokens:,} in/{self.usage.output_tokens:,} out"
        outcome = self.status if not self.error else f"{self.status}: {_cut(self.error, 60)}"
        outcome += " · cached" if self.cached else ""
        return f"LLMCall({self.purpose} · {self.model}{' · ' + where if where else ''} · {usage} · " \
            f"{self.latency:.2f}s · {money(self.cost)} · {outcome})"  # fmt: skip

    __str__ = __repr__

    def _repr_html_(self) -> str:
        e = html.escape
        cached = " · cached" if self.cached else ""
        rows = [("call", f"<b>{e(self.purpose)}</b> · {e(self.model)} · {e(self.status)}{cached}")]
        if self.step_id:
            rows.append(("step", e(f"round {self.round} · {self.step_id}")))
        rows.append(("usage", e(f"{self.usage.describe()} · {self.latency:.2f}s")))
        for message in self.messages:
            content = message.get("content")
            text = content if isinstance(content, str) else str(content)
            summary = e(f"{message.get('role', '')} · {len(text):,} characters")
            rows.append(("sent", f"<details><summary>{summary}</summary><pre style='white-space:pre-wrap'>"
                                  f"{e(text[:20000])}</pre></details>"))  # fmt: skip
        if self.reply:
            rows.append(("reply", f"<pre style='white-space:pre-wrap'>{e(self.reply[:20000])}</pre>"))
        if self.error:
            rows.append(("error", e(self.error)))
        return _html_table(rows)


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
    approval: Literal["pending", "approved", "rejected"] | None = None
    """Where the plan stands when plans wait for the user's approval (None when they do not)."""
    follow_ups: list[str] = Field(default_factory=list)
    """The user's follow-ups this round's plan was the first to see."""
    plan_cut: PlanCut | None = None
    """The planner wrote more steps than ``plan_max_steps`` allows, twice: what was cut."""


class StepChange(BaseModel):
    """How one step differs between two rounds."""

    id: str
    """The step's id in the round it is in (``round``)."""
    change: Literal["added", "removed", "changed", "reused"]
    """``reused``: a step of an earlier round whose result the later round uses (``r1.s3``) without running it."""
    round: int | None = None
    """The round the step is in: the later one for ``added`` and ``changed``, the earlier one for ``removed``,
    the round whose result is used for ``reused``."""
    was: str | None = None
    """For ``changed``: the step's id in the earlier round, when a replan gave it another."""
    fields: list[str] = Field(default_factory=list)
    """For ``changed``: which of task, dependencies, model, status, result differ."""
    before: dict[str, Any] = Field(default_factory=dict)
    """Those fields' values in the first round."""
    after: dict[str, Any] = Field(default_factory=dict)
    """And in the second."""

    @property
    def ref(self) -> str:
        """How the later round names the step: its id, or ``rN.id`` for a step of another round."""
        return f"r{self.round}.{self.id}" if self.change == "reused" else self.id


_COMPARED = ("task", "dependencies", "model", "status", "result")


class RoundDiff(BaseModel):
    """What changed between two rounds of a run (``run.diff(a, b)``): a re-run against the round it re-ran,
    or a replan against the round before it.

    Steps are matched by what they are (task, tool and its arguments), not by id: a replan numbers its steps
    afresh, so its ``s3`` is often not the earlier ``s3``. Only rounds where ids keep their meaning (a re-run
    and the round it re-ran) also pair the steps left over by id, so that a re-run with an edited task shows
    as that step changed. An earlier step the later round depends on (``r1.s3``) is ``reused``, not removed.
    """

    a: int
    b: int
    changes: list[StepChange] = Field(default_factory=list)
    unchanged: list[str] = Field(default_factory=list)
    """Ids (in round ``b``) of the steps that did not change."""
    renamed: dict[str, str] = Field(default_factory=dict)
    """Step id in round ``b`` -> its id in round ``a``, for matched steps a replan numbered differently."""

    @classmethod
    def between(cls, first: RoundRecord, second: RoundRecord, *, same_ids: bool | None = None) -> RoundDiff:
        """Compare ``first`` with ``second``. ``same_ids``: whether an id names the same step in both (default:
        when ``second`` re-ran ``first``).
        """
        if same_ids is None:
            same_ids = second.rerun_of == first.index
        pairs = _matched(first.plan.steps, second.plan.steps, same_ids=same_ids)
        old_ids = {old.id: new.id for old, new in pairs.values()}
        reused_refs = [d for step in second.plan.steps for d in step.dependencies if split_round_reference(d)]
        changes: list[StepChange] = []
        unchanged: list[str] = []
        renamed: dict[str, str] = {}
        for step in second.plan.steps:
            pair = pairs.get(step.id)
            if pair is None:
                after = step.model_dump(include=set(_COMPARED))
                changes.append(StepChange(id=step.id, change="added", round=second.index, after=after))
                continue
            before = _renumbered(pair[0], old_ids, first.index)
            fields = [name for name in _COMPARED if _value(before, name) != _value(step, name)]
            was = pair[0].id if pair[0].id != step.id else None
            if fields:
                changes.append(
                    StepChange(
                        id=step.id,
                        change="changed",
                        round=second.index,
                        was=was,
                        fields=fields,
                        before={name: getattr(pair[0], name) for name in fields},
                        after={name: getattr(step, name) for name in fields},
                    )
                )
            else:
                unchanged.append(step.id)
                if was is not None:
                    renamed[step.id] = was
        for ref in dict.fromkeys(reused_refs):
            index, sid = split_round_reference(ref) or (0, "")
            changes.append(StepChange(id=sid, change="reused", round=index))
        reused = {(c.round, c.id) for c in changes if c.change == "reused"}
        changes += [
            StepChange(id=step.id, change="removed", round=first.index, before=step.model_dump(include=set(_COMPARED)))
            for step in first.plan.steps
            if step.id not in old_ids and (first.index, step.id) not in reused
        ]
        return cls(a=first.index, b=second.index, changes=changes, unchanged=unchanged, renamed=renamed)

    def _repr_markdown_(self) -> str:
        lines = [f"**Round {self.a} → round {self.b}**", "", "| step | change | before | after |", "|---|---|---|---|"]
        for change in self.changes:
            what = change.change if change.change != "changed" else ", ".join(change.fields)
            name = change.ref + (f" (was {change.was})" if change.was else "")
            lines.append(f"| {name} | {what} | {_cell(change.before)} | {_cell(change.after)} |")
        if self.unchanged:
            names = [sid + (f" (was {self.renamed[sid]})" if sid in self.renamed else "") for sid in self.unchanged]
            lines += ["", f"Unchanged: {', '.join(names)}"]
        return "\n".join(lines)

    def __str__(self) -> str:
        parts = [f"{c.ref} {c.change}" + _detail(c) for c in self.changes]
        return f"round {self.a} -> {self.b}: " + ("; ".join(parts) or "no step changed")


_WHERE = re.compile(
    r"(?:ReplayMismatch: )?(?:Replay mismatch: )?"
    r"(?P<call>The '(?P<purpose>[^']+)' call(?: of step (?P<step>\S+))?(?: in round (?P<round>\d+))?)"
    r"(?P<rest>(?: was not recorded| was asked more often than recorded|: the recording has no calls left).*)",
    re.DOTALL,
)
"""A replay's mismatch as ``dagmagic.llm.replay`` words it: the call (``_where``), then why it had no answer."""
_CANCELLED_CALL = re.compile(
    r"(?:ReplayMismatch: )?(?:Replay mismatch: )?"
    r"(?P<purpose>[^ ·]+)(?: · step (?P<step>\S+))?(?: · round (?P<round>\d+))? · model '[^']*'"
    r"(?P<rest>: the recorded run moved on.*)",
    re.DOTALL,
)
"""The mismatch of a call the recorded run cancelled (``Interaction.describe()``, then why)."""


class Divergence(BaseModel):
    """Where a replayed run left its recording: the first model call the recording had no answer for
    (``run.divergence``; read from the run's error, so a run read back from the store knows it too).
    """

    purpose: str
    """The diverging call's purpose: ``plan``, ``step``, ``analyze``, ``synthesize``..."""
    step_id: str | None = None
    """Its step, for a step's call."""
    round: int | None = None
    """Its round."""
    reason: str
    """Why the recording had no answer, and (for a call it did not record) the closest recorded call with a
    unified diff of what changed."""

    @classmethod
    def of_error(cls, error: str | None) -> Divergence | None:
        """The divergence a run's ``error`` describes, None when it describes none (another failure)."""
        text = (error or "").split("\nHint: ")[0]
        match = _WHERE.fullmatch(text) or _CANCELLED_CALL.fullmatch(text)
        if match is None:
            return None
        rest = match.group("rest").lstrip(":").strip()
        reason = f"It {rest}" if rest.startswith("was ") else rest[:1].upper() + rest[1:]
        number = match.group("round")
        return cls(
            purpose=match.group("purpose"), step_id=match.group("step"), round=int(number) if number else None,
            reason=reason,
        )  # fmt: skip

    @property
    def call(self) -> str:
        """The call in words: ``the 'plan' call in round 1``, ``the 'step' call of step s2 in round 1``."""
        step = f" of step {self.step_id}" if self.step_id else ""
        round_ = f" in round {self.round}" if self.round else ""
        return f"the {self.purpose!r} call{step}{round_}"

    @property
    def headline(self) -> str:
        """One line: ``diverged from the recording at the 'plan' call in round 1``."""
        return f"diverged from the recording at {self.call}"

    @property
    def why(self) -> str:
        """The reason's first sentence: ``it was not recorded``."""
        first = self._sentences()[0].rstrip(".:")
        return first[:1].lower() + first[1:]

    @property
    def detail(self) -> str:
        """The rest of the reason: the closest recorded call and the diff of what changed ("" when none)."""
        return self._sentences()[1]

    def _sentences(self) -> tuple[str, str]:
        parts = re.split(r"(?<=[.:])\s", self.reason.strip(), maxsplit=1)
        return parts[0], parts[1] if len(parts) > 1 else ""

    @property
    def first_change(self) -> str:
        """The diff's first removed and added lines (``- old`` / ``+ new``), shortened; "" without a diff."""
        lines = self.reason.splitlines()
        removed = next((line for line in lines if line.startswith("-") and not line.startswith("---")), None)
        added = next((line for line in lines if line.startswith("+") and not line.startswith("+++")), None)
        return " / ".join(_cut(line[0] + " " + line[1:].strip(), 100) for line in (removed, added) if line)

    @property
    def summary(self) -> str:
        """One line: the headline, why, and the first change."""
        change = f"; first change: {self.first_change}" if self.first_change else ""
        return f"{self.headline}: {self.why}{change}"

    def __str__(self) -> str:
        return f"{self.headline}.\n{self.reason}"


class RoundComparison(BaseModel):
    """One round of a run next to the same round of another (``RunDiff.rounds``)."""

    index: int
    """The round's number in both runs."""
    steps: RoundDiff
    """What changed in its steps (``a`` and ``b`` are both ``index``)."""
    verdict_before: AnalysisResult | None = None
    """The verdict the round got in the run compared with (the original)."""
    verdict_after: AnalysisResult | None = None
    """And in this run."""

    @property
    def verdict_changed(self) -> bool:
        """Whether the verdicts differ in what they say (reached or not, confidence, reasoning)."""
        return _verdict(self.verdict_before) != _verdict(self.verdict_after)

    @property
    def changed(self) -> bool:
        """Whether a step or the verdict differs."""
        return bool(self.steps.changes) or self.verdict_changed


def _verdict(analysis: AnalysisResult | None) -> tuple[bool, float, str] | None:
    return None if analysis is None else (analysis.achieved, round(analysis.confidence, 3), analysis.reasoning)


def _verdict_words(analysis: AnalysisResult | None) -> str:
    if analysis is None:
        return "none"
    return f"{'achieved' if analysis.achieved else 'not achieved'} ({analysis.confidence:.2f})"


class RunDiff(BaseModel):
    """What differs between two runs of a goal (``replayed.diff(original)``): round by round, the steps
    (``RoundDiff``) and the verdicts; the rounds one run has and the other not; the answers; and, for a replay
    that diverged from its recording, where.
    """

    before: str
    """The id of the run compared with (the original)."""
    after: str
    """The id of this run (the replay)."""
    replay: bool = False
    """Whether this run replays the other (``session.replay``)."""
    rounds: list[RoundComparison] = Field(default_factory=list)
    """The rounds both runs have, by number."""
    rounds_added: list[int] = Field(default_factory=list)
    """Rounds only this run has."""
    rounds_missing: list[int] = Field(default_factory=list)
    """Rounds only the other run has (a replay that ended earlier, or diverged, lacks them)."""
    answer_before: str = ""
    """The other run's answer."""
    answer_after: str = ""
    """This run's answer."""
    diverged: Divergence | None = None
    """Where this run left its recording, when it did."""

    @classmethod
    def between(cls, original: RunState, other: RunState) -> RunDiff:
        """Compare ``other`` (a replay, say) with ``original``, round by round."""
        before = {record.index: record for record in original.rounds}
        after = {record.index: record for record in other.rounds}
        rounds = [
            RoundComparison(
                index=index,
                steps=RoundDiff.between(before[index], after[index], same_ids=True),
                verdict_before=before[index].analysis,
                verdict_after=after[index].analysis,
            )
            for index in sorted(before.keys() & after.keys())
        ]
        return cls(
            before=original.run_id,
            after=other.run_id,
            replay=other.replay_of == original.run_id,
            rounds=rounds,
            rounds_added=sorted(after.keys() - before.keys()),
            rounds_missing=sorted(before.keys() - after.keys()),
            answer_before=original.answer,
            answer_after=other.answer,
            diverged=Divergence.of_error(other.error) if other.status == "failed" else None,
        )

    @property
    def answer_changed(self) -> bool:
        """Whether the answers differ."""
        return self.answer_before != self.answer_after

    @property
    def identical(self) -> bool:
        """Whether nothing differs: the same rounds, steps, verdicts and answer, and no divergence."""
        return not (
            self.diverged or self.rounds_added or self.rounds_missing or self.answer_changed
            or any(comparison.changed for comparison in self.rounds)
        )  # fmt: skip

    def _title(self) -> str:
        return f"{'replay' if self.replay else 'run'} {self.after} vs {'its original ' if self.replay else ''}" \
            f"run {self.before}"  # fmt: skip

    def _round_lines(self) -> list[str]:
        lines = []
        for comparison in self.rounds:
            parts = [f"{c.ref} {c.change}" + _detail(c) for c in comparison.steps.changes]
            if comparison.verdict_changed:
                words = f"{_verdict_words(comparison.verdict_before)} -> {_verdict_words(comparison.verdict_after)}"
                parts.append(f"verdict {words}")
            lines.append(f"round {comparison.index}: " + ("; ".join(parts) or "the same steps and verdict"))
        lines += [f"round {index}: only in {self.after}" for index in self.rounds_added]
        lines += [f"round {index}: only in {self.before}" for index in self.rounds_missing]
        return lines

    def __str__(self) -> str:
        if self.identical:
            return f"{self._title()}: identical (the same steps, verdicts and answer)"
        lines = [f"{self._title()}:"]
        if self.diverged is not None:
            lines.append(self.diverged.summary)
        lines += self._round_lines()
        if self.answer_changed:
            lines += ["answer changed:", f"  before: {_cut(self.answer_before, 200)!r}",
                      f"  after:  {_cut(self.answer_after, 200)!r}"]  # fmt: skip
        else:
            lines.append("answer: the same")
        return "\n".join(lines)

    def _repr_markdown_(self) -> str:
        lines = [f"**{_markdown_text(self._title())}**", ""]
        if self.identical:
            return "\n".join([*lines, "Identical: the same steps, verdicts and answer."])
        if self.diverged is not None:
            headline = self.diverged.headline
            lines += [
                f"**{_markdown_text(headline[:1].upper() + headline[1:])}**: {_markdown_text(self.diverged.why)}",
                "",
                _fenced(self.diverged.detail),
                "",
            ]
        lines += ["| round | step | change | before | after |", "|---|---|---|---|---|"]
        for comparison in self.rounds:
            for change in comparison.steps.changes:
                what = change.change if change.change != "changed" else ", ".join(change.fields)
                name = change.ref + (f" (was {change.was})" if change.was else "")
                row = (name, what, _cell(change.before), _cell(change.after))
                lines.append(f"| {comparison.index} | " + " | ".join(_table_text(cell) for cell in row) + " |")
            if comparison.verdict_changed:
                words = (_verdict_words(comparison.verdict_before), _verdict_words(comparison.verdict_after))
                lines.append(f"| {comparison.index} | verdict | changed | {words[0]} | {words[1]} |")
        lines += [f"| {index} | | only in this run | | |" for index in self.rounds_added]
        lines += [f"| {index} | | only in the original | | |" for index in self.rounds_missing]
        if self.answer_changed:
            lines += ["", "**Answer before**", "", _fenced(self.answer_before), "", "**Answer after**", "",
                      _fenced(self.answer_after)]  # fmt: skip
        else:
            lines += ["", "The same answer."]
        return "\n".join(lines)


def _markdown_text(text: str) -> str:
    """Text shown as itself in Markdown: HTML escaped, Markdown's specials backslashed."""
    return html.escape(re.sub(r"([\\`*_\[\]!|~$#])", r"\\\1", " ".join(text.split())), quote=False)


def _table_text(text: str) -> str:
    return _markdown_text(text.replace("\\|", "|"))


def _fenced(text: str) -> str:
    """``text`` as a fenced code block: shown as written (a diff keeps its lines), whatever backticks it holds."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{text}\n{fence}"


def _detail(change: StepChange) -> str:
    """`` (was s3)``, `` (task, result)``: what a change's one line adds to its id and kind."""
    was = f" (was {change.was})" if change.was else ""
    return was + (f" ({', '.join(change.fields)})" if change.fields else "")


def _identity(step: PlanStep) -> tuple[str, str | None, str]:
    """What a step is, whatever its id: its task (case and spacing aside), its tool and the tool's arguments."""
    args = "" if step.tool_args is None else repr(sorted(step.tool_args.items()))
    return _value(step, "task"), step.tool_hint, args


def _value(step: PlanStep, name: str) -> Any:
    """A compared field's value: a task by its words (a replan that only re-cased it did not change it)."""
    value = getattr(step, name)
    return " ".join(value.lower().split()) if name == "task" else value


def _matched(old: list[PlanStep], new: list[PlanStep], *, same_ids: bool) -> dict[str, tuple[PlanStep, PlanStep]]:
    """New step id -> (old step, new step) for the steps that are the same in both: the same identity (the same
    id preferred among equals), then, when ``same_ids``, what is left with the same id.
    """
    pairs: dict[str, tuple[PlanStep, PlanStep]] = {}
    free = list(old)
    for step in new:
        alike = [o for o in free if _identity(o) == _identity(step)]
        if alike:
            match = next((o for o in alike if o.id == step.id), alike[0])
            free.remove(match)
            pairs[step.id] = (match, step)
    if same_ids:
        by_id = {o.id: o for o in free}
        for step in new:
            if step.id not in pairs and step.id in by_id:
                pairs[step.id] = (by_id.pop(step.id), step)
    return pairs


def _renumbered(step: PlanStep, new_ids: dict[str, str], index: int) -> PlanStep:
    """An earlier round's step with its dependencies named as the later round names them: a matched step by its
    new id, another one of that round by ``rN.id`` (which is how the later round would reuse it).
    """
    dependencies = [new_ids.get(d, d if split_round_reference(d) else f"r{index}.{d}") for d in step.dependencies]
    return step.model_copy(update={"dependencies": dependencies})


def _cell(values: dict[str, Any]) -> str:
    text = "; ".join(f"{name}: {str(value)[:80]}" for name, value in values.items())
    return text.replace("|", "\\|").replace("\n", " ")


class RunState(BaseModel):
    """Everything a run knows, as plain data (what ``DagRun`` exposes and the store keeps)."""

    run_id: str
    """Unique id of the run."""
    goal: str
    """The user's goal, as written."""
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

    @property
    def usage(self) -> Usage:
        """Totals over every call."""
        return Usage.total(call.usage for call in self.calls)


PlanStep.model_rebuild()  # a step may hold a subrun's state (RunState, defined after it)
