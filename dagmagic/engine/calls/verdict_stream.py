"""The verdict, streamed: the analyzer's reply is read while it is written, and what its ``final_answer`` gains
is handed over piece by piece, so the user reads the answer while the round is still being judged.

The smart model is asked exactly as the non-streamed call asks at its first level (a forced tool call, JSON
mode or text, by its capabilities; ``OutputShape`` and ``with_instruction`` make the same request). The reply
so far (the first tool call's arguments when there are any, else the text from its first ``{``) is read as
partial JSON (``pydantic_core.from_json`` with trailing strings allowed: an escape cut in two is left out until
its other half arrives); a verdict that already says the goal was not achieved hands nothing over. The whole
reply is then parsed as the non-streamed call parses it. ``None`` when it holds no verdict: the caller asks
again without streaming (at the same level when the stream gave nothing at all: the stream was at fault).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pydantic_core

from dagmagic.errors import TransientProviderError
from dagmagic.llm import ChatModel, extract_json
from dagmagic.llm.protocol import StreamChunk
from dagmagic.llm.structured import OutputShape, with_instruction
from dagmagic.models import AnalysisResult, StructuredLevel

__all__ = ["VerdictStream"]

READ_EVERY = 256
"""The reply is read again once it grew by 1/``READ_EVERY`` of its length (at least a character): reading it
whole at every piece would cost time quadratic in its length; this keeps it linear, with the answer shown at
most that share behind (40 characters of a 10,000-character reply)."""


class VerdictStream:
    """Streams one verdict of ``model``; each new piece of its ``final_answer`` goes to ``on_delta``."""

    def __init__(self, model: ChatModel, shape: OutputShape, on_delta: Callable[[str], object]) -> None:
        self.model = model
        self.shape = shape
        self.on_delta = on_delta
        capabilities = model.entry.capabilities
        self.level: StructuredLevel = (
            "tool_call" if capabilities.tool_call else "json_mode" if capabilities.json_mode else "text"
        )
        """The level asked at: the first the non-streamed call would try."""
        self.empty = False
        """Whether the stream gave nothing at all (a server whose streaming is broken), not a reply at the level."""

    async def run(self, messages: list[dict[str, Any]], *, round: int) -> AnalysisResult | None:
        """The verdict; None when the reply holds none. A stream that breaks raises ``TransientProviderError``,
        unless the whole verdict came through before (llama.cpp's server ends a streamed tool call without a
        finish reason, which litellm reports as a broken stream); other provider errors propagate.
        """
        shape, level = self.shape, self.level
        reply = _Reply()
        answer = _Answer(self.on_delta)
        try:
            async for chunk in self.model.stream(
                with_instruction(messages, shape.instruction(level)),
                purpose="analyze",
                round=round,
                temperature=0.0,
                structured_level=level,
                **shape.request(level),
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
        """The verdict in the whole reply, read as the non-streamed call reads one: the tool call's arguments,
        then the text (a model may write the JSON there instead).
        """
        for text, from_tool in ((reply.arguments(), True), (reply.text(), False)):
            if not text:
                continue
            try:
                verdict = self.shape.parse(text, from_tool=from_tool)
            except Exception:  # as for the non-streamed call: any failure is an unreadable reply
                continue
            if isinstance(verdict, AnalysisResult):
                return verdict
        return None


def _came_whole(reply: _Reply) -> bool:
    """Whether the reply holds JSON that closed, as it was written: a stream that broke off mid-verdict must not
    count as a verdict because the JSON repair can close what was cut.
    """
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
        if not isinstance(answer, str) or len(answer) <= len(self.sent):
            return
        if not answer.startswith(self.sent):  # rewritten (a second final_answer key): the whole reply decides
            self.done = True
            return
        piece, self.sent = answer[len(self.sent) :], answer
        self.on_delta(piece)
