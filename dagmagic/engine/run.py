"""``DagRun``: one goal being pursued, its state, its event log, and the user's controls over it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any, Literal

from dagmagic.engine.control import RunControl

if TYPE_CHECKING:
    from dagmagic.engine.store import RunStore
from dagmagic.errors import DagError, RunFailedError
from dagmagic.events import Event, LLMCallRecorded, PlanReady, RunWarning, StepPlanned, UserAction
from dagmagic.models import (
    AnalysisResult,
    ExecutionPlan,
    LLMCall,
    PlanStep,
    RoundRecord,
    RunPhase,
    RunState,
    RunStatus,
    Usage,
)

__all__ = ["DagRun", "Listener"]

log = logging.getLogger("dagmagic")

Listener = Callable[[Event], object]

WAKE_EVERY = 0.1
"""Seconds between wake-ups of the event loop while something awaits a run."""


class DagRun:
    """A goal being pursued. Await it for the finished run; read it at any time for where it stands.

    Controls: ``stop()`` (steps not started are skipped, running ones finish, then an answer written from what
    completed, marked partial), ``follow_up(text)`` (the text joins the goal: a plan being made or an answer
    being written for the old goal is dropped, steps not started are skipped; uses no budget), ``cancel()``
    (running steps cancelled now; status ``cancelled``). ``dagmagic.engine.control`` says what each does in
    each phase.
    """

    def __init__(self, state: RunState, *, events: list[Event] | None = None, read_only: bool = False) -> None:
        self.state = state
        self.events: list[Event] = list(events or [])
        self.exception: BaseException | None = None
        """The unexpected exception that failed the run, if one did (the run's ``error`` describes it)."""
        self.read_only = read_only
        """A run read back from the store (``dagmagic.load_run``): to continue it, ``session.resume(run_id)``."""
        self._listeners: list[Listener] = []
        self._steps_by_round = {(record.index, step.id): step for record in state.rounds for step in record.plan.steps}
        self._task: asyncio.Task[None] | None = None
        self._store: RunStore | None = None
        self.control = RunControl(state, self.emit)
        """The run's inbox: what the loop reads the user's stop and follow-ups from."""

    # --- the event stream -------------------------------------------------------------------------

    def emit(self, event: Event) -> None:
        """Record an event, fold it into the state, save it, and only then tell every listener (a step's
        result is on disk before anyone hears that it completed).
        """
        self.events.append(event)
        if isinstance(event, LLMCallRecorded):
            self._record_call(event.call)
        elif isinstance(event, PlanReady):
            for step in event.plan.steps:
                self._steps_by_round[(event.round, step.id)] = step
        elif isinstance(event, StepPlanned):
            self._steps_by_round[(event.round, event.step.id)] = event.step
        elif isinstance(event, RunWarning) and event.round is not None:
            for record in self.state.rounds:
                if record.index == event.round:
                    record.warnings.append(event.message)
        if self._store is not None:
            self._save(event)
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception:  # a broken view must never break the run
                log.exception("[dagmagic] a run listener failed on %s", event.type)

    def save_to(self, store: RunStore, history: list[Any]) -> None:
        """Checkpoint this run to ``store`` from now on (``history``: the conversation it is planned in)."""
        store.attach(self, history)
        self._store = store

    @property
    def durable(self) -> bool:
        """Whether the run is being saved to a run store (and can be resumed after a crash)."""
        return self._store is not None

    def _save(self, event: Event) -> None:
        assert self._store is not None
        try:
            self._store.record(self, event)
        except Exception as exc:  # a full disk must not end a run: it goes on, unsaved, and says so
            log.exception("[dagmagic] the run store failed on %s", event.type)
            self._store = None
            self.emit(RunWarning(message=f"This run is no longer saved: the run store failed ({exc}).", round=None))

    def step_of(self, round: int, step_id: str) -> PlanStep | None:
        """The step ``step_id`` of round ``round`` (also while its plan still streams)."""
        return self._steps_by_round.get((round, step_id))

    def _record_call(self, call: LLMCall) -> None:
        self.state.calls.append(call)
        if call.step_id is not None and call.round is not None:
            step = self._steps_by_round.get((call.round, call.step_id))
            if step is not None:
                step.usage = step.usage + call.usage

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` with every future event; returns a function that unsubscribes it."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    # --- controls -------------------------------------------------------------------------------

    def stop(self) -> None:
        """Answer now: steps not started are skipped, running ones finish, no new round begins, and the answer
        is written from what completed (marked partial). Does nothing once the run has ended.
        """
        self._writable()
        if not self.done():
            self.control.send("stop")

    def follow_up(self, text: str) -> None:
        """Steer the run: ``text`` joins the goal; it is planned for in a new round or seen by the answer
        (no budget used). It wins over an earlier ``stop()``.
        """
        self._writable()
        if not isinstance(text, str) or not text.strip():
            raise ValueError("a follow-up needs some text")
        if self.done():
            raise DagError(
                f"this run is {self.status}; a follow-up can only steer a running run. "
                "Start a new one in the same session to continue the conversation."
            )
        self.control.send("follow_up", text.strip())

    def _writable(self) -> None:
        if self.read_only:
            raise DagError(
                f"run {self.run_id} was read back from the run store and does not run here; "
                f"continue it with `await session.resume({self.run_id!r})` (or `%dag resume {self.run_id}`)."
            )

    def retry_now(self, step_id: str) -> bool:
        """Try a step waiting for a delayed retry now instead of at its ``retry_at``; False when no step of the
        current round by that id is waiting.
        """
        self._writable()
        woke = self.control.retry_now(step_id)
        if woke:
            self.emit(UserAction(action="retry_now", text=step_id))
        return woke

    def cancel(self) -> bool:
        """Abort now: running steps are cancelled and the run ends ``cancelled``. False if already done."""
        if self._task is None or self._task.done():
            return False
        return self._task.cancel()

    def done(self) -> bool:
        """Whether the run has ended."""
        return self.state.status != "running"

    async def wait(self, *, cancel_with_waiter: bool = False) -> DagRun:
        """The run, once it has ended. Cancelling the waiter leaves the run going, unless
        ``cancel_with_waiter``: then the run is cancelled too, and waited for, before the cancellation goes on.

        The wait wakes the event loop every ``WAKE_EVERY`` seconds: ipykernel's Interrupt schedules the
        cell's cancellation with a plain ``call_soon`` that runs only when the loop next wakes (ipykernel
        issue 881), which could otherwise be the end of a 30 s model call.
        """
        try:
            while self._task is not None and not self._task.done():
                await asyncio.wait([self._task], timeout=WAKE_EVERY)
        except asyncio.CancelledError:
            if cancel_with_waiter:
                self.cancel()
                await self.wait()
            raise
        return self

    def __await__(self) -> Generator[Any, None, DagRun]:
        return self.wait().__await__()

    def raise_for_status(self) -> DagRun:
        """The run if it did not fail; ``RunFailedError`` (naming the cause) if it did."""
        if self.state.status == "failed":
            raise RunFailedError(self) from self.exception
        return self

    # --- reading the run ------------------------------------------------------------------------

    @property
    def run_id(self) -> str:
        """Unique id of the run."""
        return self.state.run_id

    @property
    def goal(self) -> str:
        """The goal as the user wrote it."""
        return self.state.goal

    @property
    def status(self) -> RunStatus:
        """``running``, ``done``, ``failed`` or ``cancelled``."""
        return self.state.status

    @property
    def phase(self) -> RunPhase:
        """What the run is doing: ``starting``, ``planning``, ``executing``, ``analyzing``, ``synthesizing``,
        ``finished``.
        """
        return self.state.phase

    @property
    def answer(self) -> str:
        """The answer being written now (it grows while synthesis streams; a superseded one is cleared)."""
        return self.state.answer

    @property
    def partial(self) -> bool:
        """Whether the answer covers only what completed before the user stopped the run."""
        decision = self.rounds[-1].decision if self.rounds else None
        return bool(decision and decision.partial)

    @property
    def follow_ups(self) -> list[str]:
        """Follow-ups a plan or the final answer has seen; ``pending_follow_ups`` holds those still waiting."""
        return list(self.state.follow_ups)

    @property
    def pending_follow_ups(self) -> list[str]:
        """Follow-ups no plan and no answer has seen yet."""
        return list(self.control.pending)

    @property
    def error(self) -> str | None:
        """Why the run failed."""
        return self.state.error

    @property
    def rounds(self) -> list[RoundRecord]:
        """Every round so far."""
        return self.state.rounds

    @property
    def plan(self) -> ExecutionPlan | None:
        """The latest round's plan."""
        return self.state.rounds[-1].plan if self.state.rounds else None

    @property
    def steps(self) -> dict[str, PlanStep]:
        """The latest round's steps by id."""
        return {step.id: step for step in self.plan.steps} if self.plan else {}

    @property
    def analysis(self) -> AnalysisResult | None:
        """The latest verdict."""
        for record in reversed(self.state.rounds):
            if record.analysis is not None:
                return record.analysis
        return None

    @property
    def achieved(self) -> bool:
        """Whether the latest verdict says the goal was reached."""
        return self.analysis.achieved if self.analysis else False

    @property
    def confidence(self) -> float:
        """The latest verdict's confidence."""
        return self.analysis.confidence if self.analysis else 0.0

    @property
    def calls(self) -> list[LLMCall]:
        """Every LLM call, in order."""
        return self.state.calls

    @property
    def usage(self) -> Usage:
        """Tokens and cost of every call."""
        return self.state.usage

    @property
    def cost(self) -> float | None:
        """USD spent (litellm pricing); None when no call's price is known."""
        return self.usage.cost

    def usage_by(self, key: Literal["purpose", "round", "step"]) -> dict[Any, Usage]:
        """Usage grouped by purpose, round, or step (``(round, step_id)``; calls outside steps are left out)."""
        groups: dict[Any, Usage] = {}
        for call in self.state.calls:
            if key == "purpose":
                group: Any = call.purpose
            elif key == "round":
                group = call.round
            elif call.step_id is not None:
                group = (call.round, call.step_id)
            else:
                continue
            groups[group] = groups.get(group, Usage()) + call.usage
        return groups

    def __repr__(self) -> str:
        goal = self.goal if len(self.goal) <= 60 else f"{self.goal[:57]}..."
        steps = self.steps.values()
        completed = sum(step.status == "completed" for step in steps)
        return (
            f"<DagRun {self.status}: {goal!r} rounds={len(self.rounds)} "
            f"steps={completed}/{len(steps)} completed achieved={self.achieved} confidence={self.confidence:.2f}>"
        )
