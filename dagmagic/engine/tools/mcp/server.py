"""``MCPServer``: how to reach one MCP server, a process on stdio or an endpoint over streamable HTTP.

A value, not a connection: two equal servers (same command, arguments, environment, working directory; or
same URL and headers) are one server to a session, started once. Its environment and header values often
hold keys: its ``repr`` never shows them, and they are masked wherever else they appear (``_secrets``).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from dagmagic.errors import MCPServerError

__all__ = ["MCPServer", "MCPServerError"]

_START_SECONDS = 60.0
"""How long a server may take to start and answer (``npx -y`` may download its package first)."""


@dataclass(frozen=True, eq=True)
class MCPServer:
    """One MCP server whose tools steps may call: ``MCPServer.stdio(command, *args, env=...)`` or
    ``MCPServer.http(url, headers=...)``, passed in ``tools=`` beside functions.
    """

    transport: Literal["stdio", "http"]
    """``stdio``: a process the session starts; ``http``: a running endpoint (streamable HTTP)."""
    target: tuple[str, ...]
    """The command and its arguments (stdio), or the URL alone (http)."""
    settings: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    """Extra environment variables (stdio) or HTTP headers (http), sorted by name."""
    cwd: str | None = None
    """The process's working directory (stdio); None: the kernel's."""
    start_timeout: float = _START_SECONDS
    """Seconds the server may take to start and list its tools."""

    def __post_init__(self) -> None:
        from dagmagic._secrets import remember_secret_values

        # what a server prints (its stderr, an error) may echo them: masked wherever text leaves dagmagic
        remember_secret_values(value for _, value in self.settings)

    @classmethod
    def stdio(
        cls,
        command: str,
        *args: str,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        start_timeout: float = _START_SECONDS,
    ) -> MCPServer:
        """A server the session runs as a process talking JSON-RPC on its stdin and stdout. Its environment is
        ``env`` over a few safe variables (``PATH``, ``HOME``, ...): never the kernel's keys unless given here.
        """
        if not isinstance(command, str) or not command.strip():
            raise ValueError("MCPServer.stdio needs a command, e.g. MCPServer.stdio('npx', '-y', 'some-server')")
        values = _pairs(env, "env")
        return cls("stdio", (command, *map(str, args)), values, None if cwd is None else str(cwd), start_timeout)

    @classmethod
    def http(
        cls, url: str, *, headers: Mapping[str, str] | None = None, start_timeout: float = _START_SECONDS
    ) -> MCPServer:
        """A server already running at ``url`` (streamable HTTP), sent ``headers`` with every request."""
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError(f"MCPServer.http needs an http:// or https:// URL, got {url!r}")
        return cls("http", (url,), _pairs(headers, "headers"), None, start_timeout)

    @classmethod
    def parse(cls, text: str) -> MCPServer:
        """A server from one line: a URL (http) or a command line (stdio), as ``%dag config mcp=...`` takes it."""
        text = text.strip()
        if text.startswith(("http://", "https://")):
            return cls.http(text)
        words = shlex.split(text)
        if not words:
            raise ValueError("an MCP server needs a command line or a URL")
        return cls.stdio(*words)

    @property
    def name(self) -> str:
        """How messages name the server: its command line or URL, a key in them masked (never an environment or
        header value).
        """
        from dagmagic._secrets import mask_secrets

        return mask_secrets(self.target[0] if self.transport == "http" else shlex.join(self.target))

    @property
    def env(self) -> dict[str, str]:
        """The extra environment variables of a stdio server."""
        return dict(self.settings) if self.transport == "stdio" else {}

    @property
    def headers(self) -> dict[str, str]:
        """The headers of an http server."""
        return dict(self.settings) if self.transport == "http" else {}

    def __repr__(self) -> str:
        from dagmagic._secrets import mask_secrets

        return mask_secrets(self._shown())

    def _shown(self) -> str:
        hidden = [f"{key}=***" for key, _ in self.settings]
        if self.transport == "http":
            extra = f", headers={{{', '.join(hidden)}}}" if hidden else ""
            return f"MCPServer.http({self.target[0]!r}{extra})"
        extra = f", env={{{', '.join(hidden)}}}" if hidden else ""
        return f"MCPServer.stdio({', '.join(map(repr, self.target))}{extra})"


def _pairs(values: Mapping[str, str] | None, what: str) -> tuple[tuple[str, str], ...]:
    if values is None:
        return ()
    if not isinstance(values, Mapping):
        raise TypeError(f"{what} must be a mapping of names to strings, got {type(values).__name__}")
    return tuple(sorted((str(key), str(value)) for key, value in values.items()))
