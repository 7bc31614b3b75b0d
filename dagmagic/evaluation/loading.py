"""Reading an experiment back from a run store in any kernel, as every worker left it (``load_experiment``)."""

from __future__ import annotations

from dagmagic.engine.run.dag_run import DagRun
from dagmagic.errors import ConfigurationError
from dagmagic.evaluation.experiment import Cell, Experiment, ExperimentDefinition
from dagmagic.settings import DagSettings
from dagmagic.store import RunStore

__all__ = ["load_experiment"]


def load_experiment(name_or_id: str, store: str | None = None) -> Experiment:
    """An experiment read back from the run store (``store``, default ``DAG_STORE``) as it is now, in any kernel:
    every worker's cells; ``run_of(cell)`` reads a cell's run back. To run the cells that did not end,
    ``session.resume_evaluation``. ``KeyError`` when there is no experiment of that name or id.
    """
    path = store if store is not None else DagSettings().store_path
    if path is None:
        raise ConfigurationError("there is no run store: DAG_STORE is none; pass store= a path to read one")
    opened = RunStore.open(path)
    found = opened.load_experiment(name_or_id)
    if found is None:
        raise KeyError(f"no experiment named or numbered {name_or_id!r} in the run store {opened.path}")
    experiment = Experiment(
        ExperimentDefinition.model_validate_json(found[0]), [Cell.model_validate_json(data) for data in found[1]]
    )

    def read_back(run_id: str) -> DagRun:
        stored = opened.load(run_id)
        return DagRun(stored.state, events=stored.events, read_only=True)

    experiment._read_back = read_back
    return experiment
