"""The analyzer: its prompt, the verdict call, coercion, the regex fallback and the safe default."""

from __future__ import annotations

from typing import Any

import pytest

from dagmagic.engine.calls import prompts
from dagmagic.engine.calls.analyzer import SAFE_DEFAULT, Analyzer, contradiction, regex_analysis
from dagmagic.events import LLMCallRecorded, RunWarning
from dagmagic.llm import ChatModel, ModelRegistry
from dagmagic.models import AnalysisResult, PlanStep
from dagmagic.settings import DagSettings
from dagmagic.testing import ScriptedLLM, ScriptedRequest

SETTINGS = DagSettings(llm_retry_backoff=0.001)
TOOL_AND_JSON = ("tool_call", "json_mode")
GOAL = "What is the population of Paris?"
CUT_OFF = '{"achieved": true, "confidence": 0.7, "reasoning": "ok but'
BROKEN = 'Verdict: achieved = true, confidence = 0.7, reasoning = "ok but'
"""Fields no JSON parser reads (no bracket): only the regex finds them."""
GARBAGE = "I am not sure what you want from me."


class Harness:
    """An analyzer over a scripted model, with every event its model emitted."""

    def __init__(
        self, replies: Any, *, capabilities: tuple[str, ...] = TOOL_AND_JSON, settings: DagSettings = SETTINGS
    ) -> None:
        self.llm = ScriptedLLM({"analyze": replies}, capabilities=capabilities)
        self.events: list[Any] = []
        model = ChatModel(ModelRegistry().register("m", self.llm).get("m"), settings=settings, emit=self.events.append)
        self.analyzer = Analyzer(model, settings)

    @property
    def requests(self) -> list[ScriptedRequest]:
        return self.llm.requests_for("analyze")

    async def analyze(self, steps: list[tuple[str, PlanStep]] | None = None, round: int = 1) -> AnalysisResult:
        return await self.analyzer.analyze(
            GOAL, steps if steps is not None else [done("s1", "2.1 million")], round=round
        )


def done(sid: str, result: str, task: str = "Look it up") -> tuple[str, PlanStep]:
    return sid, PlanStep(id=sid, task=task, status="completed", result=result)


def verdict(**fields: Any) -> dict[str, Any]:
    return {"achieved": True, "confidence": 0.9, "reasoning": "Both sources agree.", "final_answer": None, **fields}


# --- the call --------------------------------------------------------------------------------------------------


async def test_analyze_uses_purpose_analyze_temperature_zero_and_verdict_lines() -> None:
    harness = Harness([verdict(final_answer="About 2.1 million.")])
    result = await harness.analyze(round=3)

    assert result == AnalysisResult(
        achieved=True, confidence=0.9, reasoning="Both sources agree.", final_answer="About 2.1 million."
    )
    (request,) = harness.llm.requests
    assert (request.purpose, request.temperature, request.round) == ("analyze", 0.0, 3)
    assert (request.tools, request.level) == ([], "text")  # verdict lines at every level: no schema sent
    (call,) = [event.call for event in harness.events if isinstance(event, LLMCallRecorded)]
    assert (call.purpose, call.round, call.structured_level) == ("analyze", 3, "text")
    assert call.reply == "yes 0.9: Both sources agree.\nAbout 2.1 million."  # the answer last


# --- the prompt ------------------------------------------------------------------------------------------------


async def test_prompt_asks_to_compare_sources_and_name_contradictions() -> None:
    harness = Harness([verdict()])
    await harness.analyze()
    system = harness.requests[0].messages[0]
    assert system["role"] == "system"
    assert "When steps disagree" in system["content"]
    assert "say which source\nis more reliable" in system["content"]
    assert "lower your confidence" in system["content"]


async def test_prompt_carries_the_goal_and_each_step_with_its_reference_status_task_and_result() -> None:
    harness = Harness([verdict()])
    await harness.analyze(
        [done("r1.s2", "INSEE: 2.1 million", "Ask INSEE"), done("s1", "Wiki: 2.2 million", "Ask wiki")]
    )
    user = harness.requests[0].messages[-1]["content"]
    assert user.startswith(f"Goal: {GOAL}\n\nStep results:\n")
    assert "[r1.s2] (completed) Ask INSEE\nResult: INSEE: 2.1 million\n\n[s1] (completed) Ask wiki" in user


