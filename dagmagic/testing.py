"""``ScriptedLLM``: a deterministic offline model for tests, tutorials and users' own tests.

It sits at the backend boundary, so everything above it (structured levels, retries, usage, events)
runs exactly as with a real model::

    llm = ScriptedLLM({
        "plan": [{"steps": [{"id": "s1", "task": "look it up"}]}],
        "step": ["Paris"],                       # every step answers "Paris"
        "step:s2": [ToolCall("lookup", {"q": "x"}), "done"],   # step s2 calls a tool first
        "analyze": [{"achieved": True, "confidence": 0.9, "reasoning": "ok"}],
        "synthesize": [["The ", "answer ", "is Paris."]],      # streamed in three pieces
    })

A script maps a purpose (or ``purpose:step_id``, or ``*`` for anything else) to a list of replies used
in order, the last one repeating, or to a callable ``(request) -> reply``, sync or async. A key naming no
purpose (``dagmagic.models.Purpose``; a typo such as ``"steps"`` or ``"planning"``) is warned about when the model
is made: no request would ever use it. A reply is:

- a string: the content;
- a dict: a JSON value, delivered as a tool call, JSON text or prose with a fenced JSON block, by what
  the request asks for (forced tool choice, JSON mode, plain text), as a real model would; a plan (the
  planner's JSON form, ``{"steps": [...]}``) and a verdict (``{"achieved": ..., "final_answer": ...}``) are
  written as the plan and verdict lines the planner and the analyzer ask for;
- a ``ToolCall`` or a list of them: a request to call tools (a JSON action in the text when the model
  lacks tool calling);
- a ``ChatResponse``: the reply exactly as a provider gave it, with its usage and ``finish_reason``
  (``"length"``: cut at its token limit);
- an exception instance: raised, for fault injection;
- a list of strings: pieces of a streamed reply (an exception in the list is raised at that point);
- an iterator of strings (a generator, ``itertools.repeat("la ")``): pieces taken as they are streamed, so it
  may never end, like a model that never stops writing (not streamed, the reply never comes).

A ``ScriptedLLM`` keeps its place in the script for as long as it lives: reused for a second run (a notebook
cell run again), its lists go on from where the first run left them, so the second run gets the second plan.
``reset()`` starts the script over; or make a new one for each run.

Replaying a recorded run lives elsewhere and is re-exported here, where tests look for it: ``replay`` and
``recording_of`` (``dagmagic.store.replay``), ``ReplayLLM`` (``dagmagic.llm.replay_backend``) and ``Cassette``.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import warnings
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal, TypeAlias, get_args

from pydantic import BaseModel, ConfigDict, Field

from dagmagic.engine.calls.plan_lines import render_plan_lines
from dagmagic.engine.calls.verdict_lines import render_verdict_lines
from dagmagic.errors import ReplayMismatch
from dagmagic.llm.cassette import Cassette
from dagmagic.llm.protocol import Capabilities, ChatRequest, ChatResponse, StreamChunk, ToolCallData, response_pieces
from dagmagic.llm.replay_backend import ReplayLLM
from dagmagic.llm.token_rate import TokenRate, piece_times, reply_tokens
from dagmagic.llm.tokens import approximate_tokens
from dagmagic.models import Purpose
from dagmagic.store.replay import recording_of, replay

__all__ = [
    "Cassette",
    "ReplayLLM",
    "ReplayMismatch",
    "Reply",
    "ScriptError",
    "ScriptedLLM",
    "ScriptedRequest",
    "TokenRate",
    "ToolCall",
    "recording_of",
    "replay",
]


_PURPOSES: tuple[str, ...] = get_args(Purpose)
"""The purposes a script (or a latency) may be keyed by, alone or as ``purpose:step_id``."""


class ToolCall(BaseModel):
    """A scripted request to call a tool."""

    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    id: str | None = None

    def __init__(self, name: str, arguments: dict[str, Any] | None = None, id: str | None = None) -> None:
        super().__init__(name=name, arguments=arguments or {}, id=id)


Reply: TypeAlias = str | dict[str, Any] | list[Any] | ToolCall | BaseException | Iterator[str]
ScriptEntry: TypeAlias = Reply | Sequence[Reply] | Callable[["ScriptedRequest"], Any]


class ScriptError(LookupError):
    """The script has no reply for a request."""


class ScriptedRequest(BaseModel):
    """What a script's callable receives."""

    model_config = ConfigDict(frozen=True)

    purpose: Purpose
    messages: list[dict[str, Any]]
    step_id: str | None = None
    round: int | None = None
    level: Literal["tool_call", "json_mode", "text"] = "text"
    """What the request asks for: a forced tool call, JSON mode, or plain text."""
    tools: list[dict[str, Any]] = Field(default_factory=list)
    tool_choice: str | dict[str, Any] | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    """The cap the request was sent (``DagSettings.llm_max_tokens``)."""
    stream: bool = False
    index: int = 0
    """How many earlier requests this script key answered."""

    @property
    def prompt(self) -> str:
        """All message text, joined (handy for asserting on what the model saw)."""
        return "\n".join(str(m.get("content") or "") for m in self.messages)


