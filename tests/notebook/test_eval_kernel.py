"""``%%dag eval`` in a real ipykernel: headless, the static grid shown once at the end; with a front end that draws
widgets, the live grid's state sent as cells change and the static grid beside it updated once; Interrupt keeps
finished cells and says how to resume.
"""

from __future__ import annotations

import re
import textwrap
import time
from collections.abc import Iterator
from typing import Any

import pytest

from dagmagic.notebook.display import WIDGET_VIEW

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


def _state(msg: Message) -> dict[str, object]:
    """The widget state a comm message carries (an update of the live grid), else {}."""
    if msg["msg_type"] not in ("comm_open", "comm_msg"):
        return {}
    data = msg["content"].get("data", {})
    state = data.get("state", {}) if isinstance(data, dict) else {}
    return state if isinstance(state, dict) else {}


def test_headless_the_grid_is_shown_once_at_the_end_with_no_display_update(kernel: Kernel) -> None:
    """nbclient, papermill and nbval draw no widget, and nbval rejects display updates: one static grid, at the end."""
    cell = kernel.execute(
        "%%dag eval --cases cases --configs configs --models small --scorers says_paris --name towns -o exp\n"
        "Where is {city}?"
    )
    shown = cell.of_type("display_data")
    assert len(shown) == 1 and cell.of_type("update_display_data") == []
    assert not any(_state(msg) for msg in cell.messages)  # no live grid was made
    final = _html(shown[0])
    assert "4 of 4 cells done" in final and "running" not in final
    assert "<td>small</td><td>2/2</td><td>0</td><td>0.00 [0.00, 0.66]</td>" in final  # Wilson's interval
    assert "<td>big</td><td>2/2</td><td>0</td><td>1.00 [0.34, 1.00]</td>" in final
    assert final.count("✓ done · ") == 4
    assert shown[0]["content"]["metadata"]["dagmagic"]["experiment_id"]  # the server extension knows it
    assert cell.result == {}  # no second copy as the cell's value
    check = kernel.execute("print(repr(exp))")
    assert check.stdout == "Experiment('towns', 4 cells: 4 done)\n"


def test_with_a_front_end_the_live_grid_syncs_throttled_and_the_static_grid_is_updated_once(kernel: Kernel) -> None:
    kernel.execute("from dagmagic.notebook.answering import AnsweringWidget\nAnsweringWidget.front_end_seen = True")
    try:
        cell = kernel.execute(
            "%%dag eval --cases cases --configs configs --models small --scorers says_paris --name live\n"
            "Where is {city}?"
        )
    finally:
        kernel.execute("AnsweringWidget.front_end_seen = False")
    shown = cell.of_type("display_data")
    updates = cell.of_type("update_display_data")
    assert len(shown) == 1 and WIDGET_VIEW in shown[0]["content"]["data"]
    assert "0 of 4 cells done" in _html(shown[0])  # the static grid beside it, for the saved notebook
    assert len(updates) == 1 and _display_id(updates[0]) == _display_id(shown[0])
    assert "4 of 4 cells done" in _html(updates[0]) and WIDGET_VIEW in updates[0]["content"]["data"]
    syncs = [_state(msg) for msg in cell.of_type("comm_msg") if "cells" in _state(msg)]
    assert syncs, "the live grid's state was never sent as it changed"
    last: dict[str, Any] = {}
    for msg in cell.messages:  # a sync sends what changed: the front end's state is all of them in turn
        last.update(_state(msg))
    assert last["counts"] == {"total": 4, "ended": 4, "failed": 0, "running": 0}
    assert last["configs"] == ["small", "big"] and last["score_column"] == "says_paris"
    assert [cell[2:4] for cell in last["cells"]] == [["done", False], ["done", True], ["done", False], ["done", True]]
    assert len(syncs) <= 4 * cell.duration + 2  # throttled: at most 4 a second, and the last


def test_interrupt_keeps_the_finished_cells_and_the_last_view_says_how_to_resume(kernel: Kernel) -> None:
    kernel.execute("slow = scripted(latency=0.4)\nmany = [f'goal {n}' for n in range(6)]")
    kernel.execute("AnsweringWidget.front_end_seen = True")
    try:
        submitted = time.monotonic()
        msg_id = kernel.submit("%%dag eval --cases many --models slow --concurrency 1 --name slowly")
        first = kernel.wait_for(
            lambda m: re.search("[1-5] of 6 cells done", str(_state(m).get("progress", ""))) is not None,
            "a first cell done",
            60,
        )
        kernel.manager.interrupt_kernel()
        assert re.search(r"about [0-9.]+ (s|min) left", str(_state(first)["progress"]))  # from the mean time per cell
        cell = kernel.collect(msg_id, submitted, timeout=60)
    finally:
        kernel.execute("AnsweringWidget.front_end_seen = False")
    assert cell.status == "error"
    assert "Interrupted: `%%dag eval --resume slowly` runs the cells that did not end." in cell.error
    assert "dagmagic" not in cell.error.replace("%%dag", "")  # one line, no stack of dagmagic's frames
    final = _html(cell.of_type("update_display_data")[-1])
    assert "stopped with" in final and "continue with `%%dag eval --resume slowly`" in final
    resumed = kernel.execute("%%dag eval --resume slowly --models slow --concurrency 3", timeout=60)
    assert "6 of 6 cells done" in _html(resumed.of_type("display_data")[-1])


def test_dag_resume_names_an_interrupted_experiment_and_runs_only_the_cells_that_did_not_end(kernel: Kernel) -> None:
    # seven cases: the messages of an earlier test's grid of six cannot pass for this one's
    kernel.execute(
        "paced = scripted(latency=0.2)\nseven = [f'goal {n}' for n in range(7)]\n"
        "alone = {'paced': {'models': dagmagic.ModelRegistry().register('paced', paced)}}"
    )
    kernel.execute("from dagmagic.notebook.answering import AnsweringWidget\nAnsweringWidget.front_end_seen = True")
    try:
        submitted = time.monotonic()
        msg_id = kernel.submit("%%dag eval --cases seven --configs alone --concurrency 1 --name paced -o paced_exp")
        kernel.wait_for(
            lambda m: re.search("[1-6] of 7 cells done", str(_state(m).get("progress", ""))) is not None,
            "a first cell done",
            60,
        )
        kernel.manager.interrupt_kernel()
        assert kernel.collect(msg_id, submitted, timeout=60).status == "error"
    finally:
        kernel.execute("AnsweringWidget.front_end_seen = False")
    before = kernel.execute(
        "done = [cell.run_id for cell in paced_exp.results if cell.status == 'done']\n"
        "plans = len(paced.requests_for('plan'))\nprint(len(done))"
    )
    finished = int(before.stdout)

    resumed = kernel.execute("%dag resume paced --concurrency 3", timeout=60)  # alone in its cell: awaited there

    assert resumed.status == "ok" and resumed.of_type("update_display_data") == []
    assert "7 of 7 cells done" in _html(resumed.of_type("display_data")[-1])
    after = kernel.execute(
        "kept = [cell.run_id for cell in paced_exp.results if cell.run_id in done]\n"
        "print(len(paced.requests_for('plan')) - plans, kept == done)"
    )
    assert after.stdout == f"{7 - finished} True\n"  # a run started for each cell that had not ended, no other
