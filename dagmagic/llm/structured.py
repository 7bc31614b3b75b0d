"""``structured_llm_call``: a value of a given shape from any model, degrading through three levels.

1. native function calling with a forced tool choice (JSON in the content instead is accepted) - 1 call;
2. JSON mode, one retry quoting the bad output - up to 2 calls;
3. plain text with extraction, one retry - up to 2 calls; then ``regex_fallback`` on the text replies.

Levels 1 and 2 are tried only when the model supports them, and none in ``skip`` (a caller that streamed one
already). A fatal provider error is raised at once; a
transient one (after the client's retries) abandons the level. Total failure returns ``default`` when
given, else raises ``StructuredOutputError``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dagmagic import errors
from dagmagic.errors import StructuredOutputError
from dagmagic.llm.client import ChatModel, ChatResult, EventSink, as_chat_model
from dagmagic.llm.extraction import extract_json
from dagmagic.llm.registry import ModelEntry
from dagmagic.models import LLMCall, Purpose, StructuredLevel, Usage
from dagmagic.settings import DagSettings

__all__ = ["OutputShape", "StructuredResult", "echoes_schema", "structured_llm_call", "with_instruction"]

T = TypeVar("T")

_MISSING: Any = object()
_QUOTE_LIMIT = 2000


class StructuredResult(BaseModel, Generic[T]):
    """The value and how it was obtained."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    value: T
    """The parsed value (``default`` on total failure)."""
    level_used: StructuredLevel
    """``tool_call``, ``json_mode``, ``text``, ``regex`` or ``default``."""
    llm_calls: int
    """How many LLM calls it took."""
    calls: list[LLMCall]
    """Their records."""
    usage: Usage
    """Their summed usage."""
    problems: list[str] = Field(default_factory=list)
    """What went wrong at each level tried (``"json_mode: Rate limited"``), why ``default`` was used."""

    @property
    def failure(self) -> str:
        """Why no level gave a value, in a few words ("" when one did)."""
        if self.level_used != "default":
            return ""
        short = (problem if len(problem) <= 160 else f"{problem[:159]}…" for problem in self.problems)
        return "; ".join(dict.fromkeys(short))


class _Attempts:
    """The running tally of one structured call."""

    def __init__(self) -> None:
        self.calls: list[LLMCall] = []
        self.text_replies: list[str] = []
        self.problems: list[str] = []

    def result(self, value: Any, level: StructuredLevel) -> StructuredResult[Any]:
        return StructuredResult(
            value=value,
            level_used=level,
            llm_calls=len(self.calls),
            calls=self.calls,
            usage=Usage.total(call.usage for call in self.calls),
            problems=self.problems,
        )


async def structured_llm_call(
    model: ChatModel | ModelEntry | Any,
    messages: list[dict[str, Any]],
    schema: type[BaseModel] | dict[str, Any],
    *,
    parse_fn: Callable[[Any], Any] | None = None,
    regex_fallback: Callable[[str], Any] | None = None,
    default: Any = _MISSING,
    purpose: Purpose,
    round: int | None = None,
    step_id: str | None = None,
    temperature: float | None = 0.0,
    schema_name: str | None = None,
    settings: DagSettings | None = None,
    emit: EventSink | None = None,
    skip: Collection[StructuredLevel] = (),
) -> StructuredResult[Any]:
    """A value matching ``schema`` (a pydantic model or a JSON schema dict) from ``model``.

    ``parse_fn(raw)`` turns the parsed JSON into the value (an exception counts as a failed attempt);
    without it a pydantic ``schema`` validates the JSON. ``regex_fallback(text)`` is the last resort on
    the text level's replies and returns the raw value or None. ``skip``: levels not to try (the caller tried
    one already, streamed, and its reply was unreadable: asked again at temperature 0 it would be the same).
    """
    chat = as_chat_model(model, settings=settings, emit=emit)
    shape = OutputShape(schema, schema_name, parse_fn)
    attempts = _Attempts()
    capabilities = chat.entry.capabilities
    call = _Caller(chat, purpose, round, step_id, temperature, attempts)

    if capabilities.tool_call and "tool_call" not in skip:
        found = await _tool_level(call, messages, shape, attempts)
        if found is not _MISSING:
            return attempts.result(found, "tool_call")
    if capabilities.json_mode and "json_mode" not in skip:
        found = await _retrying_level(call, messages, shape, attempts, "json_mode")
        if found is not _MISSING:
            return attempts.result(found, "json_mode")
    if "text" not in skip:
        found = await _retrying_level(call, messages, shape, attempts, "text")
        if found is not _MISSING:
            return attempts.result(found, "text")
    if regex_fallback is not None:
        for reply in reversed(attempts.text_replies):
            found = _from_regex(regex_fallback, reply, shape)
            if found is not _MISSING:
                return attempts.result(found, "regex")
    if default is not _MISSING:
        return attempts.result(default, "default")
    raise StructuredOutputError(
        f"{chat.name} gave no usable {shape.name} after {len(attempts.calls)} calls "
        f"(purpose {purpose}): " + "; ".join(attempts.problems)
    )


