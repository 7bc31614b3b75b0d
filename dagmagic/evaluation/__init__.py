"""Evaluating a workflow over a dataset: cases × configs × repetitions, each cell an ordinary stored run, scored.

``session.evaluate(cases, configs=..., scorers=...)`` returns an ``Experiment``.
"""

from dagmagic.evaluation.cases import Case
from dagmagic.evaluation.experiment import (
    CaseComparison,
    Cell,
    Comparison,
    ConfigSummary,
    Experiment,
    ScoreSummary,
)
from dagmagic.evaluation.runner import Scorer, scorer_name

__all__ = [
    "Case",
    "CaseComparison",
    "Cell",
    "Comparison",
    "ConfigSummary",
    "Experiment",
    "ScoreSummary",
    "Scorer",
    "scorer_name",
]
