"""A run's inbox: every user action arrives as a message (``dagmagic.messages``), and ONE table says what it
does in each phase.

``Inbox.put`` takes a message: it checks it (a precise error for misuse; nothing is recorded then), records
one ``UserAction``, keeps what the message says in the user's word, and gives it the effect ``EFFECTS``
names for the phase the run is in:

- ``refuse``: it makes no sense now (approve with no plan waiting, a follow-up to a run that ended): a
  ``DagError`` says why.
- ``ignore``: there is nothing to do (a Stop after the end): ``put`` returns False.
- ``keep``: the word is kept; the phase reads it at its next decision (a Stop while judging lets the verdict
  decide between a full and a partial answer).
- ``skip``: kept, and the round's steps not started are skipped; running ones finish.
- ``interrupt``: kept, the round's steps not started are skipped, and the phase's work (a plan, the wait
  for approval, a verdict, an answer) is dropped now: it was for a request that just changed.
- ``deliver``: the phase acts on it (``ReceivingPhase.on``): the waiting plan is approved, a paused step goes on, a
  step waiting to retry wakes.
- ``cancel``: the run's task is cancelled.
- ``relaunch``: the run goes on from a new round that re-runs a step.

The user's word is the only state messages leave, and only ``put`` changes it: ``stopped`` (a Stop that no
later follow-up overrode), the follow-ups no plan and no answer has seen yet (``pending``, kept in the run's
state), breakpoints, stepping through, and steps skipped before they started. Phases read it where they
decide (``dagmagic.engine.loop.decisions.decide``); the latest word wins: a follow-up after a Stop starts a new round,
a Stop after a follow-up answers now, and that answer sees the follow-up.
"""

from __future__ import annotations

import asyncio
import typing
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, Protocol, TypeVar

from dagmagic.errors import DagError
from dagmagic.events import Event, PhaseChanged, UserAction
from dagmagic.messages import (
    KINDS,
    ActionKind,
    BreakBefore,
    ClearBreakpoints,
    Continue,
    FollowUp,
    Message,
    Rerun,
    Skip,
    Step,
    StepThrough,
    Stop,
)
from dagmagic.models import PlanStep, RunPhase, RunState

__all__ = [
    "EFFECTS",
    "FOLLOW_UP_OUTLOOK",
    "INTERRUPTED",
    "NOT_ENDED",
    "Effect",
    "Inbox",
    "Interrupted",
    "ReceivingPhase",
    "Word",
]

T = TypeVar("T")

Effect = Literal["refuse", "ignore", "keep", "skip", "interrupt", "deliver", "cancel", "relaunch"]

_TABLE = """
                   starting  planning   awaiting_approval  executing  analyzing  synthesizing  finished
stop               keep      interrupt  interrupt          skip       keep       keep          ignore
follow_up          keep      interrupt  interrupt          skip       interrupt  interrupt     refuse
cancel             cancel    cancel     cancel             cancel     cancel     cancel        ignore
approve            refuse    refuse     deliver            refuse     refuse     refuse        refuse
reject             refuse    refuse     deliver            refuse     refuse     refuse        refuse
continue           refuse    deliver    refuse             deliver    refuse     refuse        refuse
step               refuse    deliver    refuse             deliver    refuse     refuse        refuse
skip               refuse    deliver    keep               deliver    refuse     refuse        refuse
break              keep      keep       keep               keep       keep       keep          keep
clear_breakpoints  keep      keep       keep               keep       keep       keep          keep
step_through       keep      keep       keep               keep       keep       keep          keep
retry_now          ignore    deliver    ignore             deliver    ignore     ignore        ignore
rerun              refuse    refuse     refuse             refuse     refuse     refuse        relaunch
"""
"""Why each cell is what it is:

- Stop while planning or awaiting approval drops that plan (nothing ran of it; the answer is written from
  what earlier rounds found); while executing, running steps finish and the round is judged; while judging
  or writing the answer, that work is what a Stop asks for.
- A follow-up drops whatever was being made for the goal without it (a plan, a verdict, an answer) and is
  planned for; while executing, running steps finish first; after the end it belongs in a new run.
- Steps run while a streamed plan is still being made, so the planning phase takes their messages too.
- A step skipped while its plan awaits approval is skipped when the plan runs.
- Breakpoints and stepping through are settings of the run: they apply from the next step that is ready.
- A step can only wait to retry while steps run; elsewhere retry-now finds nothing to wake.
"""


