"""What a worker does for Temporal: an experiment's cell (``run_cell``) and a detached run (``drive_run``), each an
activity that heartbeats while its run goes on. Both start from the run store the notebook and the workers share,
so an activity Temporal retries on another worker (its first worker died) resumes the run there: no completed step
or tool call is made again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from temporalio import activity
from temporalio.exceptions import ApplicationError

from dagmagic._secrets import mask_secrets
from dagmagic.errors import DagError
from dagmagic.evaluation.cell_runs import CellRuns
from dagmagic.evaluation.configs import Config, as_configs
from dagmagic.evaluation.experiment import Cell, Experiment, ExperimentDefinition
from dagmagic.events import RunWarning
from dagmagic.messages import MESSAGES
from dagmagic.models import Exchange
from dagmagic.settings import DagSettings
from dagmagic.temporal.tasks import CELL_ACTIVITY, RUN_ACTIVITY, CellOutcome, CellTask, RunTask

if TYPE_CHECKING:
    from dagmagic.engine import DagRun
    from dagmagic.evaluation._session import EvaluationSession
    from dagmagic.store import RunStore

__all__ = ["REFUSED", "WorkerActivities", "WorkerSession"]

log = logging.getLogger("dagmagic")

REFUSED = "DagmagicRefused"
"""The error type of what no retry can mend (``RETRIES`` does not retry it): the worker's store lacks the
experiment, a config it cannot build."""
MESSAGES_EVERY = 0.25
"""How often a detached run's activity asks its workflow for the user's new messages (seconds)."""


class WorkerSession(Protocol):
    """What a worker's activities need of its ``DagSession`` (the models and tools its FILE offers)."""

    @property
    def store(self) -> RunStore | None:
        """The run store it shares with the notebooks."""
        ...

    def start_as(self, *args: Any, **kwargs: Any) -> DagRun:
        """``DagSession.start_as(run_id, goal, history, **options)``."""
        ...

    def start_resume(self, *args: Any, **kwargs: Any) -> DagRun:
        """``DagSession.start_resume(run_id, **options)``."""
        ...

    def reopen(self, *args: Any, **kwargs: Any) -> DagRun:
        """``DagSession.reopen(run_id, **options)``."""
        ...


