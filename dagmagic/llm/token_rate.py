"""``TokenRate``: a simulated provider's timing, where time follows tokens as it does at a real provider.

A call's first piece comes ``first_token + input_tokens / input_tokens_per_s`` after the call starts; then the
reply is written at ``output_tokens_per_s``, so a piece arrives when its last token would be written, and a whole
(not streamed) reply when its last token would be. Tokens are counted with ``cl100k_base`` (the encoding litellm
bundles, read from litellm's own files, without importing litellm) on the text that goes over the wire: every
message (its text and tool calls), the tool schemas and the response format sent; the reply's text and its tool
calls' names and arguments.

This module imports nothing of dagmagic, so a benchmark can load it beside an older engine to measure that
engine on the same terms (``benchmarks/end_to_end.py --before``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import threading
from collections.abc import Iterable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["TokenRate", "wire_tokens"]

MESSAGE_TOKENS = 3
"""What a chat format adds per message (role and separators), as OpenAI counts it."""


class _Request(Protocol):
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    response_format: dict[str, Any] | None


class TokenRate(BaseModel):
    """Seconds a call takes by its tokens: ``ScriptedLLM(script, latency=TokenRate(output_tokens_per_s=40))``."""

    model_config = ConfigDict(frozen=True)

    first_token: float = Field(0.3, ge=0, description="Seconds before the first token of any reply.")
    input_tokens_per_s: float = Field(2000.0, gt=0, description="How fast the prompt is read.")
    output_tokens_per_s: float = Field(40.0, gt=0, description="How fast the reply is written.")

    def input_tokens(self, request: _Request) -> int:
        """The prompt's tokens as a provider bills them."""
        return request_tokens(request)

    def first_piece(self, input_tokens: int) -> float:
        """Seconds from the call's start to its first token."""
        return self.first_token + input_tokens / self.input_tokens_per_s

    def written(self, input_tokens: int, output_tokens: int) -> float:
        """Seconds from the call's start until ``output_tokens`` tokens of the reply are written (the first at
        ``first_piece``).
        """
        return self.first_piece(input_tokens) + max(output_tokens - 1, 0) / self.output_tokens_per_s


def wire_tokens(text: str) -> int:
    """``text``'s tokens in ``cl100k_base``."""
    return len(_encoding().encode(text, disallowed_special=()))


def request_tokens(request: _Request) -> int:
    """A request's prompt tokens: its messages' text and tool calls, the tool schemas and the response format."""
    parts: list[str] = []
    for message in request.messages:
        parts.append(str(message.get("content") or ""))
        if message.get("tool_calls"):
            parts.append(json.dumps(message["tool_calls"], ensure_ascii=False))
    if request.tools:
        parts.append(json.dumps(request.tools, ensure_ascii=False))
    if request.response_format:
        parts.append(json.dumps(request.response_format, ensure_ascii=False))
    return sum(wire_tokens(part) for part in parts) + MESSAGE_TOKENS * len(request.messages)


def reply_tokens(text: str, tool_calls: Iterable[tuple[str, str]] = ()) -> int:
    """A reply's tokens: its text, and each tool call's name and arguments (``(name, arguments)`` pairs)."""
    return wire_tokens(text) + sum(wire_tokens(name) + wire_tokens(arguments) for name, arguments in tool_calls)


def piece_times(rate: TokenRate, input_tokens: int, pieces: Sequence[str]) -> list[float]:
    """When each piece of a streamed reply arrives, in seconds from the call's start: when its last token is
    written (a piece without tokens comes with the one before it).
    """
    written = 0
    times = []
    for piece in pieces:
        written += wire_tokens(piece)
        times.append(rate.written(input_tokens, max(written, 1)))
    return times


_lock = threading.Lock()


@lru_cache(maxsize=1)
def _encoding() -> Any:
    import tiktoken

    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("TokenRate counts tokens with the cl100k_base file litellm bundles: install litellm")
    bundled = Path(next(iter(spec.submodule_search_locations))) / "litellm_core_utils" / "tokenizers"
    with _lock:  # tiktoken reads its cache directory from the environment when it loads an encoding
        before = os.environ.get("TIKTOKEN_CACHE_DIR")
        os.environ["TIKTOKEN_CACHE_DIR"] = str(bundled)
        try:
            return tiktoken.get_encoding("cl100k_base")
        finally:
            if before is None:
                os.environ.pop("TIKTOKEN_CACHE_DIR", None)
            else:
                os.environ["TIKTOKEN_CACHE_DIR"] = before