FOLLOW_UP_OUTLOOK: Final[Mapping[RunPhase, str]] = {
    "starting": "Follow-up sent: the first plan will include it.",
    "planning": "Follow-up sent: the plan being made is dropped; a new round plans for it.",
    "awaiting_approval": "Follow-up sent: the plan waiting for your approval is dropped; a new round plans for it.",
    "executing": (
        "Follow-up sent: steps not started are skipped and running ones finish. Then the verdict judges what "
        "completed against the goal with your follow-up: a new round plans for it, unless those results already "
        "answer it, and then the answer takes it into account."
    ),
    "analyzing": (
        "Follow-up sent: the round is judged again with it: a new round plans for it, unless the results already "
        "answer it, and then the answer takes it into account."
    ),
    "synthesizing": "Follow-up sent: the answer being written is dropped; a new round plans for it.",
}
"""What a follow-up taken in each phase will do, as the user is told when they send it (the table's
``follow_up`` row, and what ``decide`` makes of it: a verdict that finds the goal with it met answers at once).
"""


def _parse(table: str) -> dict[tuple[ActionKind, RunPhase], Effect]:
    header, *rows = (line.split() for line in table.strip().splitlines())
    effects = typing.get_args(Effect)
    cells: dict[tuple[ActionKind, RunPhase], Effect] = {}
    for kind, *row in rows:
        for phase, effect in zip(header, row, strict=True):
            assert kind in KINDS and phase in typing.get_args(RunPhase) and effect in effects, (kind, phase, effect)
            cells[(typing.cast(ActionKind, kind), typing.cast(RunPhase, phase))] = typing.cast(Effect, effect)
    return cells


EFFECTS: Final[Mapping[tuple[ActionKind, RunPhase], Effect]] = _parse(_TABLE)
"""What each kind of message does in each phase (the table above, read once)."""


class Interrupted:
    """What interrupted work returns instead of its result."""

    def __repr__(self) -> str:
        return "INTERRUPTED"


INTERRUPTED: Final = Interrupted()

NOT_ENDED: Final = (
    "a step can be re-run once the run has ended: wait for it, or stop() it first",
    "a step's result can be edited (what_if) once the run has ended: wait for it, or stop() it first",
)
"""Why a re-run (``[False]``) or a what-if (``[True]``) waits for the run's end."""


class ReceivingPhase(Protocol):
    """A phase of the goal loop as the inbox sees it: its name (which ``EFFECTS`` is keyed by), its round, and
    what it does with a message the table delivers to it.
    """

    @property
    def name(self) -> RunPhase:
        """The phase's name (``RunPhase``)."""
        ...

    @property
    def round(self) -> int | None:
        """The round it works for."""
        ...

    def on(self, message: Message) -> bool:
        """Act on a delivered message at once; False when there was nothing to act on (nothing is recorded
        then). Raise ``DagError`` for misuse. It must not emit events: the message is recorded after it.
        """
        ...


@dataclass
class _Idle:
    """The phase of a run before its driver begins and after it ends."""

    name: RunPhase
    round: int | None = None

    def on(self, message: Message) -> bool:
        raise DagError(f"the run is {self.name}: nothing can take {message.type!r} now")


@dataclass
class Word:
    """What the user has said that still holds (only ``Inbox.put`` changes it)."""

    stopped: bool = False
    """A Stop arrived and no follow-up came after it."""
    breakpoints: set[str] = field(default_factory=set)
    """Step ids to pause before, in any round."""
    step_through: bool = False
    """Pause before every step."""
    skips: set[str] = field(default_factory=set)
    """Steps of the current round the user skipped before they started."""

    def take(self, message: Message, pending: list[str]) -> None:
        """Keep what ``message`` says (``pending``: the run's follow-ups not yet seen)."""
        match message:
            case Stop():
                self.stopped = True
            case FollowUp():
                pending.append(message.describe())
                self.stopped = False
            case Rerun():
                self.stopped = False
            case BreakBefore(steps=steps):
                self.breakpoints.update(steps)
            case ClearBreakpoints():
                self.breakpoints.clear()
                self.step_through = False
            case StepThrough(on=on):
                self.step_through = on
            case Step():
                self.step_through = True
            case Continue():
                self.step_through = False
            case Skip(step=step):
                self.skips.add(step)


