"""What runs one step: the ``StepRunner`` interface and the messages a step starts from.

A step is a fresh, memoryless unit of work: it sees the original goal, its task, its tool hint and the
results of its completed dependencies, nothing else. ``dagmagic.engine.steps.agent.StepAgent`` is the runner
the session uses; any async callable taking a ``StepRequest`` can replace it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from dagmagic.engine.calls import prompts
from dagmagic.engine.calls.guard import ContextGuard
from dagmagic.events import Event
from dagmagic.llm import ChatModel
from dagmagic.models import PlanStep
from dagmagic.settings import DagSettings

__all__ = ["StepRequest", "StepRunner", "step_messages"]


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
    smart: ChatModel | None = None
    """The smart model, for checks on the step's result (citations)."""
    guard: ContextGuard | None = None
    """Keeps the step's growing conversation inside its model's window (older observations compacted)."""
    run_ended: Callable[[], bool] = lambda: False
    """Whether the step's run has ended: what comes later (a tool's late result) is no longer its news."""
    failed_call: str | None = None
    """How the direct call of a tool step (``PlanStep.tool_args``) failed: the agent is told, and does the task."""


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
    if request.failed_call:
        user = f"{user}\n\n{request.failed_call}"
    return [{"role": "system", "content": prompts.STEP_SYSTEM}, {"role": "user", "content": user}]
