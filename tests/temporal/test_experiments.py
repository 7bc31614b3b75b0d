"""Experiments on Temporal (``session.evaluate(..., on="temporal://…")``): one workflow, one activity per cell, run
by worker processes (``python -m dagmagic worker``) that share the notebook's run store.
"""

from __future__ import annotations

import asyncio
import collections
import signal
from pathlib import Path
from typing import Any

import pytest

from dagmagic.store import RunStore
from tests.temporal.workers import Worker, calls_in, notebook

pytestmark = [pytest.mark.timeout(240)]

GOALS = [f"look up case {n}" for n in range(20)]


def first_lookup_saved(store: RunStore, run_id: str) -> bool:
    """Whether the run's first step is written completed: what a worker that dies from now on keeps."""
    rounds = store.load(run_id).state.rounds
    return bool(rounds) and any(step.id == "s1" and step.status == "completed" for step in rounds[-1].plan.steps)


def answered(case: Any, run: Any) -> bool:
    return bool(run.answer == "the answer")


async def test_twenty_cells_on_two_worker_processes_each_once(
    tmp_path: Path, temporal: Any, queue: str, workers: list[Worker]
) -> None:
    store = str(tmp_path / "runs.sqlite")
    workers += [Worker(tmp_path, temporal.address, queue, store, concurrency=2) for _ in range(2)]
    session, llm = notebook(store)
    seen: dict[int, str] = {}
    experiment = await session.evaluate(
        GOALS,
        name="on-temporal",
        on=f"{temporal.on}?task_queue={queue}",
        scorers=[answered],
        on_cell=lambda cell: seen.update({cell.index: cell.status}),
    )
    assert [cell.status for cell in experiment.cells] == ["done"] * 20
    assert all(cell.scores == {"answered": True} for cell in experiment.cells)  # scored here, by this notebook
    assert seen == dict.fromkeys(range(20), "done")  # the grid heard of every cell
    assert llm.requests == []  # nothing ran in the notebook
    calls = calls_in(workers[0].calls)
    items = collections.Counter(item for _, item in calls)
    assert items == collections.Counter({f"q{n}-{part}": 1 for n in range(20) for part in "ab"})  # each call once
    assert {pid for pid, _ in calls} == {worker.pid for worker in workers}  # both workers worked
    runs = RunStore.open(store).runs(limit=100)
    assert len(runs) == 20 and {run.run_id for run in runs} == {cell.run_id for cell in experiment.cells}
    from temporalio.api.enums.v1 import EventType

    from dagmagic.temporal import TemporalAddress, connect
    from dagmagic.temporal.tasks import experiment_workflow_id

    client = await connect(TemporalAddress.parse(temporal.on))
    handle = client.get_workflow_handle(experiment_workflow_id(experiment.id))
    history = [event.event_type async for event in handle.fetch_history_events()]
    assert history.count(EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED) == 20  # Temporal's UI: one activity per cell


async def test_a_killed_workers_cell_finishes_on_another_its_run_resumed(
    tmp_path: Path, temporal: Any, queue: str, workers: list[Worker], store_path: Path | str
) -> None:
    """On each store the workers may share: a SQLite file (one machine), PostgreSQL (a team's)."""
    store = str(store_path)
    workers += [Worker(tmp_path, temporal.address, queue, store, seconds=1.5) for _ in range(2)]
    session, _ = notebook(store)
    experiment = session.start_evaluation(GOALS[:4], name="killed", on=f"{temporal.on}?task_queue={queue}")
    reader = RunStore.open(store)
    cut: tuple[Worker, str, str] | None = None
    for _ in range(600):  # a cell whose first lookup completed (in the store: it is written behind) and whose
        await asyncio.sleep(0.05)  # second is under way
        seconds = [(pid, item) for pid, item in calls_in(workers[0].calls) if item.endswith("-b")]
        if seconds:
            pid, item = seconds[0]
            cell_item = item.removesuffix("-b")
            stored = reader.runs(limit=10, goal=f"look up case {cell_item.removeprefix('q')}")
            if stored and first_lookup_saved(reader, stored[0].run_id):
                cut = next(worker for worker in workers if worker.pid == pid), cell_item, stored[0].run_id
                break
    assert cut is not None, "no cell reached its second lookup"
    doomed, cell_item, run_id = cut
    index = int(cell_item.removeprefix("q"))
    doomed.process.send_signal(signal.SIGKILL)
    doomed.process.wait(timeout=30)
    await experiment.wait()
    assert [cell.status for cell in experiment.cells] == ["done"] * 4
    cell = experiment.cells[index]
    assert cell.run_id == run_id  # the cut run was resumed on the other worker, not started again
    calls = calls_in(workers[0].calls)
    items = collections.Counter(item for _, item in calls)
    assert items[f"{cell_item}-a"] == 1  # its completed step was not made again
    assert items[f"{cell_item}-b"] == 2  # the step cut by the kill ran again, on the survivor
    survivor = next(worker for worker in workers if worker is not doomed)
    assert (survivor.pid, f"{cell_item}-b") in calls
    assert len(RunStore.open(store).runs(limit=100)) == 4  # one run per cell


