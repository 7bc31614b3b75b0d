"""``DagRun``: one goal being pursued: its state, its event log, the user's messages to it, and queries.

Everything the user does to a run is a message (``dagmagic.messages``) given to ``send``; the control
methods (``stop()``, ``follow_up()``, ``approve()``...) are one-liners over it, and the run's inbox
(``dagmagic.engine.run.inbox``) says what each does in each phase. What drives the run (a ``DagSession``'s
driver, in practice) is given at construction; the rest of the class only reads.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Generator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeGuard, cast

from dagmagic._secrets import mask_secrets
from dagmagic.engine.run.inbox import FOLLOW_UP_OUTLOOK, NOT_ENDED, Inbox
from dagmagic.engine.run.queries import RunQueries
from dagmagic.errors import DagError, RunFailedError
from dagmagic.events import (
    CallProgress,
    Event,
    LLMCallRecorded,
    PlanReady,
    RunFinished,
    RunWarning,
    StepPaused,
    StepPlanned,
)
from dagmagic.llm.registry import STANDARD_ROLES, ModelRegistry
from dagmagic.messages import (
    Approve,
    BreakBefore,
    Cancel,
    ClearBreakpoints,
    Continue,
    FollowUp,
    Message,
    Reject,
    Rerun,
    RetryNow,
    Skip,
    Step,
    Stop,
)
from dagmagic.models import (
    ExecutionPlan,
    LLMCall,
    PlanStep,
    RoundRecord,
    RunState,
)

if TYPE_CHECKING:
    from dagmagic.messages import Origin
    from dagmagic.models import Exchange

__all__ = ["DagRun", "Listener", "RunDriver", "RunRecorder"]

log = logging.getLogger("dagmagic")

Listener = Callable[[Event], object]

WAKE_EVERY = 0.1
"""Seconds between wake-ups of the event loop while something awaits a run."""


class RunDriver(Protocol):
    """What drives a run: it starts the run's task from an origin (a new run, a resume, a re-run)."""

    @property
    def registry(self) -> ModelRegistry:
        """The models the run's steps may be re-run on."""
        ...

    @property
    def history(self) -> list[Exchange]:
        """The conversation the run is planned in (its planner sees it)."""
        ...

    def start(self, run: DagRun, origin: Origin) -> asyncio.Task[None]:
        """Start driving ``run`` from ``origin`` as a task on the running loop."""
        ...

    def start_fork(self, run: DagRun, at: str, **options: Any) -> DagRun:
        """Start a new run from ``run``'s state at step ``at`` (``DagSession.start_fork``)."""
        ...


class RunRecorder(Protocol):
    """What a run asks of the store that saves it (``dagmagic.store.RunStore`` is one): the run never imports it."""

    def attach(self, run: DagRun, history: list[Exchange]) -> None:
        """Save ``run`` from now on (``history``: the conversation it is planned in)."""
        ...

    def record(self, run: DagRun, event: Event) -> None:
        """Save what ``event`` changed, and the event."""
        ...

    async def settle(self, run: DagRun) -> None:
        """Wait until what ``run`` did is written."""
        ...


