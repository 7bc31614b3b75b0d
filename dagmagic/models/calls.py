"""The record an LLM call leaves (``LLMCall``), what it was for, and the models a run called (``ModelCard``)."""

from __future__ import annotations

import html
from typing import Any, Literal

from pydantic import BaseModel, Field

from dagmagic.models._text import cut, html_table
from dagmagic.models.usage import Usage, money

__all__ = ["CallStatus", "LLMCall", "ModelCard", "Purpose", "StructuredLevel"]

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
    finish_reason: str | None = None
    """Why the reply ended, as the provider said (``stop``, ``length``: cut at its token limit, ``tool_calls``);
    None when unknown. A replay answers with it, so a cut reply is read as cut again."""
    max_tokens: int | None = None
    """The ``max_tokens`` the call was sent (None: none, or a model's own from its registration)."""
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
        outcome = self.status if not self.error else f"{self.status}: {cut(self.error, 60)}"
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
        return html_table(rows)
