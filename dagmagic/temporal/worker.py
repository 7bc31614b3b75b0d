"""A dagmagic worker on Temporal (``python -m dagmagic worker --temporal HOST:PORT FILE``): it polls the task queue
for experiment cells and detached runs and runs them with the models and tools its FILE offers, until it is told to
stop (SIGTERM, SIGINT); then its session closes, and with it the MCP servers and the code sandbox it started.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Awaitable, Callable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from dagmagic.temporal.address import TemporalAddress
from dagmagic.temporal.connection import connect

if TYPE_CHECKING:
    from dagmagic.temporal.activities import WorkerSession

__all__ = ["serve"]


async def serve(
    address: TemporalAddress,
    session: WorkerSession,
    *,
    close: Callable[[], Awaitable[None]],
    concurrency: int | None = None,
    configs: Mapping[str, Any] | None = None,
    ready: Callable[[], None] | None = None,
) -> None:
    """Run a worker for ``address``'s task queue until SIGTERM or SIGINT, then ``close`` its session. Runs cut by
    the stop are left to Temporal, which retries them on another worker (their runs resumed from the store).
    """
    from temporalio.worker import Worker
    from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

    from dagmagic.temporal.activities import WorkerActivities
    from dagmagic.temporal.workflows import ExperimentWorkflow, RunWorkflow

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):  # not the main thread: the caller stops it
            loop.add_signal_handler(signum, stop.set)
    try:
        client = await connect(address)
        activities = WorkerActivities(session, configs)
        worker = Worker(
            client,
            task_queue=address.task_queue,
            workflows=[ExperimentWorkflow, RunWorkflow],
            activities=[activities.run_cell, activities.drive_run],
            max_concurrent_activities=concurrency,
            # the workflows only pass dagmagic's payload models through; importing them once is enough
            workflow_runner=SandboxedWorkflowRunner(
                restrictions=SandboxRestrictions.default.with_passthrough_modules("dagmagic")
            ),
            graceful_shutdown_timeout=timedelta(seconds=2),
            # a cancel reaches an activity with the answer to its heartbeat: sent every second, not every 30 s
            default_heartbeat_throttle_interval=timedelta(seconds=1),
            max_heartbeat_throttle_interval=timedelta(seconds=1),
        )
        async with worker:
            if ready is not None:
                ready()
            await stop.wait()
    finally:
        await close()
