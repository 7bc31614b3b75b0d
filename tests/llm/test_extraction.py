from __future__ import annotations

import pytest

from dagmagic.llm import extract_json


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


@pytest.mark.parametrize("text", ["", "   ", "no json at all", "{not: valid", '"just a string"', "42"])
def test_no_json_raises_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        extract_json(text)
