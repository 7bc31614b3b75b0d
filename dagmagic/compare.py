"""Two runs side by side (``dagmagic.compare(a, b)``): what differs in their goals and settings, their plans aligned
step by step (matched as ``RoundDiff`` matches them: task, tool, arguments), each pair's results with the words that
differ marked, statuses, models, tokens, cost and time with their deltas, the verdicts, the answers and the calls
per purpose. Two rounds of one run compare the same way (``compare(run, rounds=(1, 2))``).

A ``RunComparison`` is plain data: the compare widget draws it, its Markdown and HTML views stand in for the widget
in a saved notebook.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from dagmagic.models import AnalysisResult, Usage

__all__ = ["Piece", "RoundPair", "RunComparison", "Side", "SideStep", "StepPair"]


class Piece(BaseModel):
    """A stretch of text in a word-level difference: in both texts, only in the first, or only in the second."""

    op: Literal["same", "removed", "added"]
    text: str


class Side(BaseModel):
    """One side of a comparison: a run (or one round of it), as the comparison reads it."""

    label: str
    """How the views name this side: ``run 3f2a19c0``, ``round 2``, ``config small``."""
    run_id: str
    round: int | None = None
    """The round compared, when two rounds of one run are (None: the whole run)."""
    goal: str
    status: str
    """As the views say it (``stopped by you`` for a run the user's Stop ended)."""
    live: bool = False
    """Whether the run is still going (the comparison fills in as it does)."""
    settings: dict[str, Any] = Field(default_factory=dict)
    """The settings the run was started with that are not the defaults (secrets masked), or a config's."""
    models: list[str] = Field(default_factory=list)
    """The models the run called, by name."""
    usage: Usage = Field(default_factory=Usage)
    cost: float | None = None
    seconds: float | None = None
    """Wall time from start to end (so far, for a live run)."""
    answer: str = ""
    calls: dict[str, int] = Field(default_factory=dict)
    """Calls per purpose (``plan``, ``step``, ``analyze``...)."""
    forked_from: str | None = None
    """The run this one was forked from (``run.fork``)."""


class SideStep(BaseModel):
    """One step as one side has it."""

    ref: str
    """Its id, or ``rN.id`` for a step of another round than the one compared."""
    task: str
    tool: str | None = None
    tool_args: dict[str, Any] | None = None
    status: str
    result: str | None = None
    error: str | None = None
    edited: bool = False
    """The user wrote this result (``what_if`` or a fork with ``result=``)."""
    model: str | None = None
    tokens: int = 0
    cost: float | None = None
    seconds: float | None = None


class StepPair(BaseModel):
    """Two steps matched as the same step, or a step only one side has."""

    a: SideStep | None = None
    b: SideStep | None = None
    change: Literal["same", "changed", "added", "removed"]
    """``added``: only ``b`` has it; ``removed``: only ``a``."""
    fields: list[str] = Field(default_factory=list)
    """For ``changed``: which of task, tool, arguments, model, status, result differ."""
    result: list[Piece] = Field(default_factory=list)
    """The two results word by word, when both have one (empty otherwise)."""
    tokens_delta: int | None = None
    """``b`` minus ``a``, when both ran."""
    cost_delta: float | None = None
    seconds_delta: float | None = None


class RoundPair(BaseModel):
    """Round ``index`` of each side (or the two rounds compared, for two rounds of one run)."""

    a: int | None
    b: int | None
    steps: list[StepPair] = Field(default_factory=list)
    """In ``b``'s order, ``a``'s unmatched steps after."""
    verdict_a: AnalysisResult | None = None
    verdict_b: AnalysisResult | None = None


class RunComparison(BaseModel):
    """Two runs, or two rounds of one run, side by side (``dagmagic.compare``)."""

    a: Side
    b: Side
    differences: dict[str, tuple[Any, Any]] = Field(default_factory=dict)
    """What differs before anything runs: ``goal`` and each setting, as (a's, b's)."""
    rounds: list[RoundPair] = Field(default_factory=list)
    answer: list[Piece] = Field(default_factory=list)
    """The answers word by word."""

    @property
    def changed_steps(self) -> list[StepPair]:
        """The pairs that differ (added, removed or changed), round by round."""
        return [pair for pair in (p for r in self.rounds for p in r.steps) if pair.change != "same"]
