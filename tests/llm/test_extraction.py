from __future__ import annotations

import random
import re
from collections.abc import Iterator

import pytest

from dagmagic.llm import extract_json, extract_json_span, extraction
from dagmagic.llm.extraction import parse_json


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": 1}', {"a": 1}),
        ("  [1, 2]  ", [1, 2]),
        ('```json\n{"steps": [{"id": "s1"}]}\n```', {"steps": [{"id": "s1"}]}),
        ('Sure!\n```\n{"a": true}\n```\nAnything else?', {"a": True}),
        ('I will use {curly} words, then {"answer": 42} and more {"b": 2}', {"answer": 42}),
        ('The plan: [{"id": "s1", "task": "a [bracket] inside"}] - done', [{"id": "s1", "task": "a [bracket] inside"}]),
        ('{"a": "quote \\" and } brace"}', {"a": 'quote " and } brace'}),
        ('{"a": 1, "b": [1, 2,],}', {"a": 1, "b": [1, 2]}),
    ],
)
def test_finds_the_json(text: str, expected: object) -> None:
    assert extract_json(text) == expected


def test_raw_newlines_inside_strings_are_kept() -> None:
    assert extract_json('{"reasoning": "line one\nline two\ttabbed"}') == {"reasoning": "line one\nline two\ttabbed"}


def test_latex_backslashes_survive() -> None:
    text = r'{"answer": "$\frac{a}{b} + \alpha \cdot \beta$, \text{ok} \right) \\ done", "n": "a\nb"}'
    value = extract_json(text)
    assert value["answer"] == r"$\frac{a}{b} + \alpha \cdot \beta$, \text{ok} \right) \ done"
    assert value["n"] == "a\nb"


def test_latex_only_with_valid_escapes_is_still_repaired() -> None:
    # \f and \b are valid JSON escapes, but a form feed in an answer means the model wrote LaTeX
    assert extract_json(r'{"x": "\frac{1}{2} and \beta"}') == {"x": r"\frac{1}{2} and \beta"}


def test_latex_inside_a_fence_inside_prose() -> None:
    text = 'Result:\n```json\n{"formula": "\\sqrt{x}"}\n```'
    assert extract_json(text) == {"formula": "\\sqrt{x}"}


@pytest.mark.parametrize(
    "text", ["", "   ", "no json at all", '"just a string"', "42", "{", "I'd use {braces} here", "see [this] and [that"]
)
def test_no_json_raises_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        extract_json(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('Calling it: {"tool": "lookup", "arguments": {"q": "Paris"', {"tool": "lookup", "arguments": {"q": "Paris"}}),
        (
            "{'tool': 'lookup', arguments: {'q': 'Paris'}, // the city\n}",
            {"tool": "lookup", "arguments": {"q": "Paris"}},
        ),
        ("{not: valid", {"not": "valid"}),
        ('{"answer": "unterminated', {"answer": "unterminated"}),
        ('[{"id": "s1", "task": "add', [{"id": "s1", "task": "add"}]),
    ],
    ids=["unclosed after prose", "single quotes, bare key, comment", "bare key and value", "open string", "open list"],
)
def test_what_nothing_parses_is_mended_by_json_repair(text: str, expected: object) -> None:
    assert extract_json(text) == expected


def test_the_mending_keeps_latex() -> None:
    assert extract_json('{"formula": "\\beta + \\frac{1}{2}", "note": "open') == {
        "formula": "\\beta + \\frac{1}{2}",
        "note": "open",
    }


def test_a_reply_longer_than_the_repair_limit_is_not_mended() -> None:
    long_reply = '{"text": "' + "x" * extraction._REPAIR_LIMIT
    with pytest.raises(ValueError, match="no JSON object or array"):
        extract_json(long_reply)
    assert extract_json(long_reply[:1000]) == {"text": "x" * (1000 - len('{"text": "'))}


DEEP_ARRAYS = "[" * 3000 + "]" * 3000


@pytest.mark.parametrize(
    "text",
    [
        DEEP_ARRAYS,
        '{"a":' * 3000 + "1" + "}" * 3000,
        "[" * 100_000,
        '{"a": [' * 50_000,
        "The plan: " + DEEP_ARRAYS + " as promised",
        "```json\n" + DEEP_ARRAYS + "\n```",
        '{"a": "\\x", "b": ' + "[" * 3000 + "]" * 3000 + "}",  # the repair cannot help either
    ],
    ids=["arrays", "objects", "unclosed arrays", "unclosed objects", "in prose", "in a fence", "needing repair"],
)
def test_json_nested_deeper_than_the_parser_follows_is_no_json(text: str) -> None:
    with pytest.raises(ValueError, match="no JSON object or array"):
        extract_json(text)
    assert parse_json(text.strip()) is None


