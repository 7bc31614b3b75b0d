"""Evaluating a workflow over a dataset: cases × configs × repetitions, each cell an ordinary stored run, scored.

``session.evaluate(cases, configs=..., scorers=...)`` returns an ``Experiment``.
"""

from dagmagic.evaluation.cases import Case
from dagmagic.evaluation.cases import _is_dataframe as is_dataframe
from dagmagic.evaluation.experiment import (
    CaseComparison,
    Cell,
    Comparison,
    ConfigSummary,
    Experiment,
    ScoreSummary,
)
from dagmagic.evaluation.judge import JudgeVerdict, LLMJudge, llm_judge
from dagmagic.evaluation.loading import load_experiment
from dagmagic.evaluation.scorers import (
    Score,
    ScoreFunction,
    Scorer,
    contains,
    exact_match,
    matches,
    max_rounds,
    no_failed_steps,
    numeric,
    used_tool,
)
from dagmagic.evaluation.scoring import scorer_name

__all__ = [
    "Case",
    "CaseComparison",
    "Cell",
    "Comparison",
    "ConfigSummary",
    "Experiment",
    "JudgeVerdict",
    "LLMJudge",
    "Score",
    "ScoreFunction",
    "ScoreSummary",
    "Scorer",
    "contains",
    "exact_match",
    "is_dataframe",
    "llm_judge",
    "load_experiment",
    "matches",
    "max_rounds",
    "no_failed_steps",
    "numeric",
    "scorer_name",
    "used_tool",
]