async def test_step_results_are_capped_at_analyzer_result_chars_each() -> None:
    assert DagSettings().analyzer_result_chars == 10000
    harness = Harness([verdict()])
    await harness.analyze([done("s1", "█" * 10500), done("s2", "short result"), done("s3", "▒" * 12000)])
    user = harness.requests[0].messages[-1]["content"]
    assert "█" * 10000 + "... (truncated)\n\n[s2]" in user
    assert user.count("█") == 10000
    assert "▒" * 10000 + "... (truncated)" in user
    assert user.count("▒") == 10000
    assert "Result: short result\n" in user  # short results are left alone
    assert user.count("(truncated)") == 2


async def test_the_cap_follows_the_settings() -> None:
    harness = Harness([verdict()], settings=DagSettings(analyzer_result_chars=150, llm_retry_backoff=0.001))
    await harness.analyze([done("s1", "█" * 151), done("s2", "▒" * 150)])
    user = harness.requests[0].messages[-1]["content"]
    assert "█" * 150 + "... (truncated)" in user and user.count("█") == 150
    assert user.endswith("Result: " + "▒" * 150)  # exactly at the cap: not cut
    assert user.count("(truncated)") == 1


async def test_failed_and_skipped_steps_show_their_error() -> None:
    failed = PlanStep(id="s2", task="Query the API", status="failed", error="TimeoutError: timed out after 600s")
    skipped = PlanStep(id="s3", task="Summarize", status="skipped", error="dependency s2 failed")
    harness = Harness([verdict(achieved=False, confidence=0.2)])
    await harness.analyze([done("s1", "partial"), ("s2", failed), ("s3", skipped)])
    user = harness.requests[0].messages[-1]["content"]
    assert "[s2] (failed) Query the API\nError: TimeoutError: timed out after 600s" in user
    assert "[s3] (skipped) Summarize\nError: dependency s2 failed" in user


# --- coercion of what the model wrote --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "achieved", "confidence"),
    [
        ({"achieved": "false"}, False, 0.9),
        ({"achieved": "no"}, False, 0.9),
        ({"achieved": 0}, False, 0.9),
        ({"achieved": "true"}, True, 0.9),
        ({"achieved": "yes"}, True, 0.9),
        ({"confidence": 5.0}, True, 0.05),
        ({"confidence": "85%"}, True, 0.85),
        ({"confidence": -0.5}, True, 0.0),
        ({"confidence": "abc"}, True, 0.0),
        ({"confidence": "0.35"}, True, 0.35),
        ({"confidence": None}, True, 0.0),
    ],
)
@pytest.mark.parametrize("capabilities", [TOOL_AND_JSON, ()], ids=["tool_call", "text"])
async def test_verdict_fields_are_coerced(
    fields: dict[str, Any], achieved: bool, confidence: float, capabilities: tuple[str, ...]
) -> None:
    harness = Harness([verdict(**fields)], capabilities=capabilities)
    result = await harness.analyze()
    assert (result.achieved, result.confidence) == (achieved, confidence)
    assert result.reasoning == "Both sources agree."
    assert len(harness.requests) == 1  # coerced, not refused and re-asked


@pytest.mark.parametrize("capabilities", [TOOL_AND_JSON, ("json_mode",), ()], ids=["tool_call", "json_mode", "text"])
async def test_a_verdict_cut_off_mid_json_is_mended_without_asking_again(capabilities: tuple[str, ...]) -> None:
    harness = Harness([CUT_OFF], capabilities=capabilities)
    result = await harness.analyze()
    assert result == AnalysisResult(achieved=True, confidence=0.7, reasoning="ok but", final_answer=None)
    assert len(harness.requests) == 1


@pytest.mark.parametrize("capabilities", [TOOL_AND_JSON, ("json_mode",), ()], ids=["tool_call", "json_mode", "text"])
async def test_broken_json_is_read_by_the_regex_fallback(capabilities: tuple[str, ...]) -> None:
    harness = Harness([BROKEN], capabilities=capabilities)
    result = await harness.analyze()
    assert result == AnalysisResult(achieved=True, confidence=0.7, reasoning="ok but", final_answer=None)
    assert [request.level for request in harness.requests] == ["text"]  # read at once, not asked again


