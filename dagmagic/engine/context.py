"""What each model gets to read: the enriched query, dependency context, and the context guard.

The guard keeps an input inside the model's window: over budget, the fast model compacts it
(``compaction``); without a fast model or when that fails, a truncation keeps head and tail.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from dagmagic.engine import prompts
from dagmagic.events import Event
from dagmagic.llm import ChatModel, ModelRegistry
from dagmagic.llm.tokens import context_window, count_tokens
from dagmagic.models import PlanStep
from dagmagic.settings import DagSettings

__all__ = [
    "TRUNCATION_MARKER",
    "ContextGuard",
    "Exchange",
    "dependency_context",
    "enriched_query",
    "has_structured_content",
    "truncate",
    "truncate_middle",
]

TRUNCATION_MARKER = "[Dependency context truncated]"

_STRUCTURED = re.compile(
    r"^\s*\|.*\|\s*$"  # a Markdown table row
    r"|```"  # a code fence
    r"|§\s*\d|\bArt(?:icle|\.)\s*\d|\bRFC\s*\d{3,}|\b10\.\d{4,9}/\S+|\bdoi:|\bU\.S\.C\.|\bC\.F\.R\.|\bv\.\s+[A-Z]",
    re.MULTILINE | re.IGNORECASE,
)

GUARD_SHARE = 0.75
"""Share of a model's window an input may take; the rest is left for the instructions and the reply."""


@dataclass(frozen=True)
class Exchange:
    """One earlier run of a session: its goal and its answer."""

    goal: str
    answer: str


def enriched_query(goal: str, history: Sequence[Exchange] = (), follow_ups: Sequence[str] = ()) -> str:
    """The planner's input: earlier exchanges as ``Previous conversation: ...``, the goal, each follow-up."""
    return _compose(format_history(history) if history else None, goal, follow_ups)


def _compose(past: str | None, goal: str, follow_ups: Sequence[str]) -> str:
    text = f"{past}\n\nCurrent request: {goal}" if past else goal
    return "".join([text, *(f"\n\n[User follow-up]: {follow_up}" for follow_up in follow_ups)])


def format_history(history: Sequence[Exchange]) -> str:
    """``Previous conversation: ...`` with each exchange as ``User:`` / ``Assistant:`` lines."""
    turns = "\n\n".join(f"User: {e.goal}\nAssistant: {e.answer}" for e in history)
    return f"Previous conversation:\n{turns}"


def has_structured_content(text: str) -> bool:
    """Whether ``text`` holds a table, a code fence or a citation: content that must not be cut mid-way."""
    return bool(_STRUCTURED.search(text))


def truncate(text: str, limit: int, marker: str = "... (truncated)") -> str:
    """``text`` cut to ``limit`` characters, with ``marker`` appended when cut."""
    return text if len(text) <= limit else f"{text[:limit]}{marker}"


def truncate_middle(text: str, limit: int) -> str:
    """``text`` cut to about ``limit`` characters, keeping two thirds from the head and one from the tail."""
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    tail = limit - head
    omitted = len(text) - head - tail
    return f"{text[:head]}\n[... {omitted} characters omitted ...]\n{text[len(text) - tail :]}"


def dependency_context(dependencies: Mapping[str, PlanStep], settings: DagSettings) -> str:
    """Completed dependencies as ``[id] (status) task\\nResult: ...``, capped at ``max_message_chars``
    (times ``structured_context_multiplier`` when a result holds a table, code or citation).
    """
    blocks = [f"[{ref}] ({step.status}) {step.task}\nResult: {step.result or ''}" for ref, step in dependencies.items()]
    text = "\n\n".join(blocks)
    limit = settings.max_message_chars
    if any(has_structured_content(step.result or "") for step in dependencies.values()):
        limit = int(limit * settings.structured_context_multiplier)
    return truncate(text, limit, f"\n{TRUNCATION_MARKER}")


class ContextGuard:
    """Keeps inputs inside each model's window (floor ``context_floor_tokens``)."""

    def __init__(
        self, registry: ModelRegistry, settings: DagSettings, *, emit: Callable[[Event], object] | None = None
    ) -> None:
        self.registry = registry
        self.settings = settings
        self.emit = emit

    def budget(self, model: ChatModel) -> int | None:
        """Tokens an input to ``model`` may take; None when its window is unknown (nothing to guard)."""
        window = context_window(model.entry)
        if window is None:
            return None
        return max(self.settings.context_floor_tokens, int(window * GUARD_SHARE))

    async def fit(self, text: str, model: ChatModel, *, task: str, round: int, step_id: str | None = None) -> str:
        """``text`` as is when it fits ``model``'s budget, else compacted by the fast model, else truncated."""
        budget = self.budget(model)
        if budget is None or count_tokens(model.entry, text) <= budget:
            return text
        if self.registry.has_role("fast"):
            fast = ChatModel(self.registry.for_role("fast"), settings=self.settings, emit=self.emit)
            target = budget // 2
            try:
                result = await fast.chat(
                    [
                        {"role": "system", "content": prompts.COMPACTION_SYSTEM.format(tokens=target, task=task)},
                        {"role": "user", "content": text},
                    ],
                    purpose="compaction",
                    round=round,
                    step_id=step_id,
                )
                if result.content.strip() and count_tokens(model.entry, result.content) <= budget:
                    return result.content
            except Exception:  # compaction is an optimization: fall through to truncation
                pass
        return truncate_middle(text, budget * 3)  # about three characters a token, to stay safely inside

    async def planner_input(
        self, goal: str, history: Sequence[Exchange], follow_ups: Sequence[str], *, round: int
    ) -> str:
        """The enriched query, its history summarized by the fast model when over ``planner_input_tokens``
        (or cut to its last ``history_fallback_chars`` without a fast model or when that fails).
        """
        query = enriched_query(goal, history, follow_ups)
        smart = self.registry.for_role("smart")
        if not history or count_tokens(smart, query) <= self.settings.planner_input_tokens:
            return query
        past = format_history(history)
        summary = None
        if self.registry.has_role("fast"):
            fast = ChatModel(self.registry.for_role("fast"), settings=self.settings, emit=self.emit)
            try:
                result = await fast.chat(
                    [
                        {"role": "system", "content": prompts.HISTORY_SUMMARY_SYSTEM},
                        {"role": "user", "content": past},
                    ],
                    purpose="history_summary",
                    round=round,
                )
                summary = result.content.strip() or None
            except Exception:  # the fallback below keeps the run going
                summary = None
        if summary is not None:
            past = f"Previous conversation (summary):\n{summary}"
        else:
            past = f"Previous conversation (last part):\n...{past[-self.settings.history_fallback_chars :]}"
        return _compose(past, goal, follow_ups)
