"""A run that goes on in a later cell, in a real kernel with a front end that draws widgets (as JupyterLab): the
earlier cell keeps a readable view (the run's static views when it moved on, led by where it went on), never a
widget view the front end would hide in favour of the newer one, and a saved notebook holds the run once per cell.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dagmagic.server import strip_live_views

from .test_kernel import SETUP, WIDGET_VIEW, CellResult, Kernel, started_kernel

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def lab_kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kernel]:
    """A kernel whose front end said it draws widgets, as JupyterLab's does on its first dagmagic widget."""
    with started_kernel(tmp_path_factory.mktemp("views")) as kernel:
        kernel.execute(SETUP, timeout=60)
        kernel.execute("quick = scripted()")
        submitted = time.monotonic()
        msg_id = kernel.submit("%%dag --models quick\nA first goal", person=True)
        comm_id = kernel.widget_comm_id(msg_id)
        kernel.send_comm_msg(comm_id, {"method": "custom", "content": {"kind": "dagmagic-front-end"}})
        first = kernel.collect(msg_id, submitted)
        assert first.status == "ok", first.error
        yield kernel


def run_cell(kernel: Kernel, code: str, timeout: float = 30.0) -> CellResult:
    """A cell as JupyterLab sends it; a failing cell fails the test with its traceback."""
    return kernel.execute(code, timeout, person=True)


def live_view_id(cell: CellResult) -> str:
    (live,) = cell.of_type("display_data")
    return str(live["content"]["transient"]["display_id"])


def latest_update(kernel: Kernel, display_id: str) -> dict[str, Any]:
    """What the display ``display_id`` shows now: its latest update (or what it was displayed with)."""
    shown = [
        m["content"]["data"]
        for _, m in kernel.log
        if m["msg_type"] in ("display_data", "update_display_data")
        and m["content"].get("transient", {}).get("display_id") == display_id
    ]
    assert shown, f"nothing displayed as {display_id}"
    return dict(shown[-1])


def saved(kernel: Kernel, cells: list[CellResult]) -> list[list[dict[str, Any]]]:
    """The cells' outputs as JupyterLab keeps them (a display id's update replaces its output), then as the
    server's pre-save hook writes them to the file.
    """
    outputs: list[list[dict[str, Any]]] = []
    for cell in cells:
        kept: list[dict[str, Any]] = []
        for msg in cell.messages:
            if msg["msg_type"] in ("display_data", "execute_result"):
                content = msg["content"]
                display_id = content.get("transient", {}).get("display_id")
                data = latest_update(kernel, display_id) if display_id else content["data"]
                kept.append({"output_type": msg["msg_type"], "data": dict(data), "metadata": content["metadata"]})
        outputs.append(kept)
    model = {"type": "notebook", "content": {"cells": [{"outputs": o} for o in outputs]}}
    strip_live_views(model)
    return [cell["outputs"] for cell in model["content"]["cells"]]


def _markdowns(outputs: list[dict[str, Any]]) -> list[str]:
    return [o["data"]["text/markdown"] for o in outputs if "text/markdown" in o.get("data", {})]


def test_a_bg_cell_keeps_the_run_as_it_was_and_says_where_it_goes_on(lab_kernel: Kernel) -> None:
    kernel = lab_kernel
    kernel.execute("slow = scripted(latency={'step': 0.5})")
    bg = run_cell(kernel, "%%dag --models slow --bg -o job\nA goal that goes on below")
    display_id = live_view_id(bg)
    assert WIDGET_VIEW in latest_update(kernel, display_id)  # while nothing else shows it: the live widget

    later = run_cell(kernel, "await job")
    assert WIDGET_VIEW in later.result  # the run is drawn live here now...
    number = later.reply["content"]["execution_count"]
    kept = latest_update(kernel, display_id)
    assert WIDGET_VIEW not in kept  # ...so the earlier view is not a widget the front end would hide
    assert f"This run went on after this cell ended: cell [{number}] shows it as it is now" in kept["text/markdown"]
    assert "A goal that goes on below" in kept["text/markdown"] and "dagmagic-static" in kept["text/html"]
    assert "status: done" not in kept["text/markdown"]  # as the cell left it, not a second copy of its end

    time.sleep(0.3)  # the run's end (sent to live views) does not change the handed-off one
    assert latest_update(kernel, display_id) == kept

    bg_saved, later_saved = saved(kernel, [bg, later])
    assert len(_markdowns(bg_saved)) == 1 and len(_markdowns(later_saved)) == 1  # the run once per cell
    assert "went on after this cell ended" in _markdowns(bg_saved)[0] and "status: done" in _markdowns(later_saved)[0]


