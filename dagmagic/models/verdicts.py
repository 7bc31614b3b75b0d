"""What a round's analysis concluded (``AnalysisResult``) and what the goal loop did next (``Decision``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, field_validator

__all__ = ["AnalysisResult", "Decision"]


class AnalysisResult(BaseModel):
    """The analyzer's verdict on a round. Lenient on input: models answer in many shapes."""

    achieved: bool = False
    """Whether the goal was reached."""
    confidence: float = 0.0
    """0..1; a percentage (``"85%"``, ``85``) is divided by 100, the rest clamped; non-numbers become 0."""
    reasoning: str = ""
    """Why, naming contradictions between sources."""
    final_answer: str | None = None
    """When the goal is reached, the answer written for the user: the run's answer (no synthesis then) when the
    smart model streams, else the fallback when the synthesis yields nothing."""

    @field_validator("achieved", mode="before")
    @classmethod
    def _coerce_achieved(cls, value: Any) -> bool:
        if isinstance(value, str):
            return value.strip().lower() in {"true", "yes", "y", "1", "achieved"}
        if isinstance(value, bool | int | float) or value is None:
            return bool(value)
        # an object here is a schema echoed back ({"type": "boolean", ...}), not a verdict
        raise ValueError(f"achieved must be true or false, not {type(value).__name__}")

    @field_validator("confidence", mode="before")
    @classmethod
    def _clamp_confidence(cls, value: Any) -> float:
        percent = isinstance(value, str) and value.strip().endswith("%")
        try:
            number = float(str(value).strip().rstrip("%").strip()) if isinstance(value, str) else float(value)
        except (TypeError, ValueError):
            return 0.0
        except OverflowError:  # an integer beyond float's range (10**1000): clamped like any other
            return 1.0 if value > 0 else 0.0
        if number != number:  # NaN
            return 0.0
        if percent or 1.0 < number <= 100.0:  # "85%" or 85: a percentage
            number /= 100.0
        return min(1.0, max(0.0, number))

    @field_validator("reasoning", mode="before")
    @classmethod
    def _text_or_empty(cls, value: Any) -> str:
        return "" if value is None else str(value)

    @field_validator("final_answer", mode="before")
    @classmethod
    def _answer_text(cls, value: Any) -> str | None:
        return None if value is None or value == "" else str(value)


class Decision(BaseModel):
    """What the goal loop did after a round's analysis."""

    action: Literal["synthesize", "replan", "stop"]
    """Answer now, plan again, or stop with the best answer so far."""
    reason: str
    """Why, in words shown to the user."""
    counts_against_budget: bool = True
    """False for a replan caused by a user follow-up."""
    partial: bool = False
    """True when the run was stopped before it finished (by the user, because a model of the round stopped
    answering, or because its cost budget was spent): the answer is written from what completed, and says so."""
