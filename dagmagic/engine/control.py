"""A run's phases and the user's actions on it: one inbox, one table that says what each action does when.

The user steers a running run with two messages, ``stop`` and ``follow_up`` (``cancel`` is the run task's
own cancellation). The loop tells the control which phase it is in, and ``EFFECTS`` decides at once what a
message does there:

- ``interrupt``: the phase works for a request that just changed (a plan, a verdict or an answer for the
  goal without the follow-up; a plan the user no longer wants after Stop), so its work is cancelled and
  the round's steps not started are skipped;
- ``skip``: the round's steps not started are skipped; running ones finish;
- ``later``: nothing now; the loop reads the message at its next decision.

What follows a round is then decided from two facts only (``dagmagic.engine.loop.decide``): ``stopped``, a
Stop that no later follow-up overrode, and ``pending``, follow-ups that no plan and no final answer has seen
yet. The latest message wins: a follow-up after a Stop starts a new round; a Stop after a follow-up answers
now, and that answer sees the follow-up.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, Final, Literal, TypeVar

from dagmagic.errors import DagError
from dagmagic.events import Event, PhaseChanged, UserAction
from dagmagic.models import PlanStep, RunPhase, RunState

__all__ = ["EFFECTS", "INTERRUPTED", "Action", "Effect", "Interrupted", "RunControl", "Verdict"]

T = TypeVar("T")

Action = Literal["stop", "follow_up"]
Effect = Literal["interrupt", "skip", "later"]

EFFECTS: Final[Mapping[tuple[RunPhase, Action], Effect]] = {
    ("starting", "stop"): "later",  # the first round will not begin
    ("starting", "follow_up"): "later",  # the first plan sees it
    ("planning", "stop"): "interrupt",
    ("planning", "follow_up"): "interrupt",  # plan again, with it
    ("awaiting_approval", "stop"): "interrupt",  # the plan is dropped unrun
    ("awaiting_approval", "follow_up"): "interrupt",  # plan again, with it
    ("executing", "stop"): "skip",  # then judge and answer from what completed
    ("executing", "follow_up"): "skip",  # then judge with it: answer if it is met, else plan again
    ("analyzing", "stop"): "later",  # the verdict decides between a full and a partial answer
    ("analyzing", "follow_up"): "interrupt",  # judge again, with it
    ("synthesizing", "stop"): "later",  # the answer is being written: that is what Stop asks for
    ("synthesizing", "follow_up"): "interrupt",  # drop this answer; plan again, with it
    ("finished", "stop"): "later",
    ("finished", "follow_up"): "later",
}


Verdict = tuple[Literal["approve"], list[PlanStep] | None] | tuple[Literal["reject"], str]
"""The user's word on a plan waiting for approval: approved (perhaps edited), or rejected with a reason."""
StepWord = Literal["continue", "step", "skip"]
"""The user's word on a step paused at a breakpoint: run it (and stop at the next breakpoint), run it and
pause before the next step, or skip it."""


class Interrupted:
    """What an interrupted phase returns instead of its result."""

    def __repr__(self) -> str:
        return "INTERRUPTED"


INTERRUPTED: Final = Interrupted()


