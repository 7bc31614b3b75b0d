"""MCP servers in cells: ``--tools`` naming a notebook variable that holds an ``MCPServer``, and
``%dag config mcp=...`` (variables, a command line or a URL, ``none``).
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from IPython.core.interactiveshell import InteractiveShell

from dagmagic import DagRun, MCPServer

pytest.importorskip("mcp")

SERVER = Path(__file__).parents[1] / "engine" / "tools" / "mcp_server.py"


@pytest.fixture
def notebook(ip: InteractiveShell) -> Iterator[InteractiveShell]:
    yield ip
    magics = ip.magics_manager.registry["DagMagics"]
    if magics.notebook._session is not None:  # as a kernel's exit does: no server outlives it
        magics.notebook._session.close()
    left = [p for p in psutil.Process().children(recursive=True) if str(SERVER) in " ".join(p.cmdline())]
    assert all(p.status() == psutil.STATUS_ZOMBIE for p in left), left


def run_cell(ip: InteractiveShell, code: str) -> object:
    result = ip.run_cell(code)
    if result.error_in_exec is not None:
        raise result.error_in_exec
    return result.result


def offered(ip: InteractiveShell) -> list[str]:
    return [t["function"]["name"] for t in ip.user_ns["llm"].requests_for("step")[0].tools]


def test_tools_take_a_variable_holding_a_server(notebook: InteractiveShell) -> None:
    def lookup(q: str) -> str:
        """Look something up."""
        return q

    notebook.user_ns.update(lookup=lookup, fs=MCPServer.stdio(sys.executable, str(SERVER)))
    run = run_cell(notebook, "%%dag --models llm --tools lookup,fs\ngoal")
    assert isinstance(run, DagRun) and run.status == "done", getattr(run, "error", None)
    assert offered(notebook)[0] == "lookup" and {"add", "shout", "pid"} <= set(offered(notebook))


def test_dag_config_mcp_takes_a_command_line_for_later_cells(
    notebook: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    command = shlex.join([sys.executable, str(SERVER)])
    run_cell(notebook, f"%dag config mcp={shlex.quote(command)}")
    magics = notebook.magics_manager.registry["DagMagics"]
    assert magics.notebook.mcp_servers == [MCPServer.stdio(sys.executable, str(SERVER))]
    assert "from the next %%dag cell on" in capsys.readouterr().out
    run = run_cell(notebook, "%%dag --models llm\ngoal")
    assert isinstance(run, DagRun) and run.status == "done", run.error
    assert {"add", "shout"} <= set(offered(notebook))
    run_cell(notebook, "%dag config mcp=none")
    assert magics.notebook.mcp_servers == []


def test_dag_config_mcp_takes_variables_and_never_shows_their_secrets(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    ip.user_ns["web"] = MCPServer.http("https://example.com/mcp", headers={"Authorization": "Bearer sk-hidden"})
    ip.user_ns["local"] = [MCPServer.stdio("server", env={"TOKEN": "sk-also-hidden"})]
    run_cell(ip, "%dag config mcp=web,local")
    run_cell(ip, "%dag config")
    out = capsys.readouterr().out
    assert "MCPServer.http('https://example.com/mcp', headers={Authorization=***})" in out
    assert "MCPServer.stdio('server', env={TOKEN=***})" in out
    assert "sk-hidden" not in out and "sk-also-hidden" not in out
    magics = ip.magics_manager.registry["DagMagics"]
    assert [server.transport for server in magics.notebook.mcp_servers] == ["http", "stdio"]
    run_cell(ip, "%dag config mcp=https://example.com/other")
    assert magics.notebook.mcp_servers == [MCPServer.http("https://example.com/other")]


def test_dag_config_mcp_refuses_a_variable_that_is_no_server(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    ip.user_ns["lookup"] = len
    result = ip.run_cell("%dag config mcp=lookup")
    assert type(result.error_in_exec).__name__ == "UsageError"
    assert "lookup is a builtin_function_or_method, not an MCPServer" in str(result.error_in_exec)
    assert "Traceback" not in capsys.readouterr().out
