"""A run on Temporal's workers in JupyterLab and chromium: ``%%dag --on`` draws the live widget of a run a worker
process drives (followed through the store), and its Stop button reaches the run there. Screenshots land in
``test-output/e2e/``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.temporal.workers import Worker, calls_in

from .conftest import CHROMIUM, NotebookPage
from .test_e2e import node

pytestmark = [
    pytest.mark.browser,
    pytest.mark.timeout(240),
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"Debian's chromium is not installed at {CHROMIUM}"),
]


@pytest.fixture
def worker(tmp_path: Path, temporal: Any) -> Iterator[tuple[Worker, str, Path]]:
    """A worker polling a queue of this test's own, its lookups slow (4 s): a run on it is seen under way."""
    store, queue = tmp_path / "runs.sqlite", f"browser-{uuid.uuid4().hex[:8]}"
    started = Worker(tmp_path, temporal.address, queue, str(store), seconds=4.0)
    yield started, f"{temporal.on}?task_queue={queue}", store
    started.stop()


def test_a_run_on_a_worker_is_drawn_live_and_stopped_from_the_widget(
    jupyterlab: NotebookPage, worker: tuple[Worker, str, Path]
) -> None:
    notebook = jupyterlab
    process, on, store = worker
    notebook.open(
        "detached_run", ["%load_ext dagmagic", f"%dag config store={store}", f"%%dag --on {on}\nlook up case 8"]
    )
    notebook.run_all()
    widget = notebook.widget()
    expect(node(widget, "s1")).to_have_attribute("data-status", "running")  # drawn from the store, live
    expect(node(widget, "s2")).to_have_attribute("data-status", "pending")
    expect(widget.locator(".dagmagic-detached")).to_contain_text("runs on Temporal's workers")  # it outlives the kernel
    notebook.screenshot("detached-run-live", focus=widget)
    widget.locator(".dagmagic-stop").click()  # a signal to its workflow; the worker's run takes it
    expect(node(widget, "s2")).to_have_attribute("data-status", "skipped")
    notebook.wait_until_done()
    widget = notebook.widgets().last
    expect(widget.locator(".dagmagic-status")).to_have_text("stopped by you")
    notebook.screenshot("detached-run-stopped", focus=widget)
    said = notebook.kernel_print(
        "r = dagmagic.last_run()\nprint(type(r).__name__, r.status, r.stopped_by_user, r.state.detached_on == "
        f"{on!r}, r.answer)"
    )
    assert said.strip() == "DetachedRun done True True the answer", said
    assert [item for _, item in calls_in(process.calls)] == ["q8-a"]  # s1 only: the Stop reached it before s2
    assert notebook.errors == []