class WorkerActivities:
    """The activities of one worker, over its session (``configs``: those its FILE names, by name)."""

    def __init__(self, session: WorkerSession, configs: Mapping[str, Any] | None = None) -> None:
        self.session = session
        self._configs = {c.name: c for c in as_configs(configs, self._evaluating)} if configs else {}

    @property
    def _evaluating(self) -> EvaluationSession:
        return self.session  # type: ignore[return-value]  # a DagSession is both

    def _store(self) -> RunStore:
        store = self.session.store
        if store is None:
            raise ApplicationError(
                "this worker has no run store: start it with DAG_STORE set to the store the notebook uses",
                type=REFUSED,
                non_retryable=True,
            )
        return store

    @activity.defn(name=CELL_ACTIVITY)
    async def run_cell(self, task: CellTask) -> CellOutcome:
        """Run one cell of an experiment (or resume its cut run, or leave it when it ended), heartbeating; the cell
        is recorded in the store as it goes, as an in-process experiment records it.
        """
        store = self._store()
        found = store.load_experiment(task.experiment_id)
        if found is None:
            raise ApplicationError(
                f"no experiment {task.experiment_id} in this worker's run store ({store.path}): start the workers "
                "with the DAG_STORE the notebook uses",
                type=REFUSED,
                non_retryable=True,
            )
        definition = ExperimentDefinition.model_validate_json(found[0])
        experiment = Experiment(definition, [Cell.model_validate_json(data) for data in found[1]])
        cell = experiment.cells[task.index]
        if cell.ended:  # a retry of a cell whose end was recorded before its worker went
            return CellOutcome(index=cell.index, status=cell.status, run_id=cell.run_id)
        if cell.status == "not_started":
            cell.status = "pending"
        case = next(case for case in definition.cases if case.id == cell.case_id)
        runs = CellRuns(self._evaluating, experiment, {task.config: self._config(task)}, ())
        async with _heartbeating(lambda: (cell.run_id,)):
            await runs.run(cell, case, asyncio.Semaphore(1), None)
        if cell.status == "pending":  # its run is held by a process not yet known dead: Temporal tries later
            raise ApplicationError(cell.error or "the cell's run is held elsewhere", type="RunHeldElsewhere")
        return CellOutcome(index=cell.index, status=cell.status, run_id=cell.run_id)

    def _config(self, task: CellTask) -> Config:
        """The cell's config: the worker FILE's of that name, else built from what the notebook sent."""
        if task.config in self._configs:
            return self._configs[task.config]
        spec: dict[str, Any] = {}
        if task.models:
            spec["models"] = task.models
        if task.settings is not None:
            spec["settings"] = DagSettings.model_validate(task.settings)
        try:
            return as_configs({task.config: spec}, self._evaluating)[0]
        except (TypeError, ValueError) as exc:
            raise ApplicationError(
                mask_secrets(f"config {task.config!r}: {exc}"), type=REFUSED, non_retryable=True
            ) from None

    @activity.defn(name=RUN_ACTIVITY)
    async def drive_run(self, task: RunTask) -> str:
        """Drive a detached run to its end: started under the notebook's id, or resumed from the store on a retry;
        the user's messages read from the workflow and handed to the run's inbox. Its status at the end.
        """
        store = self._store()
        info = activity.info()
        seen = int(info.heartbeat_details[0]) if info.heartbeat_details else 0
        options: dict[str, Any] = {}
        if task.settings is not None:
            options["settings"] = DagSettings.model_validate(task.settings)
        for option in ("approve_plans", "step_through"):
            if (value := getattr(task, option)) is not None:
                options[option] = value
        stored = store.summary(task.run_id)
        try:
            if stored is None:
                history = [Exchange(goal, answer) for goal, answer in task.history]
                run = self.session.start_as(task.run_id, task.goal, history, detached_on=task.on, **options)
            elif stored.status in ("done", "failed") and task.rerun is not None and info.attempt == 1:
                run = self.session.reopen(task.run_id, **options)  # a re-run of the ended run: its new round
                run.send(MESSAGES.validate_json(task.rerun))
            elif stored.status in ("done", "failed"):
                return stored.status
            else:
                run = self.session.start_resume(task.run_id, **options)
        except DagError as exc:  # held by a process not yet known dead: Temporal tries again later
            raise ApplicationError(mask_secrets(str(exc)), type="RunHeldElsewhere") from None
        assert info.workflow_id is not None  # an activity of a workflow, never a standalone one
        handle = activity.client().get_workflow_handle(info.workflow_id)
        try:
            while not run.done():
                for text in await handle.query("messages", seen, result_type=list[str]):
                    seen += 1
                    _hand_over(run, text)
                activity.heartbeat(seen)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(run.wait()), MESSAGES_EVERY)
            await run.wait()
        except asyncio.CancelledError:  # Temporal cancelled it (the workflow was cancelled, say): the run stops
            run.cancel()
            await run.wait()
            raise
        return run.status


def _hand_over(run: DagRun, text: str) -> None:
    """Give the run the user's message; one it cannot take now is said in the run (the notebook reads it there)."""
    try:
        run.send(MESSAGES.validate_json(text))
    except (DagError, ValueError) as exc:
        run.emit(RunWarning(message=f"A message from the notebook was not taken: {exc}", round=None))


@contextlib.asynccontextmanager
async def _heartbeating(details: Callable[[], tuple[object, ...]]) -> AsyncIterator[None]:
    """Heartbeat every second while the block runs: Temporal then knows the worker lives, and delivers a cancel."""

    async def beat() -> None:
        while True:
            activity.heartbeat(*details())
            await asyncio.sleep(1.0)

    task = asyncio.get_running_loop().create_task(beat())
    try:
        yield
    finally:
        task.cancel()
