"""Finding the JSON value in what a model wrote: bare, fenced, inside prose, or slightly broken.

The work is linear in the text (a few passes at most), whatever it holds: a reply is model output, and a
megabyte of brackets must not stall the caller. JSON nested deeper than Python's recursion limit is no
JSON here, as for any other unparsable text. What no candidate parses goes, as a last resort before the
caller asks the model again, to ``json_repair`` (unclosed brackets, single quotes, bare keys, comments),
for replies short enough that its pure-Python pass stays cheap.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from itertools import islice
from typing import Any

__all__ = ["extract_json", "extract_json_span", "parse_json"]

_FENCE = re.compile(r"```[ \t]*(?:json|JSON|javascript|js)?[ \t]*\n?(.*?)```", re.DOTALL)
_TRAILING_COMMA = re.compile(r",\s*([}\]])")
_CONTROL_FROM_LATEX = ("\b", "\f")
# \b \f \r \t followed by a letter is LaTeX (\frac, \beta, \right, \text), not a control character.
_LATEX_LOOKALIKES = frozenset("bfrt")
_MAX_STARTS = 32
# One pass over the text settles every start it meets outside a string; a start it meets inside one (the
# text's quotes pair up differently from there) needs a pass of its own. Capped so that adversarial text
# costs a few passes rather than one per start; starts still unsettled after them are not tried.
_MAX_PASSES = 4
_OPENER = re.compile(r"[{\[]")
_BRACKET_TOKEN = re.compile(r'[{}\[\]"\\]')
# A string as the repair sees it: to the next quote that no backslash escapes, or to the end.
_STRING = re.compile(r'"(?:[^"\\]+|\\.?)*"?', re.DOTALL)
# A backslash with the escape it starts, when that is a JSON escape.
_BACKSLASH = re.compile(r'\\(["\\/bfnrtu])?')
_REPAIR_LIMIT = 20_000
"""Characters of reply, from its first bracket, that ``json_repair`` is given (it takes ~3 ms per 1,000)."""


def extract_json(text: str, *, mend: bool = True) -> Any:
    """The first JSON object or array in ``text``; ``ValueError`` saying why when there is none.

    Tried in order: the whole text, each code fence, then every balanced ``{...}``/``[...]`` span (of the
    first 32 that open). Each candidate is parsed as is (raw newlines inside strings allowed), then
    repaired: LaTeX backslashes (``\\frac``, ``\\alpha``) doubled, trailing commas dropped. When none
    parses (a reply cut off mid-object, single quotes, bare keys), ``json_repair`` mends the text from its
    first bracket: the last resort before the caller asks the model again. ``mend=False`` leaves it out: for a
    caller that must know the JSON came whole (a stream that broke off).
    """
    return extract_json_span(text, mend=mend)[0]


def extract_json_span(text: str, *, mend: bool = True) -> tuple[Any, int, int]:
    """``extract_json``'s value and where in ``text`` it was written: ``(value, start, end)``, ``text[start:end]``
    being the whole text, the code fence or the bracketed span it came from (to the end of the text when
    ``json_repair`` mended it). For a caller that keeps what comes before or after the JSON apart from it.
    """
    if not isinstance(text, str) or not text.strip():
        raise ValueError("the reply is empty")
    for candidate, start, end in _candidates(text):
        value = parse_json(candidate)
        if value is not None:
            return value, start, end
    opener = _OPENER.search(text)
    value = None if opener is None or not mend else _repaired(text[opener.start() :])
    if value is not None:
        assert opener is not None
        return value, opener.start(), len(text)
    raise ValueError("no JSON object or array found in the reply")


def parse_json(candidate: str) -> Any:
    """The object or array that ``candidate`` is as a whole, repaired as ``extract_json`` repairs; else None.

    None too for anything nested deeper than the JSON parser can follow.
    """
    if not candidate or candidate[0] not in "{[":
        return None
    strict = _loads(candidate)
    if strict is not None and not _has_latex_damage(strict):
        return strict
    repaired_text = _TRAILING_COMMA.sub(r"\1", _escape_stray_backslashes(candidate))
    repaired = _loads(repaired_text) if repaired_text != candidate else None
    return strict if repaired is None else repaired


def _repaired(fragment: str) -> Any:
    """What ``json_repair`` makes of ``fragment`` (text from a bracket on): a non-empty object, or a list of
    them; else None (it turns any prose into some value, and only structured ones are worth keeping).

    LaTeX backslashes are doubled first, as for every repair, so that ``\\beta`` stays ``\\beta``.
    """
    import json_repair  # only for the rare reply nothing else parses (its import costs ~30 ms)

    if len(fragment) > _REPAIR_LIMIT:
        return None
    try:
        value = json_repair.repair_json(_escape_stray_backslashes(fragment), return_objects=True)
    except Exception:  # untrusted text in a third-party parser: any failure means "no JSON here"
        return None
    items = value if isinstance(value, list) else [value]
    structured = bool(items) and all(isinstance(item, dict) and item for item in items)
    return value if structured and not _has_latex_damage(value) else None


def _candidates(text: str) -> Iterator[tuple[str, int, int]]:
    """Each candidate with the span of ``text`` it stands for."""
    yield text.strip(), len(text) - len(text.lstrip()), len(text.rstrip())
    for match in _FENCE.finditer(text):
        yield match.group(1).strip(), match.start(), match.end()
    starts = [match.start() for match in islice(_OPENER.finditer(text), _MAX_STARTS)]
    ends = _balanced_ends(text, starts)
    for start in starts:
        if start in ends:
            yield text[start : ends[start] + 1], start, ends[start] + 1


def _balanced_ends(text: str, starts: list[int]) -> dict[int, int]:
    """For each start bracket that closes, the index of the bracket closing it, skipping brackets inside
    strings (each start read as if outside a string, as a model's JSON after prose would be).
    """
    ends: dict[int, int] = {}
    pending = starts
    for _ in range(_MAX_PASSES):
        if not pending:
            break
        in_strings = _match_brackets(text, pending, ends)
        pending = [start for start in pending if start in in_strings]
    return ends


def _match_brackets(text: str, starts: list[int], ends: dict[int, int]) -> set[int]:
    """One pass from ``starts[0]``: fills ``ends`` for the starts met outside strings and returns the
    starts met inside one. Brackets are matched with a stack, so the pass is linear however deep they go.
    """
    wanted = set(starts)
    last = starts[-1]
    in_strings: set[int] = set()
    stack: list[int] = []
    open_wanted = 0  # wanted starts on the stack: the pass can stop once none is left after the last start
    in_string = False
    skip_to = 0  # the character after a backslash inside a string is escaped
    for match in _BRACKET_TOKEN.finditer(text, starts[0]):
        index, char = match.start(), match.group()
        if in_string:
            if index < skip_to or char not in '"\\':  # an escaped character, or a bracket in the string
                if index in wanted:
                    in_strings.add(index)
            elif char == "\\":
                skip_to = index + 2
            else:
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "{[":
            stack.append(index)
            open_wanted += index in wanted
        elif stack and char in "}]":
            opened = stack.pop()
            if opened in wanted:
                ends[opened] = index
                open_wanted -= 1
        if index >= last and not open_wanted:
            break
    return in_strings


def _escape_stray_backslashes(candidate: str) -> str:
    """Double every backslash inside a string that does not start a JSON escape (or starts a LaTeX one)."""
    if "\\" not in candidate:
        return candidate
    return _STRING.sub(lambda string: _BACKSLASH.sub(_escape_one, string.group()), candidate)


def _escape_one(match: re.Match[str]) -> str:
    escape = match.group(1)
    if escape is None:
        return "\\\\"
    after = match.string[match.end() : match.end() + 1]
    if escape in _LATEX_LOOKALIKES and after.isalpha():
        return "\\\\" + escape
    return match.group()


def _loads(candidate: str) -> Any:
    try:
        value = json.loads(candidate, strict=False)  # strict=False: raw newlines inside strings
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser follows
        return None
    return value if isinstance(value, dict | list) else None


def _has_latex_damage(value: Any) -> bool:
    """Whether a parsed value holds backspace or form-feed characters: ``\\b``/``\\f`` written as LaTeX."""
    pending = [value]
    while pending:  # iterative: the parser accepts values nested nearly as deep as the recursion limit
        item = pending.pop()
        if isinstance(item, str):
            if any(char in item for char in _CONTROL_FROM_LATEX):
                return True
        elif isinstance(item, dict):
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return False