async def test_an_unreadable_reply_is_asked_for_again_saying_what_to_write() -> None:
    later = '{"achieved": false, "confidence": 0.4, "reasoning": "missing the 2024 figure'
    harness = Harness([GARBAGE, later], capabilities=())
    result = await harness.analyze()
    assert (result.achieved, result.confidence, result.reasoning) == (False, 0.4, "missing the 2024 figure")
    assert harness.requests[1].messages[-2:] == [
        {"role": "assistant", "content": GARBAGE},
        {"role": "user", "content": prompts.ANALYZER_UNREAD},
    ]


@pytest.mark.parametrize("capabilities", [TOOL_AND_JSON, ()], ids=["tool_call", "text"])
async def test_garbage_gives_exactly_the_safe_default(capabilities: tuple[str, ...]) -> None:
    harness = Harness([GARBAGE], capabilities=capabilities)
    result = await harness.analyze()
    assert result == SAFE_DEFAULT
    assert (result.achieved, result.confidence, result.reasoning, result.final_answer) == (
        False,
        0.0,
        "The model's verdict could not be read, so whether the goal was reached is not known",
        None,
    )
    assert len(harness.requests) == 2  # asked, then asked once more


async def test_the_safe_default_handed_out_is_a_copy() -> None:
    first = await Harness([GARBAGE]).analyze()
    first.reasoning = "edited by the user"
    second = await Harness([GARBAGE]).analyze()
    assert first is not SAFE_DEFAULT
    assert SAFE_DEFAULT.reasoning == second.reasoning == SAFE_DEFAULT.reasoning


async def test_an_object_without_the_verdicts_fields_is_not_taken_for_a_verdict() -> None:
    harness = Harness([{"answer": "Paris has 2.1 million people"}, verdict()])
    result = await harness.analyze()
    assert result == AnalysisResult(achieved=True, confidence=0.9, reasoning="Both sources agree.")
    assert [r.level for r in harness.requests] == ["text", "text"]  # asked once more


async def test_an_object_without_the_verdicts_fields_everywhere_gives_the_safe_default() -> None:
    harness = Harness([{"answer": "Paris"}])
    assert await harness.analyze() == SAFE_DEFAULT


# --- regex_analysis directly -----------------------------------------------------------------------------------


def test_regex_analysis_reads_prose_and_escaped_text() -> None:
    found = regex_analysis('achieved: no\nconfidence = 0.3\n"reasoning": "the \\"2024\\" figure is missing\\nstill"')
    assert found == {"achieved": "no", "confidence": "0.3", "reasoning": 'the "2024" figure is missing\nstill'}
    assert AnalysisResult.model_validate(found).achieved is False


def test_regex_analysis_reads_a_percentage_as_one() -> None:
    from dagmagic.models import AnalysisResult

    for text, confidence in [("achieved: no, confidence: 5%", 0.05), ('"achieved": false, "confidence": 85', 0.85)]:
        found = regex_analysis(text)
        assert found is not None and AnalysisResult.model_validate(found).confidence == confidence


def test_regex_analysis_reads_the_final_answer_and_needs_achieved() -> None:
    found = regex_analysis('{"achieved": true, "confidence": 0.8, "reasoning": "ok", "final_answer": "Paris')
    assert found is not None
    assert (found["reasoning"], found["final_answer"]) == ("ok", "Paris")
    assert regex_analysis('{"confidence": 0.8, "reasoning": "ok"}') is None
    assert regex_analysis("nothing here was achieved") is None


# --- a verdict that contradicts itself ------------------------------------------------------------------------

NOT_REACHED = "The goal is not reached."
"""What a 0.5B model wrote as the reasoning of "achieved, 100%" (issue 23)."""


@pytest.mark.parametrize(
    "reasoning",
    [
        NOT_REACHED,
        "Both sources agree on 2.1 million. However, the goal has not been achieved.",
        "The goal was not fully met: the 2024 figure is missing",
        "the question isn't answered yet.",
        "The results do not answer the goal.",
    ],
)
def test_an_achieved_verdict_whose_reasoning_says_the_goal_is_not_reached_contradicts_itself(reasoning: str) -> None:
    said = contradiction(AnalysisResult(achieved=True, confidence=1.0, reasoning=reasoning))
    assert said is not None and said in reasoning


