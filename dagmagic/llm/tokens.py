"""Token counts and context windows, for the context guard.

Counts come from litellm's ``token_counter``: the model's own tokenizer when litellm knows it, else
tiktoken's default encoding (also for ``ScriptedLLM`` and other non-litellm backends, which stand in for
real models). A text whose UTF-8 size is within a budget fits without counting (a token is at least one
byte), so small prompts never load litellm.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from dagmagic.llm._litellm import import_litellm
from dagmagic.llm.backend import LiteLLMBackend
from dagmagic.llm.registry import ModelEntry

__all__ = ["context_window", "count_tokens", "estimate_tokens", "fits", "request_tokens"]

MESSAGE_OVERHEAD = 4
"""Tokens a chat message costs besides its text (role and separators), as OpenAI's chat format counts them."""


def estimate_tokens(text: str) -> int:
    """A cautious estimate when no counter works: numbers and non-Latin text take more than four characters'
    worth of tokens, so it counts UTF-8 bytes, at 2.5 a token.
    """
    return len(text.encode("utf-8")) * 2 // 5 + 1


def _counter_model(entry: ModelEntry) -> str:
    return entry.target if isinstance(entry.backend, LiteLLMBackend) else ""


def count_tokens(entry: ModelEntry, text: str) -> int:
    """Tokens of ``text`` for this model (litellm's counter; a cautious estimate if that fails)."""
    if not text:
        return 0
    try:
        return int(import_litellm().token_counter(model=_counter_model(entry), text=text))
    except Exception:  # an unknown tokenizer: the estimate errs on the large side
        return estimate_tokens(text)


def fits(entry: ModelEntry, text: str, budget: int) -> bool:
    """Whether ``text`` takes at most ``budget`` tokens; counted only when its size leaves a doubt."""
    if len(text.encode("utf-8")) <= budget:
        return True
    return count_tokens(entry, text) <= budget


def request_tokens(
    entry: ModelEntry, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None = None
) -> int:
    """Tokens a whole request takes: every message's text and tool calls, and the tool schemas offered."""
    parts: list[str] = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif content is not None:
            parts.append(json.dumps(content, default=str))
        if message.get("tool_calls"):
            parts.append(json.dumps(message["tool_calls"], default=str))
    if tools:
        parts.append(json.dumps(list(tools), default=str))
    text = "\n".join(parts)
    overhead = MESSAGE_OVERHEAD * len(messages) + 3
    if len(text.encode("utf-8")) + overhead <= 1024:  # small: not worth loading a tokenizer
        return len(text.encode("utf-8")) + overhead
    return count_tokens(entry, text) + overhead


def context_window(entry: ModelEntry) -> int | None:
    """The model's input window in tokens: declared at registration, else litellm's, else the backend's;
    None when unknown.
    """
    if entry.context_window:
        return entry.context_window
    backend: Any = entry.backend
    if isinstance(backend, LiteLLMBackend):
        try:
            info = import_litellm().get_model_info(entry.target)
        except Exception:  # models missing from litellm's map
            return None
        window = info.get("max_input_tokens") or info.get("max_tokens")
        return int(window) if window else None
    window_of = getattr(backend, "context_window", None)
    if callable(window_of):
        value = window_of(entry.target)
        return int(value) if value else None
    return None
