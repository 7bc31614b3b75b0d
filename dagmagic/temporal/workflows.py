"""dagmagic's two workflows. Deterministic by Temporal's rules: they schedule activities and keep what the user
sent; the runs themselves happen in the activities (``activities.py``), on whichever worker takes them.

- ``ExperimentWorkflow``: one activity per cell, at most ``concurrency`` at once; a cell whose worker dies (its
  heartbeat stops) is retried on another, which resumes its run from the store.
- ``RunWorkflow``: a detached run's one activity. The user's messages (Stop, follow-up, approve, breakpoints…)
  arrive as the ``message`` signal and are kept in order; the activity reads the new ones (the ``messages`` query)
  and hands them to the run's inbox.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from dagmagic.temporal.tasks import (
        CELL_ACTIVITY,
        EXPERIMENT_WORKFLOW,
        RUN_ACTIVITY,
        RUN_WORKFLOW,
        CellOutcome,
        ExperimentTask,
        RunTask,
    )

__all__ = ["RETRIES", "ExperimentWorkflow", "RunWorkflow"]

RETRIES = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    non_retryable_error_types=["DagmagicRefused"],
)
"""A cell or a run whose worker died, or whose run another process still holds, is tried again (on any worker)
until it ends; one the worker refuses (no such experiment in its store, a model it lacks) is not."""

_LONGEST = timedelta(days=7)
"""How long one activity may take in all: a run waiting for an approval may wait long."""


@workflow.defn(name=EXPERIMENT_WORKFLOW)
class ExperimentWorkflow:
    """Run an experiment's cells, one activity each."""

    @workflow.run
    async def run(self, task: ExperimentTask) -> list[CellOutcome]:
        """Every cell's outcome, once each ended."""
        limit = asyncio.Semaphore(task.concurrency or len(task.cells) or 1)

        async def one(cell: object) -> CellOutcome:
            async with limit:
                outcome: CellOutcome = await _run_activity(
                    CELL_ACTIVITY, cell, CellOutcome, task.heartbeat_seconds, f"cell {getattr(cell, 'index', '?')}"
                )
                return outcome

        cells = [asyncio.create_task(one(cell)) for cell in task.cells]
        try:
            return list(await asyncio.gather(*cells))
        except asyncio.CancelledError:  # gather gives up at the first cell cancelled: the running ones are let end
            await workflow.wait(cells)  # their runs cut and recorded on the workers
            raise


@workflow.defn(name=RUN_WORKFLOW)
class RunWorkflow:
    """Drive one detached run; keep the user's messages for it."""

    def __init__(self) -> None:
        self._messages: list[str] = []

    @workflow.run
    async def run(self, task: RunTask) -> str:
        """The run's status at its end."""
        status: str = await _run_activity(RUN_ACTIVITY, task, str, task.heartbeat_seconds, task.goal[:200])
        return status

    @workflow.signal(name="message")
    def message(self, message: str) -> None:
        """A user's message for the run (``dagmagic.messages``, as JSON)."""
        self._messages.append(message)

    @workflow.query(name="messages")
    def messages(self, seen: int) -> list[str]:
        """The messages after the first ``seen``."""
        return self._messages[seen:]


async def _run_activity(name: str, task: object, result: type, heartbeat_seconds: float, summary: str) -> Any:
    """One of dagmagic's activities, heartbeating, retried on any worker, and waited for when it is cancelled (its
    run cut and recorded before the workflow ends).
    """
    return await workflow.execute_activity(
        name,
        task,
        result_type=result,
        start_to_close_timeout=_LONGEST,
        heartbeat_timeout=timedelta(seconds=heartbeat_seconds),
        retry_policy=RETRIES,
        cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
        summary=summary,
    )
