"""MCP servers as tool sources: the SDK's own server (``mcp_server.py`` beside this file) in a subprocess, and
the npm reference server ``@modelcontextprotocol/server-filesystem`` (a devDependency of js/, run with node).
Each test checks that no server process outlives its session.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import shutil
import socket
import stat
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from dagmagic import DagSession, DagSettings, MCPServer, ModelRegistry, tool
from dagmagic.engine.tools.mcp.connections import MCPConnections
from dagmagic.engine.tools.mcp.tools import MCPTool, observation_of
from dagmagic.errors import ConfigurationError, MCPServerError
from dagmagic.testing import ScriptedLLM, ToolCall
from tests.engine.conftest import plan_reply, verdict

pytest.importorskip("mcp")

HERE = Path(__file__).parent
SERVER = HERE / "mcp_server.py"
FILESYSTEM = (
    HERE.parents[2] / "js" / "node_modules" / "@modelcontextprotocol" / "server-filesystem" / "dist" / "index.js"
)


@tool
def lookup(query: str) -> str:
    """Look something up."""
    return f"found {query}"


def sdk_server(**kwargs: Any) -> MCPServer:
    return MCPServer.stdio(sys.executable, str(SERVER), **kwargs)


def run_script(step: Any, steps: int = 1) -> dict[str, Any]:
    return {
        "plan": [plan_reply(*((f"s{i}", []) for i in range(1, steps + 1)))],
        "step": step,
        "analyze": [verdict(True, 0.9, "ok", "final")],
        "synthesize": [["Done."]],
    }


def session(llm: ScriptedLLM, **kwargs: Any) -> DagSession:
    settings = kwargs.pop("settings", DagSettings(store="none"))
    return DagSession(ModelRegistry().register("scripted", llm), settings, **kwargs)


def offered(llm: ScriptedLLM) -> dict[str, dict[str, Any]]:
    """The tools the first step request offered, by name, as the model saw them."""
    return {t["function"]["name"]: t["function"] for t in llm.requests_for("step")[0].tools}


ENDED_WHILE_READ = (psutil.NoSuchProcess, FileNotFoundError, ProcessLookupError)
"""What reading a process that ends meanwhile raises: psutil's own error, or /proc's file gone under it."""


def processes_of(token: str) -> list[psutil.Process]:
    """This process's descendants still alive (not zombies) whose command line holds ``token``."""
    alive = []
    for child in psutil.Process().children(recursive=True):
        try:
            if token in " ".join(child.cmdline()) and child.status() != psutil.STATUS_ZOMBIE:
                alive.append(child)
        except ENDED_WHILE_READ:
            continue
    return alive


async def gone(pid: int) -> bool:
    """Whether the process ``pid`` ended, given the time the SDK's stop escalation takes (at most ~6 s)."""
    for _ in range(200):
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except ENDED_WHILE_READ:
            return True
        await asyncio.sleep(0.05)
    return False


def server_tasks() -> list[asyncio.Task[Any]]:
    return [t for t in asyncio.all_tasks() if t.get_name().startswith("dagmagic:mcp:") and not t.done()]


@pytest.fixture(autouse=True)
async def no_server_left() -> AsyncIterator[None]:
    yield
    for _ in range(200):  # a server told to stop (not waited for) ends within the SDK's escalation, ~6 s
        if not server_tasks():
            break
        await asyncio.sleep(0.05)
    assert server_tasks() == []
    assert processes_of(str(SERVER)) == []
    assert processes_of(str(FILESYSTEM)) == []


# --- the SDK's server -----------------------------------------------------------------------------------------


async def test_a_step_sees_the_servers_tools_with_their_schemas_and_calls_one() -> None:
    llm = ScriptedLLM(run_script([ToolCall("add", {"a": 2, "b": 3}), "five"]))
    async with session(llm, tools=[lookup, sdk_server()]) as owner:
        run = await owner.run("add 2 and 3")
    assert run.status == "done", run.error
    tools = offered(llm)
    assert {"lookup", "add", "shout", "explode", "sleep", "pid", "secret"} <= set(tools)
    assert tools["add"]["description"] == "Add two integers."
    assert tools["add"]["parameters"]["properties"]["a"]["type"] == "integer"
    assert tools["add"]["parameters"]["required"] == ["a", "b"]
    (call,) = run.steps["s1"].tool_calls
    assert (call.name, call.observation, call.error) == ("add", "5", None)
    assert "5" in llm.requests_for("step")[1].prompt


