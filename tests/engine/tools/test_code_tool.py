"""The opt-in ``python`` tool: code runs in a separate process in its own working directory, in a sandbox where
bubblewrap can run, is killed with its children at the timeout (and nothing it starts outlives the call), and
is absent from a session (and from what a step is offered) without ``allow_code=True``.

Every test that starts a runaway script kills its processes on the way out, so a failure leaves none spinning.
A test that needs the sandbox is skipped where bubblewrap cannot run, and fails there under
``DAGMAGIC_REQUIRE_SANDBOX=1`` (``.ci/run``).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dagmagic import DagSession, DagSettings, ModelRegistry
from dagmagic.engine.tools import code as code_tool
from dagmagic.engine.tools.code import CodeWorkspace
from dagmagic.engine.tools.functions import Tool, tool
from dagmagic.events import RunStarted, RunWarning
from dagmagic.testing import ScriptedLLM, ToolCall
from tests.engine.conftest import plan_reply, verdict

RUNAWAY = """
import os
print("pid", os.getpid(), flush=True)
while True:
    pass
"""

RUNAWAY_WITH_CHILD = """
import os, subprocess, sys
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
print("pid", os.getpid(), flush=True)
print("pid", child.pid, flush=True)
while True:
    pass
"""


def pids_in(text: str) -> list[int]:
    return [int(pid) for pid in re.findall(r"^pid (\d+)$", text, re.MULTILINE)]


def is_zombie(pid: int) -> bool:
    """Dead, waiting for its parent (init, for an orphan) to reap it."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


async def gone(pid: int, *, zombie_ok: bool = False, within: float = 5.0) -> bool:
    """Whether ``pid`` stops existing within a short wait (reaping is not instantaneous)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while loop.time() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        if zombie_ok and is_zombie(pid):
            return True
        await asyncio.sleep(0.02)
    return False


@contextlib.contextmanager
def killed_afterwards(pids: list[int]) -> Iterator[list[int]]:
    """Kill whatever the test collected in ``pids``, passed or failed."""
    try:
        yield pids
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def python_tool(timeout: float, workdir: Path | None = None, *, network: bool = False) -> Tool:
    """The tool as most tests here use it: run where there is no sandbox too (the refusal there is tested apart)."""
    return code_tool.python_tool(timeout, workdir, network=network, without_sandbox=True)


def session(llm: ScriptedLLM, **kwargs: Any) -> DagSession:
    return DagSession(ModelRegistry().register("scripted", llm), DagSettings(store="none"), **kwargs)


@tool
def lookup(query: str) -> str:
    """Look something up."""
    return f"found {query}"


# --- with and without the sandbox ------------------------------------------------------------------------------
# A sandboxed script lives in its own PID namespace: the pids it sees mean nothing outside, so these tests find
# its processes from outside by a token in their command line (a fork keeps its parent's).


def sandbox_problem() -> str | None:
    from dagmagic.engine.tools import _code_sandbox

    return _code_sandbox.sandbox_problem()


@pytest.fixture
def sandboxed() -> None:
    """The test needs bubblewrap: it fails where the sandbox must be there (CI), else it is skipped."""
    problem = sandbox_problem()
    if problem is None:
        return
    if os.environ.get("DAGMAGIC_REQUIRE_SANDBOX"):
        pytest.fail(f"the python tool's sandbox cannot run here: {problem}")
    pytest.skip(f"the python tool's sandbox cannot run here: {problem}")


@pytest.fixture
def unsandboxed(monkeypatch: pytest.MonkeyPatch) -> None:
    """As on a machine without bubblewrap."""
    from dagmagic.engine.tools import _code_sandbox

    monkeypatch.setattr(_code_sandbox, "BWRAP", "/nonexistent/bwrap")


@pytest.fixture(params=["sandboxed", "unsandboxed"])
def either(request: pytest.FixtureRequest) -> str:
    """Once in the sandbox, once without one: what must hold in both."""
    request.getfixturevalue(request.param)
    return str(request.param)


def processes_with(token: str) -> list[int]:
    """Pids (outside any namespace) whose command line holds ``token``; zombies are dead and left out."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if token.encode() in Path(f"/proc/{entry}/cmdline").read_bytes() and not is_zombie(int(entry)):
                found.append(int(entry))
    return found


@contextlib.contextmanager
def token_killed_afterwards(token: str) -> Iterator[str]:
    try:
        yield token
    finally:
        for pid in processes_with(token):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


async def none_left(token: str, within: float = 5.0) -> bool:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while processes_with(token):
        if loop.time() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


def unique_token(name: str) -> str:
    return f"dagtoken-{name}-{os.getpid()}-{os.urandom(4).hex()}"


# --- the tool ---------------------------------------------------------------------------------------------------


def test_python_tool_is_a_tool_named_python_that_takes_code() -> None:
    python = python_tool(timeout=3)
    assert isinstance(python, Tool) and python.name == "python" and python.is_async
    assert "separate" in python.description and "process" in python.description
    schema = python.schema()
    assert schema["function"]["name"] == "python"
    params = schema["function"]["parameters"]
    assert params["required"] == ["code"] and params["properties"]["code"]["type"] == "string"
    assert params["properties"]["code"]["description"]
    # the call's own limit must not cut the process short of its kill
    assert python.timeout is not None and python.timeout > 3


async def test_code_runs_in_another_process() -> None:
    outcome = await python_tool(timeout=10).run({"code": "import os\nprint('pid', os.getpid())"}, timeout=30)
    assert outcome.error is None and outcome.observation.startswith("exit code 0\n")
    (pid,) = pids_in(outcome.observation)
    assert pid != os.getpid()