class Inbox:
    """The inbox of one run: the phase it is in, the user's word, and the work a message may interrupt."""

    def __init__(
        self,
        state: RunState,
        emit: Callable[[Event], object],
        *,
        cancel: Callable[[], bool],
        check_rerun: Callable[[Rerun], None],
        relaunch: Callable[[Rerun], None],
        step_through: bool = False,
    ) -> None:
        self.state = state
        self._emit = emit
        self._cancel = cancel
        self._check_rerun = check_rerun
        self._relaunch = relaunch
        self.word = Word(step_through=step_through)
        self.round_stop = asyncio.Event()
        """Set when the current round's steps not started must be skipped."""
        self.round_stopped_by: ActionKind | None = None
        """The message that set ``round_stop`` last: ``stop`` or ``follow_up`` (what the skipped steps say)."""
        self._phase: ReceivingPhase = _Idle(state.phase)
        self._work: asyncio.Task[Any] | None = None
        self._on_interrupt: Callable[[], object] | None = None
        self._interrupted = False

    # --- taking messages

    def put(self, message: Message) -> bool:
        """Take a user's message (see the module's docstring); False when it had nothing to act on."""
        message.check()
        effect = EFFECTS[(message.type, self._phase.name)]
        if effect == "refuse":
            raise DagError(self._refusal(message))
        if effect == "ignore":
            return False
        self._check_now(message)
        if effect == "deliver" and not self._phase.on(message):
            return False
        self._emit(UserAction(action=message.type, text=message.describe()))
        self.word.take(message, self.pending)
        self._apply(effect, message)
        return True

    def _apply(self, effect: Effect, message: Message) -> None:
        if effect in ("skip", "interrupt"):
            self.round_stopped_by = message.type
            self.round_stop.set()
        if effect == "interrupt" and self._work is not None and not self._work.done():
            self._interrupted = True
            self._work.cancel()
            if self._on_interrupt is not None:
                self._on_interrupt()
        elif effect == "cancel":
            self._cancel()
        elif effect == "relaunch":
            assert isinstance(message, Rerun)
            self._relaunch(message)

    def _check_now(self, message: Message) -> None:
        """What the run's state says about a message the phase would take."""
        if isinstance(message, Skip):
            step = self._latest_steps().get(message.step)
            if step is None or step.status not in ("pending", "queued", "paused"):
                raise DagError(self._refusal(message))
        elif isinstance(message, Rerun):
            self._check_rerun(message)

    def _refusal(self, message: Message) -> str:
        """Why ``message`` cannot be taken in this phase, in the user's terms."""
        where = self.state.status if self.state.status != "running" else self._phase.name
        match message.type:
            case "follow_up":
                return (
                    f"this run is {self.state.status}; a follow-up can only steer a running run. "
                    "Start a new one in the same session to continue the conversation."
                )
            case "approve" | "reject":
                return f"no plan of this run is waiting for approval (the run is {where})"
            case "continue" | "step":
                return f"no step is paused (the run is {where})"
            case "skip":
                step = self._latest_steps().get(message.describe())
                state = "not in the latest round" if step is None else step.status
                return f"step {message.describe()!r} cannot be skipped: it is {state}"
            case "rerun":
                return NOT_ENDED[isinstance(message, Rerun) and message.result is not None]
        return f"{message.type} cannot be taken while the run is {where}"

    def _latest_steps(self) -> dict[str, PlanStep]:
        rounds = self.state.rounds
        return {step.id: step for step in rounds[-1].plan.steps} if rounds else {}

    # --- the user's word, as the loop reads it

    @property
    def pending(self) -> list[str]:
        """Follow-ups no plan and no final answer has seen yet, oldest first (kept in the run's state)."""
        return self.state.pending_follow_ups

    @property
    def stopped(self) -> bool:
        """A Stop that no later follow-up overrode."""
        return self.word.stopped

    def breaks_before(self, step_id: str) -> bool:
        """Whether the step must pause before it runs."""
        return self.word.step_through or step_id in self.word.breakpoints

    def skipped(self, step_id: str) -> bool:
        """Whether the user skipped the step before it started."""
        return step_id in self.word.skips

    def seen(self, count: int) -> list[str]:
        """The first ``count`` pending follow-ups, which a plan or the final answer has now seen: they leave
        ``pending``.
        """
        taken, self.state.pending_follow_ups = self.pending[:count], self.pending[count:]
        return taken

    # --- where the loop is

    @property
    def phase(self) -> ReceivingPhase:
        """The phase the run is in."""
        return self._phase

    def enter(self, phase: ReceivingPhase) -> None:
        """The run is in ``phase`` now (an event tells the views when its name changes)."""
        self._phase = phase
        if phase.name != self.state.phase:
            self.state.phase = phase.name
            self._emit(PhaseChanged(phase=phase.name, round=phase.round))

    def finish(self) -> None:
        """The run ended: every message meets the table's ``finished`` column from now on."""
        self.enter(_Idle("finished"))

    def reopen(self) -> None:
        """The run is about to be driven again (a re-run): messages meet the ``starting`` column until then."""
        self.enter(_Idle("starting"))

    def new_round(self) -> None:
        """A fresh stop for the next round's steps; skips named the last round's steps."""
        self.round_stop = asyncio.Event()
        self.round_stopped_by = None
        self.word.skips.clear()

    @property
    def interrupted(self) -> bool:
        """Whether the work running now was interrupted (its cancellation may not have landed yet)."""
        return self._interrupted

    async def interruptible(
        self, work: Coroutine[Any, Any, T], *, name: str, on_interrupt: Callable[[], object] | None = None
    ) -> T | Interrupted:
        """Run ``work`` (the phase's); ``INTERRUPTED`` when a message interrupted it (``on_interrupt`` is
        called at that moment). Cancelling the caller cancels the work and propagates.
        """
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
