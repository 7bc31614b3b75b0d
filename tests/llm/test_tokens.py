"""Token counts for the context guard: each backend counts its own models; litellm's counter with a token per
digit for models served locally, an approximation without a tokenizer for ``ScriptedLLM`` and backends with no
counter of their own.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator

import pytest

from dagmagic import ModelRegistry
from dagmagic.llm import Capabilities, ChatBackend, ChatRequest, ChatResponse, StreamChunk
from dagmagic.llm.litellm_backend import _digit_surplus
from dagmagic.llm.tokens import (
    approximate_tokens,
    context_window,
    count_tokens,
    estimate_tokens,
    fits,
    request_tokens,
)
from dagmagic.testing import ScriptedLLM

CSV = "city,year,population\n" + "".join(f"City{i},2023,{1000000 + i * 7919}\n" for i in range(200))
QWEN_CSV_TOKENS = 3497
"""What Qwen2.5's own tokenizer (llama.cpp's /extras/tokenize/count) gives for CSV: a token per digit."""

MODELS = (
    ModelRegistry()
    .register("gpt", "openai/gpt-4o")
    .register("local", "openai/qwen2.5-coder-0.5b", api_base="http://127.0.0.1:9/v1")
    .register("scripted", ScriptedLLM({}))
)


def test_an_openai_model_is_counted_with_tiktoken_as_it_is() -> None:
    import litellm

    assert count_tokens(MODELS.get("gpt"), CSV) == litellm.token_counter(model="openai/gpt-4o", text=CSV)


@pytest.mark.parametrize("name", ["local", "scripted"])
def test_a_model_litellm_does_not_know_spends_a_token_per_digit(name: str) -> None:
    counted = count_tokens(MODELS.get(name), CSV)
    assert abs(counted - QWEN_CSV_TOKENS) / QWEN_CSV_TOKENS < 0.02
    assert counted > 1.5 * count_tokens(MODELS.get("gpt"), CSV)


def test_prose_without_digits_counts_as_tiktoken_counts_it() -> None:
    import litellm

    prose = "Die Bevölkerung von Berlin wächst seit Jahren stetig, während München teurer wird. " * 50
    assert count_tokens(MODELS.get("local"), prose) == litellm.token_counter(model="", text=prose)


def test_small_texts_fit_without_counting_and_nothing_is_zero_or_negative() -> None:
    entry = MODELS.get("local")
    assert fits(entry, "short", 10) and not fits(entry, CSV, 100)
    assert count_tokens(entry, "") == 0 and estimate_tokens("") == 1
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": CSV}]
    assert request_tokens(entry, messages) > count_tokens(entry, CSV)
    assert request_tokens(entry, messages, [{"type": "function", "function": {"name": "f"}}]) > request_tokens(
        entry, messages
    )


def test_windows_come_from_the_registration_then_litellm_then_the_backend() -> None:
    models = (
        ModelRegistry()
        .register("declared", "openai/gpt-4o", context_window=4096)
        .register("known", "openai/gpt-4o")
        .register("unknown", "openai/my-local-model")
        .register("scripted", ScriptedLLM({}, context_window=5000))
    )
    assert context_window(models.get("declared")) == 4096
    assert context_window(models.get("known")) == 128_000
    assert context_window(models.get("unknown")) is None  # the guard then assumes default_context_tokens
    assert context_window(models.get("scripted")) == 5000


def test_a_growing_transcript_is_counted_from_its_remembered_beginning_never_under_its_whole_count() -> None:
    import litellm

    entry = MODELS.get("local")
    messages: list[dict[str, object]] = [{"role": "system", "content": "be brief " * 100}]
    for turn in range(12):
        messages.append({"role": "user" if turn % 2 else "assistant", "content": f"turn {turn}: " + CSV[turn * 90 :]})
        counted = request_tokens(entry, messages)
        texts = [str(message["content"]) for message in messages]
        whole = litellm.token_counter(model="", text="\n".join(texts)) + sum(
            len(run) - (len(run) + 2) // 3 for text in texts for run in re.findall(r"\d+", text)
        )
        overhead = 4 * len(messages) + 3
        assert whole <= counted - overhead <= whole + 2 * len(messages)  # never under; a join costs two at most


# --- backends count their own models


class OwnBackend:
    """A backend written before counting joined the seam: only the three required methods."""

    def capabilities(self, model: str) -> Capabilities:
        return Capabilities()

    async def complete(self, request: ChatRequest) -> ChatResponse:
        return ChatResponse(content="ok")

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamChunk]:
        yield StreamChunk(final=ChatResponse(content="ok"))


class CountingBackend(OwnBackend):
    def __init__(self, characters_a_token: int) -> None:
        self.characters_a_token = characters_a_token
        self.asked: list[str] = []

    def count_tokens(self, model: str, text: str) -> int:
        self.asked.append(model)
        return len(text) // self.characters_a_token


def test_a_backend_without_a_counter_still_is_a_backend_and_its_texts_are_approximated() -> None:
    assert isinstance(OwnBackend(), ChatBackend)
    entry = ModelRegistry().register("own", OwnBackend()).get("own")
    assert count_tokens(entry, CSV) == approximate_tokens(CSV)
    assert context_window(entry) is None


def test_a_backend_counts_its_own_model_once_per_text_apart_from_other_backends() -> None:
    two, three = CountingBackend(2), CountingBackend(3)
    models = ModelRegistry().register("two", two).register("three", three)
    assert count_tokens(models.get("two"), CSV) == len(CSV) // 2
    assert count_tokens(models.get("three"), CSV) == len(CSV) // 3  # not the count remembered for "two"
    assert count_tokens(models.get("two"), CSV) == len(CSV) // 2
    assert two.asked == ["two"] and three.asked == ["three"]  # remembered; asked for the entry's model


def test_a_counter_that_fails_gives_the_cautious_estimate() -> None:
    class Broken(OwnBackend):
        def count_tokens(self, model: str, text: str) -> int:
            raise RuntimeError("no tokenizer for this model")

    entry = ModelRegistry().register("broken", Broken()).get("broken")
    assert count_tokens(entry, CSV) == estimate_tokens(CSV)


PROSE = "The 2023 census counted 2,102,650 people in Paris and 3,755,251 in Berlin; growth was 0.4 % a year. "


@pytest.mark.parametrize(
    "text",
    [
        PROSE * 100,
        CSV,
        json.dumps([{"role": "user", "content": PROSE * 3, "tool_calls": [{"id": "call_0", "name": "census"}]}] * 20),
        "HEAD-MARK " + "filler text " * 4000 + " TAIL-MARK",
    ],
    ids=["prose", "csv", "json", "filler"],
)
def test_the_approximation_is_within_3_percent_of_litellms_count_for_a_local_model(text: str) -> None:
    import litellm

    local = litellm.token_counter(model="", text=text) + _digit_surplus(text)
    assert abs(approximate_tokens(text) - local) <= 0.03 * local


@pytest.mark.parametrize(
    "text", ["", "a", " 1", "\n\n  x", "東京都の人口", "Население", "🎉🎉", "~" * 40, "aBcDeFgH" * 5, "\u00a0\u00a01"]
)
def test_the_approximation_never_exceeds_the_utf8_size_so_small_texts_fit_without_counting(text: str) -> None:
    assert approximate_tokens(text) <= len(text.encode("utf-8"))
    assert approximate_tokens(text) == approximate_tokens(text)  # deterministic