async def test_code_runs_in_its_own_directory_that_lasts_between_calls() -> None:
    python = python_tool(timeout=10)
    first = await python.run(
        {"code": "import os\nopen('note.txt', 'w').write('remembered')\nprint(os.getcwd())"}, timeout=30
    )
    assert first.observation.startswith("exit code 0\n")
    workdir = Path(first.observation.splitlines()[1])
    assert workdir.resolve() != Path.cwd().resolve()
    assert (workdir / "note.txt").read_text() == "remembered"
    second = await python.run({"code": "print(open('note.txt').read())"}, timeout=30)
    assert second.observation == "exit code 0\nremembered\n"
    other = await python_tool(timeout=10).run({"code": "import os\nprint(os.getcwd())"}, timeout=30)
    assert Path(other.observation.splitlines()[1]) != workdir  # each tool has a directory of its own


async def test_a_given_workdir_is_used(tmp_path: Path) -> None:
    outcome = await python_tool(timeout=10, workdir=tmp_path).run(
        {"code": "open('out.csv', 'w').write('a,b')"}, timeout=30
    )
    assert outcome.observation == "exit code 0\n"
    assert (tmp_path / "out.csv").read_text() == "a,b"


async def test_exit_code_stdout_and_stderr_come_back() -> None:
    python = python_tool(timeout=10)
    code = "import sys\nprint('to stdout', flush=True)\nprint('to stderr', file=sys.stderr)\nsys.exit(3)"
    outcome = await python.run({"code": code}, timeout=30)
    assert outcome.observation.startswith("exit code 3\n")
    assert "to stdout" in outcome.observation and "to stderr" in outcome.observation
    failed = await python.run({"code": "raise ValueError('boom')"}, timeout=30)
    assert failed.observation.startswith("exit code 1\n")
    assert "Traceback" in failed.observation and "ValueError: boom" in failed.observation


async def test_a_script_killed_by_a_signal_shows_that_signal() -> None:
    # the supervisor between the tool and the script passes on how the script ended
    outcome = await python_tool(timeout=10).run(
        {"code": "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)"}, timeout=30
    )
    assert outcome.observation == "exit code -9\n"


async def test_long_output_keeps_its_head_and_tail_and_counts_what_was_dropped() -> None:
    code = "import sys\nsys.stdout.write('h' * 20000 + 'm' * 10000 + 't' * 2000)"
    outcome = await python_tool(timeout=10).run({"code": code}, timeout=30)
    head, marker, tail = outcome.observation.split("\n", 1)[1].split("\n")
    assert head == "h" * 18000 and tail == "t" * 2000
    assert marker == "[output truncated: 12000 more bytes]"


async def test_a_cut_never_splits_a_character() -> None:
    code = "import sys\nsys.stdout.write('é' * 30000)"  # two bytes each: 60000 bytes
    outcome = await python_tool(timeout=10).run({"code": code}, timeout=30)
    head, marker, tail = outcome.observation.split("\n", 1)[1].split("\n")
    assert set(head) == {"é"} and set(tail) == {"é"}, "a replacement character shows a split"
    assert marker == f"[output truncated: {60000 - 2 * len(head) - 2 * len(tail)} more bytes]"


async def test_megabytes_of_output_are_drained_to_the_end() -> None:
    code = "import sys\nfor _ in range(5000):\n    print('x' * 999)\nprint('the end')\nsys.exit(3)"
    outcome = await python_tool(timeout=30).run({"code": code}, timeout=60)
    assert outcome.observation.startswith("exit code 3\n")
    assert outcome.observation.endswith("x\nthe end\n")
    assert "[output truncated: 4980008 more bytes]" in outcome.observation
    assert len(outcome.observation) < 20100


async def test_a_flood_of_output_is_cut_off_with_bounded_memory() -> None:
    code = "import sys\nline = 'y' * 999 + '\\n'\nfor _ in range(300_000):\n    sys.stdout.write(line)"  # 300 MB
    python = python_tool(timeout=50)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tracemalloc.start()
    try:
        outcome = await python.run({"code": code}, timeout=60)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    rss_growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before  # KiB on Linux
    flooded = "Killed: the script wrote more than 64 MiB of output"
    assert outcome.observation.startswith(flooded), outcome.observation[:200]
    dropped = int(re.findall(r"\[output truncated: (\d+) more bytes\]", outcome.observation)[0])
    assert 64 * 2**20 - 20000 < dropped < 300_000_000  # read up to the cap, not to the end
    assert len(outcome.observation) < 20200
    assert peak < 50 * 2**20, f"the call allocated {peak / 2**20:.0f} MiB at its peak"
    assert rss_growth < 50 * 2**10, f"the process grew by {rss_growth / 2**10:.0f} MiB"


# --- the environment --------------------------------------------------------------------------------------------

CANARIES = {
    "OPENAI_API_KEY": "canary-openai-3f9a",
    "ANTHROPIC_API_KEY": "canary-anthropic-77c1",
    "DAG_SMART_MODEL": "canary-dag-model-51e0",
    "DAG_STORE": "canary-dag-store-0b6e",
    "MY_SERVICE_TOKEN": "canary-token-a2d4",
    "AWS_SECRET_ACCESS_KEY": "canary-aws-9c3d",
    "GOOGLE_APPLICATION_CREDENTIALS": "canary-google-e18f",
}

