"""``TokenRate``: a simulated provider whose time follows the tokens it reads and writes."""

from __future__ import annotations

import asyncio
import json

from dagmagic.llm.protocol import ChatRequest
from dagmagic.llm.token_rate import reply_tokens, request_tokens, wire_tokens
from dagmagic.testing import ScriptedLLM, TokenRate

RATE = TokenRate(first_token=0.05, input_tokens_per_s=2000, output_tokens_per_s=200)


def request(words: int, **fields: object) -> ChatRequest:
    return ChatRequest(model="m", messages=[{"role": "user", "content": "hello " * words}], purpose="step", **fields)


def test_tokens_are_counted_in_cl100k_on_everything_sent() -> None:
    assert wire_tokens("hello world") == 2
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    bare, with_tools = request(10), request(10, tools=tools)
    assert request_tokens(bare) == wire_tokens("hello " * 10) + 3  # the message, and what a chat format adds
    assert request_tokens(with_tools) == request_tokens(bare) + wire_tokens(json.dumps(tools))
    assert reply_tokens("Paris", [("lookup", '{"q": "x"}')]) == 1 + wire_tokens("lookup") + wire_tokens('{"q": "x"}')


async def test_a_streamed_reply_arrives_as_its_tokens_are_written() -> None:
    reply = "one two three four five six seven eight nine ten"
    llm = ScriptedLLM({"step": [reply]}, latency=RATE)
    sent = request(400)  # 404 tokens ("hello " 400 times is 401): read in 0.2 s
    loop = asyncio.get_running_loop()
    start = loop.time()
    arrivals = [(loop.time() - start, chunk) async for chunk in llm.stream(sent)]
    pieces = [(at, chunk.text) for at, chunk in arrivals if chunk.final is None]
    first = RATE.first_token + 404 / 2000
    assert pieces[0][0] >= first and pieces[0][0] < first + 0.1
    # the first piece ("one ") is two tokens, the whole ten: the last comes 8 tokens later, 40 ms at 200 a second
    # measured from the start: a loaded machine may deliver the first piece late and the rest on time
    assert pieces[-1][0] >= first + 8 / 200 * 0.9
    final = arrivals[-1][1].final
    assert final is not None and (final.input_tokens, final.output_tokens) == (404, wire_tokens(reply))


async def test_a_whole_reply_comes_when_its_last_token_is_written_and_length_costs_time() -> None:
    short, long = "Paris.", "Paris " * 200
    loop = asyncio.get_running_loop()
    times = []
    for reply in (short, long):
        llm = ScriptedLLM({"step": [reply]}, latency=RATE)
        start = loop.time()
        response = await llm.complete(request(10))
        times.append(loop.time() - start)
        assert response.output_tokens == wire_tokens(reply)
    assert times[0] >= RATE.first_token and times[0] < RATE.first_token + 0.1
    assert times[1] - times[0] >= (wire_tokens(long) - wire_tokens(short)) / 200 * 0.9  # 1 s more for 200 tokens
