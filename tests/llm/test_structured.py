from __future__ import annotations

import re
from typing import Any

import pytest
from pydantic import BaseModel

from dagmagic import errors
from dagmagic.events import Event, LLMCallRecorded
from dagmagic.llm import ModelRegistry, StructuredOutputError, structured_llm_call
from dagmagic.settings import DagSettings
from dagmagic.testing import ScriptedLLM, ScriptedRequest

BOTH = ("tool_call", "json_mode")
FAST_RETRY = DagSettings(llm_retry_backoff=0.001)


class Verdict(BaseModel):
    achieved: bool
    confidence: float


GOOD = {"achieved": True, "confidence": 0.9}
MESSAGES = [{"role": "system", "content": "You judge."}, {"role": "user", "content": "Was it achieved?"}]


def model(replies: Any, capabilities: tuple[str, ...] = BOTH) -> ScriptedLLM:
    return ScriptedLLM({"analyze": replies}, capabilities=capabilities)


async def call(llm: ScriptedLLM, **kwargs: Any) -> Any:
    return await structured_llm_call(llm, MESSAGES, Verdict, purpose="analyze", settings=FAST_RETRY, **kwargs)


async def test_tool_call_answered_is_level_one_in_one_call() -> None:
    llm = model([GOOD])
    result = await call(llm)
    assert result.value == Verdict(achieved=True, confidence=0.9)
    assert (result.level_used, result.llm_calls) == ("tool_call", 1)
    request = llm.requests[0]
    assert request.level == "tool_call"
    assert request.tools[0]["function"]["name"] == "submit_verdict"
    assert request.tools[0]["function"]["parameters"] == Verdict.model_json_schema()


async def test_json_in_content_at_the_tool_level_is_accepted() -> None:
    result = await call(model(['{"achieved": false, "confidence": 0.2}']))
    assert (result.level_used, result.llm_calls, result.value.achieved) == ("tool_call", 1, False)


async def test_tool_level_returning_nothing_moves_to_json_mode_in_two_calls() -> None:
    llm = model(["", GOOD])
    result = await call(llm)
    assert (result.level_used, result.llm_calls) == ("json_mode", 2)
    assert [r.level for r in llm.requests] == ["tool_call", "json_mode"]
    assert [c.structured_level for c in result.calls] == ["tool_call", "json_mode"]


async def test_json_bad_then_good_takes_two_json_calls_and_sums_usage() -> None:
    llm = model(["this is not json at all", GOOD], capabilities=("json_mode",))
    result = await call(llm)
    assert (result.level_used, result.llm_calls) == ("json_mode", 2)
    first, second = result.calls
    assert result.usage.input_tokens == first.usage.input_tokens + second.usage.input_tokens > 0
    assert result.usage.output_tokens == first.usage.output_tokens + second.usage.output_tokens > 0
    assert result.usage.requests == 2
    retry = llm.requests[1].messages
    assert retry[-2] == {"role": "assistant", "content": "this is not json at all"}
    assert "could not be used" in retry[-1]["content"] and "no JSON" in retry[-1]["content"]


async def test_garbage_everywhere_with_both_capabilities_is_five_calls_then_an_error() -> None:
    llm = model(["garbage"])
    with pytest.raises(StructuredOutputError, match="after 5 calls"):
        await call(llm)
    assert [r.level for r in llm.requests] == ["tool_call", "json_mode", "json_mode", "text", "text"]


async def test_no_capabilities_is_two_text_calls() -> None:
    llm = model(["garbage"], capabilities=())
    with pytest.raises(StructuredOutputError, match="after 2 calls"):
        await call(llm)
    assert [r.level for r in llm.requests] == ["text", "text"]


async def test_no_capabilities_succeeds_on_prose_with_fenced_json() -> None:
    llm = model([GOOD], capabilities=())
    result = await call(llm)
    assert (result.level_used, result.llm_calls) == ("text", 1)
    assert "```json" in result.calls[0].reply


async def test_the_regex_fallback_runs_only_on_text_level_replies() -> None:
    seen_by_fallback: list[str] = []

    def reply(request: ScriptedRequest) -> str:
        return f"achieved: yes, confidence: 0.{request.index + 1} ({request.level})"

    def fallback(text: str) -> dict[str, Any] | None:
        seen_by_fallback.append(text)
        match = re.search(r"confidence: ([\d.]+)", text)
        return {"achieved": True, "confidence": float(match.group(1))} if match else None

    result = await call(model(reply), regex_fallback=fallback)
    assert (result.level_used, result.llm_calls) == ("regex", 5)
    assert all(text.endswith("(text)") for text in seen_by_fallback)
    assert result.value.confidence == 0.5  # the latest text reply is tried first


async def test_the_regex_fallback_is_not_used_when_a_level_succeeds() -> None:
    calls: list[str] = []
    result = await call(model(["garbage", GOOD]), regex_fallback=lambda text: calls.append(text))
    assert result.level_used == "json_mode" and calls == []


async def test_default_on_total_failure() -> None:
    fallback = Verdict(achieved=False, confidence=0.0)
    result = await call(model(["garbage"]), default=fallback)
    assert (result.value, result.level_used, result.llm_calls) == (fallback, "default", 5)


