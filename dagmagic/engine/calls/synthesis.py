"""An answer written apart from the verdict: streamed by the smart model, and never empty.

Most runs need none: when a round reaches the goal, the verdict writes the answer (``dagmagic.engine.calls.analyzer``).
This call writes it where the verdict cannot: a partial answer (a Stop, models that stopped answering), the
answer of a run that ended without reaching the goal (its rounds used, or confident that more would not help:
written from what completed, saying what is missing), the answer of a re-run round that did not reach the goal,
after a Stop with no new verdict, an achieved verdict with no answer, and when the smart model cannot stream
(its verdict is made whole, then this answer streams). A stream that gives nothing at all (a server whose
streaming is broken) is asked for again without streaming. Results that are the same text (a step redone in
each round) are given once, under every reference that had them.

Fallbacks, when no answer could be written: an achieved verdict's ``final_answer``; else a listing that says why
it is one, with the analyzer's reasoning and each distinct completed result as ``**refs**: result``; nothing
completed gives ``(goal not achieved)`` and the reasoning. After a Stop the answer is written from what
completed and says that it is partial.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from dagmagic.engine.calls import prompts
from dagmagic.engine.calls.context import format_results, result_blocks, truncate
from dagmagic.engine.calls.guard import ContextGuard
from dagmagic.errors import RUN_ENDING, BudgetExceeded, TransientProviderError
from dagmagic.events import RunWarning
from dagmagic.llm import ChatModel
from dagmagic.models import AnalysisResult, PlanStep
from dagmagic.settings import DagSettings

__all__ = [
    "NOT_ACHIEVED",
    "REASONING_CHARS",
    "distinct_results",
    "fallback_answer",
    "synthesis_messages",
    "synthesize",
]

NOT_ACHIEVED = "(goal not achieved)"
REASONING_CHARS = 4000
UNREACHED_REASONING_CHARS = 600
"""The analyzer's reasoning as synthesis sees it, in characters."""
_SEPARATOR = "\n\n---\n\n"


FALLBACK_RESULT_CHARS = 10000
"""Characters of each step result a fallback answer quotes (as synthesis sees them, by default)."""


def distinct_results(steps: Iterable[tuple[str, PlanStep]]) -> list[tuple[str, PlanStep]]:
    """``steps`` with each completed result given once: the steps whose results are the same text become one,
    under every reference that had it (``"r1.s1, r2.s1, s1"``), where the first of them was, with the latest
    step's task. Other steps are left as they are.
    """
    merged: list[tuple[list[str], PlanStep]] = []
    by_text: dict[str, int] = {}
    for ref, step in steps:
        text = step.result.strip() if step.status == "completed" and step.result else None
        if text is None or text not in by_text:
            if text is not None:
                by_text[text] = len(merged)
            merged.append(([ref], step))
            continue
        refs, _ = merged[by_text[text]]
        merged[by_text[text]] = ([*refs, ref], step)
    return [(", ".join(refs), step) for refs, step in merged]


def fallback_answer(
    analysis: AnalysisResult | None, completed: Iterable[tuple[str, PlanStep]], why: str = "No answer was written"
) -> str:
    """The last resort, when no model could write the answer: ``why`` and the analyzer's reasoning, then each
    distinct completed result as ``**refs**: result`` (each capped); ``(goal not achieved)`` and the reasoning when
    nothing completed.
    """
    reasoning = analysis.reasoning.strip() if analysis else ""
    blocks = [
        f"**{ref}**: {truncate(step.result, FALLBACK_RESULT_CHARS)}"
        for ref, step in distinct_results(completed)
        if step.status == "completed" and step.result
    ]
    if not blocks:
        return f"{NOT_ACHIEVED}\n\n{reasoning}".strip()
    lead = f"*{why}: here are the results of the steps that completed.*"
    if analysis is not None and not analysis.achieved:
        reasoning = f"The goal was not reached: {reasoning or '(the verdict gave no reason)'}"
    return _SEPARATOR.join([f"{lead}\n\n{reasoning}" if reasoning else lead, *blocks])