class OutputShape:
    """The requested shape: its schema, the tool or format that asks for it, and how raw JSON becomes the value."""

    def __init__(
        self, schema: type[BaseModel] | dict[str, Any], name: str | None, parse_fn: Callable[[Any], Any] | None
    ) -> None:
        self.model = schema if isinstance(schema, type) and issubclass(schema, BaseModel) else None
        self.json_schema: dict[str, Any] = (
            self.model.model_json_schema() if self.model is not None else dict(schema)  # type: ignore[arg-type]
        )
        self.name = name or (self.model.__name__ if self.model else str(self.json_schema.get("title", "result")))
        self.parse_fn = parse_fn
        # function parameters must be an object: other shapes travel wrapped in {"value": ...}
        self.wrapped = self.json_schema.get("type", "object") != "object"

    @property
    def tool(self) -> dict[str, Any]:
        """The function a model is forced to call with the value as its arguments."""
        parameters = (
            {"type": "object", "properties": {"value": self.json_schema}, "required": ["value"]}
            if self.wrapped
            else self.json_schema
        )
        return {
            "type": "function",
            "function": {"name": self.tool_name, "description": f"Submit the {self.name}.", "parameters": parameters},
        }

    @property
    def tool_name(self) -> str:
        """``submit_<shape name>``."""
        cleaned = "".join(c if c.isalnum() else "_" for c in self.name).strip("_").lower()
        return f"submit_{cleaned or 'result'}"[:64]

    def request(self, level: StructuredLevel) -> dict[str, Any]:
        """The request fields that ask for this shape at ``level`` (tools and choice, or a response format)."""
        if level == "tool_call":
            return {"tools": [self.tool], "tool_choice": {"type": "function", "function": {"name": self.tool_name}}}
        if level == "json_mode":
            return {"response_format": {"type": "json_object"}}
        return {}

    def instruction(self, level: StructuredLevel) -> str:
        """What to tell the model at ``level`` so that it answers in this shape."""
        if level == "tool_call":
            return f"Answer by calling the `{self.tool_name}` tool."
        schema = json.dumps(self.json_schema, separators=(",", ":"))
        if level == "json_mode":
            return f"Reply with only a JSON value matching this JSON schema:\n{schema}"
        return (
            "Reply with a JSON value matching this JSON schema, inside a ```json code fence, "
            f"and nothing else:\n{schema}"
        )

    def parse(self, text: str, *, from_tool: bool = False) -> Any:
        """The value in a reply's text (a tool call's arguments when ``from_tool``); raises when there is none:
        no JSON, the JSON schema written back, or JSON of the wrong shape.
        """
        raw = extract_json(text)
        if echoes_schema(raw, self.json_schema) or (
            self.wrapped and isinstance(raw, dict) and echoes_schema(raw.get("value"), self.json_schema)
        ):
            raise ValueError("it repeats the JSON schema instead of giving a value that matches it")
        return self.convert(raw, from_tool=from_tool)

    def convert(self, raw: Any, *, from_tool: bool = False) -> Any:
        """The value from parsed JSON; raises on the wrong shape."""
        if from_tool and self.wrapped and isinstance(raw, dict) and "value" in raw:
            raw = raw["value"]
        if self.parse_fn is not None:
            return self.parse_fn(raw)
        if self.model is not None:
            return self.model.model_validate(raw)
        expected = self.json_schema.get("type")
        if isinstance(expected, str) and not _is_json_type(raw, expected):
            # a dict schema is not validated in full (no JSON schema validator here), but its top-level type is
            raise ValueError(f"it is a {type(raw).__name__} where the schema asks for a JSON {expected}")
        return raw


class _Caller:
    """Makes one call of a level and records it in the tally."""

    def __init__(
        self,
        chat: ChatModel,
        purpose: Purpose,
        round: int | None,
        step_id: str | None,
        temperature: float | None,
        attempts: _Attempts,
    ) -> None:
        self.chat = chat
        self.purpose = purpose
        self.round = round
        self.step_id = step_id
        self.temperature = temperature
        self.attempts = attempts

    async def __call__(
        self, messages: list[dict[str, Any]], level: StructuredLevel, **request: Any
    ) -> ChatResult | None:
        """The reply, or None when a transient error (after retries) abandons the level."""
        try:
            result = await self.chat.chat(
                messages,
                purpose=self.purpose,
                round=self.round,
                step_id=self.step_id,
                temperature=self.temperature,
                structured_level=level,
                **request,
            )
        except errors.TransientProviderError as exc:
            if isinstance(exc.call, LLMCall):
                self.attempts.calls.append(exc.call)
            self.attempts.problems.append(f"{level}: {exc.kind}")
            return None
        self.attempts.calls.append(result.call)
        return result


