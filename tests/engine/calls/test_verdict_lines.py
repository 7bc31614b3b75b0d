"""Verdict lines: the decision on the first line, then the answer; and how a scripted verdict is written in them."""

from __future__ import annotations

from typing import Any

import pytest

from dagmagic.engine.calls.analyzer import read_verdict
from dagmagic.engine.calls.verdict_lines import read_decision, read_verdict_lines, render_verdict_lines
from dagmagic.models import AnalysisResult


@pytest.mark.parametrize(
    ("line", "achieved", "confidence", "reasoning"),
    [
        ("yes 0.9", True, "0.9", ""),
        ("Yes, 85%", True, "85%", ""),
        ("no 0.4: the 2024 figure is missing", False, "0.4", "the 2024 figure is missing"),
        ("**No** (confidence 0.3) - Sweden is missing", False, "0.3", "Sweden is missing"),
        ("Verdict: yes 1", True, "1", ""),
        ("achieved: true, 0.8", True, "0.8", ""),
        ("Not reached 0.2: no source", False, "0.2", "no source"),
        ("yes", True, None, ""),
    ],
)
def test_the_first_line_is_read_leniently(line: str, achieved: bool, confidence: str | None, reasoning: str) -> None:
    decision = read_decision(line)
    assert decision is not None
    assert (decision.achieved, decision.confidence, decision.reasoning) == (achieved, confidence, reasoning)


@pytest.mark.parametrize("line", ["Note: the figures agree", "Yesterday it rained", "The goal is reached", "{"])
def test_a_line_that_says_no_decision_is_none(line: str) -> None:
    assert read_decision(line) is None


def test_when_reached_everything_after_the_first_line_is_the_answer() -> None:
    verdict = read_verdict_lines("\nyes 0.95\nBoth are American.\n\n| a | b |\n")
    assert verdict == AnalysisResult(
        achieved=True, confidence=0.95, reasoning="", final_answer="Both are American.\n\n| a | b |"
    )
    missing = read_verdict_lines("no 0.3: the figure for Sweden\nand the year are missing")
    assert missing == AnalysisResult(
        achieved=False, confidence=0.3, reasoning="the figure for Sweden\nand the year are missing"
    )
    assert read_verdict_lines("yes").confidence == 1.0 and read_verdict_lines("no").confidence == 0.0  # type: ignore[union-attr]


def test_a_json_verdict_or_prose_with_its_fields_is_still_read() -> None:
    assert read_verdict(
        '{"achieved": true, "confidence": 0.7, "reasoning": "ok", "final_answer": "42"}'
    ) == AnalysisResult(achieved=True, confidence=0.7, reasoning="ok", final_answer="42")
    assert read_verdict('achieved = false, confidence = 0.2, reasoning = "cut') == AnalysisResult(
        achieved=False, confidence=0.2, reasoning="cut"
    )
    assert read_verdict("I am not sure.") is None


@pytest.mark.parametrize(
    "verdict",
    [
        {"achieved": True, "confidence": 0.9, "reasoning": "", "final_answer": "Paris.\n\nIn France."},
        {"achieved": True, "confidence": 1, "reasoning": "Both sources agree.", "final_answer": "Paris."},
        {"achieved": False, "confidence": 0.25, "reasoning": "missing\nthe year", "final_answer": None},
        {"achieved": False, "confidence": 0.0, "reasoning": "", "final_answer": None},
    ],
)
def test_a_scripted_verdict_reads_back_as_it_was_written(verdict: dict[str, Any]) -> None:
    text = render_verdict_lines(verdict)
    assert text is not None and read_verdict_lines(text) == AnalysisResult.model_validate(verdict)


@pytest.mark.parametrize(
    "verdict",
    [
        {"achieved": "yes", "confidence": 0.9, "reasoning": "", "final_answer": "a"},
        {"achieved": True, "confidence": "85%", "reasoning": "", "final_answer": "a"},
        {"achieved": True, "confidence": 0.9, "reasoning": "ok", "final_answer": None},
        {"achieved": False, "confidence": 0.2, "reasoning": "no", "final_answer": "a fallback"},
        {"achieved": True, "confidence": 0.9, "reasoning": "two\nlines", "final_answer": "a"},
        {"answer": "Paris"},
    ],
)
def test_a_verdict_only_json_can_say_keeps_its_json(verdict: dict[str, Any]) -> None:
    assert render_verdict_lines(verdict) is None
