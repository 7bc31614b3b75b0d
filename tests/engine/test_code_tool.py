"""The opt-in ``python`` tool: code runs in a separate process in its own working directory, is killed with
its children at the timeout, and is absent from a session (and from what a step is offered) without
``allow_code=True``.

Every test that starts a runaway script kills its pids on the way out, so a failure leaves no spinning process.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dagmagic import DagSession, DagSettings, ModelRegistry
from dagmagic.engine.code_tool import python_tool
from dagmagic.engine.tools import Tool, tool
from dagmagic.testing import ScriptedLLM, ToolCall

from .conftest import plan_reply, verdict

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


def session(llm: ScriptedLLM, **kwargs: Any) -> DagSession:
    return DagSession(ModelRegistry().register("scripted", llm), DagSettings(store="none"), **kwargs)


@tool
def lookup(query: str) -> str:
    """Look something up."""
    return f"found {query}"


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


async def test_long_output_is_truncated() -> None:
    outcome = await python_tool(timeout=10).run({"code": "import sys\nsys.stdout.write('z' * 30000)"}, timeout=30)
    assert outcome.observation.endswith("\n[output truncated: 10000 more characters]")
    assert outcome.observation.count("z") == 20000


# --- the kill ---------------------------------------------------------------------------------------------------


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


# --- opt-in only ------------------------------------------------------------------------------------------------


def test_a_session_has_python_only_when_code_is_allowed() -> None:
    llm = ScriptedLLM({"*": "unused"})
    assert [t.name for t in session(llm, tools=[lookup]).tools] == ["lookup"]
    assert [t.name for t in session(llm, tools=[lookup], allow_code=False).tools] == ["lookup"]
    assert [t.name for t in session(llm).tools] == []
    assert [t.name for t in session(llm, tools=[lookup], allow_code=True).tools] == ["lookup", "python"]


async def test_the_sessions_python_tool_is_killed_at_code_timeout() -> None:
    settings = DagSettings(store="none", code_timeout=0.3)
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
