"""Evaluating a workflow over a dataset: cases × configs × repetitions, each cell an ordinary stored run, scored."""

from dagmagic.evaluation.cases import Case

__all__ = ["Case"]
