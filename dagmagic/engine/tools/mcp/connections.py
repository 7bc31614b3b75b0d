"""The running MCP servers of one session, and their lifetime.

Each server is owned by one task (``dagmagic:mcp:<server>``) that enters the SDK's transport and client
session, lists the tools, and waits for its stop: the SDK's contexts are anyio scopes that must be entered
and left in the same task, and this is that task. A server starts on the first run that needs it (or
``async with DagSession(...)``), serves every step and run on that event loop, and stops on
``DagSession.close()``; a stdio server's process is its own process group, ended by the SDK on stop (stdin
closed, then SIGTERM, then SIGKILL). At interpreter exit a server still running is stopped as a last resort.
On POSIX a stdio server runs under a guard (``_stdio_guard``) that ends it when the kernel dies however it dies,
a server busy inside a call included, and drops a message over ``MESSAGE_BYTES`` before the session parses it.
Its stderr goes to a pipe whose tail is kept (``stderr``), shown when it fails.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import os
import sys
import weakref
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dagmagic._secrets import mask_secrets
from dagmagic.engine.tools.functions import Tool
from dagmagic.engine.tools.mcp.server import MCPServer, MCPServerError
from dagmagic.engine.tools.mcp.stderr import StderrTail
from dagmagic.engine.tools.mcp.tools import MCPTool
from dagmagic.errors import ConfigurationError

__all__ = ["MESSAGE_BYTES", "MCPConnections", "missing_sdk"]

log = logging.getLogger("dagmagic")

MESSAGE_BYTES = 16 * 2**20
"""The biggest message a stdio server may send (a tool's result, often twice in it: text and structured). The
SDK reads a message in a time that grows with the square of its size, on the event loop (15 MiB: 2 s; 100 MiB:
2 minutes, the loop held up to a second at a time), so a bigger one is dropped by the guard and its call
answered with an error saying so."""
_GUARD = Path(__file__).with_name("_stdio_guard.py")
_STDERR_SETTLE = 0.5
"""Seconds a failure waits for the last of what an ended server wrote to its stderr."""
_STOP_SECONDS = 8.0
"""How long stopping waits for the servers outside their loop: the SDK's own escalation takes up to 6 s."""

_SERVING: set[_Connection] = set()
"""Every server task not ended, whoever started it: the loop holds tasks weakly, and the exit stops these."""


def missing_sdk() -> str | None:
    """Why MCP servers cannot start here (the SDK is not installed), None when they can."""
    try:
        import mcp  # noqa: F401
    except ImportError:
        return "MCP servers need the mcp package, an optional extra: pip install 'dagmagic[mcp]' (or pip install mcp)"
    return None


class MCPConnections:
    """The servers a session started, each once, shared by all its steps and runs."""

    def __init__(self) -> None:
        self._open: dict[MCPServer, _Connection] = {}
        self._retired: list[_Connection] = []
        """Connections replaced while they stop (a server that died): closing still waits for them."""
        # a session dropped unclosed stops its servers when collected (the finalizer must not hold self)
        weakref.finalize(self, _stop_soon, self._open, self._retired)

    async def tools(self, servers: Iterable[MCPServer]) -> list[Tool]:
        """The tools of ``servers``, starting those not running on this loop (at once, side by side).

        ``MCPServerError`` names every server that did not start, with the last lines of its stderr.
        """
        wanted = list(dict.fromkeys(servers))
        if not wanted:
            return []
        if problem := missing_sdk():
            raise ConfigurationError(problem)
        connections = [self._connection(server) for server in wanted]
        # shielded: a cancelled run stops waiting, the server's start goes on for the next run
        outcomes = await asyncio.gather(*(asyncio.shield(c.ready) for c in connections), return_exceptions=True)
        failures = [str(outcome) for outcome in outcomes if isinstance(outcome, BaseException)]
        if failures:
            raise MCPServerError("\n\n".join(failures))
        return [tool for outcome in outcomes if isinstance(outcome, list) for tool in outcome]

    def _connection(self, server: MCPServer) -> _Connection:
        loop = asyncio.get_running_loop()
        known = self._open.get(server)
        if known is not None and known.loop is loop and not known.task.done() and not known.stop.is_set():
            return known
        if known is not None:  # ended, failed, stopping, or on a loop that is gone (asyncio.run per call)
            known.stop_soon()
            self._retired[:] = [*(c for c in self._retired if not c.task.done()), known]
        connection = _Connection(server, loop)
        connection.task = loop.create_task(connection.serve(), name=f"dagmagic:mcp:{server.name}"[:200])
        self._open[server] = connection
        _SERVING.add(connection)
        connection.task.add_done_callback(lambda _: _SERVING.discard(connection))
        return connection

    def close(self) -> None:
        """Stop every server: on its loop when that loop runs (in this thread: right after the caller yields;
        in another: waited for), else by running the loop until they stopped. Idempotent.
        """
        connections = self._take_all()
        for connection in connections:
            connection.stop_soon()
        for connection in connections:
            connection.wait_stopped()
        # those stopping on the running loop: a later ``aclose()`` waits for them
        self._retired[:] = [connection for connection in connections if not connection.task.done()]

    def _take_all(self) -> list[_Connection]:
        connections = [*self._open.values(), *self._retired]
        self._open.clear()
        self._retired.clear()
        return connections

    async def aclose(self) -> None:
        """Stop every server and wait until their processes ended."""
        connections = self._take_all()
        here = asyncio.get_running_loop()
        for connection in connections:
            connection.stop_soon()
        for connection in connections:
            if connection.loop is here:
                with contextlib.suppress(Exception):  # the task logs its own failure; a cancel of ours goes on
                    await asyncio.wait_for(asyncio.shield(connection.task), _STOP_SECONDS)
            else:
                connection.wait_stopped()


@dataclass(eq=False)
class _Connection:
    """One server's task: it starts the server, serves its calls, and stops it when told."""

    server: MCPServer
    loop: asyncio.AbstractEventLoop
    task: asyncio.Task[None] = field(init=False)
    ready: asyncio.Future[list[Tool]] = field(init=False)
    stop: asyncio.Event = field(init=False, default_factory=asyncio.Event)
    session: Any = None
    stderr: StderrTail | None = None

    def __post_init__(self) -> None:
        self.ready = self.loop.create_future()

    async def serve(self) -> None:
        """Start the server, list its tools, wait for the stop, stop it: all in this one task."""
        # the server's stderr goes to a pipe, not the notebook: its tail is read back when it fails
        self.stderr = stderr = StderrTail()
        try:
            await self._serve(stderr)
        finally:
            stderr.closed_here()

    async def _serve(self, stderr: StderrTail) -> None:
        from mcp import ClientSession

        try:
            async with contextlib.AsyncExitStack() as stack:
                try:
                    async with asyncio.timeout(self.server.start_timeout):
                        read, write = await stack.enter_async_context(self._transport(stderr.file))
                        stderr.closed_here()
                        session = await stack.enter_async_context(ClientSession(read, write))
                        await session.initialize()
                        tools = await self._list(session)
                except asyncio.CancelledError:  # ours, or an anyio scope's that a transport's failure set off:
                    raise  # leaving the contexts turns the latter into that failure
                except BaseException as exc:  # a start that failed, however: ``ready`` says it
                    try:
                        await stderr.settled(_STDERR_SETTLE)
                    finally:  # a cancel meanwhile goes on, the failure said
                        self._failed(exc, stderr)
                    return
                self.session = session
                self.ready.set_result(tools)
                await self.stop.wait()
        except asyncio.CancelledError:
            if not self.ready.done():
                self.ready.set_exception(MCPServerError(f"the MCP server {self.server.name} was stopped as it started"))
                self.ready.exception()  # retrieved: nobody may wait for it any more
            raise
        except BaseException as exc:  # a start that failed on the way out, or a server that broke as it stopped
            if not self.ready.done():
                try:
                    await stderr.settled(_STDERR_SETTLE)
                finally:
                    self._failed(exc, stderr)
            elif self.ready.exception() is None:
                log.warning("[dagmagic] the MCP server %s stopped with an error: %s", self.server.name, _what(exc))
        finally:
            self.session = None

    def _transport(self, stderr: Any) -> contextlib.AbstractAsyncContextManager[Any]:
        server = self.server
        if server.transport == "stdio":
            from mcp.client.stdio import StdioServerParameters, stdio_client

            command, *args = server.target
            if os.name == "posix":  # the guard needs process groups; elsewhere the server runs as it is
                guard = [sys.executable, "-I", str(_GUARD), str(os.getpid()), str(MESSAGE_BYTES)]
                command, args = guard[0], [*guard[1:], command, *args]
            parameters = StdioServerParameters(command=command, args=args, env=server.env or None, cwd=server.cwd)
            return stdio_client(parameters, errlog=stderr)
        return _http_transport(server.target[0], server.headers)

    async def _list(self, session: Any) -> list[Tool]:
        listed: list[Any] = []
        cursor = None
        while True:
            from mcp.types import PaginatedRequestParams

            page = await session.list_tools(params=PaginatedRequestParams(cursor=cursor) if cursor else None)
            listed.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                return [MCPTool(entry, self.call, self.server.name) for entry in listed]

    async def call(self, name: str, arguments: dict[str, Any]) -> Any:
        """Call the tool ``name`` on the server (an error when it is no longer running)."""
        import anyio
        from mcp import MCPError
        from mcp.types import CONNECTION_CLOSED

        session = self.session
        if session is None or self.task.done() or self.stop.is_set():
            raise MCPServerError(f"the MCP server {self.server.name} is not running; it starts again with the next run")
        try:
            return await session.call_tool(name, arguments)
        except (MCPError, anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream) as exc:
            if isinstance(exc, MCPError) and exc.code != CONNECTION_CLOSED:
                raise
            self.stop.set()  # its task ends, and the next run starts the server again
            message = f"the MCP server {self.server.name} closed its connection (did it exit?)"
            if self.stderr is not None:
                await self.stderr.settled(_STDERR_SETTLE)
                if tail := self.stderr.text():
                    message += f"; its stderr ended with:\n{tail}"
            raise MCPServerError(f"{message}\nIt starts again with the next run.") from None

    def _failed(self, exc: BaseException, stderr: StderrTail) -> None:
        why = "did not answer in time" if isinstance(exc, TimeoutError) else f"did not start: {_what(exc)}"
        message = f"the MCP server {self.server.name} {why}"
        if tail := stderr.text():
            message += f"\nIts stderr ended with:\n{tail}"
        if not self.ready.done():
            self.ready.set_exception(MCPServerError(mask_secrets(message)))
            self.ready.exception()  # retrieved here: a start nobody waits for any more is not an error to log

    def stop_soon(self) -> None:
        """Tell the task to stop the server, from any thread."""
        if self.loop.is_closed():
            return
        try:
            if _on_loop(self.loop):
                self.stop.set()
            else:
                self.loop.call_soon_threadsafe(self.stop.set)
        except RuntimeError:  # the loop closed meanwhile: its tasks were ended with it
            pass

    def wait_stopped(self) -> None:
        """Outside this server's loop: wait until the server stopped (a loop that is not running is run)."""
        if _on_loop(self.loop) or self.loop.is_closed() or self.task.done():
            return  # on the loop itself the task ends once the caller yields
        try:
            if self.loop.is_running():  # another thread's loop
                future = asyncio.run_coroutine_threadsafe(_awaited(self.task), self.loop)
                future.result(_STOP_SECONDS)
            else:
                self.loop.run_until_complete(asyncio.wait_for(_awaited(self.task), _STOP_SECONDS))
        except Exception as exc:  # stopping is best effort: the server also ends with our stdin
            log.warning("[dagmagic] the MCP server %s may not have stopped: %s", self.server.name, _what(exc))


def _http_transport(url: str, headers: dict[str, str]) -> contextlib.AbstractAsyncContextManager[Any]:
    @contextlib.asynccontextmanager
    async def transport() -> Any:
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        timeout = httpx2.Timeout(30.0, read=300.0)  # the SDK's defaults: a response stream may stay open
        async with (
            httpx2.AsyncClient(headers=headers, timeout=timeout) as client,
            streamable_http_client(url, http_client=client) as streams,
        ):
            yield streams

    return transport()


async def _awaited(task: asyncio.Task[None]) -> None:
    with contextlib.suppress(BaseException):
        await task


def _on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


def _what(exc: BaseException) -> str:
    """The innermost failures of ``exc`` (anyio wraps them in exception groups), as ``Type: message``."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(dict.fromkeys(_what(inner) for inner in exc.exceptions))
    return mask_secrets(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)


def _stop_soon(opened: dict[MCPServer, _Connection], retired: list[_Connection]) -> None:
    for connection in [*opened.values(), *retired]:
        connection.stop_soon()


@atexit.register
def _stop_all_at_exit() -> None:
    """The last resort: servers of sessions never closed stop with the interpreter."""
    serving = list(_SERVING)
    for connection in serving:
        connection.stop_soon()
    for connection in serving:
        with contextlib.suppress(Exception):
            connection.wait_stopped()