@pytest.mark.parametrize("depth", [10, 400, 900, 990, 1100])
def test_nesting_parses_up_to_the_parsers_limit(depth: int) -> None:
    text = '{"a": ' + "[" * depth + '"\\frac{1}{2}"' + "]" * depth + "}"  # LaTeX: the damage check descends
    try:
        value = extract_json(text)
    except ValueError:
        assert depth > 400  # too deep for json from here: no JSON, and no RecursionError
        return
    value = value["a"]
    for _ in range(depth):
        (value,) = value
    assert value == "\\frac{1}{2}"


class CountingTokens:
    """A compiled pattern that counts the matches its ``finditer`` handed out."""

    def __init__(self, pattern: re.Pattern[str]) -> None:
        self.pattern = pattern
        self.tokens = 0

    def finditer(self, string: str, pos: int = 0) -> Iterator[re.Match[str]]:
        for match in self.pattern.finditer(string, pos):
            self.tokens += 1
            yield match


@pytest.mark.parametrize(
    ("text", "passes"),
    [
        ("[" * 500_000 + "]" * 500_000, 1),
        ("[" * 1_000_000, 1),
        ('{"[\\"{' * 160_000, extraction._MAX_PASSES),  # quotes that pair up differently from each start
    ],
    ids=["balanced", "unclosed", "quotes and escapes"],
)
def test_a_megabyte_of_brackets_costs_a_few_passes(monkeypatch: pytest.MonkeyPatch, text: str, passes: int) -> None:
    tokens = CountingTokens(extraction._BRACKET_TOKEN)
    monkeypatch.setattr(extraction, "_BRACKET_TOKEN", tokens)
    with pytest.raises(ValueError):
        extract_json(text)
    assert 0 < tokens.tokens <= passes * len(text)


def reference_balanced_end(text: str, start: int) -> int | None:
    """The bracket closing the one at ``start``, scanning from it alone (what each start must get)."""
    depth, in_string, escaped = 0, False, False
    for index in range(start, len(text)):
        char = text[index]
        if in_string:
            escaped, in_string = (False, True) if escaped else (char == "\\", char != '"')
        elif char == '"':
            in_string = True
        elif char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
            if depth == 0:
                return index
    return None


def reference_escape(candidate: str) -> str:
    """Stray backslashes in strings doubled, one character at a time."""
    out, in_string, index = [], False, 0
    while index < len(candidate):
        char = candidate[index]
        if in_string and char == "\\":
            nxt, after = candidate[index + 1 : index + 2], candidate[index + 2 : index + 3]
            if nxt and nxt in '"\\/bfnrtu' and not (nxt in "bfrt" and after.isalpha()):
                out.append(candidate[index : index + 2])
                index += 2
                continue
            out.append("\\\\")
        else:
            in_string ^= char == '"'
            out.append(char)
        index += 1
    return "".join(out)


def test_the_single_pass_finds_what_scanning_from_each_start_finds() -> None:
    rng = random.Random(20261130)
    for _ in range(20_000):
        text = "".join(rng.choice('{}[]"\\ab,:\nfé') for _ in range(rng.randint(1, 24)))
        starts = [index for index, char in enumerate(text) if char in "{["]
        if starts:
            ends = extraction._balanced_ends(text, starts)
            assert {s: ends.get(s) for s in starts} == {s: reference_balanced_end(text, s) for s in starts}, text
        assert extraction._escape_stray_backslashes(text) == reference_escape(text), text


def test_without_mending_json_that_never_closed_is_no_json() -> None:
    cut = '{"achieved": true, "reasoning": "ok but'
    assert extract_json(cut) == {"achieved": True, "reasoning": "ok but"}
    with pytest.raises(ValueError, match="no JSON object or array"):
        extract_json(cut, mend=False)


@pytest.mark.parametrize(
    ("text", "written"),
    [
        ('  {"a": 1}\n', '{"a": 1}'),
        ('Here:\n```json\n{"a": 1}\n```\nThe result is 5.', '```json\n{"a": 1}\n```'),
        ('Call [it] now: [{"a": 1}] and then 5.', '[{"a": 1}]'),
        ('Cut off: {"a": 1, "b": [2', '{"a": 1, "b": [2'),
    ],
    ids=["whole", "fenced", "inside prose", "mended"],
)
def test_the_span_is_where_the_json_was_written(text: str, written: str) -> None:
    value, start, end = extract_json_span(text)
    assert text[start:end] == written and value == extract_json(text)
