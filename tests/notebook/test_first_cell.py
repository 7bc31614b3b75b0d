"""A fresh kernel's first ``%%dag`` (issue 40's fixed costs), in a real ipykernel driven through jupyter_client.

Two of these hold times, the issue's targets, measured with timestamps the kernel and the client record:

- the first ``%%dag`` stalls the kernel's event loop by at most 50 ms: the longest gap between the ticks of a
  5 ms ``asyncio.sleep`` loop running in the kernel meanwhile. Asserted at ``STALL_LIMIT`` (150 ms) so that a
  loaded two-core machine does not fail it (measured here: about 20 ms; 170-520 ms before the engine's import
  left the loop); the number is printed and recorded. What does not depend on the machine is asserted too: the
  cell imports no module on the loop's thread.
- a headless first ``%%dag`` (nbclient: no stdin, no front end) adds at most 0.1 s: the time the cell is held
  after its run ended, against a second cell's. Asserted at ``HEADLESS_LIMIT`` (0.3 s; measured: under 10 ms,
  3.0 s before).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from .test_kernel import CellResult, Kernel, started_kernel

pytestmark = pytest.mark.timeout(180)

STALL_TARGET = 0.05
STALL_LIMIT = 0.15
HEADLESS_TARGET = 0.1
HEADLESS_LIMIT = 0.3

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

WATCH = """
import asyncio, sys, threading, time

class Imports:
    '''Every module imported from now on, with whether the loop's thread imported it.'''

    seen = []

    def find_spec(self, name, path=None, target=None):
        Imports.seen.append((name, threading.current_thread() is threading.main_thread()))
        return None

gaps = []

async def ticks():
    last = time.perf_counter()
    while True:
        await asyncio.sleep(0.005)
        now = time.perf_counter()
        gaps.append(now - last)
        last = now

sys.meta_path.insert(0, Imports())
monitor = asyncio.get_running_loop().create_task(ticks())
"""

REPORT = """
import json
monitor.cancel()
sys.meta_path.remove(next(finder for finder in sys.meta_path if isinstance(finder, Imports)))
print(json.dumps({"max_gap": max(gaps), "ticks": len(gaps), "status": dagmagic.last_run().status,
                  "on_the_loop": [name for name, on_loop in Imports.seen if on_loop],
                  "elsewhere": len([name for name, on_loop in Imports.seen if not on_loop])}))
"""


def first_dag_cell(kernel: Kernel, *, pause: bool) -> dict[str, Any]:
    """Load the extension, define a model, then (``pause``: once the background import ended) run the first
    ``%%dag`` with the loop's ticks and the imports watched.
    """
    grace = "" if pause else "preload.GRACE_SECONDS = 600.0  # no pause comes, however slow the cells\n"
    kernel.execute(f"from dagmagic.notebook import preload\n{grace}%load_ext dagmagic\nimport dagmagic", timeout=60)
    kernel.execute(SCRIPTED, timeout=60)
    if pause:  # a person typing the goal: the modules are imported meanwhile (bounded by a wide margin)
        deadline = time.monotonic() + 60
        while kernel.execute("print(preload._modules_imported.is_set())").stdout.strip() != "True":
            assert time.monotonic() < deadline, "the modules were never imported in the background"
            time.sleep(0.5)
    kernel.execute(WATCH)
    kernel.execute("%%dag --models llm\nCompare a and b", timeout=60)
    report: dict[str, Any] = json.loads(kernel.execute(REPORT).stdout)
    assert report["status"] == "done"
    return report


def _third_party(name: str) -> bool:
    return name.partition(".")[0] not in sys.stdlib_module_names


@pytest.mark.parametrize("pause", [False, True], ids=["run-all", "after-a-pause"])
def test_the_first_dag_cell_imports_nothing_on_the_loop_and_barely_stalls_it(
    pause: bool, tmp_path: Path, record_property: Any
) -> None:
    """Run All (the cell right behind the load: it imports the engine and the views in a worker thread and awaits
    them), and after a pause (the background thread imported them already).
    """
    with started_kernel(tmp_path) as fresh:
        report = first_dag_cell(fresh, pause=pause)
    stall = report["max_gap"]
    record_property("loop_stall_ms", round(stall * 1000, 1))
    print(f"\nfirst %%dag ({'after a pause' if pause else 'Run All'}): the loop stalled {stall * 1000:.0f} ms at most")
    assert not [name for name in report["on_the_loop"] if _third_party(name)], report["on_the_loop"]
    if pause:
        assert report["on_the_loop"] == [] and report["elsewhere"] <= 5, report  # nothing left to import
    else:
        assert report["elsewhere"] > 100  # the engine, pydantic's models, the views: imported, off the loop
    assert stall <= STALL_LIMIT, f"the loop stalled {stall:.3f} s (target {STALL_TARGET} s)"


def _held_after_the_run(cell: CellResult, kernel: Kernel) -> float:
    """Seconds from the widget's first update saying the run is done to the cell's idle status (client clock)."""
    done = [
        at
        for at, m in kernel.log
        if m["parent_header"].get("msg_id") == cell.reply["parent_header"]["msg_id"]
        and m["msg_type"] == "comm_msg"
        and m["content"]["data"].get("state", {}).get("status") == "done"
    ]
    assert done, "the widget never said the run was done"
    return cell.finished - done[0]


def test_a_headless_first_dag_cell_is_not_held_for_a_front_end(tmp_path: Path, record_property: Any) -> None:
    """As nbclient (papermill, ``nbconvert --execute``) runs it: no stdin, and no front end will say it drew the
    widget. The first cell ends with its run, as the second does; its live view is emptied, its value static.
    """
    with started_kernel(tmp_path) as fresh:
        fresh.execute("%load_ext dagmagic", timeout=60)
        fresh.execute(SCRIPTED, timeout=60)
        first = fresh.execute("%%dag --models llm\nCompare a and b", timeout=60)
        second = fresh.execute("%%dag --models llm\nCompare a and b again", timeout=60)
    held, held_second = _held_after_the_run(first, fresh), _held_after_the_run(second, fresh)
    record_property("headless_first_held_s", round(held, 3))
    print(
        f"\nheadless: the first cell was held {held:.3f} s after its run ended, the second {held_second:.3f} s; "
        f"the cells took {first.duration:.3f} s and {second.duration:.3f} s"
    )
    assert held - held_second <= HEADLESS_LIMIT, f"held {held:.3f} s after its run (target {HEADLESS_TARGET} s)"
    for cell in (first, second):
        assert cell.of_type("update_display_data")[-1]["content"]["data"] == {}  # the live view emptied
        assert "text/html" in cell.result and "application/vnd.jupyter.widget-view+json" not in cell.result
