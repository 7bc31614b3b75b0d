"""An experiment's cells on Temporal (``session.evaluate(..., on="temporal://…")``): one workflow, one activity per
cell, run by whichever workers poll the task queue; the notebook follows the cells through the run store.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from dagmagic.errors import DagError
from dagmagic.evaluation.configs import _NOT_DEFINING, Config
from dagmagic.evaluation.experiment import Cell, Experiment
from dagmagic.llm import STANDARD_ROLES
from dagmagic.llm.litellm_backend import LiteLLMBackend
from dagmagic.temporal.address import TemporalAddress
from dagmagic.temporal.connection import connect
from dagmagic.temporal.tasks import EXPERIMENT_WORKFLOW, CellTask, ExperimentTask, experiment_workflow_id

if TYPE_CHECKING:
    from temporalio.client import WorkflowHandle

__all__ = ["TemporalCells"]


class TemporalCells:
    """Runs an experiment's cells on the workers of a Temporal service (an evaluation's ``RemoteCells``)."""

    def __init__(self, address: TemporalAddress, *, heartbeat_seconds: float = 10.0) -> None:
        self.address = address
        self.heartbeat_seconds = heartbeat_seconds
        """How long a worker may go unheard before Temporal gives its cell to another."""

    async def run(
        self, experiment: Experiment, cells: Sequence[Cell], configs: Mapping[str, Config], concurrency: int | None
    ) -> None:
        """Start the experiment's workflow (or join the one still open: a new kernel after the first died) and wait
        until every cell's activity ended; cancelling this cancels the workflow, and with it the cells' runs.
        """
        from temporalio.client import WorkflowFailureError
        from temporalio.exceptions import WorkflowAlreadyStartedError

        client = await connect(self.address)
        task = ExperimentTask(
            experiment_id=experiment.id,
            name=experiment.name,
            cells=[_cell_task(experiment.id, cell, configs.get(cell.config)) for cell in cells],
            concurrency=concurrency,
            heartbeat_seconds=self.heartbeat_seconds,
        )
        workflow_id = experiment_workflow_id(experiment.id)
        try:
            handle = await client.start_workflow(
                EXPERIMENT_WORKFLOW, task, id=workflow_id, task_queue=self.address.task_queue
            )
        except WorkflowAlreadyStartedError:
            handle = client.get_workflow_handle(workflow_id)
        try:
            await handle.result()
        except asyncio.CancelledError:  # the cells' runs are cut on the workers (and recorded) before this returns
            await asyncio.shield(_cancelled(handle))
            raise
        except WorkflowFailureError as exc:
            cause = exc.cause
            detail = getattr(cause, "cause", None) or cause
            raise DagError(f"the experiment's workflow {workflow_id} on {self.address} failed: {detail}") from None


async def _cancelled(handle: WorkflowHandle[Any, Any]) -> None:
    """Cancel the workflow and wait until it closed: its activities waited for their runs to be cut."""
    from temporalio.client import WorkflowFailureError

    await handle.cancel()
    with contextlib.suppress(WorkflowFailureError):
        await handle.result()


def _cell_task(experiment_id: str, cell: Cell, config: Config | None) -> CellTask:
    """What a worker is told of a cell: its place, and its config's own settings and models (the rest is the
    worker's). Models travel as litellm model strings; a Python model object (a ``ScriptedLLM``, a backend of one's
    own) cannot: the worker's own models serve such a config (or its FILE's config of that name). Where runs are
    kept and replayed is not sent: it is each worker's, and a store URL may hold a password.
    """
    settings: dict[str, Any] | None = None
    models: dict[str, str] | None = None
    if config is not None and config.settings is not None:
        settings = {k: v for k, v in config.settings.non_defaults().items() if k not in _NOT_DEFINING}
    if config is not None and config.models is not None:
        entries = {role: config.models.for_role(role) for role in STANDARD_ROLES}
        if all(isinstance(entry.backend, LiteLLMBackend) for entry in entries.values()):
            models = {role: entry.target for role, entry in entries.items()}
    return CellTask(experiment_id=experiment_id, index=cell.index, config=cell.config, settings=settings, models=models)
