"""A worker's spans join the run's trace: a run's trace id comes from its run id (``run_span_context``), so the
spans of a cell's run are one trace, and a run cut by a killed worker and resumed on another adds the survivor's
spans to the trace the first worker's are in.
"""

from __future__ import annotations

import asyncio
import collections
import json
import signal
from pathlib import Path
from typing import Any

import pytest

from dagmagic.store import RunStore
from dagmagic.tracing import run_span_context
from tests.temporal.test_experiments import GOALS, notebook
from tests.temporal.workers import WORKER_FILE, Worker, calls_in

pytest.importorskip("opentelemetry.sdk.trace")

pytestmark = [pytest.mark.timeout(240)]

TRACED_WORKER_FILE = (
    WORKER_FILE
    + '''

import json
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult


class JsonLines(SpanExporter):
    """Each span as it ends, a line of DAG_TEST_SPANS/PID.jsonl (a killed worker's ended spans are there)."""

    def export(self, spans):
        with open(os.path.join(os.environ["DAG_TEST_SPANS"], f"{os.getpid()}.jsonl"), "a") as out:
            for span in spans:
                attributes = dict(span.attributes or {})
                out.write(json.dumps({
                    "pid": os.getpid(), "name": span.name, "trace_id": span.context.trace_id,
                    "run_id": attributes.get("dagmagic.run_id"),
                }) + "\\n")
        return SpanExportResult.SUCCESS


provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(JsonLines()))
trace.set_tracer_provider(provider)
'''
)


def spans_in(directory: Path) -> list[dict[str, Any]]:
    """Every span the workers exported."""
    return [json.loads(line) for file in sorted(directory.glob("*.jsonl")) for line in file.read_text().splitlines()]


async def test_a_resumed_runs_spans_on_another_worker_join_the_trace_of_its_first(
    tmp_path: Path, temporal: Any, queue: str, workers: list[Worker]
) -> None:
    store = str(tmp_path / "runs.sqlite")
    exported = tmp_path / "spans"
    exported.mkdir()
    env = {"DAG_TEST_SPANS": str(exported)}
    workers += [
        Worker(tmp_path, temporal.address, queue, store, seconds=1.5, source=TRACED_WORKER_FILE, env=env)
        for _ in range(2)
    ]
    session, _ = notebook(store)
    experiment = session.start_evaluation(GOALS[:3], name="traced", on=f"{temporal.on}?task_queue={queue}")
    cut: tuple[Worker, str] | None = None
    for _ in range(600):  # a cell whose first lookup completed and whose second is under way
        await asyncio.sleep(0.05)
        seconds = [(pid, item) for pid, item in calls_in(workers[0].calls) if item.endswith("-b")]
        if seconds:
            pid, item = seconds[0]
            cut = next(worker for worker in workers if worker.pid == pid), item.removesuffix("-b")
            break
    assert cut is not None, "no cell reached its second lookup"
    doomed, cell_item = cut
    index = int(cell_item.removeprefix("q"))
    doomed.process.send_signal(signal.SIGKILL)
    doomed.process.wait(timeout=30)
    await experiment.wait()
    assert [cell.status for cell in experiment.cells] == ["done"] * 3
    survivor = next(worker for worker in workers if worker is not doomed)
    run_id = experiment.cells[index].run_id
    assert run_id is not None and len(RunStore.open(store).runs(limit=10)) == 3

    spans = spans_in(exported)
    by_run = collections.defaultdict(list)
    for span in spans:
        by_run[str(span["run_id"]).split("/")[0]].append(span)
    assert set(by_run) == {cell.run_id for cell in experiment.cells}
    for each, its_spans in by_run.items():  # each run one trace, the one its id names
        assert {span["trace_id"] for span in its_spans} == {run_span_context(each).trace_id}
    resumed = by_run[run_id]
    names_by_pid = collections.defaultdict(set)
    for span in resumed:
        names_by_pid[span["pid"]].add(span["name"])
    assert set(names_by_pid) == {doomed.pid, survivor.pid}  # both workers' spans, in the one trace
    assert {"invoke_agent s1", "execute_tool lookup"} <= names_by_pid[doomed.pid]  # its first step, before the kill
    assert {"invoke_agent s2", "invoke_workflow dagmagic"} <= names_by_pid[survivor.pid]  # the rest, resumed
