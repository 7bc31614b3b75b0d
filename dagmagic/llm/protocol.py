"""The backend boundary: what one chat request and its reply look like, and ``ChatBackend``, what answers them.

Everything above this boundary (retries, usage, events, structured levels) is shared by every backend;
``dagmagic.llm.litellm_backend.LiteLLMBackend`` and ``dagmagic.testing.ScriptedLLM`` implement ``ChatBackend``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from dagmagic.models import Purpose, SafeText

__all__ = [
    "Capabilities",
    "ChatBackend",
    "ChatRequest",
    "ChatResponse",
    "StreamChunk",
    "ToolCallData",
    "ToolCallDelta",
    "response_pieces",
]


class Capabilities(BaseModel):
    """What a model can do, as far as structured output and streaming are concerned."""

    tool_call: bool = False
    """Native function calling with a forced tool choice."""
    json_mode: bool = False
    """``response_format`` JSON mode."""
    stream: bool = True
    """Streamed replies."""

    @classmethod
    def of(cls, value: Capabilities | Iterable[str] | Mapping[str, bool]) -> Capabilities:
        """From an instance, names (``("tool_call", "json_mode")``) or a mapping of flags."""
        if isinstance(value, Capabilities):
            return value
        if isinstance(value, Mapping):
            return cls.model_validate(dict(value))
        names = set(value)
        unknown = names - set(cls.model_fields)
        if unknown:
            raise ValueError(f"unknown capabilities {sorted(unknown)}; known: {sorted(cls.model_fields)}")
        return cls(**{name: name in names for name in cls.model_fields})


class ChatRequest(BaseModel):
    """One chat completion request, as it crosses the backend boundary."""

    model: str
    """The litellm model string, router group, or registry entry name for other backends."""
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    response_format: dict[str, Any] | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    """Most tokens the reply may have (``DagSettings.llm_max_tokens`` of its purpose): a reply that never ends
    is cut there. None: the provider's own limit."""
    purpose: Purpose
    round: int | None = None
    step_id: str | None = None
    options: dict[str, Any] = Field(default_factory=dict, exclude=True, repr=False)
    """Extra litellm keywords (``api_base``, ``api_key``...): never serialized, never shown."""
    run_id: str | None = Field(None, exclude=True)
    """The run the call belongs to (told to litellm's callbacks, not to the model)."""
    reply_format: Literal["plan", "verdict"] | None = Field(None, exclude=True)
    """The text format the caller reads the reply in, when it is one of dagmagic's own (``"plan"``: plan lines,
    ``dagmagic.engine.calls.plan_lines``; ``"verdict"``: verdict lines, ``verdict_lines``): a scripted model
    writes a scripted value in it."""

    @property
    def forced_tool(self) -> str | None:
        """The function the request forces the model to call, if any."""
        choice = self.tool_choice
        if isinstance(choice, dict):
            function = choice.get("function")
            if isinstance(function, dict) and isinstance(function.get("name"), str):
                return str(function["name"])
        return None


class ToolCallData(BaseModel):
    """A tool call the model asked for; ``arguments`` is the raw JSON text."""

    id: str
    name: str
    arguments: SafeText = ""


class ChatResponse(BaseModel):
    """A whole reply."""

    content: SafeText = ""
    """Made safe here, where a model's text enters (``safe_text``): a lone surrogate cannot fail the run."""
    tool_calls: list[ToolCallData] = Field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    """Of ``input_tokens``, those read from the provider's prompt cache."""
    reasoning_tokens: int = 0
    """Of ``output_tokens``, those spent reasoning."""
    cost: float | None = None
    """USD, None when the price is unknown."""
    finish_reason: str | None = None
    model: str | None = None
    """The model the provider says answered (it may name a version of the one asked for); None when unknown."""
    cached: bool = False
    """Given again by the response cache (``dagmagic.llm.cache``): no provider was called and ``cost`` is 0."""
    saved_cost: float | None = None
    """For a cached reply, what it cost when it was first answered (None: unknown)."""


class ToolCallDelta(BaseModel):
    """A piece of a streamed tool call; pieces with the same ``index`` concatenate."""

    index: int = 0
    id: str | None = None
    name: str | None = None
    arguments: SafeText = ""


class StreamChunk(BaseModel):
    """A piece of a streamed reply. The backend's last chunk carries ``final``, the whole reply with usage."""

    text: SafeText = ""
    tool_calls: list[ToolCallDelta] = Field(default_factory=list)
    final: ChatResponse | None = None


@runtime_checkable
class ChatBackend(Protocol):
    """Something that answers chat requests: litellm, ``ScriptedLLM``, or your own.

    Besides these three methods a backend may have any of:

    - ``count_tokens(model: str, text: str) -> int``: tokens of ``text`` for ``model``, for the context
      guard (without it, ``dagmagic.llm.tokens.approximate_tokens``); counts are remembered by text, so it
      must depend on nothing else;
    - ``context_window(model: str) -> int | None``: the input tokens ``model`` accepts (None: unknown);
    - ``estimate_cost(model: str, input_tokens: int, output_tokens: int) -> float | None``: USD a call of so many
      tokens costs (None: unknown), which a run's cost budget reserves before each call (without it, a call
      reserves nothing and only its recorded cost counts);
    - ``async warm_up() -> None``: slow preparation (loading a tokenizer, importing a client), awaited before
      a run's first call; it should keep the event loop free (``asyncio.to_thread``) and be quick once done.

    They are not members of the protocol, so a backend written with only the three still is a ``ChatBackend``.
    """

    def capabilities(self, model: str) -> Capabilities:
        """What ``model`` supports."""
        ...

    async def complete(self, request: ChatRequest) -> ChatResponse:
        """The whole reply to ``request``."""
        ...

    def stream(self, request: ChatRequest) -> AsyncIterator[StreamChunk]:
        """The reply in pieces, the last one with ``final`` set."""
        ...


def response_pieces(response: ChatResponse) -> list[StreamChunk]:
    """A whole reply as stream pieces: its text word by word, its tool calls in argument slices (no ``final``)."""
    words = response.content.split(" ")
    pieces = [StreamChunk(text=word + (" " if i < len(words) - 1 else "")) for i, word in enumerate(words) if word or i]
    for index, call in enumerate(response.tool_calls):
        pieces.append(StreamChunk(tool_calls=[ToolCallDelta(index=index, id=call.id, name=call.name)]))
        for start in range(0, len(call.arguments), 16):
            delta = ToolCallDelta(index=index, arguments=call.arguments[start : start + 16])
            pieces.append(StreamChunk(tool_calls=[delta]))
    return pieces
