"""A run on Temporal's workers, seen from a notebook (``session.start(goal, on=…)``, ``%%dag --on``, ``%dag attach``).

The run lives on a worker; this process follows it through the run store they share (``DagRun.mirror``: the
widget and every view see it as if it ran here) and sends the user's messages — Stop, follow-up, approve, reject,
breakpoints, a paused step's word, Cancel — to its workflow as signals, which the worker hands to the run's inbox.
A re-run or a what-if of the ended run starts its workflow again, and the worker reopens the run from the store.
The kernel may die meanwhile: the run goes on, and ``attach`` in any kernel follows it again, with its controls.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from dagmagic.engine import DagRun
from dagmagic.errors import DagError
from dagmagic.evaluation.configs import _NOT_DEFINING
from dagmagic.events import Event, RunFinished
from dagmagic.messages import Message, Rerun
from dagmagic.models import Exchange, RunState
from dagmagic.settings import DagSettings
from dagmagic.temporal.address import TemporalAddress
from dagmagic.temporal.connection import connect
from dagmagic.temporal.tasks import RUN_WORKFLOW, RunTask, run_workflow_id

if TYPE_CHECKING:
    from temporalio.client import Client, WorkflowHandle

    from dagmagic.store import RunStore

__all__ = ["FOLLOW_SECONDS", "DetachedRun", "attach", "start_detached"]

log = logging.getLogger("dagmagic")

FOLLOW_SECONDS = 0.25
"""How often the notebook reads a detached run back from the store, and sends the messages waiting for it."""
_WORKFLOW_EVERY = 8
"""Every how many reads the workflow itself is asked whether it still runs (one that failed before its run was
stored would otherwise be waited for forever)."""


class DetachedRun(DagRun):
    """A run driven by a worker on Temporal, followed here from the run store; its controls reach it as signals."""

    def __init__(
        self,
        state: RunState,
        *,
        address: TemporalAddress,
        store: RunStore,
        events: Sequence[Event] = (),
        start: RunTask | None = None,
    ) -> None:
        super().__init__(state, events=list(events))
        self.address = address
        """The Temporal service whose workers drive the run."""
        self._source = store
        self._outbox: list[Message] = []
        self._start: RunTask | None = start
        self._stale = len(self.events) if start is not None else -1
        """What the store holds before the worker (re)started the run: not read as the run's state."""
        self._task = asyncio.get_running_loop().create_task(self._follow(), name=f"dagmagic:detached:{self.run_id}")

    # --- the user's messages

    def send(self, message: Message) -> bool:
        """Send ``message`` to the run's workflow (a re-run or a what-if of the ended run: start it again)."""
        message.check()
        if isinstance(message, Rerun):
            self._rerun(message)
            return True
        if self.done():
            raise DagError(
                f"run {self.run_id} has ended ({self.status}); re-run a step (`run.rerun('s1')`) or start a new run"
            )
        self._outbox.append(message)
        return True

    def _rerun(self, message: Rerun) -> None:
        if not self.done():
            raise DagError(f"run {self.run_id} is still running: a step can be re-run once it has ended")
        if message.step not in self.steps:
            known = ", ".join(self.steps) or "none"
            raise DagError(f"no step {message.step!r} in the latest round (its steps: {known})")
        self._start = RunTask(
            run_id=self.run_id,
            goal=self.goal,
            on=self.address.url,
            rerun=message.model_dump_json(),
        )
        self._stale = len(self.events)
        self.state.status, self.state.finished_at, self.state.error = "running", None, None
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._follow(), name=f"dagmagic:detached:{self.run_id}")

    @property
    def awaiting_approval(self) -> bool:
        """Whether a plan waits for ``approve()`` or ``reject()`` (as the worker's run says)."""
        return not self.done() and self.state.phase == "awaiting_approval"

    @property
    def follow_up_outlook(self) -> str:
        """What a follow-up sent now would do (the worker's run decides; see ``DagRun.follow_up_outlook``)."""
        from dagmagic.engine.run.inbox import FOLLOW_UP_OUTLOOK

        return "" if self.done() else FOLLOW_UP_OUTLOOK.get(self.state.phase, "")

    @property
    def can_rerun(self) -> bool:
        """Whether a step can be re-run now: the run ended (a worker reopens it)."""
        return self.done()

    # --- following it

    async def _follow(self) -> None:
        """Start (or restart) the workflow when asked, send the waiting messages, read the run back; until it ended."""
        try:
            client = await connect(self.address)
            reads = 0
            while True:
                if self._start is not None:
                    await self._launch(client, self._start)
                    self._start = None
                handle = client.get_workflow_handle(run_workflow_id(self.run_id))
                await self._send_waiting(handle)
                self._read()
                reads += 1
                if self.done():
                    return
                if reads % _WORKFLOW_EVERY == 0:
                    await self._check_workflow(handle)
                    if self.done():
                        return
                await asyncio.sleep(FOLLOW_SECONDS)
        except DagError as exc:
            self._end_here("failed", str(exc))

    async def _launch(self, client: Client, task: RunTask) -> None:
        from temporalio.common import WorkflowIDConflictPolicy

        await client.start_workflow(
            RUN_WORKFLOW,
            task,
            id=run_workflow_id(self.run_id),
            task_queue=self.address.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
        )

    async def _send_waiting(self, handle: WorkflowHandle[Any, Any]) -> None:
        from temporalio.service import RPCError

        while self._outbox:
            message = self._outbox.pop(0)
            try:
                await handle.signal("message", message.model_dump_json())
            except RPCError as exc:  # its workflow ended meanwhile: nothing reads it any more
                log.warning("[dagmagic] run %s: %s not delivered (%s)", self.run_id, message.type, exc)

    def _read(self) -> None:
        """The run as the store holds it now, once the worker has written it (and past what it held before)."""
        try:
            stored = self._source.load(self.run_id)
        except KeyError:
            return
        if len(stored.events) <= self._stale:
            return
        self._stale = -1
        if len(stored.events) != len(self.events) or stored.state.status != self.state.status:
            self.mirror(stored.state, stored.events)

    async def _check_workflow(self, handle: WorkflowHandle[Any, Any]) -> None:
        """A workflow that closed without the run ending in the store (refused by the workers, terminated in
        Temporal's UI): the run ends here with its reason.
        """
        from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError

        description = await handle.describe()
        if description.status == WorkflowExecutionStatus.RUNNING:
            return
        self._read()
        if self.done():
            return
        try:
            await handle.result()
            reason = "its workflow ended, but the run was never stored as ended"
        except WorkflowFailureError as exc:
            cause = exc.cause
            reason = str(getattr(cause, "cause", None) or cause)
        self._end_here("failed", f"the run's workflow on {self.address} ended: {reason}")

    def _end_here(self, status: str, error: str) -> None:
        if self.done():
            return
        self.state.status, self.state.error, self.state.finished_at = "failed", error, time.time()
        self.inbox.finish()
        self.emit(RunFinished(status="failed", achieved=False, confidence=0.0, error=error))


