"""Runs on Temporal's workers (``session.start(goal, on=…)``): driven by a worker process, followed here through the
shared store, steered by signals; a re-run of the ended run reopens it on a worker.
"""

from __future__ import annotations

import asyncio
import collections
from pathlib import Path
from typing import Any

import pytest

from dagmagic import DagSession, DagSettings, ModelRegistry
from dagmagic.errors import DagError
from dagmagic.events import RunFinished, UserAction
from dagmagic.store import RunStore
from dagmagic.temporal import DetachedRun, attach
from dagmagic.testing import ScriptedLLM
from tests.temporal.workers import Worker, calls_in, notebook

pytestmark = [pytest.mark.timeout(240)]


async def until(condition: Any, what: str) -> None:
    for _ in range(1200):
        if condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never: {what}")


async def test_a_run_on_a_worker_takes_a_follow_up_and_a_stop_and_ends_done_once(
    tmp_path: Path, temporal: Any, queue: str, workers: list[Worker]
) -> None:
    store = str(tmp_path / "runs.sqlite")
    workers.append(Worker(tmp_path, temporal.address, queue, store, seconds=3.0))
    session, llm = notebook(store)
    run = session.start("look up case 7", on=f"{temporal.on}?task_queue={queue}")
    assert isinstance(run, DetachedRun) and run.status == "running"
    seen: list[str] = []
    run.subscribe(lambda event: seen.append(event.type))
    await until(lambda: run.steps.get("s1") is not None and run.steps["s1"].status == "running", "s1 running")
    run.follow_up("and say which came first")
    run.stop()  # sent in order, while s1 still runs: s2 never starts
    await run
    assert run.status == "done" and run.answer == "the answer"
    assert run.follow_ups == ["and say which came first"]
    assert run.steps["s2"].status == "skipped" and run.stopped_by_user
    assert [e.action for e in run.events if isinstance(e, UserAction)] == ["follow_up", "stop"]
    assert "run_finished" in seen and "step_started" in seen  # the views were told, as for a run driven here
    stored = RunStore.open(store).load(run.run_id)
    assert sum(isinstance(e, RunFinished) for e in stored.events) == 1  # ended once
    assert stored.state.detached_on == f"{temporal.on}?task_queue={queue}"
    assert llm.requests == []  # the worker's model answered, not this one
    with pytest.raises(DagError, match="has ended"):
        run.follow_up("too late")


async def test_a_step_of_the_ended_run_is_rerun_on_a_worker(
    tmp_path: Path, temporal: Any, queue: str, workers: list[Worker]
) -> None:
    store = str(tmp_path / "runs.sqlite")
    workers.append(Worker(tmp_path, temporal.address, queue, store))
    session, _ = notebook(store)
    run = await session.start("look up case 3", on=f"{temporal.on}?task_queue={queue}")
    assert run.status == "done" and len(run.rounds) == 1
    assert run.can_rerun
    await run.rerun("s2")
    assert run.status == "done" and len(run.rounds) == 2 and run.rounds[-1].rerun_step == "s2"
    items = collections.Counter(item for _, item in calls_in(workers[0].calls))
    assert items == {"q3-a": 1, "q3-b": 2}  # only the re-run step called its tool again


async def test_any_process_attaches_to_a_running_run_and_stops_it(
    tmp_path: Path, temporal: Any, queue: str, workers: list[Worker]
) -> None:
    store = str(tmp_path / "runs.sqlite")
    workers.append(Worker(tmp_path, temporal.address, queue, store, seconds=1.0))
    first, _ = notebook(store)
    started = first.start("look up case 5", on=f"{temporal.on}?task_queue={queue}")
    await until(lambda: started.steps.get("s1") is not None, "the run stored")
    followed = attach(started.run_id, RunStore.open(store))  # another kernel would do the same, with its store
    assert followed is not started and followed.status == "running" and followed.goal == "look up case 5"
    followed.stop()
    await followed
    await started
    assert followed.status == started.status == "done" and followed.answer == started.answer == "the answer"
    with pytest.raises(DagError, match="was not started on Temporal"):
        ended = await DagSession(
            ModelRegistry().register(
                "s",
                ScriptedLLM(
                    {
                        "plan": [{"steps": [{"id": "s1", "task": "t"}]}],
                        "step": ["x"],
                        "analyze": [{"achieved": True, "confidence": 1, "reasoning": "ok"}],
                        "synthesize": ["y"],
                    }
                ),
            ),
            DagSettings(store=store),
        ).run("a local goal")
        attach(ended.run_id, RunStore.open(store))


async def test_a_plan_waits_for_approval_and_a_breakpoint_pauses_a_step_on_the_worker(
    tmp_path: Path, temporal: Any, queue: str, workers: list[Worker]
) -> None:
    store = str(tmp_path / "runs.sqlite")
    workers.append(Worker(tmp_path, temporal.address, queue, store))
    session, _ = notebook(store)
    run = session.start("look up case 6", on=f"{temporal.on}?task_queue={queue}", approve_plans=True)
    await until(lambda: run.awaiting_approval, "the plan waits for approval")
    assert calls_in(workers[0].calls) == []  # nothing ran before the approval
    run.break_before("s2")
    run.approve()
    await until(lambda: run.paused == ["s2"], "s2 paused at its breakpoint")
    assert [item for _, item in calls_in(workers[0].calls)] == ["q6-a"]
    run.resume_step("s2")
    await run
    assert run.status == "done" and [item for _, item in calls_in(workers[0].calls)] == ["q6-a", "q6-b"]
    assert [e.action for e in run.events if isinstance(e, UserAction)] == ["break", "approve", "continue"]
