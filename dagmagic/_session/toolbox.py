"""A session's tools: functions, the opt-in ``python`` tool's workspace, and the MCP servers they come from."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from dagmagic.engine.loop.driver import GoalLoop
from dagmagic.engine.steps.agent import StepAgent
from dagmagic.engine.tools.code import CodeWorkspace
from dagmagic.engine.tools.functions import Tool, as_tools
from dagmagic.engine.tools.mcp.connections import MCPConnections
from dagmagic.engine.tools.mcp.server import MCPServer
from dagmagic.errors import ConfigurationError
from dagmagic.settings import DagSettings

__all__ = ["ToolLike", "Toolbox"]

ToolLike = Tool | Callable[..., Any] | MCPServer


class Toolbox:
    """The tools a session's steps may call, and what runs them: started when first needed, stopped by ``close``."""

    def __init__(self, tools: Iterable[ToolLike], settings: DagSettings) -> None:
        self.given = list(tools)
        self._settings = settings
        self._code: CodeWorkspace | None = None
        self._warned_without_sandbox = False
        self._mcp = MCPConnections()

    def toolset(self, tools: list[ToolLike], allow_code: bool) -> list[Tool]:
        """``tools`` as tools (an MCP server's join once it started), with ``python`` when ``allow_code``."""
        functions = [item for item in tools if not isinstance(item, MCPServer)]
        if allow_code and self._code is None:
            self._code = CodeWorkspace(
                self._settings.code_timeout,
                network=self._settings.code_network,
                without_sandbox=self._settings.code_without_sandbox,
            )
        extra = [self._code.tool()] if allow_code and self._code is not None else []
        return as_tools([*functions, *extra])

    def connector(self, servers: list[MCPServer], own_runner: bool) -> Callable[[GoalLoop], Awaitable[None]]:
        """What joins the tools of ``servers`` to a run's loop, starting the servers not running yet."""

        async def connect(loop: GoalLoop) -> None:
            served = await self._mcp.tools(servers)
            names = [tool.name for tool in [*loop.tools, *served]]
            if repeated := sorted({name for name in names if names.count(name) > 1}):
                raise ConfigurationError(
                    f"the tool name {', '.join(repeated)} is listed by an MCP server and given again (by another "
                    "server or a function): a model could not tell them apart; leave one of them out of tools="
                )
            toolset = as_tools([*loop.tools, *served])
            loop.tools, loop.tool_names = toolset, [tool.name for tool in toolset]
            if own_runner:
                loop.step_runner = StepAgent(toolset)

        return connect

    def unsandboxed_code_warning(self) -> str | None:
        """Once per session, when its ``python`` tool has no sandbox: that it refuses scripts and how to opt in, or
        (opted in) what running them without one means.
        """
        if self._code is None or self._code.sandbox_problem is None or self._warned_without_sandbox:
            return None
        self._warned_without_sandbox = True
        if self._code.refusal is not None:
            return self._code.refusal
        return (
            f"The python tool runs scripts without a sandbox: {self._code.sandbox_problem}. They run as your"
            " user: they can read and change your files, see your processes and use the network (whatever"
            " DAG_CODE_NETWORK says). What still holds: their environment has no keys or DAG_* variables, and"
            " every process they start is ended with the call (unless a script kills its supervisors on purpose)."
        )

    async def start_servers(self) -> None:
        """Start the MCP servers among the given tools now; those that started stop again when one cannot."""
        try:
            await self._mcp.tools(item for item in self.given if isinstance(item, MCPServer))
        except BaseException:
            await self._mcp.aclose()  # those that did start: nothing will close this session
            raise

    def close(self) -> None:
        """Stop the MCP servers (once the caller yields, on their loop), end the ``python`` tool's scripts and
        remove its working directory.
        """
        self._mcp.close()
        if self._code is not None:
            self._code.close()

    async def aclose(self) -> None:
        """``close()``, waiting until the MCP servers stopped (their processes ended)."""
        await self._mcp.aclose()
        self.close()
