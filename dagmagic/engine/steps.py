"""What runs one step: the ``StepRunner`` interface, and the single-call step.

A step is a fresh, memoryless unit of work: it sees the original goal, its task, its tool hint and the
results of its completed dependencies, nothing else. The tool-using agent plugs in behind the same
interface.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from dagmagic.engine import prompts
from dagmagic.engine.executor import StepFailure
from dagmagic.events import Event
from dagmagic.llm import ChatModel
from dagmagic.models import PlanStep
from dagmagic.settings import DagSettings

__all__ = ["StepRequest", "StepRunner", "single_call_step", "step_messages"]


@dataclass
class StepRequest:
    """Everything a step may see and use."""

    goal: str
    """The original goal (not the whole history)."""
    step: PlanStep
    """The step, with its task and hints; the runner may add ``tool_calls`` to it."""
    context: str
    """Its completed dependencies' results, formatted and guarded."""
    model: ChatModel
    """The model its hint resolved to."""
    round: int
    settings: DagSettings
    emit: Callable[[Event], object]


class StepRunner(Protocol):
    """Runs one step and returns its result; raises ``StepFailure`` to fail it while keeping notes."""

    async def __call__(self, request: StepRequest) -> str:
        """The step's result."""
        ...


def step_messages(request: StepRequest) -> list[dict[str, str]]:
    """The system and user messages of a step."""
    step = request.step
    hint = f"\nSuggested tool: {step.tool_hint}" if step.tool_hint else ""
    context = f"\n\nResults of the steps this one depends on:\n{request.context}" if request.context else ""
    user = prompts.STEP_USER.format(goal=request.goal, step_id=step.id, task=step.task, tool_hint=hint, context=context)
    return [{"role": "system", "content": prompts.STEP_SYSTEM}, {"role": "user", "content": user}]


async def single_call_step(request: StepRequest) -> str:
    """One LLM call on the step's context."""
    result = await request.model.chat(
        step_messages(request), purpose="step", round=request.round, step_id=request.step.id
    )
    if not result.content.strip():
        raise StepFailure("the model returned an empty answer")
    return result.content
