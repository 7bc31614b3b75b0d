"""Worker processes for the Temporal tests and benchmark: ``python -m dagmagic worker`` over a FILE whose scripted
model plans two lookups per goal (``look up case N``: ``qN-a`` then ``qN-b``), each a direct tool step that writes
``PID ITEM`` to a calls file before it answers, so a test counts every tool call, whichever process made it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

__all__ = ["WORKER_FILE", "Worker", "calls_in", "notebook"]

ROOT = Path(__file__).resolve().parents[2]

WORKER_FILE = textwrap.dedent(
    '''
    import asyncio, os, re
    from dagmagic import ModelRegistry
    from dagmagic.testing import ScriptedLLM

    CALLS = os.environ["DAG_TEST_CALLS"]
    SECONDS = float(os.environ.get("DAG_TEST_LOOKUP_SECONDS", "0.05"))


    async def lookup(item: str) -> str:
        """Look an item up.

        Args:
            item: What to look up.
        """
        with open(CALLS, "a") as calls:
            calls.write(f"{os.getpid()} {item}\\n")
        await asyncio.sleep(SECONDS)
        return f"{item} found"


    def plan(request):
        number = re.findall(r"look up case (\\d+)", " ".join(str(message) for message in request.messages))[-1]
        return {"steps": [
            {"id": "s1", "task": f"look up q{number}-a", "tool_hint": "lookup", "tool_args": {"item": f"q{number}-a"}},
            {"id": "s2", "task": f"look up q{number}-b", "tool_hint": "lookup", "tool_args": {"item": f"q{number}-b"},
             "dependencies": ["s1"]},
        ]}


    llm = ScriptedLLM(
        {"plan": plan, "step": ["found"], "analyze": [{"achieved": True, "confidence": 0.9, "reasoning": "ok"}],
         "synthesize": ["the answer"]},
        latency=float(os.environ.get("DAG_TEST_LATENCY", "0")),
        price=(0.001, 0.001),
    )
    models = ModelRegistry().register("scripted", llm)
    tools = [lookup]
    '''
)


class Worker:
    """One ``python -m dagmagic worker`` process, started and ready (it said it polls); ``source`` is its FILE
    (``tmp/worker_file.py``, written by the first worker of ``tmp``), ``env`` more of its environment.
    """

    def __init__(
        self,
        tmp: Path,
        address: str,
        queue: str,
        store: str,
        *,
        seconds: float = 0.05,
        concurrency: int = 1,
        source: str = WORKER_FILE,
        env: dict[str, str] | None = None,
    ) -> None:
        file = tmp / "worker_file.py"
        if not file.exists():
            file.write_text(source)
        self.calls = tmp / "calls.txt"
        self.log = tmp / f"worker-{time.monotonic_ns()}.log"
        env = {
            **os.environ,
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "PYTHONPATH": str(ROOT),
            "DAG_STORE": store,
            "DAG_TEST_CALLS": str(self.calls),
            "DAG_TEST_LOOKUP_SECONDS": str(seconds),
            **(env or {}),
        }
        command = [sys.executable, "-m", "dagmagic", "worker", "--temporal", address, "--task-queue", queue]
        with self.log.open("w") as log:
            self.process = subprocess.Popen(
                [*command, "--concurrency", str(concurrency), str(file)],
                env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        deadline = time.monotonic() + 60
        while "polling" not in self.output():
            assert self.process.poll() is None, f"the worker exited: {self.output()}"
            assert time.monotonic() < deadline, f"the worker never said it polls: {self.output()}"
            time.sleep(0.1)

    @property
    def pid(self) -> int:
        return self.process.pid

    def output(self) -> str:
        return self.log.read_text() if self.log.exists() else ""

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.terminate()
        return self.process.wait(timeout=30)


def calls_in(path: Path) -> list[tuple[int, str]]:
    """Every tool call the workers made: (pid, item)."""
    if not path.exists():
        return []
    return [(int(pid), item) for pid, item in (line.split() for line in path.read_text().splitlines())]


def notebook(store: Path | str) -> tuple[Any, Any]:
    """The notebook's session over ``store``, and its own model: never asked (the work runs on the workers)."""
    from dagmagic import DagSession, DagSettings, ModelRegistry
    from dagmagic.testing import ScriptedLLM

    llm = ScriptedLLM({"*": ["never asked"]})
    return DagSession(ModelRegistry().register("unused", llm), DagSettings(store=str(store))), llm