# what it finds comes first, so no cap on the observation can hide a leak
DUMP_ENVIRONMENT = r"""
import os, subprocess, sys
entries = [f"{name}={value}" for name, value in os.environ.items()]
entries += open("/proc/self/environ", "rb").read().decode(errors="replace").split("\0")
entries += subprocess.run([sys.executable, "-c", "import os; print(*os.environ, sep=chr(10))"],
                          capture_output=True, text=True).stdout.splitlines()
for entry in entries:
    if "canary" in entry:
        print("seen", entry)
print("ENVIRONMENT DUMPED")
print(dict(os.environ))
"""


@pytest.fixture
def canaries(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    for name, value in CANARIES.items():
        monkeypatch.setenv(name, value)
    return CANARIES


def assert_no_canary(text: str) -> None:
    leaked = [name for name, value in CANARIES.items() if value in text]
    assert not leaked, f"{leaked} reached the script: {text[:2000]}"


async def test_the_script_sees_none_of_the_kernels_secrets(canaries: dict[str, str]) -> None:
    outcome = await python_tool(timeout=20).run({"code": DUMP_ENVIRONMENT}, timeout=30)
    assert outcome.observation.startswith("exit code 0\n") and "ENVIRONMENT DUMPED" in outcome.observation
    assert_no_canary(outcome.observation)


async def test_the_script_gets_a_home_and_a_temporary_directory_of_its_own(tmp_path: Path) -> None:
    code = "import os, tempfile\nfor name in ('HOME', 'TMPDIR', 'PATH', 'PYTHONIOENCODING'):\n"
    code += "    print(os.environ[name])\nprint(tempfile.gettempdir())\nprint(os.path.expanduser('~'))"
    outcome = await python_tool(timeout=20, workdir=tmp_path).run({"code": code}, timeout=30)
    assert outcome.observation.startswith("exit code 0\n"), outcome.observation
    home, temporary, path, encoding, gettempdir, expanded = outcome.observation.splitlines()[1:]
    assert Path(home).parent == tmp_path and Path(home).is_dir()
    assert Path(temporary).parent == tmp_path and Path(temporary).is_dir()
    assert gettempdir == temporary and expanded == home
    assert path == os.environ["PATH"] and encoding == "utf-8"


@pytest.mark.slow  # 10-15 s when it runs first: most of it importing litellm to count tokens
async def test_a_whole_run_never_shows_a_secret(canaries: dict[str, str]) -> None:
    llm = ScriptedLLM(run_script([ToolCall("python", {"code": DUMP_ENVIRONMENT}), "dumped it"]))
    run = await session(llm, allow_code=True).run("show the environment")
    assert run.status == "done"
    (call,) = run.steps["s1"].tool_calls
    assert call.name == "python" and "ENVIRONMENT DUMPED" in call.observation, call
    assert_no_canary(run.steps["s1"].model_dump_json())
    for event in run.events:
        if isinstance(event, RunStarted):  # the run's own settings name its model (DAG_SMART_MODEL): no secret
            assert_no_canary(event.model_dump_json(exclude={"settings"}))
            assert_no_canary(json.dumps({k: v for k, v in event.settings.items() if k != "smart_model"}))
            continue
        assert_no_canary(event.model_dump_json())
    assert any("ENVIRONMENT DUMPED" in call.model_dump_json() for call in run.calls)  # the step's second request
    for llm_call in run.calls:
        assert_no_canary(llm_call.model_dump_json())


# --- the kill ---------------------------------------------------------------------------------------------------
# These read the pids a script prints: outside the sandbox's PID namespace they name its processes; the
# sandbox's own kill is tested at the end, by token.


@pytest.mark.usefixtures("unsandboxed")
async def test_a_runaway_script_is_killed_at_its_timeout() -> None:
    with killed_afterwards([]) as pids:
        outcome = await python_tool(timeout=0.5).run({"code": RUNAWAY}, timeout=30)
        pids.extend(pids_in(outcome.observation))
        assert outcome.observation.startswith("Killed: the script ran longer than 0.5s")
        assert len(pids) == 1, outcome.observation  # what it printed before the kill comes back
        assert outcome.duration >= 0.5 * 0.9
        assert await gone(pids[0]), f"pid {pids[0]} still exists after the kill"
        with pytest.raises(ProcessLookupError):
            os.kill(pids[0], 0)


@pytest.mark.usefixtures("unsandboxed")
async def test_the_scripts_children_are_killed_too() -> None:
    with killed_afterwards([]) as pids:
        outcome = await python_tool(timeout=0.5).run({"code": RUNAWAY_WITH_CHILD}, timeout=30)
        pids.extend(pids_in(outcome.observation))
        assert outcome.observation.startswith("Killed")
        assert len(pids) == 2, outcome.observation
        script, child = pids
        assert await gone(script)
        # the orphaned child is reaped by init, not by us: dead-but-unreaped counts as killed
        assert await gone(child, zombie_ok=True), f"child {child} survived its script"


@pytest.mark.usefixtures("unsandboxed")
async def test_cancelling_the_call_kills_the_script(tmp_path: Path) -> None:
    code = "import os\nopen('pid', 'w').write(str(os.getpid()))\nwhile True:\n    pass"
    with killed_afterwards([]) as pids:
        call = asyncio.create_task(python_tool(timeout=30, workdir=tmp_path).run({"code": code}, timeout=60))
        pid_file = tmp_path / "pid"
        while not (pid_file.exists() and pid_file.read_text()):
            assert not call.done(), call.result()
            await asyncio.sleep(0.02)
        pids.append(int(pid_file.read_text()))
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert await gone(pids[0])


SETSID_CHILD = """
import os, subprocess, sys, time
LEAVE = "import os, time; os.setsid(); open('child.pid', 'w').write(str(os.getpid())); time.sleep(60)"
subprocess.Popen([sys.executable, "-c", LEAVE])
while not (os.path.exists("child.pid") and open("child.pid").read()):
    time.sleep(0.01)
open("script.pid", "w").write(str(os.getpid()))
while True:
    time.sleep(0.01)
"""

DOUBLE_FORKED_DAEMON = """
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        open("daemon.pid", "w").write(str(os.getpid()))
        time.sleep(60)
    os._exit(0)
os.wait()
while not (os.path.exists("daemon.pid") and open("daemon.pid").read()):
    time.sleep(0.01)
print("started the daemon")
"""


def pid_in(path: Path) -> int:
    assert path.exists() and path.read_text(), f"the script did not write {path.name}"
    return int(path.read_text())


@pytest.mark.usefixtures("unsandboxed")
async def test_a_child_that_left_the_process_group_is_killed_at_the_timeout(tmp_path: Path) -> None:
    with killed_afterwards([]) as pids:
        outcome = await python_tool(timeout=3, workdir=tmp_path).run({"code": SETSID_CHILD}, timeout=30)
        pids.extend([pid_in(tmp_path / "script.pid"), pid_in(tmp_path / "child.pid")])
        assert outcome.observation.startswith("Killed: the script ran longer than 3s"), outcome.observation
        script, child = pids
        assert await gone(script, zombie_ok=True)
        assert await gone(child, zombie_ok=True), f"child {child} (its own session) survived the timeout"


@pytest.mark.usefixtures("unsandboxed")
async def test_a_daemon_is_killed_when_its_script_exits(tmp_path: Path) -> None:
    with killed_afterwards([]) as pids:
        outcome = await python_tool(timeout=20, workdir=tmp_path).run({"code": DOUBLE_FORKED_DAEMON}, timeout=30)
        pids.append(pid_in(tmp_path / "daemon.pid"))
        assert outcome.observation == "exit code 0\nstarted the daemon\n"
        assert await gone(pids[0], zombie_ok=True), f"daemon {pids[0]} outlived its script"


@pytest.mark.usefixtures("unsandboxed")
async def test_cancelling_the_call_kills_a_child_that_left_the_process_group(tmp_path: Path) -> None:
    with killed_afterwards([]) as pids:
        call = asyncio.create_task(python_tool(timeout=30, workdir=tmp_path).run({"code": SETSID_CHILD}, timeout=60))
        while not (tmp_path / "script.pid").exists() or not (tmp_path / "script.pid").read_text():
            assert not call.done(), call.result()
            await asyncio.sleep(0.02)
        pids.extend([pid_in(tmp_path / "script.pid"), pid_in(tmp_path / "child.pid")])
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        for pid in pids:
            assert await gone(pid, zombie_ok=True), f"pid {pid} survived the cancelled call"


KERNEL_THAT_DIES = """
import asyncio, sys
from pathlib import Path
from dagmagic.engine.tools import _code_sandbox
from dagmagic.engine.tools.code import python_tool
if sys.argv[3:] == ["unsandboxed"]:
    _code_sandbox.BWRAP = "/nonexistent/bwrap"
python = python_tool(timeout=60, workdir=Path(sys.argv[1]), without_sandbox=True)
asyncio.run(python.run({"code": sys.argv[2]}, timeout=90))
"""


@pytest.mark.usefixtures("unsandboxed")
async def test_a_script_dies_with_the_kernel_that_started_it(tmp_path: Path) -> None:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    kernel_command = [sys.executable, "-c", KERNEL_THAT_DIES, str(tmp_path), SETSID_CHILD, "unsandboxed"]
    kernel = subprocess.Popen(kernel_command, env=env)
    with killed_afterwards([]) as pids:
        try:
            while not (tmp_path / "script.pid").exists() or not (tmp_path / "script.pid").read_text():
                assert kernel.poll() is None, "the kernel ended before its script started"
                await asyncio.sleep(0.02)
            pids.extend([pid_in(tmp_path / "script.pid"), pid_in(tmp_path / "child.pid")])
        finally:
            kernel.kill()  # no cleanup of its own can run
            kernel.wait()
        for pid in pids:
            assert await gone(pid, zombie_ok=True), f"pid {pid} outlived the kernel that started it"


# --- opt-in only ------------------------------------------------------------------------------------------------


def test_a_session_has_python_only_when_code_is_allowed() -> None:
    llm = ScriptedLLM({"*": "unused"})
    assert [t.name for t in session(llm, tools=[lookup]).tools] == ["lookup"]
    assert [t.name for t in session(llm, tools=[lookup], allow_code=False).tools] == ["lookup"]
    assert [t.name for t in session(llm).tools] == []
    assert [t.name for t in session(llm, tools=[lookup], allow_code=True).tools] == ["lookup", "python"]


@pytest.mark.usefixtures("unsandboxed")
async def test_the_sessions_python_tool_is_killed_at_code_timeout() -> None:
    settings = DagSettings(store="none", code_timeout=0.3, code_without_sandbox=True)
    allowed = DagSession(ModelRegistry().register("scripted", ScriptedLLM({"*": "x"})), settings, allow_code=True)
    python = next(t for t in allowed.tools if t.name == "python")
    with killed_afterwards([]) as pids:
        outcome = await python.run({"code": RUNAWAY}, timeout=settings.tool_timeout)
        pids.extend(pids_in(outcome.observation))
        assert outcome.observation.startswith("Killed: the script ran longer than 0.3s")


def run_script(step: Any) -> dict[str, Any]:
    return {
        "plan": [plan_reply(("s1", []))],
        "step": step,
        "analyze": [verdict(True, 0.9, "ok", "final")],
        "synthesize": [["Done."]],
    }


def offered(llm: ScriptedLLM) -> list[list[str]]:
    return [[t["function"]["name"] for t in request.tools] for request in llm.requests_for("step")]


@pytest.mark.parametrize(("allow_code", "names"), [(False, ["lookup"]), (True, ["lookup", "python"])])
async def test_a_step_is_offered_python_only_when_code_is_allowed(allow_code: bool, names: list[str]) -> None:
    llm = ScriptedLLM(run_script(["the answer"]))
    run = await session(llm, tools=[lookup], allow_code=allow_code).run("find it")
    assert run.status == "done"
    assert offered(llm) and all(step_tools == names for step_tools in offered(llm))


async def test_a_model_asking_for_python_without_opt_in_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    llm = ScriptedLLM(run_script([ToolCall("python", {"code": f"open({str(marker)!r}, 'w')"}), "gave up"]))
    run = await session(llm, tools=[lookup]).run("find it")
    assert run.status == "done"
    assert not marker.exists()
    second = llm.requests_for("step")[1]
    assert "There is no tool named 'python'. Available tools: lookup." in second.prompt
    assert all("python" not in step_tools for step_tools in offered(llm))


@pytest.mark.usefixtures("unsandboxed")
async def test_without_a_sandbox_code_is_refused_unless_the_user_opts_in_naming_the_risk(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    calls = [ToolCall("python", {"code": f"open({str(marker)!r}, 'w')"}), "could not run it"]
    llm = ScriptedLLM(run_script(calls))
    refusing = session(llm, allow_code=True)
    run = await refusing.run("run code")
    refusing.close()
    assert run.status == "done"
    assert not marker.exists(), "model-written code ran without a sandbox and without an opt-in"
    (call,) = run.steps["s1"].tool_calls
    assert call.error is not None and "runs no script here: no sandbox can be used" in call.observation, call
    for said in (call.observation, *(e.message for e in run.events if isinstance(e, RunWarning))):
        assert "DAG_CODE_WITHOUT_SANDBOX=1" in said and "the kernel's API keys included" in said, said
    # opted in: the same call runs, and the run still warns what that means
    settings = DagSettings(store="none", code_without_sandbox=True)
    registry = ModelRegistry().register("scripted", ScriptedLLM(run_script(calls)))
    opted_in = DagSession(registry, settings, allow_code=True)
    again = await opted_in.run("run code")
    opted_in.close()
    (ran,) = again.steps["s1"].tool_calls
    assert ran.error is None and ran.observation.startswith("exit code 0"), ran
    assert marker.exists()
    warnings = [e.message for e in again.events if isinstance(e, RunWarning) and "sandbox" in e.message]
    assert len(warnings) == 1 and "runs scripts without a sandbox" in warnings[0], warnings


async def test_with_a_sandbox_code_runs_without_any_opt_in(sandboxed: None) -> None:
    workspace = CodeWorkspace(timeout=10)
    assert workspace.refusal is None
    outcome = await workspace.tool().run({"code": "print('ran')"}, timeout=30)
    workspace.close()
    assert outcome.observation == "exit code 0\nran\n", outcome


# --- the working directory's lifetime ----------------------------------------------------------------------------


def python_of(owner: DagSession) -> Tool:
    return next(t for t in owner.tools if t.name == "python")


async def directory_of(python: Tool) -> Path:
    outcome = await python.run({"code": "import os\nopen('kept.txt', 'w').write('x')\nprint(os.getcwd())"}, timeout=30)
    assert outcome.observation.startswith("exit code 0\n"), outcome.observation
    directory = Path(outcome.observation.splitlines()[1])
    assert directory.name.startswith("dagmagic-code-") and (directory / "kept.txt").exists()
    return directory


async def test_the_working_directory_lasts_the_session_and_goes_with_close() -> None:
    llm = ScriptedLLM(run_script([ToolCall("python", {"code": "import os\nprint(os.getcwd())"}), "there"]))
    allowed = session(llm, allow_code=True)
    run = await allowed.run("where is it")
    (call,) = run.steps["s1"].tool_calls
    directory = Path(call.observation.splitlines()[1])
    assert directory.name.startswith("dagmagic-code-") and directory.is_dir()
    assert await directory_of(python_of(allowed)) == directory  # the same directory for the whole session
    allowed.close()
    assert not directory.exists()
    allowed.close()  # a second close is harmless
    after = await python_of(allowed).run({"code": "print(1)"}, timeout=30)
    assert after.error is not None and "closed" in after.observation


async def test_a_session_used_as_a_context_manager_closes_itself() -> None:
    with session(ScriptedLLM({"*": "x"}), allow_code=True) as allowed:
        directory = await directory_of(python_of(allowed))
    assert not directory.exists()
    async with session(ScriptedLLM({"*": "x"}), allow_code=True) as allowed:
        directory = await directory_of(python_of(allowed))
    assert not directory.exists()
    with session(ScriptedLLM({"*": "x"})) as without_code:  # nothing to remove: closing is still fine
        assert without_code.tools == []


async def test_a_dropped_session_leaves_no_directory() -> None:
    allowed = session(ScriptedLLM({"*": "x"}), allow_code=True)
    directory = await directory_of(python_of(allowed))
    del allowed
    gc.collect()
    assert not directory.exists()


async def test_a_dropped_tool_leaves_no_directory() -> None:
    python = python_tool(timeout=10)
    directory = await directory_of(python)
    del python
    gc.collect()
    assert not directory.exists()


async def test_a_given_workdir_is_never_removed(tmp_path: Path) -> None:
    workspace = CodeWorkspace(timeout=10, workdir=tmp_path, without_sandbox=True)
    outcome = await workspace.tool().run({"code": "open('result.csv', 'w').write('a,b')"}, timeout=30)
    assert outcome.observation == "exit code 0\n"
    workspace.close()
    assert (tmp_path / "result.csv").read_text() == "a,b"
    python = python_tool(timeout=10, workdir=tmp_path)
    await python.run({"code": "print(1)"}, timeout=30)
    del python
    gc.collect()
    assert (tmp_path / "result.csv").read_text() == "a,b"


@pytest.mark.usefixtures("unsandboxed")
async def test_closing_kills_a_script_still_running(tmp_path: Path) -> None:
    workspace = CodeWorkspace(timeout=30, without_sandbox=True)
    code = "import os, time\nopen('pid', 'w').write(str(os.getpid()))\nwhile True:\n    time.sleep(0.01)"
    with killed_afterwards([]) as pids:
        call = asyncio.create_task(workspace.tool().run({"code": code}, timeout=60))
        pid_file = workspace.directory / "pid"
        while not (pid_file.exists() and pid_file.read_text()):
            assert not call.done(), call.result()
            await asyncio.sleep(0.02)
        pids.append(int(pid_file.read_text()))
        workspace.close()
        outcome = await call
        assert await gone(pids[0], zombie_ok=True)
        assert not workspace.directory.exists()
        assert "closed" in outcome.observation, outcome.observation


EXIT_WITHOUT_CLOSE = """
import asyncio
from dagmagic import DagSession, DagSettings, ModelRegistry
from dagmagic.testing import ScriptedLLM

settings = DagSettings(store="none", code_without_sandbox=True)
session = DagSession(ModelRegistry().register("scripted", ScriptedLLM({"*": "x"})), settings, allow_code=True)
python = next(t for t in session.tools if t.name == "python")
outcome = asyncio.run(python.run({"code": "import os; print(os.getcwd())"}, timeout=30))
directory = outcome.observation.splitlines()[1]
assert os.path.isdir(directory), outcome.observation
print(directory)
"""


def test_the_directory_is_gone_at_interpreter_exit() -> None:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    code = "import os\n" + EXIT_WITHOUT_CLOSE
    finished = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=50)
    assert finished.returncode == 0, finished.stderr
    directory = Path(finished.stdout.strip())
    assert directory.name.startswith("dagmagic-code-")
    assert not directory.exists()


# --- the sandbox (bubblewrap): what only it gives, and what holds in it and without it -------------------------


# a kernel as Jupyter starts it: with secrets in its environment and its connection file on its command line
FAKE_KERNEL = """
import asyncio, sys
from pathlib import Path
from dagmagic.engine.tools.code import python_tool
outcome = asyncio.run(python_tool(timeout=30, workdir=Path(sys.argv[1])).run({"code": sys.argv[2]}, timeout=60))
print(outcome.observation)
"""
KERNEL_SECRET = "DAG_TEST_SECRET"
CONNECTION_FILE = "kernel-conn-4b1d.json"

# the names it looks for are built at run time, so that the script's own command line does not hold them
SNOOP = r"""
import os
wanted = [b"DAG_TEST" + b"_SECRET=", b"kernel-conn" + b"-4b1d"]
def ancestors():
    pid = os.getpid()
    while pid > 1:
        pid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
        yield pid
pids = [*ancestors(), *(int(entry) for entry in os.listdir("/proc") if entry.isdigit())]
found = set()
for pid in pids:
    for name in ("environ", "cmdline"):
        try:
            data = open(f"/proc/{pid}/{name}", "rb").read()
        except OSError:
            continue
        found.update(f"{name} of {pid}" for secret in wanted if secret in data)
print("SNOOPED", sorted(found))
"""


@pytest.mark.usefixtures("sandboxed")
def test_the_script_cannot_read_the_kernels_environment_or_command_line(tmp_path: Path) -> None:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", KERNEL_SECRET: "canary-kernel-7e21"}
    kernel = [sys.executable, "-c", FAKE_KERNEL, str(tmp_path), SNOOP, "-f", f"/nowhere/{CONNECTION_FILE}"]
    finished = subprocess.run(kernel, capture_output=True, text=True, env=env, timeout=60)
    assert finished.returncode == 0, finished.stderr
    assert finished.stdout.startswith("exit code 0\n"), finished.stdout
    assert "SNOOPED []" in finished.stdout, finished.stdout
    assert "canary-kernel-7e21" not in finished.stdout


LOOPBACK_CALL = """
import socket
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=5).close()
    print("connected")
except OSError as exc:
    print("refused:", exc)
"""


@pytest.mark.usefixtures("sandboxed")
@pytest.mark.parametrize("network", [False, True])
async def test_the_network_is_reachable_only_when_allowed(network: bool) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    try:
        port = listener.getsockname()[1]
        python = python_tool(timeout=20, network=network)
        outcome = await python.run({"code": LOOPBACK_CALL.format(port=port)}, timeout=30)
        assert outcome.observation.startswith("exit code 0\n"), outcome.observation
        try:
            listener.accept()[0].close()
            accepted = True
        except BlockingIOError:
            accepted = False
    finally:
        listener.close()
    if network:
        assert "connected" in outcome.observation and accepted
    else:
        assert "refused" in outcome.observation and not accepted


WRITE_ELSEWHERE = """
import sys
import tempfile
for path in sys.argv[1:]:
    try:
        open(path, "w").write("escaped")
        print("wrote", path)
    except OSError as exc:
        print("refused", path, type(exc).__name__)
"""


@pytest.mark.usefixtures("sandboxed")
async def test_the_script_can_write_only_in_its_working_directory(tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    with tempfile.TemporaryDirectory(dir=Path.home()) as in_home:
        targets = [tmp_path / "beside-the-workdir.txt", Path(in_home) / "in-home.txt", workdir / "inside.txt"]
        code = f"import sys\nsys.argv[1:] = {[str(target) for target in targets]!r}\n" + WRITE_ELSEWHERE
        outcome = await python_tool(timeout=20, workdir=workdir).run({"code": code}, timeout=30)
        assert outcome.observation.startswith("exit code 0\n"), outcome.observation
        for outside in targets[:2]:
            assert f"refused {outside}" in outcome.observation, outcome.observation
            assert not outside.exists()
        assert (workdir / "inside.txt").read_text() == "escaped"


READ_CREDENTIALS = """
import sys
from pathlib import Path
for name in sys.argv[1:]:
    path = Path(name)
    try:
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        text = "".join(p.read_text() for p in files)
    except OSError as exc:
        text = type(exc).__name__
    print(path.name, repr(text))
"""


@pytest.mark.usefixtures("sandboxed")
async def test_the_usual_credential_files_in_home_are_hidden_and_the_users_data_is_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with tempfile.TemporaryDirectory(dir=Path.home()) as fake_home:  # /tmp itself is hidden from the script
        home = Path(fake_home)
        secrets = [home / ".ssh" / "id_ed25519", home / ".aws" / "credentials", home / ".netrc"]
        for secret in secrets:
            secret.parent.mkdir(parents=True, exist_ok=True)
            secret.write_text("canary-secret")
        (home / "data.csv").write_text("a,b\n1,2\n")
        monkeypatch.setenv("HOME", str(home))
        targets = [home / ".ssh", home / ".aws", home / ".netrc", home / "data.csv"]
        code = f"import sys\nsys.argv[1:] = {[str(target) for target in targets]!r}\n" + READ_CREDENTIALS
        outcome = await python_tool(timeout=20, workdir=tmp_path).run({"code": code}, timeout=30)
        assert outcome.observation.startswith("exit code 0\n"), outcome.observation
        assert "canary-secret" not in outcome.observation
        assert "data.csv 'a,b\\n1,2\\n'" in outcome.observation  # the user's files stay readable
        assert all(secret.read_text() == "canary-secret" for secret in secrets)  # hidden, not touched


ESCAPE = """
# {token}
import os, signal, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        open("grandchild.pid", "w").write(str(os.getpid()))
        time.sleep(60)  # holding the output pipe, in a session of its own, the child of nobody
    os._exit(0)
while not (os.path.exists("go") and os.path.exists("grandchild.pid")):
    time.sleep(0.01)
os.kill(os.getppid(), signal.SIGKILL)  # the supervisor
time.sleep(60)
"""


async def test_nothing_outlives_a_script_that_kills_its_supervisor(either: str, tmp_path: Path) -> None:
    timeout = 20.0
    with token_killed_afterwards(unique_token("escape")) as token:
        python = python_tool(timeout=timeout, workdir=tmp_path)
        call = asyncio.create_task(python.run({"code": ESCAPE.format(token=token)}, timeout=60))
        while not (tmp_path / "grandchild.pid").exists():
            assert not call.done(), call.result()
            await asyncio.sleep(0.02)
        assert len(processes_with(token)) >= 2, "the script and its grandchild are running"
        loop = asyncio.get_running_loop()
        (tmp_path / "go").touch()
        told = loop.time()
        outcome = await call
        ended = loop.time() - told
        assert await none_left(token), f"{processes_with(token)} outlived the call ({either})"
        assert f"ran longer than {timeout:g}s" not in outcome.observation, outcome.observation  # not the timeout
        # from the supervisor's death, not from a start a loaded machine makes slow
        assert ended < 0.5 * timeout, f"the call ended {ended:.1f}s after the script was told to go, of {timeout}s"


RUNAWAY_FAMILY = """
# {token}
import os, subprocess, sys, time
subprocess.Popen([sys.executable, "-c", "# {token}\\nimport os, time\\nos.setsid()\\ntime.sleep(60)"])
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(60)
    os._exit(0)
while True:
    time.sleep(0.01)
"""


async def started(token: str, count: int, call: asyncio.Future[Any] | subprocess.Popen[bytes]) -> None:
    """Wait until ``count`` processes with ``token`` run; fail if the call ends first."""
    while len(processes_with(token)) < count:
        done = call.done() if isinstance(call, asyncio.Future) else call.poll() is not None
        assert not done, "the call ended before the script's processes started"
        await asyncio.sleep(0.02)


@pytest.mark.usefixtures("sandboxed")
@pytest.mark.parametrize("end", ["timeout", "cancel", "close"])
async def test_in_the_sandbox_every_process_ends_with_the_call(end: str) -> None:
    workspace = CodeWorkspace(timeout=1.5 if end == "timeout" else 30)
    assert workspace.sandbox_problem is None
    with token_killed_afterwards(unique_token(end)) as token:
        call = asyncio.ensure_future(workspace.tool().run({"code": RUNAWAY_FAMILY.format(token=token)}, timeout=60))
        await started(token, 4, call)  # the script, its child in a session of its own, a daemon and its parent
        if end == "cancel":
            call.cancel()
        elif end == "close":
            workspace.close()
        outcome = await asyncio.gather(call, return_exceptions=True)
        assert await none_left(token), f"{processes_with(token)} outlived the call ({end})"
    workspace.close()
    if end == "timeout":
        assert outcome[0].observation.startswith("Killed: the script ran longer than 1.5s"), outcome


@pytest.mark.usefixtures("sandboxed")
async def test_in_the_sandbox_every_process_dies_with_the_kernel(tmp_path: Path) -> None:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    with token_killed_afterwards(unique_token("kernel")) as token:
        code = RUNAWAY_FAMILY.format(token=token)
        kernel = subprocess.Popen([sys.executable, "-c", KERNEL_THAT_DIES, str(tmp_path), code], env=env)
        try:
            await started(token, 4, kernel)
        finally:
            kernel.kill()  # no cleanup of its own can run
            kernel.wait()
        assert await none_left(token), f"{processes_with(token)} outlived the kernel that started them"


async def test_a_script_killed_by_a_signal_shows_that_signal_in_the_sandbox_too(either: str) -> None:
    outcome = await python_tool(timeout=10).run({"code": "import os, signal\nos.kill(os.getpid(), 15)"}, timeout=30)
    assert outcome.observation == "exit code -15\n", either


def test_the_description_tells_the_model_what_holds(either: str) -> None:
    description = python_tool(timeout=7).description
    assert "killed after 7s, with every process it started" in description
    if either == "sandboxed":
        assert "in a sandbox, without network access" in description
        assert "in a sandbox, with network access" in python_tool(timeout=7, network=True).description
    else:
        assert "without a sandbox, with the user's files and network" in description


@pytest.mark.usefixtures("unsandboxed")
async def test_without_a_sandbox_a_session_warns_once_and_the_environment_is_still_scrubbed(
    canaries: dict[str, str],
) -> None:
    script = run_script([ToolCall("python", {"code": DUMP_ENVIRONMENT}), "dumped it", "nothing to run"])
    llm = ScriptedLLM(
        {purpose: [*replies, *replies] if purpose != "step" else replies for purpose, replies in script.items()}
    )
    settings = DagSettings(store="none", code_without_sandbox=True)
    allowed = DagSession(ModelRegistry().register("scripted", llm), settings, allow_code=True)
    first = await allowed.run("show the environment")
    (call,) = first.steps["s1"].tool_calls
    assert "ENVIRONMENT DUMPED" in call.observation
    assert_no_canary(call.observation)
    warnings = [event.message for event in first.events if isinstance(event, RunWarning)]
    (warning,) = [message for message in warnings if "sandbox" in message]
    assert "without a sandbox: bubblewrap is not installed" in warning and "apt-get install bubblewrap" in warning
    assert "every process they start is ended with the call" in warning
    second = await allowed.run("again")
    assert second.status == "done"
    assert not [event for event in second.events if isinstance(event, RunWarning) and "sandbox" in event.message]
    allowed.close()


KILL_BOTH_SUPERVISORS = """
# {token}
import os, signal, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(60)
    os._exit(0)
time.sleep(0.2)
first = int(open(f"/proc/{{os.getppid()}}/stat").read().rsplit(")", 1)[1].split()[1])
os.kill(first, signal.SIGKILL)
os.kill(os.getppid(), signal.SIGKILL)
time.sleep(60)
"""


async def test_a_script_that_kills_both_supervisors_ends_the_call_and_escapes_only_without_a_sandbox(
    either: str,
) -> None:
    timeout = 20.0
    with token_killed_afterwards(unique_token("both")) as token:
        outcome = await python_tool(timeout=timeout).run(
            {"code": KILL_BOTH_SUPERVISORS.format(token=token)}, timeout=60
        )
        assert outcome.duration < 0.5 * timeout, f"the call took {outcome.duration:.1f}s of its {timeout}s"
        assert outcome.observation.startswith("Ended without an exit code"), outcome.observation  # not the timeout
        if either == "sandboxed":
            assert await none_left(token), f"{processes_with(token)} outlived the call"
            assert "the sandbox ended every process the script started" in outcome.observation
        else:  # the platform's limit, said rather than hidden (the second guard may still win the race)
            escaped = bool(processes_with(token))
            said = "A process the script started still holds its output: it escaped" in outcome.observation
            assert escaped == said, outcome.observation


def test_a_bwrap_that_cannot_make_a_sandbox_is_named_with_its_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dagmagic.engine.tools import _code_sandbox

    refusing = tmp_path / "bwrap"
    refusing.write_text("#!/bin/sh\necho 'bwrap: No permissions to create a new namespace' >&2\nexit 1\n")
    refusing.chmod(0o755)
    monkeypatch.setattr(_code_sandbox, "BWRAP", str(refusing))
    workspace = CodeWorkspace(timeout=5)
    assert workspace.sandbox_problem == (
        "bubblewrap cannot make a sandbox here (bwrap: No permissions to create a new namespace)"
    )
    assert "scripts are refused here" in workspace.tool().description
    assert workspace.refusal is not None and "(bubblewrap cannot make a sandbox here" in workspace.refusal
    workspace.close()
    opted_in = CodeWorkspace(timeout=5, without_sandbox=True)
    assert "without a sandbox" in opted_in.tool().description and opted_in.refusal is None
    opted_in.close()
