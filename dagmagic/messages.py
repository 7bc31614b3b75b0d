"""What the user can tell a running run: every action is a message put into the run's inbox.

``run.send(message)`` takes any of these; ``DagRun``'s control methods (``stop()``, ``follow_up(text)``,
``approve()``...) are one-liners over it, and the widget sends the same messages. What a message does depends
on the phase the run is in: ``dagmagic.engine.run.inbox.EFFECTS`` is that table.

A message checks its own content when it is put (``check``: a ``ValueError`` that says what is wrong); the
inbox checks whether it makes sense now.
"""

from __future__ import annotations

import typing
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

__all__ = [
    "KINDS",
    "MESSAGES",
    "ActionKind",
    "Approve",
    "BreakBefore",
    "Cancel",
    "ClearBreakpoints",
    "Continue",
    "FollowUp",
    "Message",
    "Origin",
    "Reject",
    "Rerun",
    "RetryNow",
    "Skip",
    "Step",
    "StepThrough",
    "Stop",
]

ActionKind = Literal[
    "stop",
    "follow_up",
    "cancel",
    "approve",
    "reject",
    "continue",
    "step",
    "skip",
    "break",
    "clear_breakpoints",
    "step_through",
    "retry_now",
    "rerun",
]
"""Every kind of message, as ``UserAction.action`` records it."""


class _Message(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    def check(self) -> None:
        """Raise ``ValueError`` when the message itself is malformed (an empty follow-up, say)."""

    def describe(self) -> str:
        """What ``UserAction.text`` records of it."""
        return ""


class Stop(_Message):
    """Answer now: steps not started are skipped, running ones finish, the answer covers what completed."""

    type: Literal["stop"] = "stop"


class FollowUp(_Message):
    """Steer the run: ``text`` joins the goal, planned for in a new round or seen by the answer."""

    type: Literal["follow_up"] = "follow_up"
    text: str

    def check(self) -> None:  # noqa: D102
        if not self.text.strip():
            raise ValueError("a follow-up needs some text")

    def describe(self) -> str:  # noqa: D102
        return self.text.strip()


class Cancel(_Message):
    """Abort now: running steps are cancelled and the run ends ``cancelled``."""

    type: Literal["cancel"] = "cancel"


class Approve(_Message):
    """Run the plan waiting for approval, or ``steps`` instead (an edited plan, as dicts of ``PlanStep`` fields)."""

    type: Literal["approve"] = "approve"
    steps: list[dict[str, Any]] | None = None

    def describe(self) -> str:  # noqa: D102
        return "edited" if self.steps is not None else ""


class Reject(_Message):
    """Drop the plan waiting for approval and plan again, telling the planner ``feedback``."""

    type: Literal["reject"] = "reject"
    feedback: str

    def check(self) -> None:  # noqa: D102
        if not self.feedback.strip():
            raise ValueError("say why the plan is rejected: the planner plans again with it")

    def describe(self) -> str:  # noqa: D102
        return self.feedback.strip()


class _StepMessage(_Message):
    step: str | None = None
    """The step acted on (None: the first paused one, where that makes sense)."""

    def describe(self) -> str:
        return self.step or ""


class Continue(_StepMessage):
    """Run the paused step (``task``: an edited task for it) and go on to the next breakpoint."""

    type: Literal["continue"] = "continue"
    task: str | None = None


class Step(_StepMessage):
    """Run the paused step, then pause again before the next step that becomes ready."""

    type: Literal["step"] = "step"
    task: str | None = None


class Skip(_StepMessage):
    """Skip a step: paused, now; not started yet, when it is ready. Its dependents are skipped too."""

    type: Literal["skip"] = "skip"
    step: str

    def check(self) -> None:  # noqa: D102
        if not self.step.strip():
            raise ValueError("say which step to skip, e.g. s3")


class BreakBefore(_Message):
    """Pause before each of these steps runs (in any round)."""

    type: Literal["break"] = "break"
    steps: tuple[str, ...]

    def describe(self) -> str:  # noqa: D102
        return f"before {', '.join(self.steps)}"


class ClearBreakpoints(_Message):
    """Remove every breakpoint and stop stepping through (paused steps stay paused until released)."""

    type: Literal["clear_breakpoints"] = "clear_breakpoints"


class StepThrough(_Message):
    """Pause before every step (``on=False``: only at breakpoints)."""

    type: Literal["step_through"] = "step_through"
    on: bool = True

    def describe(self) -> str:  # noqa: D102
        return "on" if self.on else "off"


class RetryNow(_StepMessage):
    """Try a step waiting for a delayed retry now instead of at its ``retry_at``."""

    type: Literal["retry_now"] = "retry_now"
    step: str


class Rerun(_StepMessage):
    """Re-run a step of the latest round (with a new ``task`` or ``model``) and what depends on it; with a
    ``result``, take that text as the step's result instead of running it (``run.what_if``) and re-run only what
    depends on it.
    """

    type: Literal["rerun"] = "rerun"
    step: str
    task: str | None = None
    model: str | None = None
    result: str | None = None


Origin = Literal["new", "resume", "fork"] | Rerun
"""Where a drive starts: a new run, a resumed one, a fork (``run.fork``: its last round, made from another run's, runs
what it has not completed), or the re-run of a step."""


Message = Annotated[
    Stop
    | FollowUp
    | Cancel
    | Approve
    | Reject
    | Continue
    | Step
    | Skip
    | BreakBefore
    | ClearBreakpoints
    | StepThrough
    | RetryNow
    | Rerun,
    Field(discriminator="type"),
]
"""Any message; ``MESSAGES.validate_python({"type": "stop"})`` reads one from JSON (the widget's)."""

MESSAGES: TypeAdapter[Message] = TypeAdapter(Message)

KINDS: Sequence[ActionKind] = typing.get_args(ActionKind)
"""Every kind, in the order of ``ActionKind``."""
