"""An MCP server's tools as dagmagic tools: the server's name, description and input schema; a call goes to
the server, its content becomes the observation, and a result marked ``isError`` becomes an error observation
(``Tool.run`` turns the ``MCPToolError`` raised here into one, and applies ``tool_timeout``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

from dagmagic.engine.tools.functions import Tool, arguments_object, computing_name

__all__ = ["MCPTool", "MCPToolError", "observation_of"]

_UNNAMEABLE = re.compile(r"[^A-Za-z0-9_-]")

Call = Callable[[str, dict[str, Any]], Awaitable[Any]]
"""Sends ``tools/call`` with the tool's name and arguments and returns the server's ``CallToolResult``."""


class MCPToolError(Exception):
    """The server answered a call with ``isError``: its text is the observation's error."""


class MCPTool(Tool):
    """A tool one MCP server lists; ``call`` reaches that server."""

    def __init__(self, listed: Any, call: Call, server: str) -> None:
        remote = str(listed.name)

        async def call_remote(**arguments: Any) -> str:
            result = await call(remote, arguments)
            text = observation_of(result)
            if getattr(result, "is_error", False):
                raise MCPToolError(text or f"{remote} failed without saying why")
            return text

        # a model may only call names of letters, digits, '_' and '-': other characters become '_'
        name = _UNNAMEABLE.sub("_", remote)[:64] or "tool"
        if not name[0].isalpha() and name[0] != "_":
            name = f"t_{name}"[:64]
        self.function = call_remote
        self.name = name
        self.remote_name = remote
        """The name the server knows the tool by."""
        self.server = server
        """The server's command line or URL."""
        self.description = " ".join(str(listed.description or "").split()) or f"{remote}, a tool of {server}."
        self.timeout = None
        self.computes = computing_name(name)
        self.is_async = True
        schema = dict(listed.input_schema or {})
        schema.setdefault("type", "object")
        schema.setdefault("properties", {})
        self._schema = schema

    @property
    def parameters(self) -> dict[str, Any]:
        """The server's JSON schema of the arguments."""
        return self._schema

    def __repr__(self) -> str:
        return f"MCPTool({self.name!r}, server={self.server!r})"

    def _validate(self, arguments: dict[str, Any] | str | None) -> dict[str, Any]:
        arguments = arguments_object(arguments)
        problem = _schema_problem(self._schema, arguments)
        if problem is not None:
            raise ValueError(problem)
        return arguments


def observation_of(result: Any) -> str:
    """The text of a ``CallToolResult``: its text content, what other content is, else its structured content."""
    parts = []
    for block in getattr(result, "content", None) or []:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(str(block.text))
        elif kind == "resource":
            resource = block.resource
            text = getattr(resource, "text", None)
            parts.append(str(text) if text is not None else f"[resource {resource.uri} ({resource.mime_type})]")
        elif kind == "resource_link":
            parts.append(f"[resource {block.uri}]")
        elif kind in ("image", "audio"):
            parts.append(f"[{kind} {getattr(block, 'mime_type', '')}, not shown]")
        else:
            parts.append(f"[{kind or type(block).__name__} content, not shown]")
    if not parts and getattr(result, "structured_content", None) is not None:
        return json.dumps(result.structured_content, ensure_ascii=False, default=str)
    return "\n".join(parts)


def _schema_problem(schema: dict[str, Any], arguments: dict[str, Any]) -> str | None:
    """What ``arguments`` break of the server's schema (None when they fit, or jsonschema is not there to say)."""
    try:
        import jsonschema  # type: ignore[import-untyped]
    except ImportError:  # the server validates too: its error comes back as the observation
        return None
    try:
        validator = jsonschema.validators.validator_for(schema)(schema)
        errors = sorted(validator.iter_errors(arguments), key=lambda error: list(error.path))
    except jsonschema.SchemaError:  # a schema the server got wrong is the server's to enforce
        return None
    problems = [f"{'.'.join(map(str, error.path)) or 'arguments'}: {error.message}" for error in errors]
    return "; ".join(problems) or None
