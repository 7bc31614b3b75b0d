"""An MCP server written with the SDK's own ``MCPServer`` (FastMCP in mcp 1.x), for the tests of
``dagmagic.engine.tools.mcp``: run as ``python mcp_server.py`` it serves on stdio, ``python mcp_server.py http PORT``
over streamable HTTP.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

app = MCPServer("dagmagic-test")


@app.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@app.tool()
def shout(text: str) -> str:
    """The text in capitals."""
    return text.upper()


@app.tool()
def explode(reason: str) -> str:
    """Always fails (a ``ToolError``: the SDK tells the client only the message of a failure it was told of)."""
    raise ToolError(f"exploded: {reason}")


@app.tool()
async def sleep(seconds: float) -> str:
    """Sleep, then say so."""
    await asyncio.sleep(seconds)
    return "slept"


@app.tool()
def block(seconds: float) -> str:
    """Block (a sync call that holds the server: it reads nothing meanwhile), then say so."""
    time.sleep(seconds)
    return "blocked"


@app.tool()
def big(megabytes: float) -> str:
    """A result of that many megabytes."""
    return "x" * int(megabytes * 2**20)


@app.tool()
def pid() -> int:
    """This server's process id."""
    return os.getpid()


@app.tool()
def secret() -> str:
    """The value of DAG_TEST_SECRET in this server's environment."""
    return os.environ.get("DAG_TEST_SECRET", "unset")


if __name__ == "__main__":
    if sys.argv[1:2] == ["http"]:
        app.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        app.run()
