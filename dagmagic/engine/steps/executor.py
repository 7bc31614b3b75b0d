"""The executor: runs a plan's steps as soon as their dependencies complete, at most N at once.

Dispatch is event-driven: each step keeps a count of unfinished dependencies, and the step that
completes last starts its dependents on the spot (no polling, no level barrier). Ready steps start in
plan order; a FIFO semaphore holds the concurrency limit, and ``started`` means a slot was acquired.

A step that fails with a ``transient`` error is tried again as its ``RetryPolicy`` says (at once, then after
growing delays, its slot free meanwhile: status ``retrying`` with ``retry_at``; ``retry_now`` cuts a wait
short), then fails for good. Steps already completed when execution begins (a resumed run) count as done.

Failure never spreads sideways: a failed step's dependents are skipped (naming it), independent branches go
on; only an exception of a ``fatal`` type (a provider refusing the key, say: every other step would meet it
too) ends the plan: running steps are cancelled and the exception is raised. A stop event skips every step not
yet started while running ones finish; so does ``halt`` (the run's cost budget is spent), and so does a step
raising an exception of a ``halting`` type (it ends cancelled, in its words); cancellation cancels running
steps, waits for them, marks them cancelled and re-raises. Anything else a step raises fails that step, a
``BaseException`` that is not an ``Exception`` too (a ``KeyboardInterrupt`` from a tool must not stop the
event loop).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Final

from dagmagic._secrets import mask_secrets
from dagmagic.engine.steps.deadlines import StepDeadlines
from dagmagic.engine.steps.retries import RetryPolicy
from dagmagic.events import Event, StepCompleted, StepQueued, StepRetrying, StepStarted
from dagmagic.models import ExecutionPlan, PlanStep, StepStatus

__all__ = [
    "FOLLOWED_UP_REASON",
    "SKIPPED_BY_USER",
    "STOPPED_REASON",
    "BeforeStep",
    "DagExecutor",
    "RunStep",
    "StepFailure",
]

STOPPED_REASON: Final = "Skipped — you stopped the run"
FOLLOWED_UP_REASON: Final = "Skipped — your follow-up changed the goal"

RunStep = Callable[[PlanStep, dict[str, PlanStep]], Awaitable[str]]
"""Runs one step given its completed dependencies (by reference: ``s1`` or ``r1.s2``); returns its result."""
BeforeStep = Callable[[PlanStep, dict[str, PlanStep]], Awaitable[bool]]
"""Called when a step is ready, before it takes a slot (a breakpoint waits here); False skips the step."""
SKIPPED_BY_USER: Final = "Skipped by the user"

_UNSTARTED: Final = ("pending", "queued", "paused")
_ENDED_BADLY: Final = ("failed", "skipped", "cancelled")


class StepFailure(Exception):
    """Raised by a step that failed but has partial notes worth keeping (the analyzer and replanner see them)."""

    def __init__(self, reason: str, notes: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.notes = notes


class DagExecutor:
    """Executes one plan; ``earlier`` maps ``rN.id`` references to steps of earlier rounds."""

    def __init__(
        self,
        plan: ExecutionPlan,
        run_step: RunStep,
        *,
        max_concurrency: int,
        step_timeout: float,
        emit: Callable[[Event], object] | None = None,
        stop: asyncio.Event | None = None,
        earlier: Mapping[str, PlanStep] | None = None,
        open_ended: bool = False,
        fatal: tuple[type[BaseException], ...] = (),
        transient: tuple[type[BaseException], ...] = (),
        retries: RetryPolicy | None = None,
        before_step: BeforeStep | None = None,
        stop_reason: Callable[[], str] | None = None,
        halting: tuple[type[BaseException], ...] = (),
    ) -> None:
        """``open_ended``: the plan is still arriving; ``add()`` its steps, ``close()`` when it is whole.
        ``fatal``: exception types that end the whole plan when a step raises one; ``transient``: those that
        get the step tried again as ``retries`` says (no retries without a policy). ``stop_reason``: why the
        steps ``stop`` skips were skipped (a Stop's reason, or a follow-up's), asked when it skips them.
        ``halting``: exception types that mean nothing more may start (``halt`` with the exception's words).
        """
        self.plan = plan
        self.run_step = run_step
        self.step_timeout = step_timeout
        self.emit = emit or (lambda event: None)
        self.stop = stop or asyncio.Event()
        self._stop_reason = stop_reason or (lambda: STOPPED_REASON)
        self.earlier = dict(earlier or {})
        self._slots = asyncio.Semaphore(max_concurrency)
        self._steps = {step.id: step for step in plan.steps}  # plan order: the order ready steps start in
        self._dependents: dict[str, list[str]] = {sid: [] for sid in self._steps}
        self._waiting: dict[str, int] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._all_settled = asyncio.Event()
        self._cancelling = False
        self._closed = not open_ended
        self._fatal_types = fatal
        self._halting_types = halting
        self._halted: str | None = None  # why nothing more starts (a step's status says it as "Skipped — why")
        self._fatal: BaseException | None = None
        self._transient_types = transient
        self.retries = retries or RetryPolicy(immediate=0, delays=())
        self.before_step = before_step
        self._wakeups: dict[str, asyncio.Event] = {}  # steps waiting for a delayed retry
        self._withdrawn: set[int] = set()  # ids of step objects taken out of the plan: they report nothing
        self._deadlines = StepDeadlines(step_timeout)

    async def execute(self) -> ExecutionPlan:
        """Run every step that can run; return the plan with every step in a final state."""
        blocked = self._index_dependencies()
        watcher = asyncio.create_task(self._watch_stop(), name="dagmagic:stop-watcher")
        try:
            for sid, reason in blocked.items():
                self._finish(self._steps[sid], "skipped", reason)
            for sid, step in self._steps.items():
                if self._too_late() is not None:
                    break
                if step.status == "pending" and self._waiting[sid] == 0:
                    self._dispatch(step)
                elif step.status == "retrying":  # a resumed run: it waits out what is left of its delay
                    self._tasks[sid] = asyncio.create_task(self._run(step, resumed=True), name=f"dagmagic:step:{sid}")
            if (late := self._too_late()) is not None:
                self._skip_unstarted(late)
            self._settle_if_done()
            await self._all_settled.wait()
            if self._fatal is not None:
                await self._cancel_all()
                raise self._fatal
        except asyncio.CancelledError:
            await self._cancel_all()
            raise
        finally:
            self._deadlines.close()
            watcher.cancel()
            await asyncio.wait([watcher])  # it ends with the execution: no task of it is left pending
        for step in self._steps.values():
            if step.status in _UNSTARTED:  # only a plan that skipped validation can get here
                waiting_on = [d for d in step.dependencies if self._status_of(d) != "completed"]
                self._finish(step, "failed", f"Could not run: dependencies {', '.join(waiting_on)} never completed")
        return self.plan

    def add(self, step: PlanStep) -> None:
        """Add a step to an open-ended plan and start it if it can run. Its dependencies must already be in
        the plan (or be completed results of earlier rounds): then it cannot close a cycle.
        """
        if self._closed:
            raise RuntimeError("the plan is closed: no step can be added")
        if step.id in self._steps:
            raise ValueError(f"step {step.id!r} is already in the plan")
        unknown = [d for d in step.dependencies if d not in self._steps and d not in self.earlier]
        if unknown:
            raise ValueError(f"step {step.id!r} depends on {', '.join(unknown)}, which are not in the plan yet")
        if not any(existing is step for existing in self.plan.steps):
            self.plan.steps.append(step)
        self._steps[step.id] = step
        self._dependents[step.id] = []
        blocked = None
        waiting = 0
        for dep in dict.fromkeys(step.dependencies):
            status = self._status_of(dep)
            if status in ("failed", "skipped", "cancelled") or (dep not in self._steps and status != "completed"):
                blocked = blocked or f"Skipped — dependency {dep} {status}"
            elif status != "completed":
                waiting += 1
                self._dependents[dep].append(step.id)
        self._waiting[step.id] = waiting
        if blocked is not None:
            self._finish(step, "skipped", blocked)
        elif self._fatal is not None:
            self._finish(step, "cancelled", "Cancelled before it started")
        elif (late := self._too_late()) is not None:
            self._finish(step, "skipped", late)
        elif waiting == 0:
            self._dispatch(step)

    def withdraw(self, step_id: str) -> None:
        """Take a step out of an open-ended plan (a new plan replaces it): cancelled if it was started.
        Steps that depend on it must be withdrawn first.
        """
        step = self._steps.pop(step_id)
        self.plan.steps.remove(step)
        self._waiting.pop(step_id, None)
        self._dependents.pop(step_id, None)
        for children in self._dependents.values():
            if step_id in children:
                children.remove(step_id)
        self._withdrawn.add(id(step))
        task = self._tasks.pop(step_id, None)
        if task is not None:
            task.cancel()  # it ends cancelled, quietly; nothing waits on it any more
        self._settle_if_done()

    def close(self) -> None:
        """The plan is whole: ``execute()`` returns once its steps have settled."""
        self._closed = True
        self._settle_if_done()

    def _settle_if_done(self) -> None:
        if not self._tasks and self._closed and not self._cancelling:
            self._all_settled.set()

    def _index_dependencies(self) -> dict[str, str]:
        """Count each step's dependencies inside the plan; return the steps an earlier round's result blocks."""
        blocked: dict[str, str] = {}
        for sid, step in self._steps.items():
            if sid in self._waiting:  # added (and counted) while the plan streamed, before execution began
                continue
            inner = [d for d in dict.fromkeys(step.dependencies) if d in self._steps]
            unfinished = [d for d in inner if self._steps[d].status != "completed"]  # a resumed run's are done
            self._waiting[sid] = len(unfinished)
            for dep in unfinished:
                self._dependents[dep].append(sid)
            if step.status != "pending":
                continue
            for dep in step.dependencies:
                status = self._status_of(dep)
                if status in _ENDED_BADLY or (dep not in self._steps and status != "completed"):
                    blocked.setdefault(sid, f"Skipped — dependency {dep} {status}")
        return blocked

    def _status_of(self, dependency: str) -> StepStatus | str:
        step = self._steps.get(dependency) or self.earlier.get(dependency)
        return step.status if step is not None else "unknown"

    def _dispatch(self, step: PlanStep) -> None:
        step.status = "queued"
        step.queued_at = time.time()
        self.emit(StepQueued(round=self.plan.round, step_id=step.id))
        self._tasks[step.id] = asyncio.create_task(self._run(step), name=f"dagmagic:step:{step.id}")

    async def _run(self, step: PlanStep, *, resumed: bool = False) -> None:
        try:
            if resumed and not await self._wait_to_retry(step):
                return
            if not resumed and self.before_step is not None:
                dependencies = {d: self._steps.get(d) or self.earlier[d] for d in step.dependencies}
                go_on = await self.before_step(step, dependencies)
                if step.status not in ("queued", "paused"):  # a stop skipped it meanwhile
                    return
                if not go_on:
                    self._finish(step, "skipped", SKIPPED_BY_USER)
                    return
                step.status = "queued"
            while True:
                async with self._slots:
                    if step.status != "queued":  # skipped by a stop while it waited for a slot
                        return
                    delay = await self._run_started(step)
                    while delay == 0.0:  # an immediate retry keeps the slot
                        self._schedule_retry(step, 0.0)
                        delay = await self._run_started(step)
                if delay is None:
                    return
                self._schedule_retry(step, delay)
                if not await self._wait_to_retry(step):
                    return
        finally:
            if self._tasks.get(step.id) is asyncio.current_task():  # a withdrawn step's id may be reused
                del self._tasks[step.id]
            self._settle_if_done()

    async def _run_started(self, step: PlanStep) -> float | None:
        """One try of a started step; the seconds to wait before the next try, or None when it is done."""
        step.status = "running"
        step.retry_at = None
        step.started_at = time.time()
        step.attempts += 1
        self.emit(StepStarted(round=self.plan.round, step_id=step.id, model=step.model))
        dependencies = {d: self._steps.get(d) or self.earlier[d] for d in step.dependencies}
        try:
            async with asyncio.timeout(None) as deadline:
                self._deadlines.add(step.id, deadline)
                try:
                    result = await self.run_step(step, dependencies)
                finally:
                    self._deadlines.discard(step.id)
        except asyncio.CancelledError:
            self._finish(step, "cancelled", "Cancelled")
            raise
        except TimeoutError as exc:
            if deadline.expired():
                self._finish(step, "failed", f"timed out after {self.step_timeout:g}s")
            else:  # the step's own TimeoutError (e.g. an HTTP client's): an ordinary failure
                self._finish(step, "failed", f"{type(exc).__name__}: {exc}")
        except StepFailure as failure:
            self._finish(step, "failed", mask_secrets(failure.reason), result=failure.notes)
        except self._fatal_types as exc:
            self._finish(step, "failed", mask_secrets(f"{type(exc).__name__}: {exc}"))
            if self._fatal is None:
                self._fatal = exc
                self._all_settled.set()  # execute() wakes, cancels the rest and raises it
        except self._transient_types as exc:
            step.failures += 1
            step.error = mask_secrets(f"{type(exc).__name__}: {exc}")
            delay = self.retries.delay_after(step.failures)
            if delay is not None:
                return delay
            self._finish(step, "failed", f"Failed for good after {step.failures} tries: {step.error}")
        except Exception as exc:
            self._failed(step, exc)
        except BaseException as exc:  # KeyboardInterrupt, GeneratorExit, a library's own: left to propagate it
            # would stop the event loop (KeyboardInterrupt) or end the task with the step still "running"
            detail = f" ({exc})" if str(exc) else ""
            reason = f"the step was stopped by {type(exc).__name__}{detail}, which is not an Exception"
            self._finish(step, "failed", mask_secrets(reason))
        else:
            self._finish(step, "completed", None, result=result)
        return None

    def _failed(self, step: PlanStep, exc: Exception) -> None:
        """A step raised ``exc``: it failed, or, for a ``halting`` exception, it was cancelled and nothing more
        starts (halted first: its dependents are skipped for the same reason).
        """
        if isinstance(exc, self._halting_types):
            self.halt(str(exc))
            self._finish(step, "cancelled", f"Cancelled — {exc}")
        else:
            self._finish(step, "failed", mask_secrets(f"{type(exc).__name__}: {exc}"))

    def _too_late(self) -> str | None:
        """Why a step may not start now (the round was stopped, or the run halted); None when it may."""
        if self.stop.is_set():
            return self._stop_reason()
        return f"Skipped — {self._halted}" if self._halted is not None else None

    def _schedule_retry(self, step: PlanStep, delay: float) -> None:
        step.status = "retrying"
        step.retry_at = time.time() + delay
        self.emit(
            StepRetrying(
                round=self.plan.round,
                step_id=step.id,
                failures=step.failures,
                retry_at=step.retry_at,
                error=step.error or "",
            )
        )

    async def _wait_to_retry(self, step: PlanStep) -> bool:
        """Wait, slot free, until the step's ``retry_at`` (or ``retry_now``); False when a stop ended it."""
        wake = self._wakeups.setdefault(step.id, asyncio.Event())
        wake.clear()
        try:
            remaining = (step.retry_at or 0.0) - time.time()
            if remaining > 0 and not self.stop.is_set():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(remaining):
                        await wake.wait()
        except asyncio.CancelledError:
            self._finish(step, "cancelled", "Cancelled while waiting to retry")
            raise
        finally:
            self._wakeups.pop(step.id, None)
        step.retry_at = None
        if self.stop.is_set() or self._halted:
            why = self._halted or "the run was stopped"
            self._finish(step, "failed", f"{step.error} (not tried again: {why})")
            return False
        step.status = "queued"
        return True

    def step(self, step_id: str) -> PlanStep | None:
        """The plan's step ``step_id``, if it has one."""
        return self._steps.get(step_id)

    def halt(self, reason: str) -> None:
        """Start nothing more (``reason``: why, as ``the cost budget of 0.05 USD was reached``): steps not started
        are skipped saying it, steps waiting to retry are not tried again; running ones finish.
        """
        if self._halted is None:
            self._halted = reason
        self._skip_unstarted(f"Skipped — {self._halted}")
        for wake in self._wakeups.values():
            wake.set()

    def retry_now(self, step_id: str) -> bool:
        """Cut short the wait of a step waiting for a delayed retry; False when it is not waiting."""
        wake = self._wakeups.get(step_id)
        if wake is None:
            return False
        wake.set()
        return True

    def _finish(self, step: PlanStep, status: StepStatus, error: str | None, *, result: str | None = None) -> None:
        """Put a step in a final state, then release or skip its dependents."""
        step.status = status
        step.error = error
        if id(step) in self._withdrawn:
            return
        if result is not None:
            step.result = result
        step.completed_at = time.time()
        self.emit(StepCompleted(round=self.plan.round, step_id=step.id, status=status, error=error))
        if self._cancelling:
            return
        for child_id in self._dependents.get(step.id, ()):
            child = self._steps[child_id]
            if child.status != "pending":
                continue
            if (late := self._too_late()) is not None:
                self._finish(child, "skipped", late)
            elif status != "completed":
                self._finish(child, "skipped", f"Skipped — dependency {step.id} {status}")
            else:
                self._waiting[child_id] -= 1
                if self._waiting[child_id] == 0:
                    self._dispatch(child)

    async def _watch_stop(self) -> None:
        await self.stop.wait()
        self._skip_unstarted()
        for wake in self._wakeups.values():  # a step waiting to retry is not tried again
            wake.set()

    def _skip_unstarted(self, reason: str | None = None) -> None:
        for step in self._steps.values():
            if step.status in _UNSTARTED:
                self._finish(step, "skipped", reason or self._stop_reason())

    async def _cancel_all(self) -> None:
        self._cancelling = True
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for step in self._steps.values():
            if step.status in _UNSTARTED:
                self._finish(step, "cancelled", "Cancelled before it started")