def test_a_rerun_in_a_later_cell_leaves_the_first_cell_pointing_to_it(lab_kernel: Kernel) -> None:
    kernel = lab_kernel
    kernel.execute("again = scripted()")
    first = run_cell(kernel, "%%dag --models again -o twice\nA goal re-run below")
    display_id = live_view_id(first)
    assert "status: done" in latest_update(kernel, display_id)["text/markdown"]

    rerun = run_cell(kernel, "%dag rerun s2")
    number = rerun.reply["content"]["execution_count"]
    kept = latest_update(kernel, display_id)
    assert WIDGET_VIEW not in kept and f"This run goes on in cell [{number}]" in kept["text/markdown"]
    assert "rounds: 1" in kept["text/markdown"]  # the run before the re-run
    assert "rounds: 2" in latest_update(kernel, live_view_id(rerun))["text/markdown"]


def test_an_earlier_view_of_a_resumed_run_says_where_it_was_resumed(tmp_path: Path) -> None:
    with started_kernel(tmp_path) as kernel:
        kernel.execute(SETUP, timeout=60)
        kernel.execute(
            f"%dag config store={tmp_path / 'runs.sqlite'}\n"
            "gate = asyncio.Event()\n"
            "async def held(request):\n"
            "    if request.step_id == 's2':\n"
            "        await gate.wait()\n"
            "    return 'a result'\n"
            "hanging = scripted(step=held)"
        )
        submitted = time.monotonic()
        msg_id = kernel.submit("%%dag --models hanging --bg -o job\nA goal cut off half-way", person=True)
        comm_id = kernel.widget_comm_id(msg_id)
        kernel.send_comm_msg(comm_id, {"method": "custom", "content": {"kind": "dagmagic-front-end"}})
        bg = kernel.collect(msg_id, submitted)
        assert bg.status == "ok", bg.error
        display_id = live_view_id(bg)
        kernel.execute(
            "while not (job.steps.get('s2') and job.steps['s2'].status == 'running'):\n"
            "    await asyncio.sleep(0.02)\n"
            "job.cancel()\n"
            "await job\n"
            "gate.set()",
            person=True,
        )
        cut = latest_update(kernel, display_id)
        assert WIDGET_VIEW in cut and "status: cancelled" in cut["text/markdown"]  # what the user saw: stale

        resumed = run_cell(kernel, "%dag resume")
        number = resumed.reply["content"]["execution_count"]
        kept = latest_update(kernel, display_id)
        assert WIDGET_VIEW not in kept, "the earlier cell still shows the cut-off run's widget"
        assert f"This run was resumed in cell [{number}]" in kept["text/markdown"]
        now = latest_update(kernel, live_view_id(resumed))
        assert WIDGET_VIEW in now and "status: done" in now["text/markdown"]
        # the same widget follows the resumed run: the earlier cell's widget (its value) is no longer a second,
        # stale one with Resume and Start over
        assert now[WIDGET_VIEW]["model_id"] == comm_id


def test_headless_a_bg_cell_says_its_run_goes_on_after_it(tmp_path: Path) -> None:
    """Executed headless (nbclient, as the tutorials are stored): the ``--bg`` cell's value is the run as the cell
    left it, and says where to see the rest; a cell that awaited its run says nothing of the kind.
    """
    with started_kernel(tmp_path) as kernel:
        kernel.execute(SETUP, timeout=60)
        kernel.execute("slow = scripted(latency={'step': 0.3})")
        bg = kernel.execute("%%dag --models slow --bg -o job\nA goal that goes on below")
        assert WIDGET_VIEW not in bg.result
        pointer = "This run goes on after this cell: a later cell that shows it, or `%dag show 1`, shows it as it is"
        assert bg.result["text/markdown"].startswith(f"> ↪ {pointer}")
        assert "This run goes on after this cell" in bg.result["text/html"]
        assert bg.result["text/plain"].startswith("<DagRun running")  # the repr stays the run's alone
        done = kernel.execute("await job")
        assert "goes on after" not in done.result["text/markdown"] and "status: done" in done.result["text/markdown"]
        awaited = kernel.execute("%%dag --models slow\nA goal awaited here")
        assert "goes on after" not in awaited.result["text/markdown"]
