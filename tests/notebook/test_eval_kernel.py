"""``%%dag eval`` in a real ipykernel: the grid is displayed once with a display id and updated in place, its last
state says every cell is done with the summary per config; Interrupt keeps finished cells and says how to resume.
"""

from __future__ import annotations

import re
import textwrap
import time
from collections.abc import Iterator

import pytest

from .test_kernel import SETUP, Kernel, Message, started_kernel

pytestmark = pytest.mark.timeout(120)

EVAL_SETUP = textwrap.dedent(
    """
    def answering(answer):
        verdict = {"achieved": True, "confidence": 0.9, "reasoning": "fine", "final_answer": answer}
        return scripted(latency=0.05, analyze=[verdict], synthesize=[[answer]])
    small, big = answering("Lyon"), answering("Paris")
    configs = {"small": {"models": {"smart": small}}, "big": {"models": {"smart": big}}}
    cases = [{"city": "Paris", "id": "paris"}, {"city": "Lyon", "id": "lyon"}]
    def says_paris(case, run):
        return "Paris" in run.answer
    """
)


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kernel]:
    with started_kernel(tmp_path_factory.mktemp("kernel")) as session:
        session.execute(SETUP, timeout=60)
        session.execute(EVAL_SETUP)
        yield session


def _html(msg: Message) -> str:
    return str(msg["content"]["data"].get("text/html", ""))


def _display_id(msg: Message) -> str | None:
    return msg["content"].get("transient", {}).get("display_id")


def test_the_grid_is_shown_once_and_updated_in_place_until_every_cell_is_done(kernel: Kernel) -> None:
    cell = kernel.execute(
        "%%dag eval --cases cases --configs configs --models small --scorers says_paris --name towns -o exp\n"
        "Where is {city}?"
    )
    shown = cell.of_type("display_data")
    updates = cell.of_type("update_display_data")
    assert len(shown) == 1 and _display_id(shown[0]) is not None
    assert updates and {_display_id(update) for update in updates} == {_display_id(shown[0])}
    assert "0 of 4 cells done" in _html(shown[0])
    final = _html(updates[-1])
    assert "4 of 4 cells done" in final and "running" not in final
    assert "<td>small</td><td>2/2</td><td>0</td><td>0.00 [0.00, 0.00]</td>" in final  # the summary per config
    assert "<td>big</td><td>2/2</td><td>0</td><td>1.00 [1.00, 1.00]</td>" in final
    assert final.count("✓ done · ") == 4
    assert len(updates) <= 4 * cell.duration + 2  # throttled: at most 4 redraws a second, and the last
    assert cell.result == {}  # no second copy as the cell's value
    check = kernel.execute("print(repr(exp))")
    assert check.stdout == "Experiment('towns', 4 cells: 4 done)\n"


def test_interrupt_keeps_the_finished_cells_and_the_last_view_says_how_to_resume(kernel: Kernel) -> None:
    kernel.execute("slow = scripted(latency=0.4)\nmany = [f'goal {n}' for n in range(6)]")
    submitted = time.monotonic()
    msg_id = kernel.submit("%%dag eval --cases many --models slow --concurrency 1 --name slowly")
    first = kernel.wait_for(
        lambda m: m["msg_type"] == "update_display_data" and re.search("[1-5] of 6 cells done", _html(m)) is not None,
        "a first cell done",
        60,
    )
    kernel.manager.interrupt_kernel()
    assert re.search(r"about [0-9.]+ (s|min) left", _html(first))  # an estimate from the mean time per cell
    cell = kernel.collect(msg_id, submitted, timeout=60)
    assert cell.status == "error"
    assert "Interrupted: `%%dag eval --resume slowly` runs the cells that did not end." in cell.error
    assert "dagmagic" not in cell.error.replace("%%dag", "")  # one line, no stack of dagmagic's frames
    final = _html(cell.of_type("update_display_data")[-1])
    assert "stopped with" in final and "continue with `%%dag eval --resume slowly`" in final
    resumed = kernel.execute("%%dag eval --resume slowly --models slow --concurrency 3", timeout=60)
    assert "6 of 6 cells done" in _html(resumed.of_type("update_display_data")[-1])