async def test_max_cost_holds_for_all_workers_together(
    tmp_path: Path, temporal: Any, queue: str, workers: list[Worker]
) -> None:
    store = str(tmp_path / "runs.sqlite")
    workers += [Worker(tmp_path, temporal.address, queue, store) for _ in range(2)]
    session, _ = notebook(store)
    on = f"{temporal.on}?task_queue={queue}"
    probe = await session.evaluate(GOALS[:1], name="probe", on=on)
    cost = probe.cells[0].cost
    assert cost is not None and cost > 0
    experiment = await session.evaluate(GOALS, name="budget", on=on, max_cost=4.5 * cost)
    statuses = [cell.status for cell in experiment.cells]
    done = statuses.count("done")
    # 5 cells fit; a cell starts only while the recorded spend is under the budget, so at most one cell per
    # worker in flight goes over it
    assert 5 <= done <= 5 + len(workers), statuses
    assert statuses.count("not_started") == 20 - done
    assert sum(cell.cost or 0.0 for cell in experiment.cells) <= (4.5 + len(workers)) * cost
    assert experiment.stopped_reason is not None and "not started" in experiment.stopped_reason


async def test_an_interrupted_experiment_cuts_the_workers_runs_and_resumes_on_them(
    tmp_path: Path, temporal: Any, queue: str, workers: list[Worker]
) -> None:
    from temporalio.api.enums.v1 import EventType
    from temporalio.client import WorkflowExecutionStatus

    from dagmagic.temporal import connect
    from dagmagic.temporal.address import TemporalAddress
    from dagmagic.temporal.tasks import experiment_workflow_id

    store = str(tmp_path / "runs.sqlite")
    workers.append(Worker(tmp_path, temporal.address, queue, store, seconds=3.0, concurrency=2))
    session, _ = notebook(store)
    on = f"{temporal.on}?task_queue={queue}"
    experiment = session.start_evaluation(GOALS[:4], name="cut", on=on)
    for _ in range(600):  # two cells whose first lookups completed
        await asyncio.sleep(0.05)
        if sum(item.endswith("-b") for _, item in calls_in(workers[0].calls)) >= 2:
            break
    experiment.cancel()
    await experiment.wait()
    statuses = [cell.status for cell in experiment.cells]
    # as the workers left them: the cells under way cut (their second lookups take 3 s), the others never started
    assert "running" not in statuses and statuses.count("cancelled") >= 1, statuses
    assert set(statuses) <= {"cancelled", "pending", "done"}, statuses
    cut = [cell.index for cell in experiment.cells if cell.status == "cancelled"]
    client = await connect(TemporalAddress.parse(on))
    described = await client.get_workflow_handle(experiment_workflow_id(experiment.id)).describe()
    assert described.status == WorkflowExecutionStatus.CANCELED
    stored = RunStore.open(store)
    assert all(stored.summary(experiment.cells[i].run_id or "").status == "cancelled" for i in cut)

    resumed = await session.resume_evaluation("cut", on=on)
    assert [cell.status for cell in resumed.cells] == ["done"] * 4
    items = collections.Counter(item for _, item in calls_in(workers[0].calls))
    assert all(items[f"q{i}-a"] == 1 for i in range(4))  # the cut runs' completed lookups were kept
    assert [resumed.cells[i].run_id for i in cut] == [experiment.cells[i].run_id for i in cut]  # resumed, not anew
    handle = client.get_workflow_handle(experiment_workflow_id(experiment.id))
    history = [event.event_type async for event in handle.fetch_history_events()]
    completed = EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
    assert history.count(completed) == 4 - statuses.count("done")  # the resume's workflow: a cell each, in the UI
