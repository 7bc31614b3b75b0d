"""The analyzer: did the round reach the goal, and how sure is it? It asks the smart model at temperature 0,
and when the goal is reached its ``final_answer`` is the answer itself, written for the user: the run is
answered from it, with no separate synthesis (``Drive.act``). A model that streams writes the verdict as a
stream, its answer shown while it is written (``dagmagic.engine.calls.verdict_stream``); a broken stream or an
unreadable reply is asked for again without streaming.

Lenient by design: the verdict's fields are coerced (``"false"`` -> False, confidence clamped to 0..1),
broken JSON goes through a regex, and total failure is a safe "not achieved, confidence 0" that leads
to a replan rather than a crash. A verdict that contradicts itself ("achieved", its reasoning saying the goal
is not reached) is asked for again once, quoting the contradiction; a second one counts as not achieved.

A reached verdict's answer is checked against what the analyzer read (``dagmagic.engine.calls.verdict_check``:
figures no result holds, comparisons and rankings their figures contradict); one that does not check is asked for
again once, quoting what did not; a second that does not counts as not achieved, so the loop plans again, the
reasons in its reasoning. An answer that checks costs no call.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from dagmagic.engine.calls import prompts
from dagmagic.engine.calls.context import format_results, result_blocks
from dagmagic.engine.calls.guard import STRUCTURED_RESERVE, ContextGuard
from dagmagic.engine.calls.verdict_check import Mismatch, check_answer
from dagmagic.engine.calls.verdict_lines import read_verdict_lines, render_verdict_lines
from dagmagic.engine.calls.verdict_stream import VerdictStream
from dagmagic.errors import TransientProviderError
from dagmagic.events import Event, RunWarning
from dagmagic.llm import ChatModel, extract_json
from dagmagic.models import AnalysisResult, PlanStep
from dagmagic.settings import DagSettings

__all__ = ["SAFE_DEFAULT", "Analyzer", "contradiction", "read_verdict", "regex_analysis"]


UNREAD_VERDICT = "The model's verdict could not be read, so whether the goal was reached is not known"
SAFE_DEFAULT = AnalysisResult(achieved=False, confidence=0.0, reasoning=UNREAD_VERDICT)

_BOOL = r'"?achieved"?\s*[:=]\s*"?(true|false|yes|no|1|0)\b'
_NUMBER = r'"?confidence"?\s*[:=]\s*"?(-?\d+(?:\.\d+)?(?:[ \t]*%)?)'
_TEXT = r'"?{field}"?\s*[:=]\s*"((?:[^"\\]|\\.)*)"?'


def regex_analysis(text: str) -> dict[str, Any] | None:
    """The verdict's fields pulled out of broken JSON or prose; None without an ``achieved`` field."""
    achieved = re.search(_BOOL, text, re.IGNORECASE)
    if achieved is None:
        return None
    found: dict[str, Any] = {"achieved": achieved.group(1)}
    confidence = re.search(_NUMBER, text, re.IGNORECASE)
    if confidence:
        found["confidence"] = confidence.group(1)
    for field in ("reasoning", "final_answer"):
        match = re.search(_TEXT.format(field=field), text, re.IGNORECASE | re.DOTALL)
        if match:
            found[field] = match.group(1).replace('\\"', '"').replace("\\n", "\n")
    return found


