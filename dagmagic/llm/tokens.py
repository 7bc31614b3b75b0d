"""Token counts and context windows, for the context guard.

Counts come from litellm's ``token_counter``: the model's own tokenizer when litellm knows it, else
tiktoken's default encoding (also for ``ScriptedLLM`` and other non-litellm backends, which stand in for
real models). That encoding groups up to three digits in a token, where the open models served locally
(Qwen, Llama 2, Mistral) spend a token per digit: measured against Qwen2.5's own tokenizer, tiktoken
counted 0.56 of a CSV table's tokens, 0.71 of a JSON list's; with a token per digit, 1.00 of both (and of
prose and code). So unless the model is one whose tokenizer is tiktoken's, every digit counts as a token.
A text whose UTF-8 size is within a budget fits without counting (a token is at least one byte), so small
prompts never load litellm. Counts are remembered by a text's length and hash (not the text itself), and a
request's by its parts: a step agent's transcript grows a turn at a time, so a request is counted as the
count of its longest remembered beginning plus what follows it, one counter call for the new turns (a
200-step run with 20 tool calls a step made 6,291 counter calls on whole transcripts, 2.7-3.7 s of its
8.7-12.7 s; now 4,891 calls on the new turns, 0.9-1.7 s). Counting a beginning apart from its rest can only
overcount by the token that joins them, on the safe side of a budget.
"""

from __future__ import annotations

import functools
import json
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from dagmagic.llm._litellm import import_litellm
from dagmagic.llm.backend import LiteLLMBackend
from dagmagic.llm.registry import ModelEntry

__all__ = ["context_window", "count_tokens", "estimate_tokens", "fits", "request_tokens"]

_DIGITS = re.compile(r"\d+")

_TIKTOKEN_PROVIDERS = ("openai", "azure", "text-completion-openai")


class _Remembered:
    """The last ``size`` counts, by key; a key is a few numbers, so memory stays small however long the texts."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._counts: OrderedDict[tuple[str, int, int], int] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, int, int]) -> int | None:
        with self._lock:
            count = self._counts.get(key)
            if count is not None:
                self._counts.move_to_end(key)
            return count

    def put(self, key: tuple[str, int, int], count: int) -> None:
        with self._lock:
            self._counts[key] = count
            if len(self._counts) > self.size:
                self._counts.popitem(last=False)


_texts = _Remembered(4096)
"""Tokens of a text, by (counter model, length, hash)."""
_requests = _Remembered(1024)
"""Tokens of a request's parts joined, by (counter model, number of parts, hash of the parts' keys)."""

MESSAGE_OVERHEAD = 4
"""Tokens a chat message costs besides its text (role and separators), as OpenAI's chat format counts them."""


def estimate_tokens(text: str) -> int:
    """A cautious estimate when no counter works: numbers and non-Latin text take more than four characters'
    worth of tokens, so it counts UTF-8 bytes, at 2.5 a token.
    """
    return len(text.encode("utf-8")) * 2 // 5 + 1


def _counter_model(entry: ModelEntry) -> str:
    return entry.target if isinstance(entry.backend, LiteLLMBackend) else ""


@functools.lru_cache(maxsize=256)
def _tiktoken_is_exact(model: str) -> bool:
    """Whether ``model`` is an OpenAI model litellm knows (tiktoken is its tokenizer), not a local one."""
    if not model:
        return False
    litellm = import_litellm()
    try:
        name, provider, *_ = litellm.get_llm_provider(model)
    except Exception:  # a model string litellm cannot place
        return False
    return provider in _TIKTOKEN_PROVIDERS and (name in litellm.model_cost or model in litellm.model_cost)


def _digit_surplus(text: str) -> int:
    """Tokens a per-digit tokenizer spends on numbers beyond tiktoken's three digits a token."""
    return sum(len(run) - (len(run) + 2) // 3 for run in _DIGITS.findall(text))


def count_tokens(entry: ModelEntry, text: str) -> int:
    """Tokens of ``text`` for this model (litellm's counter, a token per digit unless the model is an OpenAI
    one; a cautious estimate if counting fails).
    """
    if not text:
        return 0
    model = _counter_model(entry)
    key = (model, len(text), hash(text))
    known = _texts.get(key)
    if known is not None:
        return known
    try:
        tokens = int(import_litellm().token_counter(model=model, text=text))
    except Exception:  # an unknown tokenizer: the estimate errs on the large side
        return estimate_tokens(text)
    counted = tokens if _tiktoken_is_exact(model) else tokens + _digit_surplus(text)
    _texts.put(key, counted)
    return counted


def fits(entry: ModelEntry, text: str, budget: int) -> bool:
    """Whether ``text`` takes at most ``budget`` tokens; counted only when its size leaves a doubt."""
    if len(text.encode("utf-8")) <= budget:
        return True
    return count_tokens(entry, text) <= budget


def request_tokens(
    entry: ModelEntry, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None = None
) -> int:
    """Tokens a whole request takes: every message's text and tool calls, and the tool schemas offered."""
    parts: list[str] = [json.dumps(list(tools), default=str)] if tools else []  # first: messages grow at the end
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif content is not None:
            parts.append(json.dumps(content, default=str))
        if message.get("tool_calls"):
            parts.append(json.dumps(message["tool_calls"], default=str))
    overhead = MESSAGE_OVERHEAD * len(messages) + 3
    size = sum(len(part.encode("utf-8")) for part in parts) + max(len(parts) - 1, 0)
    if size + overhead <= 1024:  # small: not worth loading a tokenizer
        return size + overhead
    return _joined_tokens(entry, parts) + overhead


def _joined_tokens(entry: ModelEntry, parts: list[str]) -> int:
    """Tokens of ``parts`` joined by newlines: a remembered beginning's count, plus the rest counted at once."""
    model = _counter_model(entry)
    keys = [(model, 0, 0)]
    for part in parts:
        keys.append((model, len(keys), hash((keys[-1][2], len(part), hash(part)))))
    start, known = 0, 0
    for end in range(len(parts), 0, -1):
        remembered = _requests.get(keys[end])
        if remembered is not None:
            start, known = end, remembered
            break
    if start == len(parts):
        return known
    rest = count_tokens(entry, "\n".join(parts[start:]))
    total = known + rest + (1 if start else 0)  # the newline joining the beginning to the rest: a token at most
    _requests.put(keys[-1], total)
    return total


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
