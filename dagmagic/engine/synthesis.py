"""An answer written apart from the verdict: streamed by the smart model, and never empty.

Most runs need none: when a round reaches the goal, the verdict writes the answer (``dagmagic.engine.analyzer``).
This call writes it where the verdict cannot: a partial answer (a Stop, models that stopped answering), the
answer of a re-run round that did not reach the goal, after a Stop with no new verdict, an achieved verdict
with no answer, and when the smart model cannot stream (its verdict is made whole, then this answer streams).

Fallbacks: a failing or empty stream gives the analyzer's ``final_answer``; a goal not reached gives the
analyzer's reasoning and each completed step as ``**id**: result``; nothing completed gives
``(goal not achieved)`` and the reasoning. After a Stop the answer is written from what completed and says
that it is partial.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from dagmagic.engine import prompts
from dagmagic.engine.context import format_results, result_blocks, truncate
from dagmagic.engine.guard import ContextGuard
from dagmagic.errors import RUN_ENDING
from dagmagic.events import RunWarning
from dagmagic.llm import ChatModel
from dagmagic.models import AnalysisResult, PlanStep
from dagmagic.settings import DagSettings

__all__ = ["NOT_ACHIEVED", "REASONING_CHARS", "fallback_answer", "synthesis_messages", "synthesize"]

NOT_ACHIEVED = "(goal not achieved)"
REASONING_CHARS = 4000
"""The analyzer's reasoning as synthesis sees it, in characters."""
_SEPARATOR = "\n\n---\n\n"


FALLBACK_RESULT_CHARS = 10000
"""Characters of each step result a fallback answer quotes (as synthesis sees them, by default)."""


def fallback_answer(analysis: AnalysisResult | None, completed: Iterable[tuple[str, PlanStep]]) -> str:
    """The analyzer's reasoning, then every completed step as ``**ref**: result`` (each result capped)."""
    reasoning = analysis.reasoning.strip() if analysis else ""
    blocks = [
        f"**{ref}**: {truncate(step.result, FALLBACK_RESULT_CHARS)}"
        for ref, step in completed
        if step.status == "completed" and step.result
    ]
    if not blocks:
        return f"{NOT_ACHIEVED}\n\n{reasoning}".strip()
    return _SEPARATOR.join([reasoning, *blocks] if reasoning else blocks)


def synthesis_messages(goal: str, reasoning: str, results: str, *, partial: bool = False) -> list[dict[str, str]]:
    """The synthesis conversation around the formatted results."""
    user = prompts.SYNTHESIS_USER.format(goal=goal, reasoning=truncate(reasoning, REASONING_CHARS), results=results)
    if partial:
        user += prompts.SYNTHESIS_PARTIAL
    return [{"role": "system", "content": prompts.SYNTHESIS_SYSTEM}, {"role": "user", "content": user}]


async def synthesize(
    model: ChatModel,
    goal: str,
    steps: list[tuple[str, PlanStep]],
    analysis: AnalysisResult,
    settings: DagSettings,
    *,
    round: int,
    on_delta: Callable[[str], object],
    guard: ContextGuard | None = None,
    partial: bool = False,
) -> tuple[str, bool]:
    """The streamed answer and False, or a fallback answer and True."""
    blocks = result_blocks(steps, settings.synthesis_result_chars)
    if guard is not None:
        room = guard.room(model, synthesis_messages(goal, analysis.reasoning, "", partial=partial))
        blocks = await guard.fit_blocks(
            blocks, model, room=room, task=f"writing the answer to this goal: {goal}", round=round
        )
    messages = synthesis_messages(goal, analysis.reasoning, format_results(blocks), partial=partial)
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
    except RUN_ENDING:  # a wrong key or model ends the run (which then answers with the fallback)
        raise
    except Exception as exc:  # any other failure of the stream: the fallback below still answers
        pieces = []
        cause = f"{type(exc).__name__}: {exc}"
    else:
        cause = "the reply was empty"
    answer = "".join(pieces)
    if answer.strip():
        return answer, False
    fallback = "the analyzer's answer" if analysis.final_answer else "the completed steps' results"
    if model.emit is not None:
        message = f"The answer could not be written ({cause}): showing {fallback} instead."
        model.emit(RunWarning(message=message, round=round))
    return analysis.final_answer or fallback_answer(analysis, steps), True