_GOAL = r"\b(?:goal|question|request)\b"
_STATE = r"(?:reached|achieved|met|answered|fulfill?ed|accomplished)"
_NOT = r"(?:n['’]t|\s+not)"
_DENIED = re.compile(
    rf"{_GOAL}[^.;!?\n]*?\b(?:is|was|has|have|are|were){_NOT}(?:\s+(?:yet|been|fully|entirely|completely))*"
    rf"\s+{_STATE}\b"
    rf"|\b(?:do|does|did){_NOT}(?:\s+(?:yet|fully|entirely|completely))*\s+(?:answer|reach|meet|achieve|fulfill?)\b"
    rf"[^.;!?\n]*{_GOAL}",
    re.IGNORECASE,
)
"""A statement that the goal is not reached: "The goal is not reached.", "the question isn't answered yet"."""
_QUALIFIED = re.compile(
    r"\b(?:alone|by itself|on its own|but|however|although|though|until|unless|without|except|whereas)\b",
    re.IGNORECASE,
)
"""After such a statement, in the same sentence: it is about part of the results ("not reached by s1 alone,
but s2 completes it"), not a verdict on the whole."""
_AFFIRMED = re.compile(
    rf"(?:{_GOAL}|\bit\b)[^.;!?\n]*?\b(?:is|was|has|have|are|were)(?:\s+(?:now|fully|been|indeed|thus|therefore))*"
    rf"\s+{_STATE}\b"
    rf"|\b(?:answers|completes|reaches|meets|fulfill?s)\s+(?:it|the goal|the question)\b",
    re.IGNORECASE,
)
"""A statement that the goal (or "it") is reached."""
_SENTENCE_END = re.compile(r"(?<=[.;!?])\s+|\n+")


def contradiction(verdict: AnalysisResult) -> str | None:
    """The sentence of an achieved verdict's reasoning that says the goal is not reached, with nothing later
    saying it is (a small model wrote "achieved, 100%" and "The goal is not reached."); None when there is none.
    Kept narrow: a statement about part of the results ("not reached by step 1 alone, but s2 completes it") or one
    a later sentence takes back is no contradiction.
    """
    if not verdict.achieved:
        return None
    sentences = [part.strip() for part in _SENTENCE_END.split(verdict.reasoning) if part.strip()]
    for position, sentence in enumerate(sentences):
        denied = _DENIED.search(sentence)
        if denied is None or _QUALIFIED.search(sentence, denied.end()):
            continue
        if not any(_AFFIRMED.search(later) for later in sentences[position + 1 :]):
            return sentence
    return None


def _parse_verdict(raw: Any) -> AnalysisResult:
    """A verdict, its fields coerced; an object without ``achieved`` answered something else and is refused
    (so the call asks again instead of taking it for "not achieved, confidence 0" with no reasoning).
    """
    if not isinstance(raw, Mapping) or "achieved" not in raw:
        raise ValueError("the reply has no `achieved` field")
    return AnalysisResult.model_validate(raw)


def read_verdict(text: str) -> AnalysisResult | None:
    """The verdict a reply writes: its verdict lines, else the JSON verdict a model wrote instead, else the
    fields a regex finds in broken JSON or prose; None when it holds none.
    """
    verdict = read_verdict_lines(text)
    if verdict is not None:
        return verdict
    try:
        return _parse_verdict(extract_json(text))
    except (ValueError, TypeError, RecursionError):
        pass
    found = regex_analysis(text)
    return AnalysisResult.model_validate(found) if found is not None else None


def _written(verdict: AnalysisResult) -> str:
    """A verdict as the model wrote it, for a conversation that asks for it again."""
    return render_verdict_lines(verdict.model_dump()) or json.dumps(verdict.model_dump(), ensure_ascii=False)


def _sources(messages: list[dict[str, str]], steps: list[tuple[str, PlanStep]]) -> list[str]:
    """What an answer's figures may come from: the prompt (the goal, the results as the analyzer read them), each
    step's whole result, and what each of its tool calls returned.
    """
    texts = [message["content"] for message in messages]
    texts += [step.result for _, step in steps if step.result]
    texts += [call.observation for _, step in steps for call in step.tool_calls if call.observation]
    return texts


def _listed(problems: list[Mismatch]) -> str:
    return "; ".join(problem.message for problem in problems)


def _bullets(problems: list[Mismatch]) -> str:
    return "\n".join(f"- {problem.message[0].upper()}{problem.message[1:]}." for problem in problems)


