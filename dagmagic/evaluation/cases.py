"""One case of an evaluation: a goal, what a good answer holds (``expected``), and the user's own labels."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Case"]


class Case(BaseModel):
    """A goal to run, with what its answer should hold; scorers receive it with the cell's run."""

    model_config = ConfigDict(frozen=True)

    id: str
    """Stable within an experiment: ``c1``, ``c2``... in the order given, unless the case names its own."""
    goal: str
    """What the run is asked (a DataFrame row's goal is the template filled with the row)."""
    expected: Any = None
    """What a good answer holds (text, a number, a pattern...): the built-in scorers compare against it."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Anything else the user keeps with the case (a DataFrame row's other columns land here)."""
