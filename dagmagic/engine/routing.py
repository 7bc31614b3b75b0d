"""Domain routing: a cheap classification of the goal as legal, medical, financial or none.

A domain makes the planner ask for the reasoning model on the steps where precision matters.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from dagmagic.errors import RUN_ENDING
from dagmagic.events import RunWarning
from dagmagic.llm import ChatModel, structured_llm_call

__all__ = ["Domain", "DomainHint", "classify_domain"]

Domain = Literal["legal", "medical", "financial"]


class DomainHint(BaseModel):
    """The router's answer."""

    domain: Domain | None = Field(
        description='"legal", "medical" or "financial" when the goal needs that expertise, else null.'
    )


async def classify_domain(model: ChatModel, goal: str, *, round: int) -> Domain | None:
    """The goal's domain, or None (also when the classification fails: routing is only a hint, and a warning
    says so). A wrong key or an unknown model ends the run as everywhere else: every later call would meet it.
    """
    messages = [
        {
            "role": "system",
            "content": "Classify the user's goal: does answering it need legal, medical or financial expertise? "
            "Answer null for anything else.",
        },
        {"role": "user", "content": goal},
    ]
    try:
        outcome = await structured_llm_call(
            model,
            messages,
            DomainHint,
            default=DomainHint(domain=None),
            purpose="route",
            round=round,
            temperature=0.0,
        )
    except RUN_ENDING:
        raise
    except Exception as exc:  # the route is a hint; without it the plan is simply not domain-steered
        _unrouted(model, f"{type(exc).__name__}: {exc}", round)
        return None
    if outcome.failure:
        _unrouted(model, outcome.failure, round)
    hint: DomainHint = outcome.value
    return hint.domain


def _unrouted(model: ChatModel, cause: str, round: int) -> None:
    if model.emit is not None:
        message = f"The goal's domain could not be classified ({cause}): planning without domain steering."
        model.emit(RunWarning(message=message, round=round))
