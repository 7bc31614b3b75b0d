"""The fixed costs of a fresh kernel's first ``%%dag`` cell (issue 40), each measured in fresh ipykernels driven
through jupyter_client as a front end drives them.

- loop stall: the longest gap between the ticks of a 5 ms ``asyncio.sleep`` loop running as a task in the kernel
  while the first ``%%dag`` (a ``ScriptedLLM``) runs: in "Run All" (each cell right behind the one before) and
  2 s after ``%load_ext`` (a person typing); with it, the seconds from the cell's submit to its widget's
  ``comm_open``, next to a trivial anywidget's in a fresh kernel;
- headless: a first ``%%dag`` executed as nbclient executes it (``allow_stdin=False``, no front end answering):
  how long the cell is held after its run ended, and the cell's time, next to a second cell's;
- masking: ``mask_known_secrets`` and ``mask_secrets`` per 1,000 calls, with this environment and with 200 more
  variables (in a fresh process);
- the first real-model run after ``%load_ext``: a litellm model (``mock_response=``, no network) with a provider
  key in the environment, how much longer its cell takes than a second one's, in "Run All", 2 s and 4 s after the
  load: mostly the wait for litellm's import (2.5-4 s of CPU here).

``--before REV`` measures the code of git revision ``REV`` side by side, each scenario's kernels interleaved (its
``dagmagic`` package exported to a temporary folder, put first on the kernels' ``PYTHONPATH``).

Run: ``python benchmarks/first_dag_cell.py [--before REV] [--repeats N]`` (about a minute per code base at 3
repeats). It prints numbers; it asserts nothing.
"""

from __future__ import annotations

import os

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"  # never fetch litellm's price list from the network

import argparse
import json
import queue
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager

ROOT = Path(__file__).resolve().parent.parent

SCRIPTED = """
from dagmagic.testing import ScriptedLLM
llm = ScriptedLLM({
    "plan": [{"steps": [{"id": "s1", "task": "look up a"}, {"id": "s2", "task": "look up b"},
                        {"id": "s3", "task": "compare", "dependencies": ["s1", "s2"]}]}],
    "step": ["a result"],
    "analyze": [{"achieved": True, "confidence": 0.9, "reasoning": "fine", "final_answer": "42"}],
    "synthesize": [["The answer ", "is 42."]],
})
"""

MONITOR = """
import asyncio as _asyncio, time as _time
_gaps = []
async def _ticks():
    last = _time.perf_counter()
    while True:
        await _asyncio.sleep(0.005)
        now = _time.perf_counter()
        _gaps.append(now - last)
        last = now
_monitor = _asyncio.get_running_loop().create_task(_ticks())
"""

GAPS = """
_monitor.cancel()
import json as _json
print(_json.dumps({"max_gap": max(_gaps), "status": dagmagic.last_run().status}))
"""

REAL_MODEL = """
import os
from dagmagic import ModelRegistry
real = ModelRegistry().register("m", "openai/gpt-4.1-mini", mock_response="42", api_key=os.environ["OPENAI_API_KEY"])
"""

MASKING = """
import json, os, sys, timeit
from dagmagic._secrets import mask_known_secrets, mask_secrets

text = "a step's result of about this length, with a number: 42 and a word or two more " * 3
times = {}
for label, extra in (("this environment", 0), ("+200 variables", 200)):
    for i in range(extra):
        os.environ[f"BENCH_VARIABLE_{i}"] = f"value {i} " * 3
    for name, mask in (("mask_known_secrets", mask_known_secrets), ("mask_secrets", mask_secrets)):
        mask(text)
        seconds = min(timeit.repeat(lambda: mask(text), number=10_000, repeat=5)) / 10
        times[f"{name}, {label}"] = seconds * 1000
    times[f"variables, {label}"] = len(os.environ)
print(json.dumps(times))
"""


