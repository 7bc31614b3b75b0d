"""A worker's MCP servers and code sandbox stop with it: SIGTERM ends the worker (exit 0), its MCP server processes
and the ``python`` tool's working directory with it, whether its cell ended or is still under way.
"""

from __future__ import annotations

import asyncio
import textwrap
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from dagmagic.events import StepStarted
from dagmagic.store import RunStore
from tests.engine.tools.test_mcp import SERVER
from tests.temporal.workers import Worker, notebook

pytestmark = [pytest.mark.timeout(240)]

WORKER_FILE = textwrap.dedent(
    """
    import os, sys
    from dagmagic import MCPServer, ModelRegistry
    from dagmagic.testing import ScriptedLLM

    SLEEP = float(os.environ["DAG_TEST_SLEEP"])


    def plan(request):
        return {"steps": [
            {"id": "s1", "task": "add", "tool_hint": "add", "tool_args": {"a": 2, "b": 3}},
            {"id": "s2", "task": "compute", "tool_hint": "python", "tool_args": {"code": "print(6 * 7)"}},
            {"id": "s3", "task": "wait", "tool_hint": "sleep", "tool_args": {"seconds": SLEEP},
             "dependencies": ["s1", "s2"]},
        ]}


    llm = ScriptedLLM(
        {"plan": plan, "step": ["done"], "analyze": [{"achieved": True, "confidence": 0.9, "reasoning": "ok"}],
         "synthesize": ["the answer"]}
    )
    models = ModelRegistry().register("scripted", llm)
    tools = [MCPServer.stdio(sys.executable, os.environ["DAG_TEST_MCP_SERVER"])]
    allow_code = True
    """
)


def servers_of(worker: Worker) -> list[psutil.Process]:
    """The worker's MCP server processes (its children running the test server)."""
    found = []
    for child in psutil.Process(worker.pid).children(recursive=True):
        try:
            if str(SERVER) in " ".join(child.cmdline()) and child.status() != psutil.STATUS_ZOMBIE:
                found.append(child)
        except (psutil.NoSuchProcess, FileNotFoundError, ProcessLookupError):
            pass
    return found


def workspaces(tmp: Path) -> list[Path]:
    """The ``python`` tool's working directories (the worker's TMPDIR is ``tmp``)."""
    return sorted(tmp.glob("dagmagic-code-*"))


def start_worker(tmp_path: Path, temporal: Any, queue: str, store: str, sleep: float) -> tuple[Worker, Path]:
    temp = tmp_path / "worker-tmp"
    temp.mkdir()
    env = {"TMPDIR": str(temp), "DAG_TEST_MCP_SERVER": str(SERVER), "DAG_TEST_SLEEP": str(sleep)}
    return Worker(tmp_path, temporal.address, queue, store, source=WORKER_FILE, env=env), temp


def ended(processes: list[psutil.Process]) -> bool:
    return not any(process.is_running() and process.status() != psutil.STATUS_ZOMBIE for process in processes)


async def test_sigterm_stops_the_workers_mcp_servers_and_code_sandbox(
    tmp_path: Path, temporal: Any, queue: str, workers: list[Worker]
) -> None:
    store = str(tmp_path / "runs.sqlite")
    worker, temp = start_worker(tmp_path, temporal, queue, store, sleep=0)
    workers.append(worker)
    experiment = await notebook(store)[0].evaluate(
        ["one goal"], name="lifecycle", on=f"{temporal.on}?task_queue={queue}"
    )
    assert [cell.status for cell in experiment.cells] == ["done"], worker.output()
    run_id = experiment.cells[0].run_id
    assert run_id is not None
    plan = RunStore.open(store).load(run_id).state.rounds[0].plan
    assert "5" in str(plan.step("s1").result) and "42" in str(plan.step("s2").result)  # MCP's add, python's print
    servers = servers_of(worker)
    assert servers  # the MCP server the cell's add step called (and any process it started), up for the next cell
    assert len(workspaces(temp)) == 1  # the python step's working directory
    assert worker.stop() == 0, worker.output()
    psutil.wait_procs(servers, timeout=10)
    assert ended(servers)
    assert workspaces(temp) == []


async def test_sigterm_while_a_cell_is_under_way_ends_the_worker_and_what_it_started(
    tmp_path: Path, temporal: Any, queue: str, workers: list[Worker]
) -> None:
    store = str(tmp_path / "runs.sqlite")
    worker, temp = start_worker(tmp_path, temporal, queue, store, sleep=600)  # s3 waits on the MCP server
    workers.append(worker)
    experiment = notebook(store)[0].start_evaluation(["one goal"], name="cut", on=f"{temporal.on}?task_queue={queue}")
    try:
        deadline = time.monotonic() + 120
        while not (servers_of(worker) and workspaces(temp) and "s3" in _started_steps(store)):
            assert time.monotonic() < deadline, worker.output()
            await asyncio.sleep(0.1)
        servers = servers_of(worker)
        worker.process.terminate()
        assert await asyncio.to_thread(worker.process.wait, 120) == 0, worker.output()
        psutil.wait_procs(servers, timeout=10)
        assert ended(servers)
        assert workspaces(temp) == []
    finally:
        experiment.cancel()


def _started_steps(store: str) -> set[str]:
    """The steps that started in the store's runs."""
    opened = RunStore.open(store)
    try:
        return {
            event.step_id
            for summary in opened.runs(limit=10)
            for event in opened.load(summary.run_id).events
            if isinstance(event, StepStarted)
        }
    finally:
        opened.close()