async def test_a_tool_that_raises_and_bad_arguments_become_observations() -> None:
    calls = [ToolCall("explode", {"reason": "boom"}), ToolCall("add", {"a": "two", "b": 3}), "gave up"]
    llm = ScriptedLLM(run_script(calls))
    async with session(llm, tools=[sdk_server()]) as owner:
        run = await owner.run("try")
    assert run.status == "done", run.error
    exploded, invalid = run.steps["s1"].tool_calls
    assert exploded.error is not None and "exploded: boom" in exploded.observation
    assert invalid.error is not None and "Invalid arguments for add" in invalid.observation
    assert "a: 'two' is not of type 'integer'" in invalid.observation


async def test_a_call_obeys_the_tool_timeout_and_the_server_serves_on() -> None:
    script = {**run_script([ToolCall("sleep", {"seconds": 60}), ToolCall("shout", {"text": "still here"}), "ok"])}
    llm = ScriptedLLM(script)
    started = time.perf_counter()
    async with session(llm, tools=[sdk_server()], settings=DagSettings(store="none", tool_timeout=0.5)) as owner:
        run = await owner.run("sleep")
    slept, shouted = run.steps["s1"].tool_calls
    assert slept.error is not None and "did not finish within 0.5s" in slept.error
    assert slept.duration < (time.perf_counter() - started) / 2 + 0.5  # cut at the limit, not the sleep
    assert slept.duration < 60 / 2  # far from the 60 s sleep
    assert (shouted.observation, shouted.error) == ("STILL HERE", None)


async def test_steps_and_runs_share_one_server_process_which_ends_with_the_session() -> None:
    llm = ScriptedLLM(run_script([ToolCall("pid", {}), "pid told"], steps=2))
    owner = session(llm, tools=[sdk_server()])
    first = await owner.run("which pid")
    second = await owner.run("which pid again")
    pids = {call.observation for run in (first, second) for step in run.steps.values() for call in step.tool_calls}
    assert len(pids) == 1, pids  # four calls, two runs, one process
    pid = int(pids.pop())
    assert psutil.pid_exists(pid)
    owner.close()  # on the loop: the servers stop as soon as this test yields
    assert await gone(pid)
    await owner.aclose()  # waits for what close() began
    assert server_tasks() == []


async def test_a_session_dropped_unclosed_stops_its_servers_when_collected() -> None:
    llm = ScriptedLLM(run_script([ToolCall("pid", {}), "pid told"]))
    owner = session(llm, tools=[sdk_server()])
    pid = int((await owner.run("which pid")).steps["s1"].tool_calls[0].observation)
    del owner
    gc.collect()
    assert await gone(pid)


async def test_a_cancelled_run_leaves_the_server_serving_until_close() -> None:
    script = {
        **run_script([]),
        "plan": [plan_reply(("s1", [])), plan_reply(("s2", []))],
        "step:s1": [ToolCall("sleep", {"seconds": 60}), "slept"],
        "step:s2": [ToolCall("pid", {}), "told"],
    }
    llm = ScriptedLLM(script)
    async with session(llm, tools=[sdk_server()]) as owner:
        run = owner.start("sleep long")
        while not run.steps.get("s1") or run.steps["s1"].status != "running":
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.3)
        run.cancel()
        await run.wait()
        assert run.status == "cancelled"
        after = await owner.run("which pid")  # the call cut short left the server serving
        pid = int(after.steps["s2"].tool_calls[0].observation)
    assert await gone(pid)


