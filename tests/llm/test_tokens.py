"""Token counts for the context guard: litellm's counter, a token per digit for models served locally."""

from __future__ import annotations

import re

import pytest

from dagmagic import ModelRegistry
from dagmagic.llm.tokens import context_window, count_tokens, estimate_tokens, fits, request_tokens
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