class DagRun(RunQueries):
    """A goal being pursued. Await it for the finished run; read it at any time for where it stands.

    ``driver`` drives it (``origin``: where it starts now; None: not yet, or only when a step is re-run);
    ``step_through`` pauses before every step. A run read back from the store is ``read_only``.
    """

    def __init__(
        self,
        state: RunState,
        *,
        events: list[Event] | None = None,
        read_only: bool = False,
        driver: RunDriver | None = None,
        origin: Origin | None = None,
        step_through: bool = False,
    ) -> None:
        self.state = state
        self.events: list[Event] = list(events or [])
        self.warnings: list[str] = [event.message for event in self.events if _about_the_whole_run(event)]
        """What the user should know about the whole run (it is not saved, code runs without a sandbox, a model
        did not answer); a round's and a step's warnings are on the round and the step."""
        self.calls_under_way: dict[tuple[str, int | None, str | None, float], CallProgress] = {}
        """The run's own LLM calls sent and not ended yet, by (purpose, round, step, when sent): how much of each
        reply has arrived."""
        self.exception: BaseException | None = None
        """The unexpected exception that failed the run, if one did (the run's ``error`` describes it)."""
        self.read_only = read_only
        """A run read back from the store (``dagmagic.load_run``): to continue it, ``session.resume(run_id)``."""
        self.inbox = Inbox(
            state,
            self.emit,
            cancel=self._cancel_task,
            check_rerun=self._check_rerun,
            relaunch=self._relaunch,
            step_through=step_through,
        )
        """Where the user's messages arrive; the goal loop reads the user's word from it."""
        self._listeners: list[Listener] = []
        self._steps_by_round = {(record.index, step.id): step for record in state.rounds for step in record.plan.steps}
        self._store: RunRecorder | None = None
        self._pauses: dict[tuple[int, str], StepPaused] = {}
        self._driver = driver
        self._task: asyncio.Task[None] | None = None
        for step in self._steps_by_round.values():  # a run read back: its steps' subruns, read back too
            if step.subrun_state is not None and step.subrun is None:
                step.attach_subrun(DagRun(step.subrun_state, read_only=True))
        if driver is not None and origin is not None:
            self._drive(origin)

    # --- the event stream -------------------------------------------------------------------------

    def emit(self, event: Event) -> None:
        """Record an event, fold it into the state, give what it changed to the store, and only then tell every
        listener (a step's result is written before anything that happened after it; anyone reading through
        the store sees it).
        """
        self.events.append(event)
        self._fold(event)
        if self._store is not None:
            self._save(event)
        self._tell(event)

    def _tell(self, event: Event) -> None:
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception:  # a broken view must never break the run
                log.exception("[dagmagic] a run listener failed on %s", event.type)

    def _fold(self, event: Event) -> None:
        """What the run keeps from an event besides the event itself."""
        if isinstance(event, LLMCallRecorded | CallProgress):
            self._fold_call(event)
        elif event.depth:  # the rest of a subrun's events are its own state's
            return
        elif isinstance(event, PlanReady):
            for step in event.plan.steps:
                self._steps_by_round[(event.round, step.id)] = step
        elif isinstance(event, StepPlanned):
            self._steps_by_round[(event.round, event.step.id)] = event.step
        elif isinstance(event, StepPaused):
            self._pauses[(event.round, event.step_id)] = event
        elif isinstance(event, RunWarning) and event.round is not None:
            for record in self.state.rounds:
                if record.index == event.round:
                    _fold_warning(record, event)
        elif _about_the_whole_run(event):
            self.warnings.append(event.message)

    def _fold_call(self, event: LLMCallRecorded | CallProgress) -> None:
        """A call's record (a subrun's too: it counts here, under its step path), or how far one under way is."""
        if isinstance(event, LLMCallRecorded):
            call = event.call
            self._record_call(call)
            self.calls_under_way.pop((call.purpose, call.round, call.step_id, call.started_at), None)
        elif not event.depth:
            self.calls_under_way[(event.purpose, event.round, event.step_id, event.started_at)] = event

    def save_to(self, store: RunRecorder, history: list[Any]) -> None:
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
            self._unsaved(f"the run store failed ({exc}).")

    def _unsaved(self, reason: str) -> None:
        """The store can no longer write this run (``reason``): it goes on unsaved, and says so."""
        if self._store is not None:
            self._store = None
            self.emit(RunWarning(message=f"This run is no longer saved: {reason}", round=None))

    async def _settle_store(self) -> None:
        """Wait until what the run did is written and the store checkpointed (bounded: see ``RunStore.settle``)."""
        if self._store is not None:
            await self._store.settle(self)

    def mirror(self, state: RunState, events: Sequence[Event]) -> None:
        """Become the run as another process drives it and stores it: ``state`` as stored now, and ``events`` (the
        stored log) from the first this run has not seen, each told to the listeners as if it happened here. A
        view of the run (the widget, a comparison) follows it so, whoever drives it.
        """
        new = events[len(self.events) :]
        for field in RunState.model_fields:  # in place: the views and the inbox hold this state
            setattr(self.state, field, getattr(state, field))
        self._steps_by_round = {(record.index, step.id): step for record in state.rounds for step in record.plan.steps}
        for event in new:
            self.events.append(event)
            if isinstance(event, StepPaused):
                self._pauses[(event.round, event.step_id)] = event
            elif _about_the_whole_run(event):
                self.warnings.append(event.message)
            self._tell(event)

    def step_of(self, round: int, step_id: str) -> PlanStep | None:
        """The step ``step_id`` of round ``round`` (also while its plan still streams)."""
        return self._steps_by_round.get((round, step_id))

    def _record_call(self, call: LLMCall) -> None:
        self.state.calls.append(call)
        if call.step_id is not None and call.round is not None:
            step = self._steps_by_round.get((call.round, call.step_id.split("/")[0]))
            if step is not None:
                step.usage = step.usage + call.usage

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` with every future event; returns a function that unsubscribes it (and holds the
        listeners, not the run: a view keeping it does not keep the run alive).
        """
        listeners = self._listeners
        listeners.append(listener)
        return lambda: listeners.remove(listener) if listener in listeners else None

    # --- the user's messages ----------------------------------------------------------------------

    def send(self, message: Message) -> bool:
        """Give the run a message (``dagmagic.messages``): what it does depends on the phase the run is in
        (``dagmagic.engine.run.inbox.EFFECTS``). False when there was nothing to act on; ``DagError`` (or
        ``ValueError`` for a malformed message) says why one cannot be taken now.
        """
        if self.read_only and self.done():
            raise DagError(
                f"run {self.run_id} was read back from the run store and does not run here; take it back with "
                f"`session.reopen({self.run_id!r})` to re-run a step or edit a result, or fork it: "
                "`await run.fork(at='s1', ...)`."
            )
        if self.read_only:
            raise DagError(
                f"run {self.run_id} was read back from the run store and does not run here; "
                f"continue it with `await session.resume({self.run_id!r})` (or `%dag resume {self.run_id}`)."
            )
        return self.inbox.put(message)

    def stop(self) -> None:
        """Answer now: steps not started are skipped, running ones finish, no new round begins, and the answer
        is written from what completed (marked partial). Does nothing once the run has ended.
        """
        self.send(Stop())

    def follow_up(self, text: str) -> None:
        """Steer the run: ``text`` joins the goal; it is planned for in a new round or seen by the answer
        (no budget used). It wins over an earlier ``stop()``. ``follow_up_outlook`` says which, before it is sent.
        """
        self.send(FollowUp(text=text if isinstance(text, str) else ""))

    @property
    def follow_up_outlook(self) -> str:
        """What a follow-up sent now would do, in the user's words (the views' confirmation); "" once the run
        has ended (a follow-up is refused then).
        """
        return "" if self.done() or self.read_only else FOLLOW_UP_OUTLOOK.get(self.inbox.phase.name, "")

    def cancel(self) -> bool:
        """Abort now: running steps are cancelled and the run ends ``cancelled``. False if already done."""
        return self.send(Cancel())

    def retry_now(self, step_id: str) -> bool:
        """Try a step waiting for a delayed retry now instead of at its ``retry_at``; False when no step of the
        current round by that id is waiting.
        """
        return self.send(RetryNow(step=step_id))

    # --- debugging: approve a plan, pause before a step, re-run a step ----------------------------

    def approve(self, plan: ExecutionPlan | Sequence[PlanStep | Mapping[str, Any]] | None = None) -> None:
        """Run the plan waiting for approval, or ``plan`` instead (an edited one: an ``ExecutionPlan``, or its
        steps as ``PlanStep`` objects or dicts), checked like a model's plan first (``ValueError`` says what
        is wrong with it).
        """
        self.send(Approve(steps=_drafts(plan)))

    def reject(self, feedback: str) -> None:
        """Drop the plan waiting for approval and plan again, telling the planner ``feedback``."""
        self.send(Reject(feedback=feedback if isinstance(feedback, str) else ""))

    def break_before(self, *step_ids: str) -> None:
        """Pause before each of these steps runs (in any round), showing what it is about to send."""
        self.send(BreakBefore(steps=step_ids))

    def clear_breakpoints(self) -> None:
        """Remove every breakpoint and stop stepping through (paused steps stay paused until released)."""
        self.send(ClearBreakpoints())

    def resume_step(self, step_id: str | None = None, *, task: str | None = None) -> None:
        """Continue: run the paused step (``task``: an edited task for it) and go on to the next breakpoint."""
        self.send(Continue(step=step_id or next(iter(self.paused), None), task=task))

    def step_over(self, step_id: str | None = None, *, task: str | None = None) -> None:
        """Step: run the paused step, then pause again before the next step that becomes ready."""
        self.send(Step(step=step_id or next(iter(self.paused), None), task=task))

    def skip(self, step_id: str) -> None:
        """Skip a step: paused, it is skipped now; not started yet, it is skipped when it is ready. Its
        dependents are skipped too.
        """
        self.send(Skip(step=step_id))

    def start_rerun(self, step_id: str, *, task: str | None = None, model: str | None = None) -> DagRun:
        """Start re-running ``step_id`` of the latest round (``task``: a new task; ``model``: a role or a
        registered model's name) and every step downstream of it, in a new round that keeps the other
        results; then the run judges and answers again. Returns the run at once; ``await`` it for its end.
        """
        self.send(Rerun(step=step_id, task=task, model=model))
        return self

    async def rerun(self, step_id: str, *, task: str | None = None, model: str | None = None) -> DagRun:
        """Re-run ``step_id`` and what depends on it (see ``start_rerun``); the run once answered again."""
        return await self.start_rerun(step_id, task=task, model=model).wait(cancel_with_waiter=True)

    def start_what_if(self, step_id: str, *, result: str) -> DagRun:
        """Start a new round where ``step_id`` of the latest round said ``result`` (your text; the step does not
        run): the steps that depend on it run again, everything else is kept, then the run judges and answers
        again. The edit is recorded (``ResultEdited``; the step is ``edited``, its round ``what_if``). Returns the
        run at once; ``await`` it for its end. ``dagmagic.compare(run)`` then compares the round with the one
        before.
        """
        if not isinstance(result, str):
            raise TypeError(f"what_if() takes the step's new result as text, got {type(result).__name__}")
        self.send(Rerun(step=step_id, result=result))
        return self

    async def what_if(self, step_id: str, *, result: str) -> DagRun:
        """What if ``step_id`` had said ``result`` (see ``start_what_if``); the run once answered again."""
        return await self.start_what_if(step_id, result=result).wait(cancel_with_waiter=True)

    def start_fork(
        self,
        at: str,
        *,
        task: str | None = None,
        result: str | None = None,
        settings: Any = None,
        models: Any = None,
        session: Any = None,
    ) -> DagRun:
        """Start a NEW run from this run's state before its step ``at`` (or, with ``result``, after it: the step
        ended with that text), through the session that drove this run or ``session`` (a run read back has none):
        see ``DagSession.start_fork``. ``settings``/``models``: the fork's own instead of the session's. Returns the
        fork at once; ``await`` it.
        """
        options: dict[str, Any] = {"task": task, "result": result}
        options |= {name: value for name, value in (("settings", settings), ("models", models)) if value is not None}
        if session is not None:
            return cast("DagRun", session.start_fork(self, at, **options))
        if self._driver is None:
            raise DagError(
                f"run {self.run_id} was read back, so no session drives it here: fork it through one, "
                f"`await run.fork(at={at!r}, session=session)` or `await session.fork({self.run_id!r}, at={at!r})`"
            )
        return self._driver.start_fork(self, at, **options)

    async def fork(
        self,
        at: str,
        *,
        task: str | None = None,
        result: str | None = None,
        settings: Any = None,
        models: Any = None,
        session: Any = None,
    ) -> DagRun:
        """Fork this run at step ``at`` (see ``start_fork``); the fork once it ended (``forked.forked_from`` is this
        run's id; ``dagmagic.compare(run, forked)`` puts them side by side).
        """
        forked = self.start_fork(at, task=task, result=result, settings=settings, models=models, session=session)
        return await forked.wait(cancel_with_waiter=True)

    def _check_rerun(self, message: Rerun) -> None:
        act = "continue from an edited result" if message.result is not None else "re-run a step"
        if self._driver is None:
            raise DagError(
                f"this run was not started here, so it cannot {act}; take it back first with "
                f"`session.reopen({self.run_id!r})` (or fork it: `run.fork(at=...)`)"
            )
        if not self.done():
            raise DagError(NOT_ENDED[message.result is not None])
        if message.step not in self.steps:
            known = ", ".join(self.steps) or "none"
            raise DagError(f"no step {message.step!r} in the latest round (its steps: {known})")
        registry = self._driver.registry
        model = message.model
        if model is not None and model not in registry and model not in STANDARD_ROLES and not registry.has_role(model):
            names = ", ".join([*STANDARD_ROLES, *(entry.name for entry in registry)])
            raise DagError(f"no model or role {model!r}; choose one of: {names}")

    def _relaunch(self, message: Rerun) -> None:
        ended = self.state.status, self.state.finished_at, self.state.error
        self.state.status, self.state.finished_at, self.state.error = "running", None, None
        self.inbox.reopen()
        try:
            self._drive(message)
        except BaseException:  # not driven after all (another process drives the run now, say): it stays ended
            self.state.status, self.state.finished_at, self.state.error = ended
            self.inbox.finish()
            raise

    def _drive(self, origin: Origin) -> None:
        assert self._driver is not None
        self._task = self._driver.start(self, origin)
        self._task.add_done_callback(self._task_ended)

    def _task_ended(self, task: asyncio.Task[None]) -> None:
        """A task cancelled before it began (or broken before its loop) never ended the run: it ends here."""
        if self.state.status == "running" and task is self._task:
            self.state.status = "cancelled" if task.cancelled() else "failed"
            if not task.cancelled() and task.exception() is not None:
                self.exception = task.exception()
                self.state.error = mask_secrets(f"{type(self.exception).__name__}: {self.exception}")
            self.inbox.finish()
            self.emit(RunFinished(status=self.state.status, achieved=False, confidence=0.0, error=self.state.error))

    def _cancel_task(self) -> bool:
        if self._task is None or self._task.done():
            return False
        return self._task.cancel()

    @property
    def awaiting_approval(self) -> bool:
        """Whether a plan waits for ``approve()`` or ``reject()``."""
        return not self.read_only and self.inbox.phase.name == "awaiting_approval"

    @property
    def paused(self) -> list[str]:
        """The steps of the latest round paused at a breakpoint now, in the order they paused."""
        latest, steps = (self.rounds[-1].index if self.rounds else None), self.steps
        return [sid for (round, sid) in self._pauses if round == latest and steps[sid].status == "paused"]

    def about_to_send(self, step_id: str) -> StepPaused | None:
        """What a paused step of the latest round is about to send (its messages and tools), None when it
        is not paused.
        """
        step = self.steps.get(step_id)
        if step is None or step.status != "paused" or not self.rounds:
            return None
        return self._pauses.get((self.rounds[-1].index, step_id))

    @property
    def conversation(self) -> list[Exchange] | None:
        """The conversation the run was planned in, when it is driven in this process; None for a run read
        back (the store holds its conversation).
        """
        return list(self._driver.history) if self._driver is not None else None

    @property
    def can_rerun(self) -> bool:
        """Whether ``rerun()`` can re-run a step here now (the run ended, and was started in this process)."""
        return self.done() and not self.read_only and self._driver is not None

    def done(self) -> bool:
        """Whether the run has ended."""
        return self.state.status != "running"

    @property
    def driven(self) -> bool:
        """Whether a task drives the run now (it may still be ending after ``done()``)."""
        return self._task is not None and not self._task.done()

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
        if self._task is not None:
            # A wake-up can see the task done before its done callbacks (the session's: the answer joins the
            # history, older runs leave memory) have run; they were scheduled first, so one yield lets them.
            await asyncio.sleep(0)
        return self

    def __await__(self) -> Generator[Any, None, DagRun]:
        return self.wait().__await__()

    def raise_for_status(self) -> DagRun:
        """The run if it did not fail; ``RunFailedError`` (naming the cause) if it did."""
        if self.state.status == "failed":
            raise RunFailedError(self) from self.exception
        return self


def _drafts(plan: ExecutionPlan | Sequence[PlanStep | Mapping[str, Any]] | None) -> list[dict[str, Any]] | None:
    """An edited plan's steps as dicts (``approve``'s argument)."""
    if plan is None:
        return None
    items = plan.steps if isinstance(plan, ExecutionPlan) else plan
    if isinstance(items, Mapping):
        raise TypeError("approve() takes the plan's steps (a list), or an ExecutionPlan")
    return [item.model_dump() if isinstance(item, PlanStep) else dict(item) for item in items]


def _fold_warning(record: RoundRecord, event: RunWarning) -> None:
    """A round's warning: a note, or its plan cut to ``plan_max_steps`` (which the views say as such)."""
    if event.plan_cut is not None:
        record.plan_cut = event.plan_cut
    else:
        record.warnings.append(event.message)


def _about_the_whole_run(event: Event) -> TypeGuard[RunWarning]:
    return isinstance(event, RunWarning) and event.round is None and event.step_id is None and not event.depth
