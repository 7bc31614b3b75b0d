"""The analyzer on fuzzed verdicts: always an ``AnalysisResult`` with a bool and a finite confidence in [0, 1]."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from dagmagic.engine.calls.analyzer import Analyzer, regex_analysis
from dagmagic.models import AnalysisResult, PlanStep

from .harness import CAPABILITIES, SETTINGS, FuzzLLM, assert_sane_verdict, chat_model
from .strategies import analysis_like, dump, json_ish_text, texts, wrapped

STEPS = [("s1", PlanStep(id="s1", task="look it up", status="completed", result="2.1 million"))]


@st.composite
def verdict_replies(draw: st.DrawFn) -> Any:
    kind = draw(st.integers(0, 5))
    if kind == 0:
        return draw(json_ish_text())
    if kind == 1:
        return draw(analysis_like())  # a dict: delivered as a tool call, JSON text or a fenced block
    return draw(wrapped(dump(draw(analysis_like()), ascii_only=draw(st.booleans()))))


async def analyze(replies: list[Any], level: str) -> AnalysisResult:
    llm = FuzzLLM({"analyze": replies}, capabilities=CAPABILITIES[level])
    return await Analyzer(chat_model(llm), SETTINGS).analyze("the goal", STEPS, round=1)


@given(st.lists(verdict_replies(), min_size=1, max_size=3), st.sampled_from(sorted(CAPABILITIES)))
@example(['{"achieved": true, "confidence": 1' + "0" * 1000 + "}"], "json_mode")
@example(['{"achieved": true, "confidence": -1' + "0" * 1000 + ', "reasoning": "r"}'], "text")
@example(['{"achieved": "yes", "confidence": 1e309}'], "text")
@example(['{"achieved": "yes", "confidence": NaN}'], "text")
async def test_the_verdict_is_always_sane(replies: list[Any], level: str) -> None:
    assert_sane_verdict(await analyze(replies, level))


@given(st.one_of(texts(300), json_ish_text(), analysis_like().map(dump)))
def test_the_regex_fallback_finds_fields_or_nothing(text: str) -> None:
    found = regex_analysis(text)
    if found is not None:
        assert_sane_verdict(AnalysisResult.model_validate(found))


@given(analysis_like())
def test_coercion_of_any_verdict_object(raw: dict[str, Any]) -> None:
    try:
        verdict = AnalysisResult.model_validate(raw)
    except ValueError:  # pydantic's ValidationError: an object as `achieved` is refused (a schema echoed back)
        return
    assert_sane_verdict(verdict)


@pytest.mark.parametrize(("digits", "clamped"), [("1" + "0" * 1000, 1.0), ("-1" + "0" * 1000, 0.0)])
async def test_a_confidence_beyond_the_range_of_floats_is_clamped_at_the_first_call(
    digits: str, clamped: float
) -> None:
    # found by the fuzzer: float(10**1000) raised OverflowError, so the verdict was refused at every level
    llm = FuzzLLM({"analyze": ['{"achieved": true, "confidence": ' + digits + ', "reasoning": "sure"}']})
    verdict = await Analyzer(chat_model(llm), SETTINGS).analyze("the goal", STEPS, round=1)
    assert (verdict.achieved, verdict.confidence, verdict.reasoning) == (True, clamped, "sure")
    assert len(llm.requests_for("analyze")) == 1
    assert AnalysisResult.model_validate({"confidence": 10**1000}).confidence == 1.0
