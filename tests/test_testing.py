from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from dagmagic.llm import ChatModel, ChatRequest, ModelRegistry
from dagmagic.testing import ScriptedLLM, ScriptedRequest, ScriptError, ToolCall

HELLO = [{"role": "user", "content": "hello"}]


def request(purpose: Any = "step", **fields: Any) -> ChatRequest:
    return ChatRequest(model="scripted", messages=HELLO, purpose=purpose, **fields)


async def test_replies_are_used_in_order_and_the_last_repeats() -> None:
    llm = ScriptedLLM({"step": ["one", "two"]})
    assert [(await llm.complete(request())).content for _ in range(4)] == ["one", "two", "two", "two"]


async def test_a_single_reply_repeats() -> None:
    llm = ScriptedLLM({"step": "same"})
    assert [(await llm.complete(request())).content for _ in range(2)] == ["same", "same"]


async def test_step_keys_win_over_purposes_and_star_catches_the_rest() -> None:
    llm = ScriptedLLM({"step:s2": ["special"], "step": ["plain"], "*": ["anything"]})
    assert (await llm.complete(request(step_id="s2"))).content == "special"
    assert (await llm.complete(request(step_id="s1"))).content == "plain"
    assert (await llm.complete(request("analyze"))).content == "anything"


async def test_callables_sync_and_async_see_the_request() -> None:
    seen: list[ScriptedRequest] = []

    def sync(req: ScriptedRequest) -> str:
        seen.append(req)
        return f"{req.purpose}#{req.index} r{req.round} {req.step_id}"

    async def later(req: ScriptedRequest) -> str:
        await asyncio.sleep(0)
        return req.prompt.upper()

    llm = ScriptedLLM({"step": sync, "analyze": later})
    assert (await llm.complete(request(round=2, step_id="s1"))).content == "step#0 r2 s1"
    assert (await llm.complete(request())).content == "step#1 rNone None"
    assert (await llm.complete(request("analyze"))).content == "HELLO"
    assert seen[0].messages == HELLO


async def test_a_missing_purpose_names_it() -> None:
    with pytest.raises(ScriptError, match=r"no reply for purpose 'plan'.*add 'plan' to the script"):
        await ScriptedLLM({"step": ["x"]}).complete(request("plan"))


async def test_exceptions_are_raised() -> None:
    llm = ScriptedLLM({"step": [ValueError("injected"), "fine"]})
    with pytest.raises(ValueError, match="injected"):
        await llm.complete(request())
    assert (await llm.complete(request())).content == "fine"


async def test_a_dict_is_shaped_by_what_the_request_asks_for() -> None:
    llm = ScriptedLLM({"plan": {"a": 1}})
    forced = {"type": "function", "function": {"name": "submit_plan"}}
    tools = [{"type": "function", "function": {"name": "submit_plan", "parameters": {}}}]
    as_tool = await llm.complete(request("plan", tools=tools, tool_choice=forced))
    assert as_tool.content == "" and as_tool.tool_calls[0].name == "submit_plan"
    assert json.loads(as_tool.tool_calls[0].arguments) == {"a": 1}
    as_json = await llm.complete(request("plan", response_format={"type": "json_object"}))
    assert json.loads(as_json.content) == {"a": 1}
    as_text = await llm.complete(request("plan"))
    assert as_text.content.startswith("Here is the result:") and "```json" in as_text.content


async def test_without_tool_calling_a_dict_never_arrives_as_a_tool_call() -> None:
    llm = ScriptedLLM({"plan": {"a": 1}}, capabilities=("json_mode",))
    forced = {"type": "function", "function": {"name": "submit_plan"}}
    reply = await llm.complete(request("plan", tools=[{"type": "function"}], tool_choice=forced))
    assert reply.tool_calls == [] and "```json" in reply.content


async def test_tool_calls_native_or_as_json_actions() -> None:
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {}}}]
    native = ScriptedLLM({"step": [[ToolCall("lookup", {"q": "x"}), ToolCall("lookup", {"q": "y"})]]})
    reply = await native.complete(request(tools=tools))
    assert [(tc.name, json.loads(tc.arguments)) for tc in reply.tool_calls] == [
        ("lookup", {"q": "x"}),
        ("lookup", {"q": "y"}),
    ]
    assert reply.finish_reason == "tool_calls"
    plain = ScriptedLLM({"step": ToolCall("lookup", {"q": "x"})}, capabilities=())
    reply = await plain.complete(request(tools=tools))
    assert json.loads(reply.content) == {"tool": "lookup", "arguments": {"q": "x"}}