@pytest.mark.parametrize(
    ("achieved", "reasoning"),
    [
        (True, "The goal is not reached by step 1 alone, but s2 completes it."),
        (True, "Step 1 did not reach the source. Step 2 did: the goal is reached."),
        (True, "The goal was not reached in round 1; now it is reached with r1.s1 and s2."),
        (True, "The goal is not reached without s2's figure, which it gives: 2.1 million."),
        (True, "The goal is not met by s1 on its own; together with s2 it is."),
        (True, "Both sources agree on 2.1 million (INSEE 2024)."),
        (True, ""),
        (False, NOT_REACHED),
    ],
)
def test_honest_reasoning_is_no_contradiction(achieved: bool, reasoning: str) -> None:
    assert contradiction(AnalysisResult(achieved=achieved, confidence=0.9, reasoning=reasoning)) is None


async def test_a_verdict_that_contradicts_itself_is_asked_for_again_quoting_why() -> None:
    corrected = verdict(achieved=False, confidence=0.4, reasoning="The 2024 figure is missing.")
    harness = Harness([verdict(confidence=1.0, reasoning=NOT_REACHED, final_answer="2.1 million"), corrected])
    result = await harness.analyze()
    assert (result.achieved, result.confidence, result.reasoning) == (False, 0.4, "The 2024 figure is missing.")
    assert len(harness.requests) == 2
    asked = str(harness.requests[1].messages[-1]["content"])
    assert "says the goal was reached" in asked and f"'{NOT_REACHED}'" in asked


async def test_a_verdict_that_contradicts_itself_twice_counts_as_not_achieved_with_a_warning() -> None:
    events: list[Any] = []
    llm = ScriptedLLM({"analyze": [verdict(confidence=1.0, reasoning=NOT_REACHED, final_answer="2.1 million")]})
    model = ChatModel(ModelRegistry().register("m", llm).get("m"), settings=SETTINGS, emit=events.append)
    result = await Analyzer(model, SETTINGS, emit=events.append).analyze(GOAL, [done("s1", "2.1 million")], round=1)
    assert (result.achieved, result.confidence, result.final_answer) == (False, 0.0, None)
    assert NOT_REACHED in result.reasoning and len(llm.requests_for("analyze")) == 2
    assert any("contradicted itself" in event.message for event in events if isinstance(event, RunWarning))


# --- an answer checked against the results (issue 42) ----------------------------------------------------------

FRANCE = done("s1", "France: 68,401,997 inhabitants (INSEE).", task="Population of France")
GERMANY = done("s2", "Germany: 84,482,267 inhabitants (Destatis).", task="Population of Germany")
WRONG_ORDER = "France has more people than Germany, with 68,401,997 compared to Germany's 84,482,267."
RIGHT_ORDER = "Germany has more people than France: 84,482,267 against 68,401,997."


def checked(replies: list[Any]) -> tuple[ScriptedLLM, list[Any], Analyzer]:
    events: list[Any] = []
    llm = ScriptedLLM({"analyze": replies})
    model = ChatModel(ModelRegistry().register("m", llm).get("m"), settings=SETTINGS, emit=events.append)
    return llm, events, Analyzer(model, SETTINGS, emit=events.append)


async def test_a_right_answer_with_figures_from_the_results_costs_no_extra_call() -> None:
    llm, events, analyzer = checked([verdict(confidence=1.0, final_answer=RIGHT_ORDER)])
    result = await analyzer.analyze("Which has more people?", [FRANCE, GERMANY], round=1)
    assert (result.achieved, result.final_answer) == (True, RIGHT_ORDER)
    assert len(llm.requests_for("analyze")) == 1 and not [e for e in events if isinstance(e, RunWarning)]


async def test_a_figure_a_calculator_step_computed_passes_with_no_extra_call() -> None:
    total = done("s3", "152884264", task="calculator(expression='68401997+84482267')")
    answer = "Together they have 152,884,264 people."
    llm, _, analyzer = checked([verdict(confidence=1.0, final_answer=answer)])
    result = await analyzer.analyze("How many people in both?", [FRANCE, GERMANY, total], round=1)
    assert (result.achieved, result.final_answer) == (True, answer) and len(llm.requests_for("analyze")) == 1


