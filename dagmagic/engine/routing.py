"""Domain routing: a cheap classification of the goal as legal, medical, financial or none.

A domain makes the planner ask for the reasoning model on the steps where precision matters.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from dagmagic.llm import ChatModel, structured_llm_call

__all__ = ["Domain", "DomainHint", "classify_domain"]

Domain = Literal["legal", "medical", "financial"]


class DomainHint(BaseModel):
    """The router's answer."""

    domain: Domain | None = Field(
        description='"legal", "medical" or "financial" when the goal needs that expertise, else null.'
    )


async def classify_domain(model: ChatModel, goal: str, *, round: int) -> Domain | None:
    """The goal's domain, or None (also when the classification fails: routing is only a hint)."""
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
    except Exception:  # the route is a hint; without it the plan is simply not domain-steered
        return None
    hint: DomainHint = outcome.value
    return hint.domain
