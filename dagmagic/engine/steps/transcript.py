"""A step's tool turns as messages: the calls a model asked for and what they returned.

Native tool calling gives an assistant message carrying ``tool_calls`` and one ``tool`` message per result;
the JSON action format gives the action as the assistant's text and each result as a user message. A step
records every call it made (``PlanStep.tool_calls``, saved with the step as each returns), so a step tried
again, or resumed in another process, rebuilds these turns from the record and goes on from them: a tool
call that returned is never made again (one in flight when the process died may be).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from dagmagic._secrets import mask_data
from dagmagic.engine.calls.context import truncate
from dagmagic.events import Event, StepIteration
from dagmagic.models import PlanStep, ToolCallRecord

if TYPE_CHECKING:
    from dagmagic.engine.tools.functions import ToolOutcome

__all__ = [
    "CALL_TEXT_CHARS",
    "RequestedCall",
    "assistant_message",
    "observation_message",
    "record_call",
    "recorded_turns",
]

PREVIEW_CHARS = 300
"""Characters of an observation a ``StepIteration`` event carries."""

CALL_TEXT_CHARS = 2000
"""Text of a turn that calls tools, kept in the conversation."""


@dataclasses.dataclass
class RequestedCall:
    """A tool call a model asked for."""

    id: str
    name: str
    arguments: Any


def assistant_message(content: str, calls: list[RequestedCall], native: bool) -> dict[str, Any]:
    """The model's turn that asked for ``calls``."""
    # what matters in a turn that calls tools is the calls: text around them is kept short (a small model once
    # wrote 7,720 tokens before its call, and the next turn no longer fit its window)
    content = truncate(content, CALL_TEXT_CHARS, "\n[... cut]")
    if not native:
        return {"role": "assistant", "content": content}
    return {
        "role": "assistant",
        "content": content or None,
        "tool_calls": [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": json.dumps(call.arguments, default=str)},
            }
            for call in calls
        ],
    }


def observation_message(call: RequestedCall, observation: str, native: bool) -> dict[str, Any]:
    """What ``call`` returned, as the model reads it."""
    if native:
        return {"role": "tool", "tool_call_id": call.id, "content": observation}
    return {"role": "user", "content": f"Result of {call.name}:\n{observation}"}


def recorded_turns(records: list[ToolCallRecord], native: bool) -> tuple[list[dict[str, Any]], int]:
    """The turns of the calls a step's model made, as messages, and how many turns they were (a tool step's
    direct call, ``turn=0``, was made by the executor: it is no turn of the model's).
    """
    turns: list[list[ToolCallRecord]] = []
    for record in records:
        if record.turn == 0:
            continue
        if turns and record.turn is not None and turns[-1][-1].turn == record.turn:
            turns[-1].append(record)
        else:  # a new turn (a record from before turns were kept is a turn of its own)
            turns.append([record])
    messages: list[dict[str, Any]] = []
    for number, turn in enumerate(turns, start=1):
        calls = [RequestedCall(f"call_{number}_{i}", record.name, record.arguments) for i, record in enumerate(turn)]
        actions = [{"tool": call.name, "arguments": call.arguments} for call in calls]
        text = "" if native else json.dumps(actions[0] if len(actions) == 1 else actions, default=str)
        messages.append(assistant_message(text, calls, native))
        messages.extend(observation_message(c, r.observation, native) for c, r in zip(calls, turn, strict=True))
    return messages, len(turns)


def record_call(
    step: PlanStep,
    name: str,
    arguments: Any,
    outcome: ToolOutcome,
    *,
    turn: int,
    round: int,
    emit: Callable[[Event], object],
) -> None:
    """Record a call the step made (``turn`` 0: the executor's own call of a tool step) and tell the run."""
    # the model's arguments ran as it wrote them; what is kept of them is masked
    arguments = mask_data(arguments if isinstance(arguments, dict) else {"raw": arguments})
    step.tool_calls.append(
        ToolCallRecord(
            name=name,
            arguments=arguments,
            observation=outcome.observation,
            error=outcome.error,
            started_at=time.time() - outcome.duration,
            duration=outcome.duration,
            turn=turn,
        )
    )
    emit(
        StepIteration(
            round=round,
            step_id=step.id,
            iteration=turn,
            tool=name,
            arguments=arguments,
            observation_preview=truncate(outcome.observation, PREVIEW_CHARS),
            duration=outcome.duration,
        )
    )