class ScriptedLLM:
    """A scripted model; see the module docstring.

    Each list in the script is consumed in order across every request the model answers, whichever run sends
    it: reused for another run, it goes on where the last one stopped. ``reset()`` starts it over.
    """

    def __init__(
        self,
        script: Mapping[str, ScriptEntry],
        latency: float | Mapping[str, float] | TokenRate = 0.0,
        capabilities: Iterable[str] = ("tool_call", "json_mode", "stream"),
        *,
        chunk_delay: float = 0.0,
        price: tuple[float, float] | None = None,
        context_window: int | None = None,
    ) -> None:
        """``latency``: seconds before each reply; or per key, keyed like the script (``purpose:step_id`` wins
        over ``purpose``, which covers each of its step keys, then ``*``; 0 for the rest); or a ``TokenRate``
        (time follows the tokens read and written, and the usage is counted in ``cl100k_base`` tokens);
        ``chunk_delay``: seconds between streamed pieces; ``price``: USD per (input, output) token, else cost is
        unknown (None); ``context_window``: input tokens the model accepts (None: unlimited), for context guard
        tests. A script or latency key naming no purpose is warned about (``UserWarning``).
        """
        self.script = dict(script)
        self.latency = latency
        _warn_about_unused_keys("script", self.script)
        if isinstance(latency, Mapping):
            _warn_about_unused_keys("latency", latency)
        self._capabilities = Capabilities.of(tuple(capabilities))
        self.chunk_delay = chunk_delay
        self.price = price
        self._context_window = context_window
        self.requests: list[ScriptedRequest] = []
        self._served: dict[str, int] = {}

    def reset(self) -> None:
        """Start the script over, as if new: every list at its first reply again, no request seen."""
        self._served.clear()
        self.requests.clear()

    def capabilities(self, model: str) -> Capabilities:
        """The capabilities given at construction."""
        return self._capabilities

    def context_window(self, model: str) -> int | None:
        """The context window given at construction."""
        return self._context_window

    def estimate_cost(self, model: str, input_tokens: int, output_tokens: int) -> float | None:
        """USD a call of so many tokens costs at ``price``; None without one."""
        if self.price is None:
            return None
        return input_tokens * self.price[0] + output_tokens * self.price[1]

    def count_tokens(self, model: str, text: str) -> int:
        """Tokens of ``text`` as ``approximate_tokens`` counts them: no tokenizer to load, so a scripted run never
        imports litellm, and within a few percent of what litellm's counter gives a local model on prose.
        """
        return approximate_tokens(text)

    def requests_for(self, purpose: str, step_id: str | None = None) -> list[ScriptedRequest]:
        """The requests seen for a purpose (and step)."""
        return [r for r in self.requests if r.purpose == purpose and (step_id is None or r.step_id == step_id)]

    def _key(self, request: ChatRequest) -> str:
        for key in (f"{request.purpose}:{request.step_id}", request.purpose, "*"):
            if key in self.script:
                return key
        raise ScriptError(
            f"ScriptedLLM has no reply for purpose {request.purpose!r}"
            + (f" (step {request.step_id!r})" if request.step_id else "")
            + f"; add {request.purpose!r} to the script (keys now: {sorted(self.script)})"
        )

    async def _reply(self, request: ChatRequest, *, stream: bool) -> tuple[Any, ScriptedRequest]:
        try:
            key = self._key(request)
        except ScriptError:
            self.requests.append(self._seen(request, stream, 0))  # unanswered requests are requests too
            raise
        index = self._served.get(key, 0)
        self._served[key] = index + 1
        seen = self._seen(request, stream, index)
        self.requests.append(seen)
        delay = self._delay(request)
        if delay:
            await asyncio.sleep(delay)
        entry = self.script[key]
        if callable(entry) and not isinstance(entry, BaseException):
            reply = entry(seen)
            if inspect.isawaitable(reply):
                reply = await reply
        elif isinstance(entry, list | tuple):
            if not entry:
                raise ScriptError(f"the script's list for {key!r} is empty")
            reply = entry[min(index, len(entry) - 1)]
        else:
            reply = entry
        return reply, seen

    def _delay(self, request: ChatRequest) -> float:
        """Seconds before the reply: the latency of the request's step key, else of its purpose, else of ``*``."""
        latency = self.latency
        if isinstance(latency, TokenRate):
            return 0.0
        if not isinstance(latency, Mapping):
            return latency
        for key in (f"{request.purpose}:{request.step_id}", request.purpose, "*"):
            if key in latency:
                return latency[key]
        return 0.0

    @staticmethod
    def _seen(request: ChatRequest, stream: bool, index: int) -> ScriptedRequest:
        return ScriptedRequest(
            purpose=request.purpose,
            messages=request.messages,
            step_id=request.step_id,
            round=request.round,
            level="tool_call" if request.forced_tool else "json_mode" if request.response_format else "text",
            tools=request.tools or [],
            tool_choice=request.tool_choice,
            temperature=request.temperature,
            max_tokens=request.max_tokens,
            stream=stream,
            index=index,
        )

    async def complete(self, request: ChatRequest) -> ChatResponse:
        """The scripted reply, shaped by what the request asks for."""
        start = asyncio.get_running_loop().time()
        reply, _ = await self._reply(request, stream=False)
        if isinstance(reply, BaseException):
            raise reply
        if isinstance(reply, Iterator):  # the whole of it, however long it takes to write
            written: list[str] = []
            for piece in reply:
                written.append(piece)
                await asyncio.sleep(self.chunk_delay)
            reply = "".join(written)
        if isinstance(reply, list) and all(isinstance(piece, str | BaseException) for piece in reply):
            for piece in reply:
                if isinstance(piece, BaseException):
                    raise piece
        response = self._response(request, reply)
        if isinstance(self.latency, TokenRate):
            await _sleep_until(start + self.latency.written(response.input_tokens, response.output_tokens))
        return response

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamChunk]:
        """The scripted reply in pieces: the given ones, or words of a text reply."""
        start = asyncio.get_running_loop().time()
        reply, _ = await self._reply(request, stream=True)
        if isinstance(reply, BaseException):
            raise reply
        lazy = isinstance(reply, Iterator)
        pieces: Iterable[Any] = (
            reply if lazy or _is_chunk_list(reply) else response_pieces(self._response(request, reply))
        )
        text: list[str] = []
        rate = self.latency if isinstance(self.latency, TokenRate) else None
        input_tokens = rate.input_tokens(request) if rate else 0
        written: list[str] = []
        for number, piece in enumerate(pieces):
            if rate is not None and not isinstance(piece, BaseException):
                written.append(piece.text + _arguments(piece) if isinstance(piece, StreamChunk) else str(piece))
                await _sleep_until(start + piece_times(rate, input_tokens, ["".join(written)])[0])
            if number and self.chunk_delay:
                await asyncio.sleep(self.chunk_delay)
            elif lazy:
                await asyncio.sleep(0)  # an endless one leaves the loop to others between pieces
            if isinstance(piece, BaseException):
                raise piece
            if isinstance(piece, StreamChunk):
                text.append(piece.text)
                yield piece
            else:
                text.append(str(piece))
                yield StreamChunk(text=str(piece))
        whole = lazy or _is_chunk_list(reply)
        final = self._response(request, "".join(text)) if whole else self._response(request, reply)
        yield StreamChunk(final=final)

    def _response(self, request: ChatRequest, reply: Any) -> ChatResponse:
        if isinstance(reply, ChatResponse):
            return reply
        content, tool_calls = self._render(request, reply)
        if isinstance(self.latency, TokenRate):
            input_tokens = self.latency.input_tokens(request)
            output_tokens = reply_tokens(content, ((tc.name, tc.arguments) for tc in tool_calls))
        else:
            prompt_chars = sum(len(str(m.get("content") or "")) for m in request.messages)
            output_chars = len(content) + sum(len(tc.name) + len(tc.arguments) for tc in tool_calls)
            input_tokens, output_tokens = prompt_chars // 4 + 1, output_chars // 4 + 1
        cost = None
        if self.price is not None:
            cost = input_tokens * self.price[0] + output_tokens * self.price[1]
        return ChatResponse(
            content=content,
            tool_calls=tool_calls,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cost=cost,
            finish_reason="tool_calls" if tool_calls else "stop",
        )

    def _render(self, request: ChatRequest, reply: Any) -> tuple[str, list[ToolCallData]]:
        native_tools = self._capabilities.tool_call and bool(request.tools)
        if isinstance(reply, str):
            return reply, []
        if _is_chunk_list(reply):
            return "".join(str(piece) for piece in reply), []
        if isinstance(reply, ToolCall) or (isinstance(reply, list) and reply and isinstance(reply[0], ToolCall)):
            calls = [reply] if isinstance(reply, ToolCall) else list(reply)
            if native_tools:
                return "", [_tool_call_data(call, i) for i, call in enumerate(calls)]
            actions = [{"tool": call.name, "arguments": call.arguments} for call in calls]
            return json.dumps(actions[0] if len(actions) == 1 else actions), []
        if request.reply_format is not None and isinstance(reply, dict | list):
            render = render_plan_lines if request.reply_format == "plan" else render_verdict_lines
            lines = render(reply)
            if lines is not None:
                return lines, []
        if isinstance(reply, dict | list):
            text = json.dumps(reply, ensure_ascii=False)
            forced = request.forced_tool
            if forced and native_tools:
                return "", [ToolCallData(id="call_0", name=forced, arguments=text)]
            if request.response_format:
                return text, []
            return f"Here is the result:\n```json\n{json.dumps(reply, indent=2, ensure_ascii=False)}\n```", []
        raise ScriptError(f"ScriptedLLM cannot use a reply of type {type(reply).__name__}: {reply!r}")


