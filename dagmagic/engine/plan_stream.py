"""The streaming planner: steps start while the plan is still being written.

The smart model's reply (tool-call argument deltas, or JSON text) is parsed as it arrives with
pydantic_core's partial JSON parser. A step is handed over as soon as it is complete (a later element has
begun) and every step it depends on is already known: a step that depends only on earlier steps cannot
close a cycle. A step naming something not seen yet waits; when the plan ends it is validated as a whole
(the same rules as the normal planner), the waiting steps follow, and a plan the validation rejects is
reported so the caller can drop what it started and re-ask.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError
from pydantic_core import from_json

from dagmagic.engine.planner import PlanDraft, Planner, StepDraft, normalize_step, recover_steps
from dagmagic.llm.structured import OutputShape, with_instruction
from dagmagic.models import PlanStep, StructuredLevel, split_round_reference

__all__ = ["PlanStream", "StreamedPlan"]


@dataclass
class StreamedPlan:
    """What a plan stream produced: its steps (handed over or not), or the problem that sinks it."""

    messages: list[dict[str, Any]]
    """The conversation, for a re-ask."""
    drafts: list[StepDraft] = field(default_factory=list)
    """Every step as finally written."""
    started: dict[str, PlanStep] = field(default_factory=dict)
    """Steps handed over while the plan streamed, by id."""
    readable: bool = True
    """False when the reply held no plan at all."""


class PlanStream:
    """Streams one plan and hands each step to ``on_step`` as soon as it can run."""

    def __init__(self, planner: Planner, on_step: Callable[[PlanStep], None]) -> None:
        self.planner = planner
        self.on_step = on_step

    async def run(
        self,
        query: str,
        *,
        round: int,
        context: str | None = None,
        earlier: Collection[str] = (),
        domain: str | None = None,
    ) -> StreamedPlan:
        """Stream the plan; steps go to ``on_step`` on the way. Provider errors propagate."""
        planner = self.planner
        capabilities = planner.model.entry.capabilities
        level: StructuredLevel = (
            "tool_call" if capabilities.tool_call else "json_mode" if capabilities.json_mode else "text"
        )
        shape = OutputShape(PlanDraft, None, recover_steps)
        messages = with_instruction(
            planner.messages(query, round=round, context=context, earlier=earlier, domain=domain),
            shape.instruction(level),
        )
        streamed = StreamedPlan(messages=messages)
        handover = _Handover(self, streamed, earlier, planner.settings.plan_max_steps)
        arguments: list[str] = []
        text: list[str] = []
        async for chunk in planner.model.stream(
            messages, purpose="plan", round=round, temperature=0.0, structured_level=level, **shape.request(level)
        ):
            text.append(chunk.text)
            arguments.extend(delta.arguments for delta in chunk.tool_calls if delta.index == 0)
            handover.offer(_partial_steps("".join(arguments) or "".join(text)), complete=False)
        whole = "".join(arguments) or "".join(text)
        try:
            streamed.drafts = recover_steps(whole)
        except (ValueError, ValidationError):
            streamed.readable = False
        return streamed


class _Handover:
    """Decides which streamed steps can start now."""

    def __init__(self, stream: PlanStream, streamed: StreamedPlan, earlier: Collection[str], limit: int) -> None:
        self.stream = stream
        self.streamed = streamed
        self.earlier = set(earlier)
        self.limit = limit
        self.seen: set[str] = set()
        self.waiting: list[StepDraft] = []
        self.considered = 0

    def offer(self, items: list[Any], *, complete: bool) -> None:
        """Consider every element that is finished: all but the last, which may still be growing."""
        finished = items if complete else items[:-1]
        for index in range(self.considered, len(finished)):
            self.considered = index + 1
            draft = _draft(finished[index], index)
            if draft is None or draft.id in self.seen:
                continue  # unreadable or a duplicate: the validation at the end names it
            self.seen.add(draft.id)
            self.waiting.append(draft)
            self._release()

    def _release(self) -> None:
        """Start every waiting step whose dependencies are all known, until none is left to start."""
        progress = True
        while progress:
            progress = False
            for draft in list(self.waiting):
                if len(self.streamed.started) >= self.limit:
                    return  # an oversize plan: the validation at the end rejects it
                if all(self._known(dep) for dep in draft.dependencies):
                    self.waiting.remove(draft)
                    step = _step(draft, self.stream.planner.roles)
                    self.streamed.started[step.id] = step
                    self.stream.on_step(step)
                    progress = True

    def _known(self, dependency: str) -> bool:
        if split_round_reference(dependency) is not None and dependency not in self.streamed.started:
            return dependency in self.earlier
        return dependency in self.streamed.started


def _partial_steps(text: str) -> list[Any]:
    """The ``steps`` array of a plan still being written (empty while none has begun)."""
    start = min((i for i in (text.find("{"), text.find("[")) if i >= 0), default=-1)
    if start < 0:
        return []
    try:
        value = from_json(text[start:], allow_partial=True)
    except ValueError:
        return []
    if isinstance(value, dict):
        value = value.get("steps", [])
    return value if isinstance(value, list) else []


def _draft(item: Any, index: int) -> StepDraft | None:
    if not isinstance(item, dict) or not (item.get("task") or item.get("description")):
        return None
    try:
        return StepDraft.model_validate(normalize_step(dict(item), index))
    except ValidationError:
        return None


def _step(draft: StepDraft, roles: Collection[str]) -> PlanStep:
    hint = draft.model_hint if draft.model_hint in roles else None
    return PlanStep(
        id=draft.id,
        task=draft.task,
        dependencies=list(dict.fromkeys(draft.dependencies)),
        tool_hint=draft.tool_hint,
        model_hint=hint,
    )