class Kernel:
    """A fresh kernel and its client."""

    def __init__(self, client: BlockingKernelClient) -> None:
        self.client = client

    def execute(self, code: str, *, person: bool = False, timeout: float = 120.0) -> dict[str, Any]:
        """Run a cell to its end: when it was sent, when it was idle again, its stdout, its messages (each with
        its arrival time, ``time.monotonic``).
        """
        submitted = time.monotonic()
        msg_id = self.client.execute(code, allow_stdin=person)
        messages, idle = [], None
        while idle is None:
            try:
                msg = self.client.get_iopub_msg(timeout=max(submitted + timeout - time.monotonic(), 0.01))
            except queue.Empty:
                raise RuntimeError(f"cell did not finish: {code[:80]!r}") from None
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            messages.append((time.monotonic(), msg))
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                idle = messages[-1][0]
        reply = self.client.get_shell_msg(timeout=10)
        while reply["parent_header"].get("msg_id") != msg_id:
            reply = self.client.get_shell_msg(timeout=10)
        if reply["content"]["status"] != "ok":
            raise RuntimeError(f"cell failed: {code[:80]!r}: {reply['content']}")
        stdout = "".join(m["content"]["text"] for _, m in messages if m["msg_type"] == "stream")
        return {"submitted": submitted, "idle": idle, "stdout": stdout, "messages": messages}


class Code:
    """A code base: this checkout's, or a revision's ``dagmagic`` exported to a folder put first on the path."""

    def __init__(self, label: str, path: Path | None) -> None:
        self.label, self.path = label, path

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of its kernels: no ``DAG_*`` setting and no provider key but those in ``extra``."""
        environ = {k: v for k, v in os.environ.items() if not k.startswith("DAG_")}
        environ.update(DAG_STORE="none", PYDEVD_DISABLE_FILE_VALIDATION="1", **extra)
        for key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY"):
            if key not in extra:
                environ.pop(key, None)
        if self.path is not None:
            environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(self.path), environ.get("PYTHONPATH", "")]))
        return environ

    @contextmanager
    def kernel(self, **env: str) -> Iterator[Kernel]:
        """A new ipykernel of this interpreter, nothing imported in it yet."""
        with tempfile.TemporaryDirectory() as folder:
            manager = KernelManager(kernel_name="python3")
            manager.start_kernel(cwd=folder, env=self.env(**env), stderr=subprocess.DEVNULL)  # its TCP warning
            client = manager.client()
            try:
                client.start_channels()
                client.wait_for_ready(timeout=60)
                yield Kernel(client)
            finally:
                client.stop_channels()
                manager.shutdown_kernel(now=True)


def widget_opened(cell: dict[str, Any]) -> float:
    """Seconds from the cell's submit to the first widget's ``comm_open``."""
    opened = [at for at, m in cell["messages"] if m["msg_type"] == "comm_open"]
    return opened[0] - cell["submitted"] if opened else float("nan")


def held_after_the_run(cell: dict[str, Any]) -> float:
    """Seconds from the widget's first state update saying the run is done to the cell's end."""
    done = [
        at
        for at, m in cell["messages"]
        if m["msg_type"] == "comm_msg" and m["content"]["data"].get("state", {}).get("status") == "done"
    ]
    return cell["idle"] - done[0] if done else float("nan")


def first_cell(code: Code, pause: float) -> dict[str, float]:
    """The longest loop gap and the widget's delay of the first ``%%dag``, ``pause`` seconds after the load."""
    with code.kernel() as kernel:
        kernel.execute("%load_ext dagmagic\nimport dagmagic", person=True)
        time.sleep(pause)
        kernel.execute(SCRIPTED, person=True)
        kernel.execute(MONITOR, person=True)
        cell = kernel.execute("%%dag --models llm\nCompare a and b", person=True)
        gaps = json.loads(kernel.execute(GAPS)["stdout"])
        assert gaps["status"] == "done", gaps
        return {"stall ms": gaps["max_gap"] * 1000, "widget s": widget_opened(cell)}


def headless(code: Code) -> dict[str, float]:
    """A first and a second ``%%dag`` as nbclient runs them (no stdin, no front end)."""
    with code.kernel() as kernel:
        kernel.execute("%load_ext dagmagic")
        kernel.execute(SCRIPTED)
        first = kernel.execute("%%dag --models llm\nCompare a and b")
        second = kernel.execute("%%dag --models llm\nCompare a and b again")
        return {
            "first held after its run s": held_after_the_run(first),
            "second held after its run s": held_after_the_run(second),
            "first cell s": first["idle"] - first["submitted"],
            "second cell s": second["idle"] - second["submitted"],
        }


