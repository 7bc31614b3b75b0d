"""The verdict as the analyzer writes it: the decision on the first line, then the answer.

::

    yes 0.95
    Both are American: Scott Derrickson is an American director, ...

    no 0.4: the population of Sweden is missing

The first line says ``yes`` or ``no`` (the goal is reached or not), the confidence (0 to 1, or a percentage), and,
after a colon, the reasoning: nothing or one short sentence when the goal is reached, what is missing when it is
not. When it is reached, everything after the first line is the answer the user reads: the run ends when the
answer is written, and the answer starts to show one short line after the call's first token.

Why lines rather than a JSON verdict: on LLMCompiler's shapes, counted in cl100k_base, the JSON verdict sent a
~150-token schema and wrote 34 tokens (keys, quotes, a reasoning sentence) before its answer's first, against 14
for LLMCompiler's ``Thought: ... Action: Finish(``; this first line is 3 tokens when the goal is reached.

A reply that is JSON after all (a model that knows only that form) is read as the JSON verdict was.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from dagmagic.models import AnalysisResult

__all__ = ["DecisionLine", "read_decision", "read_verdict_lines", "render_verdict_lines"]

_DECISION = re.compile(
    r"^[\s*#>`_-]*(?:(?:verdict|achieved|reached|goal reached|decision)\s*[:=-]?\s*)?"
    r"(yes|no|true|false|not achieved|achieved|not reached|reached)\b[\s*_`]*"
    r"[,;(]?\s*(?:confidence\s*[:=]?\s*)?(\d+(?:\.\d+)?\s*%?)?\)?[\s*_`]*(?:[:.,\-–—]\s*(.*?))?\s*$",
    re.IGNORECASE,
)
_REACHED = frozenset({"yes", "true", "achieved", "reached"})
_FIELDS = re.compile(r'"?(?:reasoning|final_answer)"?\s*[:=]', re.IGNORECASE)
"""A line that names the JSON verdict's fields (``reasoning = "..."``) is that verdict written as prose."""


class DecisionLine:
    """The first line of a verdict as read: reached or not, the confidence, the reasoning."""

    def __init__(self, achieved: bool, confidence: str | None, reasoning: str) -> None:
        self.achieved = achieved
        self.confidence = confidence
        self.reasoning = reasoning


def read_decision(line: str) -> DecisionLine | None:
    """The decision a verdict's first line says; None when it says none."""
    match = _DECISION.match(line)
    if match is None or _FIELDS.search(line):
        return None
    said, confidence, reasoning = match.group(1).lower(), match.group(2), (match.group(3) or "").strip()
    return DecisionLine(said in _REACHED, confidence, reasoning)


def read_verdict_lines(text: str) -> AnalysisResult | None:
    """The verdict a whole reply writes; None when its first line is no decision."""
    lines = text.strip().splitlines()
    if not lines:
        return None
    decision = read_decision(lines[0])
    if decision is None:
        return None
    rest = "\n".join(lines[1:]).strip()
    confidence: Any = decision.confidence if decision.confidence is not None else (1.0 if decision.achieved else 0.0)
    if decision.achieved:
        return AnalysisResult(
            achieved=True, confidence=confidence, reasoning=decision.reasoning, final_answer=rest or None
        )
    reasoning = "\n".join(part for part in (decision.reasoning, rest) if part)
    return AnalysisResult(achieved=False, confidence=confidence, reasoning=reasoning)


def render_verdict_lines(verdict: Any) -> str | None:
    """A verdict in its JSON form (as scripts write it) as the lines a model would write; None when it is not a
    well-formed verdict (a script testing the recovery of a malformed one keeps its JSON).
    """
    if not isinstance(verdict, Mapping) or not set(verdict) <= {"achieved", "confidence", "reasoning", "final_answer"}:
        return None
    achieved, confidence = verdict.get("achieved"), verdict.get("confidence", 0.0)
    reasoning, answer = verdict.get("reasoning") or "", verdict.get("final_answer")
    if not isinstance(achieved, bool) or isinstance(confidence, bool) or not isinstance(confidence, int | float):
        return None
    if not isinstance(reasoning, str) or not isinstance(answer, str | None):
        return None
    if achieved and ("\n" in reasoning or not answer or not answer.strip()):
        return None  # an achieved verdict with no answer, or a reasoning of several lines: only JSON says it
    if not achieved and answer is not None:
        return None  # an answer to a goal not reached: only JSON says it
    if answer is not None and answer != answer.strip():
        return None  # the lines' answer is read without its outer blanks
    first = f"{'yes' if achieved else 'no'} {confidence:g}" + (f": {' '.join(reasoning.split())}" if reasoning else "")
    if achieved:
        return f"{first}\n{answer}"
    return f"no {confidence:g}" + (f": {reasoning}" if reasoning else "")