def _warn_about_unused_keys(what: str, keys: Iterable[str]) -> None:
    """A ``UserWarning`` for each key no request will ever match: its purpose is none of ``_PURPOSES``."""
    for key in keys:
        if key != "*" and key.partition(":")[0] not in _PURPOSES:
            warnings.warn(
                f"ScriptedLLM: the {what} key {key!r} is never used: it names no purpose. Key it by a purpose, "
                f"'purpose:step_id' or '*'; known purposes: {', '.join(map(repr, _PURPOSES))}",
                UserWarning,
                stacklevel=3,
            )


def _tool_call_data(call: ToolCall, index: int) -> ToolCallData:
    return ToolCallData(id=call.id or f"call_{index}", name=call.name, arguments=json.dumps(call.arguments))


async def _sleep_until(deadline: float) -> None:
    delay = deadline - asyncio.get_running_loop().time()
    if delay > 0:
        await asyncio.sleep(delay)


def _arguments(chunk: StreamChunk) -> str:
    return "".join((delta.name or "") + (delta.arguments or "") for delta in chunk.tool_calls)


def _is_chunk_list(reply: Any) -> bool:
    return (
        isinstance(reply, list)
        and bool(reply)
        and all(isinstance(piece, str | BaseException | StreamChunk) for piece in reply)
    )