async def test_a_server_that_dies_is_an_observation_and_starts_again_for_the_next_run() -> None:
    connections = MCPConnections()
    try:
        tools = {t.name: t for t in await connections.tools([sdk_server()])}
        pid = int((await tools["pid"].run({}, timeout=30)).observation)
        psutil.Process(pid).kill()
        assert await gone(pid)
        outcome = await tools["add"].run({"a": 1, "b": 2}, timeout=30)
        assert outcome.error is not None and "closed its connection (did it exit?)" in outcome.observation
        assert "starts again with the next run" in outcome.observation
        again = {t.name: t for t in await connections.tools([sdk_server()])}
        assert int((await again["pid"].run({}, timeout=30)).observation) != pid
        assert (await again["add"].run({"a": 1, "b": 2}, timeout=30)).observation == "3"
    finally:
        await connections.aclose()


async def test_a_server_that_fails_to_start_is_named_with_its_stderr(tmp_path: Path) -> None:
    broken = tmp_path / "broken_server.py"
    broken.write_text("import sys\nprint('config error: no DATABASE_URL set', file=sys.stderr)\nsys.exit(3)\n")
    server = MCPServer.stdio(sys.executable, str(broken))
    llm = ScriptedLLM(run_script(["unused"]))
    with pytest.raises(MCPServerError) as raised:
        async with session(llm, tools=[lookup, server]):
            pass
    message = str(raised.value)
    assert f"the MCP server {server.name} did not start" in message
    assert "config error: no DATABASE_URL set" in message
    # lazily, in a run: the run fails with that message, and the next run tries again
    owner = session(llm, tools=[server])
    run = await owner.run("anything")
    assert run.status == "failed" and "config error: no DATABASE_URL set" in (run.error or "")
    again = await owner.run("anything")
    assert again.status == "failed" and "MCPServerError" in (again.error or "")
    await owner.aclose()


async def test_a_server_that_never_answers_fails_after_its_start_timeout(tmp_path: Path) -> None:
    mute = tmp_path / "mute_server.py"
    mute.write_text("import sys, time\nprint('listening elsewhere', file=sys.stderr, flush=True)\ntime.sleep(600)\n")
    server = MCPServer.stdio(sys.executable, str(mute), start_timeout=1.0)
    with pytest.raises(MCPServerError, match="did not answer in time") as raised:
        async with session(ScriptedLLM(run_script(["x"])), tools=[server]):
            pass
    assert "listening elsewhere" in str(raised.value)
    assert processes_of(str(mute)) == []


async def test_a_tool_name_given_twice_fails_the_run_saying_so() -> None:
    @tool
    def add(a: int, b: int) -> int:
        """Add, locally."""
        return a + b

    async with session(ScriptedLLM(run_script(["x"])), tools=[add, sdk_server()]) as owner:
        run = await owner.run("add")
    assert run.status == "failed"
    assert "the tool name add is listed by an MCP server and given again" in (run.error or "")


async def test_environment_reaches_the_server_and_never_its_repr() -> None:
    server = sdk_server(env={"DAG_TEST_SECRET": "sk-canary-1234567890abcdef"})
    assert "sk-canary" not in repr(server) and "DAG_TEST_SECRET=***" in repr(server)
    llm = ScriptedLLM(run_script([ToolCall("secret", {}), "told"]))
    async with session(llm, tools=[server]) as owner:
        run = await owner.run("the secret")
    # the server read the key from its environment; a tool's result is masked as it enters the run
    assert run.steps["s1"].tool_calls[0].observation == "***"
    headers = MCPServer.http("https://example.com/mcp", headers={"Authorization": "Bearer sk-x"})
    assert repr(headers) == "MCPServer.http('https://example.com/mcp', headers={Authorization=***})"
    with_key = MCPServer.stdio("server", "--api-key", "sk-proj-abcdefghijklmnopqrstuvwxyz0123")
    assert "abcdefghij" not in repr(with_key) and "abcdefghij" not in with_key.name


async def test_equal_servers_are_one_server() -> None:
    assert sdk_server(env={"A": "1"}) == sdk_server(env={"A": "1"})
    assert len({sdk_server(), sdk_server(), sdk_server(env={"A": "1"})}) == 2


