"""A run on Temporal's workers outlives its kernel: ``%%dag --on`` in one kernel, the kernel killed, the run attached
from a new kernel through ``jupyter_client``, steered from there, ended once.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from dagmagic.events import RunFinished, UserAction
from dagmagic.store import RunStore
from tests.temporal.workers import Worker, calls_in

from .test_kernel import started_kernel

pytestmark = [pytest.mark.timeout(300)]


def _stored_steps(store: Path) -> tuple[str | None, dict[str, str]]:
    """The store's latest run and its steps' statuses (nothing while no run is stored)."""
    if not store.exists():
        return None, {}
    runs = RunStore.open(store).runs(limit=5)
    if not runs:
        return None, {}
    stored = RunStore.open(store).load(runs[0].run_id)
    return runs[0].run_id, {step.id: step.status for record in stored.state.rounds for step in record.plan.steps}


def _until(condition: Any, what: str, timeout: float = 120.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := condition():
            return found
        time.sleep(0.1)
    raise AssertionError(f"never: {what}")


def test_a_run_on_a_worker_survives_its_kernel_and_is_attached_stopped_and_steered_from_another(
    tmp_path: Path, temporal: Any
) -> None:
    store, queue = tmp_path / "runs.sqlite", f"kernel-{uuid.uuid4().hex[:8]}"
    on = f"{temporal.on}?task_queue={queue}"
    worker = Worker(tmp_path, temporal.address, queue, str(store), seconds=8.0)
    try:
        with started_kernel(tmp_path) as kernel:
            kernel.execute(f"%load_ext dagmagic\n%dag config store={store}", timeout=60)
            kernel.submit(f"%%dag --on {on}\nlook up case 4")  # the cell awaits the run: not waited for here
            run_id = _until(lambda: _stored_steps(store)[1].get("s1") == "running" and _stored_steps(store)[0], "s1")
            kernel.manager.shutdown_kernel(now=True)  # killed: no Python of the kernel runs any more
        assert _stored_steps(store)[1]["s1"] == "running"  # the run goes on, on the worker

        with started_kernel(tmp_path) as kernel:
            kernel.execute(f"%load_ext dagmagic\n%dag config store={store}\nimport json", timeout=60)
            cell = kernel.execute(f"%dag attach {run_id} --bg -o run", timeout=60)
            assert cell.result["text/plain"].startswith("<DagRun running: 'look up case 4'"), cell.result
            kernel.execute("run.follow_up('and say which came first')\nrun.stop()")
            said = kernel.execute(
                "await run\nprint(json.dumps([run.status, run.answer, run.follow_ups, run.stopped_by_user]))",
                timeout=120,
            ).stdout
        status, answer, follow_ups, stopped = json.loads(said)
        assert (status, answer, follow_ups, stopped) == ("done", "the answer", ["and say which came first"], True)
        stored = RunStore.open(store).load(run_id)
        assert sum(isinstance(event, RunFinished) for event in stored.events) == 1  # ended once
        assert [e.action for e in stored.events if isinstance(e, UserAction)] == ["follow_up", "stop"]
        assert [item for _, item in calls_in(worker.calls)] == ["q4-a"]  # s2 never started: stopped before
    finally:
        worker.stop()
