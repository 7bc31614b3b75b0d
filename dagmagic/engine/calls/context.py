"""What each model gets to read: the enriched query, dependency context, step results, and how text is cut.

How much of it fits a model's window is the context guard's business (``dagmagic.engine.calls.guard``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from dagmagic.models import Exchange, PlanStep
from dagmagic.settings import DagSettings

__all__ = [
    "TRUNCATION_MARKER",
    "compose_query",
    "dependency_context",
    "enriched_query",
    "format_exchanges",
    "format_history",
    "format_results",
    "has_structured_content",
    "past_of",
    "result_blocks",
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


def enriched_query(goal: str, history: Sequence[Exchange] = (), follow_ups: Sequence[str] = ()) -> str:
    """The planner's input: earlier exchanges as ``Previous conversation: ...``, the goal, each follow-up."""
    return compose_query(format_history(history) if history else None, goal, follow_ups)


def compose_query(past: str | None, goal: str, follow_ups: Sequence[str]) -> str:
    """The planner's input from the (fitted) history text, the goal and the follow-ups."""
    text = f"{past}\n\nCurrent request: {goal}" if past else goal
    return "".join([text, *(f"\n\n[User follow-up]: {follow_up}" for follow_up in follow_ups)])


def past_of(query: str, objective: str) -> str | None:
    """The conversation a planner's ``query`` held before the goal and follow-ups ``objective`` (what
    ``compose_query`` was given as ``past``); None when it held none.
    """
    tail = f"\n\nCurrent request: {objective}"
    if not query.endswith(tail):
        return None
    return query[: -len(tail)] or None


def format_history(history: Sequence[Exchange]) -> str:
    """``Previous conversation: ...`` with each exchange as ``User:`` / ``Assistant:`` lines."""
    return f"Previous conversation:\n{format_exchanges(history)}"


def format_exchanges(history: Sequence[Exchange]) -> str:
    """Each exchange as ``User:`` / ``Assistant:`` lines, a blank line between two."""
    return "\n\n".join(f"User: {e.goal}\nAssistant: {e.answer}" for e in history)


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


def result_blocks(steps: Iterable[tuple[str, PlanStep]], limit: int) -> list[str]:
    """Each step as ``[ref] (status) task`` with its result (cut to ``limit`` characters) or its error."""
    blocks = []
    for ref, step in steps:
        block = f"[{ref}] ({step.status}) {step.task}"
        if step.result:
            block += f"\nResult: {truncate(step.result, limit)}"
        if step.error:
            block += f"\nError: {step.error}"
        blocks.append(block)
    return blocks


def format_results(blocks: Sequence[str]) -> str:
    """Result blocks as one text (``(no step ran)`` when there are none)."""
    return "\n\n".join(blocks) or "(no step ran)"