def trivial_widget(code: Code) -> dict[str, float]:
    """Seconds from submit to a trivial anywidget's ``comm_open`` in a fresh kernel."""
    with code.kernel() as kernel:
        cell = kernel.execute(
            "import anywidget, traitlets\n"
            "class W(anywidget.AnyWidget):\n"
            "    _esm = 'export default { render({ el }) { el.textContent = \"hi\"; } }'\n"
            "    value = traitlets.Int(0).tag(sync=True)\n"
            "W()",
            person=True,
        )
        return {"widget s": widget_opened(cell)}


def real_model(code: Code, pause: float) -> dict[str, float]:
    """How much longer the first real-model ``%%dag`` takes than a second, ``pause`` s after the load (a key set)."""
    with code.kernel(OPENAI_API_KEY="sk-test-" + "x" * 24) as kernel:
        kernel.execute("%load_ext dagmagic", person=True)
        time.sleep(pause)
        kernel.execute(REAL_MODEL, person=True)
        first = kernel.execute("%%dag --models real --no-widget\nWhat is six times seven?", person=True)
        second = kernel.execute("%%dag --models real --no-widget\nWhat is seven times six?", person=True)
        return {"first waits s": (first["idle"] - first["submitted"]) - (second["idle"] - second["submitted"])}


def masking(code: Code) -> dict[str, float]:
    """Milliseconds per 1,000 calls of the two maskers (a fresh process)."""
    with tempfile.TemporaryDirectory() as folder:  # not this checkout: python -c puts its folder first on the path
        command = [sys.executable, "-c", MASKING]
        out = subprocess.run(command, capture_output=True, text=True, check=True, env=code.env(), cwd=folder)
    return dict(json.loads(out.stdout))


def compare(title: str, codes: list[Code], repeats: int, measure: Callable[[Code], dict[str, float]]) -> None:
    """Median of ``repeats`` measures per code base, the code bases interleaved; one line per figure."""
    results: dict[str, list[dict[str, float]]] = {code.label: [] for code in codes}
    for _ in range(repeats):
        for code in codes:
            results[code.label].append(measure(code))
    for key in results[codes[0].label][0]:
        medians = [f"{code.label} {statistics.median(r[key] for r in results[code.label]):8.3f}" for code in codes]
        print(f"{title:<42} {key:<30} " + "   ".join(medians), flush=True)


@contextmanager
def exported(revision: str) -> Iterator[Path]:
    """``revision``'s ``dagmagic`` package in a temporary folder."""
    with tempfile.TemporaryDirectory() as folder:
        archive = subprocess.run(["git", "archive", revision, "dagmagic"], cwd=ROOT, capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", folder], input=archive.stdout, check=True)
        yield Path(folder)


def main() -> None:
    """Print every figure."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", metavar="REV", help="also measure the code of this git revision")
    parser.add_argument("--repeats", type=int, default=3, help="fresh kernels per scenario and code base")
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, medians of {args.repeats} fresh kernels")
    with exported(args.before) if args.before else nullcontext() as before:
        codes = ([Code(f"before({args.before})", before)] if before is not None else []) + [Code("now", None)]
        for pause, what in ((0.0, "Run All"), (2.0, "2 s after %load_ext")):
            compare(f"first %%dag, {what}", codes, args.repeats, lambda code, p=pause: first_cell(code, p))
        compare("a trivial anywidget, fresh kernel", codes, args.repeats, trivial_widget)
        compare("headless first %%dag (nbclient)", codes, args.repeats, headless)
        compare("masking, ms per 1,000 calls", codes, args.repeats, masking)
        for pause, what in ((0.0, "Run All"), (2.0, "2 s after"), (4.0, "4 s after")):
            compare(f"first real-model %%dag, {what}", codes, args.repeats, lambda code, p=pause: real_model(code, p))


if __name__ == "__main__":
    main()
