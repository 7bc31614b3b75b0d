"""The experiments a session started or resumed, each with the configs and scorers it needs to go on."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypedDict

from dagmagic.evaluation.experiment import Experiment
from dagmagic.evaluation.remote import RemoteCells
from dagmagic.evaluation.runner import CellListener, Evaluation
from dagmagic.evaluation.scorers import ScoreFunction

__all__ = ["EvaluationOptions", "ResumeOptions", "SessionEvaluations"]


class EvaluationOptions(TypedDict, total=False):
    """What ``session.evaluate`` / ``start_evaluation`` take besides the cases (``DagSession.evaluate`` says)."""

    goal: str | None
    configs: Mapping[str, Any] | None
    scorers: Iterable[ScoreFunction]
    repeat: int
    concurrency: int | None
    max_cost: float | None
    name: str | None
    on_cell: CellListener | None
    on: str | None


class ResumeOptions(TypedDict, total=False):
    """What ``session.resume_evaluation`` / ``start_resume_evaluation`` take (``DagSession.resume_evaluation``)."""

    configs: Mapping[str, Any] | None
    scorers: Iterable[ScoreFunction] | None
    concurrency: int | None
    max_cost: float | None
    on_cell: CellListener | None
    on: str | None


class SessionEvaluations:
    """A session's experiments, by id."""

    def __init__(self) -> None:
        self._by_id: dict[str, Evaluation] = {}

    @property
    def experiments(self) -> list[Experiment]:
        """Each experiment once, as it is now, oldest first."""
        return [evaluation.experiment for evaluation in self._by_id.values()]

    def start(self, session: Any, cases: Any, options: EvaluationOptions) -> Experiment:
        """A new experiment of ``session`` over ``cases``, started; the ``Experiment`` at once."""
        remote = _remote(options.get("on"))
        evaluation = Evaluation.new(
            session,
            cases,
            goal=options.get("goal"),
            configs=options.get("configs"),
            scorers=options.get("scorers", ()),
            repeat=options.get("repeat", 1),
            max_cost=options.get("max_cost"),
            name=options.get("name"),
        )
        self._by_id[evaluation.experiment.id] = evaluation
        return evaluation.start(options.get("concurrency"), options.get("on_cell"), remote)

    def resume(self, session: Any, name_or_id: str, options: ResumeOptions) -> Experiment:
        """The cells of experiment ``name_or_id`` that did not end, started (this session's own experiment keeps
        its configs and scorers; one read back from the store needs them again); the ``Experiment`` at once.
        """
        configs, scorers = options.get("configs"), options.get("scorers")
        remote = _remote(options.get("on"))
        mine = [e for e in self._by_id.values() if name_or_id in (e.experiment.id, e.experiment.name)]
        if mine:
            latest = max(mine, key=lambda found: found.experiment.definition.created_at)
            evaluation = Evaluation.again(session, latest.experiment, configs, scorers, previous=latest)
        else:
            evaluation = Evaluation.stored(session, name_or_id, configs, scorers)
        self._by_id[evaluation.experiment.id] = evaluation
        if (max_cost := options.get("max_cost")) is not None:
            evaluation.raise_budget(max_cost)
        return evaluation.start(options.get("concurrency"), options.get("on_cell"), remote)


def _remote(on: str | None) -> RemoteCells | None:
    """Where ``on=`` sends an experiment's cells (None: they run here)."""
    if on is None:
        return None
    from dagmagic.temporal import TemporalAddress, TemporalCells, require_sdk

    address = TemporalAddress.parse(on)
    require_sdk()
    return TemporalCells(address)
