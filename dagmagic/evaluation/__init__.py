"""Evaluating a workflow over a dataset: cases × configs × repetitions, each cell an ordinary stored run, scored."""

from dagmagic.evaluation.cases import Case
from dagmagic.evaluation.judge import JudgeVerdict, LLMJudge, llm_judge
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

__all__ = [
    "Case",
    "JudgeVerdict",
    "LLMJudge",
    "Score",
    "ScoreFunction",
    "Scorer",
    "contains",
    "exact_match",
    "llm_judge",
    "matches",
    "max_rounds",
    "no_failed_steps",
    "numeric",
    "used_tool",
]