async def test_streams_the_given_pieces_and_ends_with_the_whole_reply() -> None:
    llm = ScriptedLLM({"synthesize": [["a", "b", "c"]]}, chunk_delay=0.01)
    chunks = [chunk async for chunk in llm.stream(request("synthesize"))]
    assert [c.text for c in chunks[:-1]] == ["a", "b", "c"]
    assert chunks[-1].final is not None and chunks[-1].final.content == "abc"


async def test_a_streamed_tool_call_arrives_in_argument_slices() -> None:
    arguments = {"steps": [{"id": f"s{i}", "task": "x" * 10} for i in range(3)]}
    llm = ScriptedLLM({"plan": [arguments]})
    forced = {"type": "function", "function": {"name": "submit_plan"}}
    tools = [{"type": "function", "function": {"name": "submit_plan", "parameters": {}}}]
    chunks = [c async for c in llm.stream(request("plan", tools=tools, tool_choice=forced))]
    deltas = [d for c in chunks for d in c.tool_calls]
    assert len(deltas) > 3 and deltas[0].name == "submit_plan"
    assert json.loads("".join(d.arguments for d in deltas)) == arguments


async def test_latency_per_key_and_request_log() -> None:
    llm = ScriptedLLM({"step": ["x"], "plan": ["y"]}, latency={"step": 0.05})
    loop = asyncio.get_running_loop()
    start = loop.time()
    await llm.complete(request("plan"))
    fast = loop.time() - start
    await llm.complete(request("step", step_id="s1"))
    slow = loop.time() - start - fast
    assert slow >= 0.05 > fast
    assert [r.purpose for r in llm.requests] == ["plan", "step"]
    assert len(llm.requests_for("step", "s1")) == 1


async def test_a_purposes_latency_applies_to_each_of_its_step_keys() -> None:
    llm = ScriptedLLM({"step:s1": ["x"], "step:s2": ["y"], "plan": ["p"]}, latency={"step": 0.05, "step:s2": 0.1})
    loop = asyncio.get_running_loop()
    for step_id, least in (("s1", 0.05), ("s2", 0.1), ("s3", None)):
        start = loop.time()
        try:
            await llm.complete(request("step", step_id=step_id))
        except ScriptError:
            assert least is None  # no script key for s3: no reply, and no wait either
            continue
        assert loop.time() - start >= least
    start = loop.time()
    await llm.complete(request("plan"))
    assert loop.time() - start < 0.05


@pytest.mark.parametrize(
    ("script", "latency", "key"),
    [
        ({"steps": ["x"]}, 0.0, "steps"),
        ({"stpe:s1": ["x"]}, 0.0, "stpe:s1"),
        ({"step": ["x"]}, {"planning": 1.0}, "planning"),
    ],
)
def test_a_key_that_names_no_purpose_is_warned_about_at_construction(
    script: dict[str, Any], latency: Any, key: str
) -> None:
    with pytest.warns(UserWarning, match=rf"'{key}'.*never used.*known purposes: .*'step'"):
        ScriptedLLM(script, latency=latency)


def test_purpose_step_and_star_keys_are_not_warned_about() -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ScriptedLLM({"plan": ["p"], "step:s1.s2": ["x"], "*": ["y"]}, latency={"step": 1.0, "step:s1": 2.0, "*": 0.1})


async def test_reset_starts_the_script_over() -> None:
    llm = ScriptedLLM({"plan": ["first", "second"]})
    assert [(await llm.complete(request("plan"))).content for _ in range(2)] == ["first", "second"]
    llm.reset()
    assert (await llm.complete(request("plan"))).content == "first"
    assert len(llm.requests) == 1 and llm.requests[0].index == 0


async def test_it_plugs_into_the_registry_like_any_model() -> None:
    llm = ScriptedLLM({"step": ["hi"]})
    model = ChatModel(ModelRegistry().register("s", llm).get("s"))
    assert (await model.chat(HELLO, purpose="step")).content == "hi"
