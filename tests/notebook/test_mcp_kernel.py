"""An MCP server in a real kernel: shared by cells, alive through an interrupt, gone with the kernel's shutdown."""

from __future__ import annotations

import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from .test_kernel import started_kernel

pytest.importorskip("mcp")
pytestmark = pytest.mark.timeout(120)

SERVER = Path(__file__).parents[1] / "engine" / "tools" / "mcp_server.py"

SETUP = textwrap.dedent(
    f"""
    %load_ext dagmagic
    import sys, dagmagic
    from dagmagic import MCPServer
    from dagmagic.testing import ScriptedLLM, ToolCall

    def scripted(*calls):
        return ScriptedLLM({{
            "plan": [{{"steps": [{{"id": "s1", "task": "ask the server"}}]}}],
            "step": [*calls, "told"],
            "analyze": [{{"achieved": True, "confidence": 0.9, "reasoning": "fine", "final_answer": "ok"}}],
            "synthesize": [["ok"]],
        }})

    fs = MCPServer.stdio({sys.executable!r}, {str(SERVER)!r})
    asks = scripted(ToolCall("pid", {{}}))
    sleeps = scripted(ToolCall("sleep", {{"seconds": 60}}))
    blocks = scripted(ToolCall("block", {{"seconds": 120}}))
    """
)

PID = "print(dagmagic.last_run().steps['s1'].tool_calls[0].observation)"


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.parametrize("shutdown", ["graceful", "killed"])
def test_a_server_serves_every_cell_survives_an_interrupt_and_ends_with_the_kernel(
    tmp_path: Path, shutdown: str
) -> None:
    with started_kernel(tmp_path) as kernel:
        kernel.execute(SETUP, timeout=60)
        kernel.execute("%%dag --models asks --tools fs\nwhich process serves?", timeout=60)
        pid = int(kernel.execute(PID).stdout)
        assert alive(pid)

        msg_id = kernel.submit("%%dag --models sleeps --tools fs\nsleep a minute")
        submitted = time.monotonic()
        kernel.wait_for(lambda m: m.get("parent_header", {}).get("msg_id") == msg_id, "the cell started")
        time.sleep(1.5)  # the call is in flight
        kernel.manager.interrupt_kernel()
        interrupted = kernel.collect(msg_id, submitted, timeout=40)
        assert interrupted.status == "error"

        kernel.execute("asks = scripted(ToolCall('pid', {}))")
        kernel.execute("%%dag --models asks --tools fs\nstill there?")
        assert int(kernel.execute(PID).stdout) == pid  # one process for every cell, the interrupt included

        if shutdown == "graceful":
            kernel.manager.shutdown_kernel(now=False)  # a shutdown request: the kernel's interpreter exits
        else:
            kernel.manager.shutdown_kernel(now=True)  # SIGKILL, no Python runs: the server reads the end of its stdin
        for _ in range(300):
            if not alive(pid):
                break
            time.sleep(0.05)
        assert not alive(pid), f"the MCP server {pid} outlived its kernel ({shutdown})"


@pytest.mark.slow
@pytest.mark.parametrize("shutdown", ["graceful", "killed"])
def test_a_server_busy_inside_a_call_ends_with_the_kernel(tmp_path: Path, shutdown: str) -> None:
    with started_kernel(tmp_path) as kernel:
        kernel.execute(SETUP, timeout=60)
        kernel.execute("%%dag --models asks --tools fs\nwhich process serves?", timeout=60)
        pid = int(kernel.execute(PID).stdout)
        msg_id = kernel.submit("%%dag --models blocks --tools fs\nblock two minutes")
        kernel.wait_for(lambda m: m.get("parent_header", {}).get("msg_id") == msg_id, "the cell started")
        time.sleep(1.5)  # the call is in flight: the server blocks in it and reads nothing, its stdin's end neither
        assert alive(pid)
        kernel.manager.shutdown_kernel(now=shutdown == "killed")
        for _ in range(300):
            if not alive(pid):
                break
            time.sleep(0.05)
        alive_after = alive(pid)
        if alive_after:
            psutil.Process(pid).kill()
        assert not alive_after, f"the MCP server {pid}, busy in a call, outlived its kernel ({shutdown})"
