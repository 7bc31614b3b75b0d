"""MCP servers as tool sources: ``MCPServer.stdio(...)`` / ``MCPServer.http(...)`` in a session's ``tools=``.

``server`` describes a server (what the user writes), ``connections`` owns the running ones (one task each,
started on a session's first need, stopped with the session), ``tools`` makes their tools dagmagic tools.
The ``mcp`` SDK is imported only when a server starts: it is an optional extra (``dagmagic[mcp]``). This
package imports only ``server``: describing a server costs nothing.
"""

from dagmagic.engine.tools.mcp.server import MCPServer, MCPServerError

__all__ = ["MCPServer", "MCPServerError"]