def unreached_lead(analysis: AnalysisResult) -> str:
    """The first lines of an answer to a goal not reached: what is missing, in the verdict's words. Written by us,
    not asked of the model: a small model asked to say it copies the instruction instead.
    """
    reasoning = truncate(analysis.reasoning.strip(), UNREACHED_REASONING_CHARS) or "The verdict gave no reason."
    return f"**Not fully answered.** {reasoning}\n\n"


def synthesis_messages(
    goal: str, reasoning: str, results: str, *, partial: bool = False, unreached: bool = False
) -> list[dict[str, str]]:
    """The synthesis conversation around the formatted results."""
    user = prompts.SYNTHESIS_USER.format(goal=goal, reasoning=truncate(reasoning, REASONING_CHARS), results=results)
    if partial:
        user += prompts.SYNTHESIS_PARTIAL
    elif unreached:
        user += prompts.SYNTHESIS_UNREACHED
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
    unreached: bool = False,
) -> tuple[str, bool]:
    """The written answer and False, or a fallback answer and True. ``unreached``: the run ended without
    reaching the goal, and the answer says what is missing.
    """
    steps = distinct_results(steps)
    kind = {"partial": partial, "unreached": unreached}
    blocks = result_blocks(steps, settings.synthesis_result_chars)
    if guard is not None:
        room = guard.room(model, synthesis_messages(goal, analysis.reasoning, "", **kind))
        blocks = await guard.fit_blocks(
            blocks, model, room=room, task=f"writing the answer to this goal: {goal}", round=round
        )
    messages = synthesis_messages(goal, analysis.reasoning, format_results(blocks), **kind)
    lead = unreached_lead(analysis) if unreached and not partial else ""
    unsent = [lead] if lead else []

    def delta(text: str) -> object:
        while unsent:  # the shortfall, said by us before the first word the model writes
            on_delta(unsent.pop())
        return on_delta(text)

    try:
        answer = await _written(model, messages, round=round, on_delta=delta)
    except RUN_ENDING:  # a wrong key or model ends the run (which then answers with the fallback)
        raise
    except BudgetExceeded:  # not a failure: the run answers as its budget says (Drive.out_of_budget)
        raise
    except Exception as exc:  # any other failure of the call: the fallback below still answers
        answer, cause = "", f"{type(exc).__name__}: {exc}"
    else:
        cause = "the reply was empty"
    if answer.strip():
        return lead + answer, False
    verdicts = analysis.final_answer if analysis.final_answer and not unreached else None
    if model.emit is not None:
        instead = "the analyzer's answer" if verdicts else "the completed steps' results"
        message = f"The answer could not be written ({cause}): showing {instead} instead."
        model.emit(RunWarning(message=message, round=round))
    return verdicts or fallback_answer(analysis, steps, f"The answer could not be written ({cause})"), True


async def _written(
    model: ChatModel, messages: list[dict[str, str]], *, round: int, on_delta: Callable[[str], object]
) -> str:
    """The answer, streamed when the model can. A stream that gave no text at all, empty or broken before its
    first piece, is asked for again without streaming: some servers' streaming is broken (llama.cpp's sent one
    role chunk, then the end). One that breaks after some text raises (that text was shown already).
    """
    if model.entry.capabilities.stream:
        pieces: list[str] = []
        try:
            async for chunk in model.stream(messages, purpose="synthesize", round=round):
                if chunk.text:
                    pieces.append(chunk.text)
                    on_delta(chunk.text)
        except TransientProviderError as broken:
            if "".join(pieces).strip():
                raise
            why = f"The answer's stream broke before any text ({broken.kind})"
        else:
            if "".join(pieces).strip():
                return "".join(pieces)
            why = "The answer's stream was empty"
        if model.emit is not None:
            model.emit(RunWarning(message=f"{why}: it is asked for again without streaming.", round=round))
    reply = await model.chat(messages, purpose="synthesize", round=round)
    on_delta(reply.content)
    return reply.content
