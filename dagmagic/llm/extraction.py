"""Finding the JSON value in what a model wrote: bare, fenced, inside prose, or slightly broken."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

__all__ = ["extract_json"]

_FENCE = re.compile(r"```[ \t]*(?:json|JSON|javascript|js)?[ \t]*\n?(.*?)```", re.DOTALL)
_JSON_ESCAPES = frozenset('"\\/bfnrtu')
# \b \f \r \t followed by a letter is LaTeX (\frac, \beta, \right, \text), not a control character.
_LATEX_LOOKALIKES = frozenset("bfrt")
_TRAILING_COMMA = re.compile(r",\s*([}\]])")
_CONTROL_FROM_LATEX = ("\b", "\f")
_MAX_STARTS = 32


def extract_json(text: str) -> Any:
    """The first JSON object or array in ``text``; ``ValueError`` saying why when there is none.

    Tried in order: the whole text, each code fence, then every balanced ``{...}``/``[...]`` span.
    Each candidate is parsed as is (raw newlines inside strings allowed), then repaired: LaTeX
    backslashes (``\\frac``, ``\\alpha``) doubled, trailing commas dropped.
    """
    if not isinstance(text, str) or not text.strip():
        raise ValueError("the reply is empty")
    for candidate in _candidates(text):
        value = _parse(candidate)
        if value is not None:
            return value
    raise ValueError("no JSON object or array found in the reply")


def _candidates(text: str) -> Iterator[str]:
    yield text.strip()
    for match in _FENCE.finditer(text):
        yield match.group(1).strip()
    starts = [i for i, char in enumerate(text) if char in "{["][:_MAX_STARTS]
    for start in starts:
        end = _balanced_end(text, start)
        if end is not None:
            yield text[start : end + 1]


def _balanced_end(text: str, start: int) -> int | None:
    """Index of the bracket closing the one at ``start``, skipping brackets inside strings."""
    depth = 0
    in_string = False
    escaped = False
    for index in range(start, len(text)):
        char = text[index]
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
            if depth == 0:
                return index
    return None


def _parse(candidate: str) -> Any:
    """The object or array in ``candidate``, or None."""
    if not candidate or candidate[0] not in "{[":
        return None
    strict = _loads(candidate)
    if strict is not None and not _has_latex_damage(strict):
        return strict
    repaired = _loads(_TRAILING_COMMA.sub(r"\1", _escape_stray_backslashes(candidate)))
    return strict if repaired is None else repaired


def _escape_stray_backslashes(candidate: str) -> str:
    """Double every backslash inside a string that does not start a JSON escape (or starts a LaTeX one)."""
    out: list[str] = []
    in_string = False
    index = 0
    while index < len(candidate):
        char = candidate[index]
        if in_string and char == "\\":
            following = candidate[index + 1 : index + 3]
            nxt = following[:1]
            latex = nxt in _LATEX_LOOKALIKES and following[1:2].isalpha()
            if nxt in _JSON_ESCAPES and not latex:
                out.append(candidate[index : index + 2])
                index += 2
                continue
            out.append("\\\\")
        else:
            if char == '"':
                in_string = not in_string
            out.append(char)
        index += 1
    return "".join(out)


def _loads(candidate: str) -> Any:
    try:
        value = json.loads(candidate, strict=False)  # strict=False: raw newlines inside strings
    except ValueError:
        return None
    return value if isinstance(value, dict | list) else None


def _has_latex_damage(value: Any) -> bool:
    """Whether a parsed value holds backspace or form-feed characters: ``\\b``/``\\f`` written as LaTeX."""
    if isinstance(value, str):
        return any(char in value for char in _CONTROL_FROM_LATEX)
    if isinstance(value, dict):
        return any(_has_latex_damage(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_latex_damage(v) for v in value)
    return False
