"""Token counts and context windows: litellm's for litellm models, estimates for everything else."""

from __future__ import annotations

from typing import Any

from dagmagic.llm._litellm import import_litellm
from dagmagic.llm.backend import LiteLLMBackend
from dagmagic.llm.registry import ModelEntry

__all__ = ["context_window", "count_tokens", "estimate_tokens"]


def estimate_tokens(text: str) -> int:
    """About four characters a token: the usual rule for English and code."""
    return len(text) // 4 + 1


def count_tokens(entry: ModelEntry, text: str) -> int:
    """Tokens of ``text`` for this model: litellm's counter for litellm models, else an estimate."""
    if isinstance(entry.backend, LiteLLMBackend):
        try:
            return int(import_litellm().token_counter(model=entry.target, text=text))
        except Exception:  # unknown tokenizer: the estimate is as good as anything
            return estimate_tokens(text)
    return estimate_tokens(text)


def context_window(entry: ModelEntry) -> int | None:
    """The model's input window in tokens, None when unknown."""
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