async def test_without_the_sdk_the_message_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mcp", None)
    with pytest.raises(ConfigurationError, match=r"pip install 'dagmagic\[mcp\]'"):
        async with session(ScriptedLLM(run_script(["x"])), tools=[sdk_server()]):
            pass


# --- over streamable HTTP ------------------------------------------------------------------------------------


@pytest.fixture
async def http_server() -> AsyncIterator[str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, str(SERVER), "http", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        for _ in range(400):
            with socket.socket() as client:
                if client.connect_ex(("127.0.0.1", port)) == 0:
                    break
            await asyncio.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(10)


async def test_a_step_calls_a_tool_of_a_server_over_http(http_server: str) -> None:
    llm = ScriptedLLM(run_script([ToolCall("shout", {"text": "over http"}), "shouted"]))
    server = MCPServer.http(http_server, headers={"X-Test": "1"})
    async with session(llm, tools=[server]) as owner:
        run = await owner.run("shout")
    assert run.status == "done", run.error
    assert run.steps["s1"].tool_calls[0].observation == "OVER HTTP"


async def test_an_http_server_that_does_not_answer_is_named_without_its_headers() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    server = MCPServer.http(f"http://127.0.0.1:{port}/mcp", headers={"Authorization": "Bearer sk-never-shown-123"})
    with pytest.raises(MCPServerError) as raised:
        async with session(ScriptedLLM(run_script(["x"])), tools=[server]):
            pass
    message = str(raised.value)
    assert f"the MCP server http://127.0.0.1:{port}/mcp did not start: ConnectError" in message
    assert "sk-never-shown" not in message


# --- the npm reference server ----------------------------------------------------------------------------------


async def test_the_filesystem_reference_server_lists_and_reads_files_in_a_run(tmp_path: Path) -> None:
    node = shutil.which("node")
    if node is None or not FILESYSTEM.exists():
        problem = "node or js/node_modules/@modelcontextprotocol/server-filesystem is missing (cd js && npm ci)"
        if os.environ.get("DAGMAGIC_REQUIRE_MCP"):  # CI: .ci/run installs it, so missing is a failure
            pytest.fail(problem)
        pytest.skip(problem)
    root = tmp_path.resolve()
    (root / "notes.txt").write_text("the launch is on Tuesday\n")
    calls = [
        ToolCall("list_directory", {"path": str(root)}),
        ToolCall("read_text_file", {"path": str(root / "notes.txt")}),
        "Tuesday",
    ]
    llm = ScriptedLLM(run_script(calls))
    server = MCPServer.stdio(node, str(FILESYSTEM), str(root))
    async with session(llm, tools=[lookup, server]) as owner:
        run = await owner.run("when is the launch?")
        assert processes_of(str(FILESYSTEM)) != []
    assert run.status == "done", run.error
    assert {"list_directory", "read_text_file", "write_file", "lookup"} <= set(offered(llm))
    listing, read = run.steps["s1"].tool_calls
    assert "[FILE] notes.txt" in listing.observation
    assert read.observation.strip() == "the launch is on Tuesday"
    assert processes_of(str(FILESYSTEM)) == []


def test_a_server_line_is_a_command_or_a_url() -> None:
    assert MCPServer.parse('python "my server.py" --fast') == MCPServer.stdio("python", "my server.py", "--fast")
    assert MCPServer.parse("https://example.com/mcp") == MCPServer.http("https://example.com/mcp")
    with pytest.raises(ValueError, match="command line or a URL"):
        MCPServer.parse("  ")


# --- listings and results, without a server ---------------------------------------------------------------------


async def test_every_page_of_a_tool_listing_is_read_and_odd_names_made_callable() -> None:
    import mcp.types as types

    from dagmagic.engine.tools.mcp.connections import _Connection

    class TwoPages:
        def __init__(self) -> None:
            self.cursors: list[str | None] = []

        async def list_tools(self, params: types.PaginatedRequestParams | None = None) -> types.ListToolsResult:
            cursor = params.cursor if params is not None else None
            self.cursors.append(cursor)
            name, following = ("files.read", "page-2") if cursor is None else ("2fast", None)
            listed = types.Tool(name=name, input_schema={"type": "object", "properties": {"x": {"type": "string"}}})
            return types.ListToolsResult(tools=[listed], next_cursor=following)

    pages = TwoPages()
    tools = await _Connection(sdk_server(), asyncio.get_running_loop())._list(pages)
    assert pages.cursors == [None, "page-2"]
    assert [(t.name, t.remote_name) for t in tools if isinstance(t, MCPTool)] == [
        ("files_read", "files.read"),
        ("t_2fast", "2fast"),
    ]
    assert tools[0].parameters["properties"] == {"x": {"type": "string"}}


def test_a_result_becomes_text_whatever_its_content() -> None:
    import mcp.types as types

    mixed = types.CallToolResult(
        content=[
            types.TextContent(type="text", text="first"),
            types.ImageContent(type="image", data="AA==", mime_type="image/png"),
            types.EmbeddedResource(
                type="resource", resource=types.TextResourceContents(uri="file:///a", text="inside")
            ),
        ]
    )
    assert observation_of(mixed) == "first\n[image image/png, not shown]\ninside"
    assert observation_of(types.CallToolResult(content=[], structured_content={"a": 1})) == '{"a": 1}'


# --- secrets in env= and headers= -----------------------------------------------------------------------------

ECHOING_SERVER = "import os, sys\nprint('cannot reach', os.environ['DATABASE_URL'], file=sys.stderr)\nsys.exit(3)\n"


async def test_an_env_value_a_failing_server_prints_is_masked_in_the_error_events_and_store(
    tmp_path: Path, store_path: Path | str
) -> None:
    from dagmagic import load_run

    secret = "hunter2-db-pass-7f3a9c"  # not key-shaped: only knowing it was given in env= masks it
    echoing = tmp_path / "echoing_server.py"
    echoing.write_text(ECHOING_SERVER)
    server = MCPServer.stdio(sys.executable, str(echoing), env={"DATABASE_URL": f"postgresql://app:{secret}@db/app"})
    assert secret not in repr(server)
    settings = DagSettings(store=str(store_path))
    owner = session(ScriptedLLM(run_script(["unused"])), tools=[server], settings=settings)
    run = await owner.run("anything")
    await owner.aclose()
    assert run.status == "failed" and "cannot reach" in (run.error or ""), run.error  # the stderr tail is there
    assert secret not in (run.error or ""), run.error
    assert [repr(event) for event in run.events if secret in repr(event)] == []
    stored = load_run(run.run_id, store=str(store_path))
    assert secret not in stored.state.model_dump_json(), "the stored run shows the env value"
    assert [repr(event) for event in stored.events if secret in repr(event)] == []
    if isinstance(store_path, Path):  # the SQLite file itself, every page of it
        for file in tmp_path.glob("runs.sqlite*"):
            assert secret.encode() not in file.read_bytes(), file.name


def test_a_header_value_is_masked_wherever_it_appears() -> None:
    from dagmagic._secrets import mask_secrets

    token = "opaque-session-token-51c2e0"
    server = MCPServer.http("https://example.com/mcp", headers={"X-Session": token, "Authorization": "Bearer 8b1f0e"})
    assert token not in repr(server)
    assert mask_secrets(f"the server answered 401 to X-Session: {token}") == "the server answered 401 to X-Session: ***"


# --- a server's lifetime and what it sends, bounded -------------------------------------------------------------

BUSY_DRIVER = """
import asyncio, sys
from dagmagic import MCPServer
from dagmagic.engine.tools.mcp.connections import MCPConnections

async def main() -> None:
    connections = MCPConnections()
    tools = {t.name: t for t in await connections.tools([MCPServer.stdio(sys.executable, sys.argv[1])])}
    print((await tools["pid"].run({}, timeout=30)).observation, flush=True)
    busy = asyncio.ensure_future(tools["block"].run({"seconds": 300}, timeout=600))
    await asyncio.sleep(0.5)
    print("busy", flush=True)
    await busy

asyncio.run(main())
"""


async def test_a_server_busy_in_a_call_ends_with_its_driver_killed() -> None:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    driver = subprocess.Popen(
        [sys.executable, "-c", BUSY_DRIVER, str(SERVER)], stdout=subprocess.PIPE, text=True, env=env
    )
    pid = None
    try:
        assert driver.stdout is not None
        pid = int(driver.stdout.readline())
        assert driver.stdout.readline() == "busy\n"  # blocked in a call: it reads nothing, not even its stdin's end
        driver.kill()  # SIGKILL: no cleanup of the driver's own runs
        driver.wait()
        assert await gone(pid), f"the MCP server {pid} outlived the process that started it"
    finally:
        driver.kill()
        driver.wait()
        if driver.stdout is not None:
            driver.stdout.close()
        if pid is not None and psutil.pid_exists(pid):
            psutil.Process(pid).kill()


FLOODING_SERVER = """
import os, runpy, sys
for _ in range(int(sys.argv[1])):
    os.write(2, b"e" * 2**20)
os.write(2, b"\\nready after the flood\\n")
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def open_regular_files() -> dict[int, int]:
    """The size of every regular file this process holds open, by descriptor."""
    sizes = {}
    for entry in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            status = os.fstat(int(entry))
            if stat.S_ISREG(status.st_mode):
                sizes[int(entry)] = status.st_size
    return sizes


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="reads this process's descriptors in /proc")
async def test_a_stderr_flood_keeps_only_a_bounded_tail(tmp_path: Path) -> None:
    flooding = tmp_path / "flooding_server.py"
    flooding.write_text(FLOODING_SERVER)
    megabytes = 40
    before = open_regular_files()
    connections = MCPConnections()
    try:
        tools = {
            t.name: t
            for t in await connections.tools(
                [MCPServer.stdio(sys.executable, str(flooding), str(megabytes), str(SERVER))]
            )
        }
        held = {fd: size for fd, size in open_regular_files().items() if fd not in before}
        assert max(held.values(), default=0) < 2**20, f"files held for the server's stderr: {held}"
        pid = int((await tools["pid"].run({}, timeout=30)).observation)
        psutil.Process(pid).kill()
        outcome = await tools["add"].run({"a": 1, "b": 2}, timeout=30)
        assert outcome.error is not None and "its stderr ended with:" in outcome.observation
        assert outcome.observation.split("its stderr ended with:\n", 1)[1].startswith("e" * 100), outcome.observation[
            :300
        ]
        assert "ready after the flood" in outcome.observation
    finally:
        await connections.aclose()


async def test_a_result_past_the_bound_is_refused_without_stalling_the_loop() -> None:
    from dagmagic.engine.tools.mcp.connections import MESSAGE_BYTES

    connections = MCPConnections()
    stalls: list[float] = []

    async def tick() -> None:
        loop = asyncio.get_running_loop()
        last = loop.time()
        while True:
            await asyncio.sleep(0.005)
            stalls.append(loop.time() - last)
            last = loop.time()

    try:
        tools = {t.name: t for t in await connections.tools([sdk_server()])}
        ticker = asyncio.ensure_future(tick())
        started = time.perf_counter()
        outcome = await tools["big"].run({"megabytes": 3 * MESSAGE_BYTES / 2**20}, timeout=300)
        took = time.perf_counter() - started
        ticker.cancel()
        assert outcome.error is not None, outcome.observation[:200]
        assert f"more than the {MESSAGE_BYTES / 2**20:g} MiB an answer may be" in outcome.observation
        assert "ask the tool for less" in outcome.observation
        assert max(stalls) < took / 4, f"the loop stood still {max(stalls):.2f}s of the call's {took:.2f}s"
        assert (await tools["add"].run({"a": 1, "b": 2}, timeout=30)).observation == "3"  # it serves on
        small = await tools["big"].run({"megabytes": 0.5}, timeout=60)
        assert small.error is None and len(small.observation) == 2**19
    finally:
        await connections.aclose()
