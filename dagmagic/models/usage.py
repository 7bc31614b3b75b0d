"""Tokens and money: ``Usage`` (adds with ``+``) and ``money``, a cost as people read it."""

from __future__ import annotations

import html
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict, computed_field

__all__ = ["Usage", "money"]


class Usage(BaseModel):
    """Tokens and money spent; adds with ``+``."""

    model_config = ConfigDict(frozen=True)

    input_tokens: int = 0
    """Prompt tokens."""
    output_tokens: int = 0
    """Completion tokens."""
    cached_input_tokens: int = 0
    """Of ``input_tokens``, those the provider read from its prompt cache (priced at the model's cached-input
    rate, ``cache_read_input_token_cost`` in litellm's price list)."""
    reasoning_tokens: int = 0
    """Of ``output_tokens``, those a reasoning model spent thinking (billed as output, never shown)."""
    requests: int = 0
    """LLM calls counted (retries of one call count once)."""
    cost: float | None = None
    """USD from litellm's price list; None when no call's price is known, else the sum of the known ones."""
    cached_requests: int = 0
    """Of ``requests``, those answered from the response cache (``DAG_CACHE``): no call made, no tokens, cost 0."""
    saved_cost: float | None = None
    """USD the cached requests cost when they were first answered; None when none of their prices is known."""

    @computed_field  # type: ignore[prop-decorator]
    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cached_input_tokens=self.cached_input_tokens + other.cached_input_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
            requests=self.requests + other.requests,
            cost=_known_sum(self.cost, other.cost),
            cached_requests=self.cached_requests + other.cached_requests,
            saved_cost=_known_sum(self.saved_cost, other.saved_cost),
        )

    @classmethod
    def total(cls, usages: Iterable[Usage]) -> Usage:
        """The sum of many usages (an empty sum is zero)."""
        result = cls()
        for usage in usages:
            result = result + usage
        return result

    def describe(self) -> str:
        """``1,234 in · 56 out · 3 requests · $0.0123`` (``cost unknown`` without a price); with cached requests
        ``... · 3 requests (2 cached, saved $0.0123) · $0.0012``; with prompt-cache or reasoning tokens
        ``1,234 in (1,000 cached) · 56 out (40 reasoning) · ...``.
        """
        plural = "" if self.requests == 1 else "s"
        read = f" ({self.cached_input_tokens:,} cached)" if self.cached_input_tokens else ""
        thought = f" ({self.reasoning_tokens:,} reasoning)" if self.reasoning_tokens else ""
        cached = ""
        if self.cached_requests:
            saved = "saving unknown: no price" if self.saved_cost is None else f"saved {money(self.saved_cost)}"
            cached = f" ({self.cached_requests} cached, {saved})"
        return (
            f"{self.input_tokens:,} in{read} · {self.output_tokens:,} out{thought} · "
            f"{self.requests} request{plural}{cached} · {money(self.cost)}"
        )

    def __repr__(self) -> str:
        return f"Usage({self.describe()})"

    __str__ = __repr__

    def _repr_html_(self) -> str:
        return f"<code>{html.escape(self.describe())}</code>"


def _known_sum(first: float | None, second: float | None) -> float | None:
    """The sum of the known amounts; None when neither is known."""
    known = [amount for amount in (first, second) if amount is not None]
    return sum(known) if known else None


def money(cost: float | None) -> str:
    """A cost as people read it: ``$0.0123``, ``$1.25``, ``$0`` or ``cost unknown``."""
    if cost is None:
        return "cost unknown"
    if cost == 0:
        return "$0"
    return f"${cost:.4f}" if cost < 1 else f"${cost:,.2f}"
