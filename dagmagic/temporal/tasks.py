"""What dagmagic's workflows and activities are given and give back on Temporal: pydantic models, sent as JSON by
the pydantic data converter (the workflows' and activities' only payloads).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "CELL_ACTIVITY",
    "EXPERIMENT_WORKFLOW",
    "RUN_ACTIVITY",
    "RUN_WORKFLOW",
    "CellOutcome",
    "CellTask",
    "ExperimentTask",
    "RunTask",
    "experiment_workflow_id",
    "run_workflow_id",
]

EXPERIMENT_WORKFLOW = "dagmagic-experiment"
RUN_WORKFLOW = "dagmagic-run"
CELL_ACTIVITY = "dagmagic-cell"
RUN_ACTIVITY = "dagmagic-drive-run"


class _Task(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CellTask(_Task):
    """One cell of an experiment to run on a worker: the worker reads the rest from the run store they share."""

    experiment_id: str
    index: int
    config: str
    settings: dict[str, Any] | None = None
    """The config's own settings (JSON, as ``DagSettings`` takes them), None: the worker's."""
    models: dict[str, str] | None = None
    """The config's own models, role → model name (one of the worker's models, else a litellm model string)."""


class ExperimentTask(_Task):
    """An experiment's cells to run, each as one activity, at most ``concurrency`` at once (None: as many as the
    workers take).
    """

    experiment_id: str
    name: str
    cells: list[CellTask]
    concurrency: int | None = None
    heartbeat_seconds: float = 10.0


class CellOutcome(_Task):
    """How a cell's activity ended: the cell's status as the worker recorded it."""

    index: int
    status: str
    run_id: str | None = None


class RunTask(_Task):
    """A detached run: started by a worker under the id the notebook gave it, resumed from the store on a retry."""

    run_id: str
    goal: str
    on: str
    """The address the notebook sent it to (``temporal://…``), recorded in the run."""
    rerun: str | None = None
    """A re-run or what-if of the ended run (``dagmagic.messages.Rerun`` as JSON): the worker reopens the run and
    gives it this."""
    history: list[tuple[str, str]] = Field(default_factory=list)
    """The conversation it is planned in: (goal, answer) of the runs before it."""
    settings: dict[str, Any] | None = None
    approve_plans: bool | None = None
    step_through: bool | None = None
    heartbeat_seconds: float = 10.0


def experiment_workflow_id(experiment_id: str) -> str:
    """The workflow id of an experiment's cells on Temporal (one open at a time: a new kernel finds it)."""
    return f"dagmagic-experiment-{experiment_id}"


def run_workflow_id(run_id: str) -> str:
    """The workflow id of a detached run, which any kernel that knows the run finds it by."""
    return f"dagmagic-run-{run_id}"