class RunControl:
    """The inbox of one run: its phase, the user's messages, and the work a message may interrupt."""

    def __init__(self, state: RunState, emit: Callable[[Event], object]) -> None:
        self.state = state
        self.emit = emit
        self.stopped = False
        """A Stop arrived and no follow-up came after it."""
        self.round_stop = asyncio.Event()
        """Set when the current round's steps not started must be skipped."""
        self.executor: Any = None
        """The executor of the round being run, which a ``retry_now`` reaches."""
        self._work: asyncio.Task[Any] | None = None
        self._on_interrupt: Callable[[], object] | None = None
        self._interrupted = False
        self.breakpoints: set[str] = set()
        """Step ids to pause before (``run.break_before``)."""
        self.step_through = False
        """Pause before every step."""
        self.skips: set[str] = set()
        """Steps the user skipped before they started."""
        self.validate_plan: Callable[[list[dict[str, Any]]], list[PlanStep]] | None = None
        """Checks an edited plan like a model's (raises ``ValueError``); set while a plan waits."""
        self._approval: asyncio.Future[Verdict] | None = None
        self._paused: dict[str, asyncio.Future[tuple[StepWord, str | None]]] = {}

    @property
    def pending(self) -> list[str]:
        """Follow-ups no plan and no final answer has seen yet, oldest first (kept in the run's state)."""
        return self.state.pending_follow_ups

    @property
    def phase(self) -> RunPhase:
        """What the run is doing now."""
        return self.state.phase

    def send(self, action: Action, text: str = "") -> Effect:
        """Take a user's message; act on it at once as ``EFFECTS`` says for the current phase."""
        if action == "follow_up":
            self.pending.append(text)
            self.stopped = False
        else:
            self.stopped = True
        self.emit(UserAction(action=action, text=text))
        effect = EFFECTS[(self.phase, action)]
        if effect != "later":
            self.round_stop.set()
        if effect == "interrupt" and self._work is not None and not self._work.done():
            self._interrupted = True
            self._work.cancel()
            if self._on_interrupt is not None:
                self._on_interrupt()
        return effect

    # --- plans waiting for approval, steps paused at breakpoints

    @property
    def awaiting_approval(self) -> bool:
        """Whether a plan waits for the user's word."""
        return self._approval is not None and not self._approval.done()

    async def approval(self) -> Verdict:
        """Wait for the user's word on the plan (run it inside ``interruptible``: a Stop drops the plan)."""
        self._approval = asyncio.get_running_loop().create_future()
        try:
            return await self._approval
        finally:
            self._approval = None

    def decide_plan(self, verdict: Verdict) -> None:
        """Give the user's word on the waiting plan."""
        if not self.awaiting_approval:
            raise DagError("no plan is waiting for approval")
        assert self._approval is not None
        self._approval.set_result(verdict)

    def breaks_before(self, step_id: str) -> bool:
        """Whether the step must pause before it runs."""
        return self.step_through or step_id in self.breakpoints

    @property
    def paused(self) -> list[str]:
        """The steps paused at a breakpoint now, in the order they paused."""
        return [sid for sid, word in self._paused.items() if not word.done()]

    async def pause(self, step_id: str) -> tuple[StepWord, str | None]:
        """Wait for the user's word on a paused step (``skip`` when the round is stopped meanwhile)."""
        word = self._paused[step_id] = asyncio.get_running_loop().create_future()
        stop = asyncio.ensure_future(self.round_stop.wait())
        try:
            await asyncio.wait([word, stop], return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            self._paused.pop(step_id, None)
        return word.result() if word.done() else ("skip", None)

    def release(self, step_id: str, word: StepWord, task: str | None = None) -> None:
        """Let a paused step go on as the user said (``task``: an edited task for it)."""
        future = self._paused.get(step_id)
        if future is None or future.done():
            raise DagError(f"step {step_id!r} is not paused; paused now: {', '.join(self.paused) or 'none'}")
        if word == "step":
            self.step_through = True
        elif word == "continue":
            self.step_through = False
        future.set_result((word, task))

    def retry_now(self, step_id: str) -> bool:
        """Wake a step of the current round that waits for a delayed retry; False when none is waiting."""
        return bool(self.executor is not None and self.executor.retry_now(step_id))

    @property
    def interrupted(self) -> bool:
        """Whether the phase's work running now was interrupted (its cancellation may not have landed yet)."""
        return self._interrupted

    def enter(self, phase: RunPhase, round: int | None = None) -> None:
        """Move to ``phase`` (an event tells the views)."""
        if phase != self.state.phase:
            self.state.phase = phase
            self.emit(PhaseChanged(phase=phase, round=round))

    def new_round(self) -> asyncio.Event:
        """A fresh stop event for the next round's steps."""
        self.round_stop = asyncio.Event()
        return self.round_stop

    def seen(self, count: int) -> list[str]:
        """The first ``count`` pending follow-ups, which a plan or the final answer has now seen; they
        leave ``pending``.
        """
        taken, self.state.pending_follow_ups = self.pending[:count], self.pending[count:]
        return taken

    async def interruptible(
        self,
        phase: RunPhase,
        work: Coroutine[Any, Any, T],
        *,
        round: int | None,
        name: str,
        on_interrupt: Callable[[], object] | None = None,
    ) -> T | Interrupted:
        """Run ``work`` as ``phase``; ``INTERRUPTED`` when a message interrupted it (``on_interrupt`` is
        called at that moment). Cancelling the caller cancels the work and propagates.
        """
        self.enter(phase, round)
        task = asyncio.get_running_loop().create_task(work, name=name)
        self._work, self._on_interrupt, self._interrupted = task, on_interrupt, False
        try:
            result = await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if self._interrupted and not (current is not None and current.cancelling()):
                return INTERRUPTED
            raise
        finally:
            self._work = self._on_interrupt = None
        return INTERRUPTED if self._interrupted else result
