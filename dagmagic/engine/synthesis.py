"""The answer: streamed by the smart model when the goal was reached, and never empty.

Fallbacks: a failing or empty stream gives the analyzer's ``final_answer``; a goal not reached gives the
analyzer's reasoning and each completed step as ``**id**: result``; nothing completed gives
``(goal not achieved)`` and the reasoning.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from dagmagic.engine import prompts
from dagmagic.engine.analyzer import format_results
from dagmagic.llm import ChatModel
from dagmagic.models import AnalysisResult, PlanStep
from dagmagic.settings import DagSettings

__all__ = ["NOT_ACHIEVED", "fallback_answer", "synthesize"]

NOT_ACHIEVED = "(goal not achieved)"
_SEPARATOR = "\n\n---\n\n"


def fallback_answer(analysis: AnalysisResult | None, completed: Iterable[tuple[str, PlanStep]]) -> str:
    """The analyzer's reasoning, then every completed step as ``**ref**: result``."""
    reasoning = analysis.reasoning.strip() if analysis else ""
    blocks = [f"**{ref}**: {step.result}" for ref, step in completed if step.status == "completed" and step.result]
    if not blocks:
        return f"{NOT_ACHIEVED}\n\n{reasoning}".strip()
    return _SEPARATOR.join([reasoning, *blocks] if reasoning else blocks)


async def synthesize(
    model: ChatModel,
    goal: str,
    steps: list[tuple[str, PlanStep]],
    analysis: AnalysisResult,
    settings: DagSettings,
    *,
    round: int,
    on_delta: Callable[[str], object],
) -> tuple[str, bool]:
    """The streamed answer and False, or a fallback answer and True."""
    results = format_results(steps, settings.synthesis_result_chars)
    messages = [
        {"role": "system", "content": prompts.SYNTHESIS_SYSTEM},
        {
            "role": "user",
            "content": prompts.SYNTHESIS_USER.format(goal=goal, reasoning=analysis.reasoning, results=results),
        },
    ]
    pieces: list[str] = []
    try:
        if model.entry.capabilities.stream:
            async for chunk in model.stream(messages, purpose="synthesize", round=round):
                if chunk.text:
                    pieces.append(chunk.text)
                    on_delta(chunk.text)
        else:
            reply = await model.chat(messages, purpose="synthesize", round=round)
            pieces.append(reply.content)
            on_delta(reply.content)
    except Exception:  # any failure of the stream: the fallback below still answers
        pieces = []
    answer = "".join(pieces)
    if answer.strip():
        return answer, False
    return analysis.final_answer or fallback_answer(analysis, steps), True