async def _tool_level(call: _Caller, messages: list[dict[str, Any]], shape: OutputShape, attempts: _Attempts) -> Any:
    reply = await call(
        with_instruction(messages, shape.instruction("tool_call")), "tool_call", **shape.request("tool_call")
    )
    if reply is None:
        return _MISSING
    response = reply.response
    sources = [(tc.arguments, True) for tc in response.tool_calls if tc.name == shape.tool_name]
    sources += [(tc.arguments, True) for tc in response.tool_calls if tc.name != shape.tool_name]
    sources.append((response.content, False))
    for text, from_tool in sources:
        found = _try_convert(text, shape, attempts, "tool_call", from_tool=from_tool)
        if found is not _MISSING:
            return found
    return _MISSING


async def _retrying_level(
    call: _Caller, messages: list[dict[str, Any]], shape: OutputShape, attempts: _Attempts, level: StructuredLevel
) -> Any:
    """Two tries at the JSON or text level, the second quoting what was wrong with the first."""
    conversation = with_instruction(messages, shape.instruction(level))
    for try_number in range(2):
        reply = await call(conversation, level, **shape.request(level))
        if reply is None:
            return _MISSING
        if level == "text":
            attempts.text_replies.append(reply.content)
        found = _try_convert(reply.content, shape, attempts, level)
        if found is not _MISSING:
            return found
        if try_number == 0:
            conversation = [
                *conversation,
                {"role": "assistant", "content": reply.content[:_QUOTE_LIMIT]},
                {
                    "role": "user",
                    "content": f"That reply could not be used: {attempts.problems[-1]}. "
                    f"Reply again with only the JSON value matching the schema.",
                },
            ]
    return _MISSING


_SCHEMA_WORDS = frozenset(
    {
        "$defs", "$ref", "$schema", "additionalProperties", "allOf", "anyOf", "default", "description", "enum",
        "format", "items", "maximum", "minimum", "oneOf", "properties", "required", "title", "type",
    }
)  # fmt: skip


def echoes_schema(value: Any, schema: dict[str, Any]) -> bool:
    """Whether a reply is the JSON schema written back (small models do this) instead of a value: the schema
    itself, or its properties each given as a schema fragment (``{"type": "boolean", "description": ...}``).
    """
    if not isinstance(value, dict) or not value:
        return False
    if value == schema or (isinstance(value.get("properties"), dict) and set(value) <= _SCHEMA_WORDS):
        return True
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return False
    given = [name for name in properties if name in value]
    return bool(given) and all(_is_schema_fragment(value[name]) for name in given)


def _is_schema_fragment(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and bool(value)
        and set(value) <= _SCHEMA_WORDS
        and any(word in value for word in ("type", "anyOf", "oneOf", "$ref"))
    )


def _try_convert(text: str, shape: OutputShape, attempts: _Attempts, level: str, *, from_tool: bool = False) -> Any:
    try:
        return shape.parse(text, from_tool=from_tool)
    except ValidationError as exc:
        problem = f"it does not match the schema ({_first_errors(exc)})"
    except Exception as exc:  # parse_fn is the caller's code: any exception is a failed attempt
        problem = f"{type(exc).__name__}: {exc}"
    attempts.problems.append(f"{level}: {problem}")
    return _MISSING


def _from_regex(regex_fallback: Callable[[str], Any], text: str, shape: OutputShape) -> Any:
    try:
        raw = regex_fallback(text)
        if raw is None:
            return _MISSING
        if shape.model is not None and isinstance(raw, shape.model):
            return raw
        return shape.convert(raw) if isinstance(raw, dict | list) else raw
    except Exception:  # a fallback that raises simply found nothing
        return _MISSING


_JSON_TYPES: dict[str, type | tuple[type, ...]] = {
    "object": dict,
    "array": list,
    "string": str,
    "integer": int,
    "number": (int, float),
    "boolean": bool,
    "null": type(None),
}


def _is_json_type(value: Any, json_type: str) -> bool:
    """Whether ``value`` is of the JSON schema type ``json_type`` (an unknown type name accepts anything)."""
    python_type = _JSON_TYPES.get(json_type)
    if python_type is None:
        return True
    if isinstance(value, bool) and json_type in ("integer", "number"):
        return False
    return isinstance(value, python_type)


def _first_errors(exc: ValidationError, limit: int = 3) -> str:
    parts = [f"{'.'.join(str(p) for p in e['loc']) or 'value'}: {e['msg']}" for e in exc.errors()[:limit]]
    return "; ".join(parts)


def with_instruction(messages: list[dict[str, Any]], instruction: str) -> list[dict[str, Any]]:
    """A copy of ``messages`` with the format instruction appended to the last user message."""
    copied = [dict(message) for message in messages]
    if copied and copied[-1].get("role") == "user" and isinstance(copied[-1].get("content"), str):
        copied[-1]["content"] = f"{copied[-1]['content']}\n\n{instruction}"
    else:
        copied.append({"role": "user", "content": instruction})
    return copied
