"""The verdict, streamed: the analyzer's reply is read while it is written, and what its answer gains is handed
over piece by piece, so the user reads the answer while the round is still being judged.

The smart model is asked for verdict lines (``verdict_lines``): once the first line says the goal is reached,
everything after it is the answer, handed over as it arrives (trailing blanks held back until more follows). A
model that writes the JSON verdict instead (from its first ``{``) is read as partial JSON
(``pydantic_core.from_json`` with trailing strings allowed: an escape cut in two is left out until its other half
arrives). A verdict that says the goal was not reached hands nothing over. The whole reply is then read as the
non-streamed call reads it. ``None`` when it holds no verdict: the caller asks again without streaming.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pydantic_core

from dagmagic.engine.calls.verdict_lines import read_decision
from dagmagic.errors import TransientProviderError
from dagmagic.llm import ChatModel, extract_json
from dagmagic.llm.protocol import StreamChunk
from dagmagic.models import AnalysisResult, StructuredLevel

__all__ = ["VerdictStream"]

READ_EVERY = 256
"""The reply is read again once it grew by 1/``READ_EVERY`` of its length (at least a character): reading it
whole at every piece would cost time quadratic in its length; this keeps it linear, with the answer shown at
most that share behind (40 characters of a 10,000-character reply)."""


class VerdictStream:
    """Streams one verdict of ``model``; each new piece of its ``final_answer`` goes to ``on_delta``."""

    def __init__(
        self, model: ChatModel, read: Callable[[str], AnalysisResult | None], on_delta: Callable[[str], object]
    ) -> None:
        """``read``: the verdict in a whole reply's text, as the non-streamed call reads it (None: none)."""
        self.model = model
        self.read = read
        self.on_delta = on_delta
        self.level: StructuredLevel = "text"
        """The level asked at: verdict lines are text at every level."""
        self.empty = False
        """Whether the stream gave nothing at all (a server whose streaming is broken), not a reply at the level."""

    async def run(self, messages: list[dict[str, Any]], *, round: int) -> AnalysisResult | None:
        """The verdict; None when the reply holds none. A stream that breaks raises ``TransientProviderError``,
        unless the whole verdict came through before (llama.cpp's server ends a streamed tool call without a
        finish reason, which litellm reports as a broken stream); other provider errors propagate.
        """
        reply = _Reply()
        answer = _Answer(self.on_delta)
        try:
            async for chunk in self.model.stream(
                messages,
                purpose="analyze",
                round=round,
                temperature=0.0,
                structured_level=self.level,
                reply_format="verdict",
            ):
                if reply.add(chunk):
                    answer.read(reply)
        except TransientProviderError:
            verdict = self._parsed(reply) if _came_whole(reply) else None
            if verdict is None:
                raise
            return verdict
        answer.read(reply, whole=True)
        self.empty = reply.empty
        return self._parsed(reply)

    def _parsed(self, reply: _Reply) -> AnalysisResult | None:
        """The verdict in the whole reply: a tool call's arguments (a model may call a tool on its own), else the
        text, read as the non-streamed call reads it.
        """
        for text in (reply.arguments(), reply.text()):
            if text:
                verdict = self.read(text)
                if verdict is not None:
                    return verdict
        return None


def _came_whole(reply: _Reply) -> bool:
    """Whether the reply holds JSON that closed, as it was written: a stream that broke off mid-verdict must not
    count as a verdict because the JSON repair can close what was cut (verdict lines never tell they are whole).
    """
    if not reply.is_json and read_decision(reply.text().lstrip().split("\n", 1)[0]) is not None:
        return False
    for text in (reply.arguments(), reply.text()):
        try:
            extract_json(text, mend=False)
        except ValueError:
            continue
        return True
    return False


class _Reply:
    """The reply as it arrives: the first tool call's arguments, and the text."""

    def __init__(self) -> None:
        self._text: list[str] = []
        self._arguments: list[str] = []
        self._sizes = [0, 0]  # characters of the text, of the arguments

    def add(self, chunk: StreamChunk) -> bool:
        """Take a piece; whether the part the answer is read from grew."""
        grew = False
        for delta in chunk.tool_calls:
            if delta.index == 0 and delta.arguments:
                self._arguments.append(delta.arguments)
                self._sizes[1] += len(delta.arguments)
                grew = True
        if chunk.text:
            self._text.append(chunk.text)
            self._sizes[0] += len(chunk.text)
            grew = grew or not self._arguments
        return grew

    @property
    def empty(self) -> bool:
        """Whether nothing but blanks came: no text, no tool call's arguments."""
        return not self.text().strip() and not self.arguments().strip()

    @property
    def size(self) -> int:
        """Characters of the part the answer is read from: the arguments once there are any, else the text."""
        return self._sizes[1] if self._arguments else self._sizes[0]

    def arguments(self) -> str:
        """The first tool call's arguments so far."""
        return "".join(self._arguments)

    def text(self) -> str:
        """The text so far."""
        return "".join(self._text)

    @property
    def is_json(self) -> bool:
        """Whether the verdict is written as JSON (a tool call's arguments, or text that begins like JSON)."""
        return bool(self._arguments) or self.text().lstrip().startswith(("{", "```"))

    def verdict_so_far(self) -> str:
        """The JSON being written: the arguments, else the text from its first ``{`` ("" before one)."""
        if self._arguments:
            return self.arguments()
        text = self.text()
        start = text.find("{")
        return text[start:] if start >= 0 else ""


class _Answer:
    """The ``final_answer`` handed over so far."""

    def __init__(self, on_delta: Callable[[str], object]) -> None:
        self.on_delta = on_delta
        self.sent = ""
        self.read_at = 0
        self.done = False

    def read(self, reply: _Reply, *, whole: bool = False) -> None:
        """Hand over what ``final_answer`` gained since the last read (``whole``: the reply is complete)."""
        if reply.size < self.read_at:  # a tool call began after some text: read from its arguments now
            self.read_at = 0
        if self.done or (not whole and reply.size - self.read_at < max(1, self.read_at // READ_EVERY)):
            return
        self.read_at = reply.size
        if reply.is_json:
            self._read_json(reply)
        else:
            self._read_lines(reply, whole=whole)

    def _read_lines(self, reply: _Reply, *, whole: bool) -> None:
        text = reply.text().lstrip()
        end = text.find("\n")
        if end < 0:
            if whole:
                self.done = True  # one line: a verdict with no answer to show
            return
        decision = read_decision(text[:end])
        if decision is None:  # prose before a JSON verdict, perhaps: read from its first brace
            self._read_json(reply)
            return
        if not decision.achieved:
            self.done = True  # not reached: nothing to show
            return
        self._send(text[end + 1 :].strip())

    def _read_json(self, reply: _Reply) -> None:
        written = reply.verdict_so_far()
        if not written:
            return
        try:
            partial = pydantic_core.from_json(written, allow_partial="trailing-strings")
        except ValueError:  # not JSON (yet, or at all): the whole reply's parse decides
            return
        if not isinstance(partial, dict):
            return
        if partial.get("achieved") is False:  # not the answer: what was written of it is dropped by the caller
            self.done = True
            return
        answer = partial.get("final_answer")
        if isinstance(answer, str):
            self._send(answer)

    def _send(self, answer: str) -> None:
        """Hand over what ``answer`` (the answer so far) adds to what was sent."""
        if len(answer) <= len(self.sent):
            return
        if not answer.startswith(self.sent):  # rewritten (a second final_answer key): the whole reply decides
            self.done = True
            return
        piece, self.sent = answer[len(self.sent) :], answer
        self.on_delta(piece)