async def test_a_parse_fn_that_raises_counts_as_a_failure() -> None:
    def even_only(raw: dict[str, Any]) -> int:
        if raw["n"] % 2:
            raise ValueError("n must be even")
        return int(raw["n"])

    llm = ScriptedLLM({"plan": [{"n": 1}, {"n": 3}, {"n": 4}]})
    result = await structured_llm_call(
        llm, MESSAGES, {"type": "object", "properties": {"n": {"type": "integer"}}}, parse_fn=even_only, purpose="plan"
    )
    assert (result.value, result.level_used, result.llm_calls) == (4, "json_mode", 3)
    assert "ValueError: n must be even" in llm.requests[2].messages[-1]["content"]


async def test_a_schema_mismatch_is_quoted_in_the_retry() -> None:
    llm = model([{"achieved": True}, GOOD], capabilities=("json_mode",))
    result = await call(llm)
    assert result.llm_calls == 2
    assert "confidence: Field required" in llm.requests[1].messages[-1]["content"]


async def test_a_list_schema_travels_wrapped_through_the_tool() -> None:
    llm = ScriptedLLM({"plan": [{"value": ["a", "b"]}]})
    schema = {"type": "array", "items": {"type": "string"}}
    result = await structured_llm_call(llm, MESSAGES, schema, purpose="plan")
    assert (result.value, result.level_used) == (["a", "b"], "tool_call")
    assert llm.requests[0].tools[0]["function"]["parameters"]["properties"]["value"] == schema


async def test_caller_messages_are_not_mutated() -> None:
    before = [dict(m) for m in MESSAGES]
    await call(model(["garbage", GOOD]))
    assert before == MESSAGES


async def test_an_authentication_error_is_raised_after_one_call() -> None:
    llm = model([errors.AuthenticationError("invalid x-api-key")])
    with pytest.raises(errors.AuthenticationError, match="invalid x-api-key") as caught:
        await call(llm)
    assert len(llm.requests) == 1
    assert "Hint:" in str(caught.value)


@pytest.mark.parametrize(
    "fatal",
    [errors.PermissionDeniedError("no"), errors.BadRequestError("too long"), errors.UnknownModelError("nope")],
)
async def test_every_fatal_error_is_raised_at_once(fatal: errors.ProviderError) -> None:
    llm = model([fatal])
    with pytest.raises(type(fatal)):
        await call(llm, default=None)
    assert len(llm.requests) == 1


async def test_a_rate_limit_is_retried_and_then_succeeds() -> None:
    llm = model([errors.RateLimitError("slow down"), GOOD])
    events: list[Event] = []
    result = await call(llm, emit=events.append)
    assert (result.level_used, result.llm_calls, len(llm.requests)) == ("tool_call", 1, 2)
    assert result.calls[0].retries == 1
    assert [type(e) for e in events if e.type != "call_progress"] == [LLMCallRecorded]  # one call, retried inside


async def test_a_level_whose_retries_run_out_is_abandoned_for_the_next() -> None:
    outage = errors.ServerError("503")
    llm = model([outage, outage, outage, GOOD])  # llm_retries=2: three tries at the tool level
    result = await call(llm)
    assert result.level_used == "json_mode"
    assert [r.level for r in llm.requests] == ["tool_call"] * 3 + ["json_mode"]
    assert result.calls[0].error is not None and result.calls[0].retries == 2
    assert result.llm_calls == 2


async def test_calls_are_tagged_with_purpose_round_and_step_and_emitted() -> None:
    events: list[Event] = []
    registry = ModelRegistry().register("judge", model(["", GOOD]), roles=["smart"])
    result = await structured_llm_call(
        registry.for_role("smart"), MESSAGES, Verdict, purpose="analyze", round=2, step_id="s3", emit=events.append
    )
    recorded = [e.call for e in events if isinstance(e, LLMCallRecorded)]
    assert recorded == result.calls
    assert {(c.purpose, c.model, c.round, c.step_id) for c in recorded} == {("analyze", "judge", 2, "s3")}
    assert all(c.latency >= 0 and c.usage.requests == 1 for c in recorded)


# --- a schema written back is not a value


class Flexible(BaseModel):
    """Every field optional: an echoed schema would validate as one."""

    note: str | None = None
    score: float | None = None


@pytest.mark.parametrize(
    "echo",
    [
        Flexible.model_json_schema(),  # the whole schema
        {"properties": Flexible.model_json_schema()["properties"], "type": "object"},  # its heart
        {"note": {"type": "string", "description": "a note"}, "score": {"type": "number"}},  # fields as schemas
    ],
    ids=["schema", "properties", "fields"],
)
async def test_a_schema_echo_is_a_failed_level_and_the_next_level_is_tried(echo: dict[str, Any]) -> None:
    llm = ScriptedLLM({"analyze": [echo, {"note": "fine", "score": 0.5}]}, capabilities=BOTH)
    result = await structured_llm_call(llm, MESSAGES, Flexible, purpose="analyze", settings=FAST_RETRY)
    assert result.value == Flexible(note="fine", score=0.5)
    assert (result.level_used, result.llm_calls) == ("json_mode", 2)


async def test_a_schema_echo_at_every_level_is_a_structured_output_error_saying_so() -> None:
    llm = ScriptedLLM({"analyze": [Flexible.model_json_schema()]}, capabilities=BOTH)
    with pytest.raises(StructuredOutputError, match="repeats the JSON schema"):
        await structured_llm_call(llm, MESSAGES, Flexible, purpose="analyze", settings=FAST_RETRY)


def test_ordinary_values_are_not_taken_for_schema_echoes() -> None:
    from dagmagic.llm.structured import echoes_schema

    schema = Flexible.model_json_schema()
    for value in ({"note": "type", "score": 1}, {"note": None}, {}, [], {"properties": {"a": 1}, "name": "x"}):
        assert not echoes_schema(value, schema)