async def test_a_confident_wrong_comparison_is_judged_again_and_again_wrong_is_not_reached() -> None:
    llm, events, analyzer = checked([verdict(confidence=1.0, final_answer=WRONG_ORDER)])
    discarded: list[str] = []
    result = await analyzer.analyze(
        "Which has more people, France or Germany?", [FRANCE, GERMANY], round=1, on_discard=discarded.append
    )
    assert (result.achieved, result.confidence, result.final_answer) == (False, 0.0, None)
    said = "it says France has more people than Germany, but the results give France 68,401,997 and Germany 84,482,267"
    assert said in result.reasoning
    requests = llm.requests_for("analyze")
    assert len(requests) == 2
    asked = str(requests[1].messages[-1]["content"])
    assert "It says France has more people than Germany" in asked and "only from the step results" in asked
    warnings = [e.message for e in events if isinstance(e, RunWarning)]
    assert len(warnings) == 2 and "did not check against the step results" in warnings[0]


async def test_an_invented_sum_is_judged_again_and_a_right_verdict_is_taken() -> None:
    invented = "Together they have 12,480,000 three times: 37,440,000 people."
    honest = verdict(achieved=False, confidence=0.3, reasoning="The sum needs a calculator step.")
    llm, _, analyzer = checked([verdict(confidence=1.0, final_answer=invented), honest])
    result = await analyzer.analyze("How many people in both?", [FRANCE, GERMANY], round=1)
    assert (result.achieved, result.reasoning) == (False, "The sum needs a calculator step.")
    asked = str(llm.requests_for("analyze")[1].messages[-1]["content"])
    assert "The answer says 37,440,000, which no step result holds and no tool computed." in asked


async def test_an_invented_figure_then_a_right_answer_is_taken() -> None:
    invented = "Germany has 84,482,267 people, France 70,000,123."
    right = "Germany has 84,482,267 people, France 68,401,997."
    llm, _, analyzer = checked([verdict(confidence=1.0, final_answer=invented), verdict(final_answer=right)])
    result = await analyzer.analyze("Populations?", [FRANCE, GERMANY], round=1)
    assert (result.achieved, result.final_answer) == (True, right) and len(llm.requests_for("analyze")) == 2


async def test_a_figure_from_the_goal_passes_with_no_extra_call() -> None:
    answer = "No: France's 68,401,997 is less than 70,000,000."
    llm, _, analyzer = checked([verdict(confidence=1.0, final_answer=answer)])
    result = await analyzer.analyze("Does France have more than 70,000,000 people?", [FRANCE], round=1)
    assert (result.achieved, result.final_answer) == (True, answer) and len(llm.requests_for("analyze")) == 1


def area(sid: str, country: str, km2: int) -> tuple[str, PlanStep]:
    step = PlanStep(
        id=sid, task=f"area({country})", status="completed", result=str(km2), tool_args={"country": country}
    )
    return sid, step


AREAS = [area("s1", "Dorvania", 84_300), area("s2", "Zantheria", 41_750)]
META = (
    "The step results reach the user's goal by providing the areas of Dorvania and Zantheria in square kilometres. "
    "The confidence is high because all results are given."
)


async def test_an_answer_that_speaks_of_the_results_and_gives_none_is_judged_again() -> None:
    """The 1.5B wrote its judgement where the answer goes ("The step results reach the user's goal by providing
    the areas ..."), with none of the four areas the tool steps found: judged again, and the answer that gives
    them is taken.
    """
    right = "Dorvania: 84,300 km²; Zantheria: 41,750 km²."
    llm, events, analyzer = checked([verdict(final_answer=META), verdict(final_answer=right)])
    result = await analyzer.analyze("What are the areas of Dorvania and Zantheria?", AREAS, round=1)
    assert (result.achieved, result.final_answer) == (True, right)
    asked = str(llm.requests_for("analyze")[1].messages[-1]["content"])
    assert "The answer speaks of the results but gives none of what they found (84300, 41750)" in asked
    assert any("did not check" in e.message for e in events if isinstance(e, RunWarning))


async def test_an_answer_that_gives_what_the_tool_steps_found_in_words_or_figures_passes() -> None:
    for answer in ("The step results give 84.3 thousand km² for Dorvania.", "Dorvania is larger."):
        llm, _, analyzer = checked([verdict(final_answer=answer)])
        result = await analyzer.analyze("Which is larger, Dorvania or Zantheria?", AREAS, round=1)
        assert result.achieved and len(llm.requests_for("analyze")) == 1, answer