def start_detached(
    address: TemporalAddress,
    goal: str,
    store: RunStore | None,
    *,
    history: Sequence[Exchange] = (),
    settings: DagSettings | None = None,
    approve_plans: bool = False,
    step_through: bool = False,
) -> DetachedRun:
    """Send ``goal`` to the workers at ``address`` as a new run (planned in ``history``); the run, followed here."""
    if store is None:
        raise DagError(
            "a run on Temporal's workers is followed through a run store the notebook and the workers share "
            "(DAG_STORE: a PostgreSQL URL, or a path every worker reaches); this session has none"
        )
    run_id = uuid.uuid4().hex[:12]
    changed = {k: v for k, v in (settings or DagSettings()).non_defaults().items() if k not in _NOT_DEFINING}
    task = RunTask(
        run_id=run_id,
        goal=goal,
        on=address.url,
        history=[(exchange.goal, exchange.answer) for exchange in history],
        settings=changed or None,
        approve_plans=approve_plans or None,
        step_through=step_through or None,
    )
    state = RunState(run_id=run_id, goal=goal, started_at=time.time(), detached_on=address.url)
    return DetachedRun(state, address=address, store=store, start=task)


def attach(run_id: str, store: RunStore, on: str | None = None) -> DetachedRun:
    """Follow again the run ``run_id`` that Temporal's workers drive (its address read from the store unless
    ``on`` names it): live while it runs, with its controls; read back when it ended (a step can be re-run).
    """
    try:
        stored = store.load(run_id)
    except KeyError:
        raise DagError(f"no run {run_id!r} in the run store {store.path}") from None
    where = on or stored.state.detached_on
    if where is None:
        raise DagError(
            f"run {run_id} was not started on Temporal's workers; show it with `%dag show {run_id}` "
            f"or `dagmagic.load_run({run_id!r})`, resume it with `%dag resume {run_id}`"
        )
    return DetachedRun(stored.state, address=TemporalAddress.parse(where), store=store, events=stored.events)