class Analyzer:
    """Judges a round's results against the goal."""

    def __init__(
        self,
        model: ChatModel,
        settings: DagSettings,
        *,
        emit: Callable[[Event], object] | None = None,
        guard: ContextGuard | None = None,
    ):
        self.model = model
        self.settings = settings
        self.emit = emit
        self.guard = guard

    @staticmethod
    def messages(goal: str, results: str, note: str = "") -> list[dict[str, str]]:
        """The analyzer's conversation, around the formatted results (and what says they are partial)."""
        return [
            {"role": "system", "content": prompts.ANALYZER_SYSTEM},
            {"role": "user", "content": prompts.ANALYZER_USER.format(goal=goal, results=results) + note},
        ]

    async def prompt(self, goal: str, steps: Iterable[tuple[str, PlanStep]], *, round: int) -> list[dict[str, str]]:
        """The conversation with every result (each cut to ``analyzer_result_chars``), all within the
        model's window when there is a guard.
        """
        steps = list(steps)
        unfinished = sum(step.status in ("failed", "skipped") for _, step in steps)
        note = prompts.ANALYZER_PARTIAL.format(unfinished=unfinished, total=len(steps)) if unfinished else ""
        blocks = result_blocks(steps, self.settings.analyzer_result_chars)
        if self.guard is not None:
            room = self.guard.room(self.model, self.messages(goal, "", note), reserve=STRUCTURED_RESERVE)
            blocks = await self.guard.fit_blocks(
                blocks, self.model, room=room, task=f"judging whether this goal was reached: {goal}", round=round
            )
        return self.messages(goal, format_results(blocks), note)

    @property
    def streams(self) -> bool:
        """Whether verdicts stream (the model can), their ``final_answer`` shown while it is written."""
        return self.model.entry.capabilities.stream

    async def analyze(
        self,
        goal: str,
        steps: Iterable[tuple[str, PlanStep]],
        *,
        round: int,
        on_delta: Callable[[str], object] | None = None,
        on_discard: Callable[[str], object] | None = None,
    ) -> AnalysisResult:
        """The verdict; ``SAFE_DEFAULT`` when nothing readable came back.

        With ``on_delta``, a model that streams writes it as a stream, each new piece of its ``final_answer``
        going to ``on_delta``. When those pieces will not become a verdict (the stream broke, the reply could
        not be read, the call failed), ``on_discard(why)`` is called before the verdict is asked for again
        without streaming (the level that gave an unreadable reply is not asked twice) or the error is raised.
        An achieved verdict whose reasoning says the goal is not reached (``contradiction``) is dropped the same
        way and asked for again once, quoting it; a second such verdict counts as not achieved, confidence 0.
        So is one whose answer does not check against what the analyzer read (``check_answer``), quoting what did
        not check; a second such answer counts as not achieved, confidence 0, its reasoning saying why.
        """
        steps = list(steps)
        messages = await self.prompt(goal, steps, round=round)
        verdict = await self._verdict(messages, round=round, on_delta=on_delta, on_discard=on_discard)
        verdict = await self._consistent(verdict, messages, round=round, on_discard=on_discard)
        found = [step.result for _, step in steps if step.tool_args is not None and step.status == "completed"]
        sources = _sources(messages, steps)
        return await self._checked(
            verdict, messages, sources, [r for r in found if r], round=round, on_discard=on_discard
        )

    async def _consistent(
        self,
        verdict: AnalysisResult,
        messages: list[dict[str, str]],
        *,
        round: int,
        on_discard: Callable[[str], object] | None,
    ) -> AnalysisResult:
        """The verdict, asked for again once when it contradicts itself; not achieved when it does again."""
        said = contradiction(verdict)
        if said is None:
            return verdict
        why = f"the verdict contradicts itself (achieved, but its reasoning says {said!r}): it is asked for again"
        self._discard(on_discard, why)
        self._warn(f"The verdict contradicted itself (achieved, but its reasoning says {said!r}): asked again.", round)
        again = [
            *messages,
            {"role": "assistant", "content": _written(verdict)},
            {"role": "user", "content": prompts.ANALYZER_REASK.format(said=said)},
        ]
        verdict = await self._whole(again, round=round)
        said = contradiction(verdict)
        if said is None:
            return verdict
        self._warn(f"The verdict contradicted itself again ({said!r}): the round counts as not achieved.", round)
        reasoning = f"{verdict.reasoning} (The verdict said achieved but contradicted itself: taken as not achieved.)"
        return AnalysisResult(achieved=False, confidence=0.0, reasoning=reasoning)

    async def _checked(
        self,
        verdict: AnalysisResult,
        messages: list[dict[str, str]],
        sources: list[str],
        found: list[str],
        *,
        round: int,
        on_discard: Callable[[str], object] | None,
    ) -> AnalysisResult:
        """The verdict, judged again once when its answer does not check against the results (``check_answer``;
        ``found``: what the tool steps found); not achieved, saying why, when the second answer does not either.
        """
        problems = check_answer(verdict.final_answer, sources, found) if verdict.achieved else []
        if not problems:
            return verdict
        said = _listed(problems)
        self._discard(on_discard, f"the answer does not check against the step results ({said}): it is judged again")
        self._warn(f"The answer did not check against the step results: {said}. It was judged again.", round)
        again = [
            *messages,
            {"role": "assistant", "content": _written(verdict)},
            {"role": "user", "content": prompts.ANALYZER_CHECK.format(problems=_bullets(problems))},
        ]
        verdict = await self._whole(again, round=round)
        problems = check_answer(verdict.final_answer, sources, found) if verdict.achieved else []
        if not problems:
            return verdict
        said = _listed(problems)
        self._warn(f"The answer still did not check against the step results ({said}): not reached.", round)
        reasoning = (
            f"The answer did not check against the step results: {said}. A figure that must be computed needs a "
            "step that computes it with a tool."
        )
        return AnalysisResult(achieved=False, confidence=0.0, reasoning=reasoning)

    async def _verdict(
        self,
        messages: list[dict[str, str]],
        *,
        round: int,
        on_delta: Callable[[str], object] | None,
        on_discard: Callable[[str], object] | None,
    ) -> AnalysisResult:
        """The verdict, streamed when it can be; asked for again without streaming when the stream broke, gave
        nothing, or could not be read.
        """
        if on_delta is not None and self.streams:
            stream = VerdictStream(self.model, read_verdict, on_delta)
            try:
                streamed = await stream.run(messages, round=round)
            except TransientProviderError as broken:
                why = f"the verdict's stream broke ({broken.kind}): the round is judged again without streaming"
                self._discard(on_discard, why)
                self._warn(f"{why[0].upper()}{why[1:]}.", round)
            except Exception as exc:
                self._discard(on_discard, f"the verdict could not be written ({type(exc).__name__})")
                raise
            else:
                if streamed is not None:
                    return streamed
                if stream.empty:  # the server's streaming is broken, not the reply: asked again, whole
                    self._warn("The verdict's stream was empty: the round is judged again without streaming.", round)
                else:
                    self._discard(on_discard, "the verdict could not be read: the round is judged again")
        return await self._whole(messages, round=round)

    def _warn(self, message: str, round: int) -> None:
        if self.emit is not None:
            self.emit(RunWarning(message=message, round=round))

    @staticmethod
    def _discard(on_discard: Callable[[str], object] | None, why: str) -> None:
        if on_discard is not None:
            on_discard(f"{why[0].upper()}{why[1:]}.")

    async def _whole(self, messages: list[dict[str, str]], *, round: int) -> AnalysisResult:
        """The verdict from a call not streamed, asked once more (saying what to write) when the reply holds none;
        ``SAFE_DEFAULT`` when it still does not, or when the analyzer did not answer (why: on the verdict and as a
        warning).
        """
        for _attempt in range(2):
            try:
                result = await self.model.chat(
                    messages,
                    purpose="analyze",
                    round=round,
                    temperature=0.0,
                    structured_level="text",
                    reply_format="verdict",
                )
            except TransientProviderError as exc:  # retried already: not reached (not: it wrote nonsense)
                verdict = SAFE_DEFAULT.model_copy()  # a copy: it lands in the run, where it may be edited
                verdict.reasoning = f"{verdict.reasoning} ({exc.kind})"
                self._warn(f"The round could not be judged ({exc.kind}): it counts as not achieved.", round)
                return verdict
            read = read_verdict(result.content)
            if read is not None:
                return read
            messages = [
                *messages,
                {"role": "assistant", "content": result.content[:2000]},
                {"role": "user", "content": prompts.ANALYZER_UNREAD},
            ]
        return SAFE_DEFAULT.model_copy()
