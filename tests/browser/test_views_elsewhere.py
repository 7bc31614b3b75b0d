"""A run that goes on in a later cell, in JupyterLab: the earlier cell keeps a readable view of it (the run as that
cell left it, led by the cell it went on in) instead of going blank, and the saved file holds the run once per
cell. Issue 41's reports: a ``--bg`` cell awaited below went blank; after ``%dag resume`` the earlier cell still
offered to resume a run that was done.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from playwright.sync_api import expect

from dagmagic.server import strip_live_views

from .conftest import CHROMIUM, WAIT_MS, NotebookPage
from .test_e2e import ANSWER_TEXT, Gate, cells, expect_waiting_for_the_gate, node

pytestmark = [
    pytest.mark.browser,
    pytest.mark.timeout(240),  # the first test also starts JupyterLab and chromium
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"Debian's chromium is not installed at {CHROMIUM}"),
]

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def code_cell(tab: NotebookPage, index: int) -> Any:
    """The notebook's code cell ``index`` (from 0)."""
    return tab.page.locator(f"[id='{tab.panel_id}'] .jp-CodeCell").nth(index)


def save(tab: NotebookPage, name: str) -> dict[str, Any]:
    """Save the notebook as JupyterLab does; the file as the server's pre-save hook leaves it (applied here too:
    JupyterLab 4.6 here may write a notebook in chunks, which the hook does not see).
    """
    page = tab.page
    page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
    page.wait_for_function("() => !window.jupyterapp.shell.currentWidget.context.model.dirty", timeout=WAIT_MS)
    model = {"type": "notebook", "content": json.loads((tab.lab.root / name).read_text(encoding="utf-8"))}
    strip_live_views(model)
    saved: dict[str, Any] = model["content"]
    return saved


def run_views(notebook: dict[str, Any]) -> list[list[str]]:
    """Per code cell, the Markdown of each static view of a run it holds."""
    return [
        ["".join(o["data"]["text/markdown"]) for o in cell.get("outputs", []) if "dagmagic" in o.get("metadata", {})]
        for cell in notebook["cells"]
        if cell["cell_type"] == "code"
    ]


def test_a_bg_cell_awaited_below_keeps_the_run_as_it_left_it_and_points_below(jupyterlab: NotebookPage) -> None:
    tab = jupyterlab
    gate = Gate(tab, "bg-below")
    setup = cells(gate, "scripted()", "Go on in the cell below", "--bg -o job")
    tab.open("bg-below", [*setup, "await job"])
    tab.run_all()
    bg, below = code_cell(tab, 2), code_cell(tab, 3)
    live = bg.locator(".dagmagic:visible")
    expect_waiting_for_the_gate(live)  # the --bg cell ended; its run goes on, drawn live there
    expect(below.locator(".dagmagic")).to_have_count(0)
    tab.screenshot("bg-while-awaited", focus=bg)

    gate.open()
    tab.wait_until_done()
    drawn = below.locator(".dagmagic:visible")
    expect(drawn.locator(".dagmagic-status")).to_have_attribute("data-status", "done")
    expect(drawn.locator(".dagmagic-answer .dagmagic-answer-body")).to_have_text(ANSWER_TEXT)

    kept = bg.locator(".jp-OutputArea-output:visible", has_text="went on after this cell ended")
    expect(kept).to_have_count(1)  # not blank: the run as the cell left it...
    expect(kept).to_contain_text("cell [4] shows it as it is now")  # ...and where it went on
    expect(kept.locator(".dagmagic-static")).to_be_visible()
    expect(kept).to_contain_text("Go on in the cell below")
    expect(bg.locator(".dagmagic:visible")).to_have_count(0)  # no second live view...
    expect(bg.locator(".jp-OutputArea-child:visible")).to_have_count(1)  # ...nor the empty prompt of its hidden value
    expect(below.locator(".jp-OutputArea-child:visible")).to_have_count(1)
    tab.screenshot("bg-after-awaited", focus=bg)
    tab.screenshot("bg-after-awaited-below", focus=below.locator(".dagmagic:visible .dagmagic-answer"))

    views = run_views(save(tab, "bg-below.ipynb"))
    assert [len(v) for v in views] == [0, 0, 1, 1], views  # the run once per cell that showed it
    assert "went on after this cell ended" in views[2][0] and "status: done" not in views[2][0]
    assert "status: done" in views[3][0]
    assert WIDGET_VIEW not in json.dumps(views)
    assert tab.errors == []


def test_an_earlier_view_of_a_resumed_run_says_where_it_was_resumed(jupyterlab: NotebookPage) -> None:
    tab = jupyterlab
    gate = Gate(tab, "resumed-below")
    setup = cells(gate, "scripted()", "Resume me below", "--bg -o job")
    setup.insert(1, "%dag config store=resumed-below.sqlite")
    cut = "while job.phase != 'executing':\n    await asyncio.sleep(0.05)\njob.cancel()\nawait job\nprint(job.status)"
    tab.open("resumed-below", [*setup, cut, "pathlib.Path(GATE).touch()", "%dag resume"])
    tab.run_all()
    tab.wait_until_done()
    first, resumed = code_cell(tab, 3), code_cell(tab, 6)

    drawn = resumed.locator(".dagmagic:visible")
    expect(drawn.locator(".dagmagic-status")).to_have_attribute("data-status", "done")
    expect(drawn.locator(".dagmagic-answer .dagmagic-answer-body")).to_have_text(ANSWER_TEXT)
    kept = first.locator(".jp-OutputArea-output:visible", has_text="This run was resumed in cell [7]")
    expect(kept).to_have_count(1)
    expect(kept.locator(".dagmagic-static")).to_be_visible()
    expect(kept).to_contain_text("cancelled")  # the run as it stopped, under the line that says where it went
    # no stale widget still offering to resume a run that is done
    expect(first.locator(".dagmagic:visible")).to_have_count(0)
    expect(first.locator(".jp-OutputArea-child:visible")).to_have_count(1)
    expect(tab.page.locator(".dagmagic-resume-offer:visible")).to_have_count(0)
    tab.screenshot("resumed-earlier-cell", focus=first)
    tab.screenshot("resumed-later-cell", focus=drawn)
    assert tab.errors == []


def test_a_rerun_started_from_the_view_leaves_one_output_under_the_cell(jupyterlab: NotebookPage) -> None:
    """The live view, updated when the re-run ends, draws the widget anew: the cell's value, now the older view,
    is hidden with its prompt (before, an empty "[3]:" stayed under the widget).
    """
    tab = jupyterlab
    gate = Gate(tab, "rerun-here")
    gate.open()
    tab.open("rerun-here", cells(gate, "scripted()", "Re-run me from the view"))
    tab.run_all()
    tab.wait_until_done()
    cell = code_cell(tab, 2)
    widget = cell.locator(".dagmagic:visible")
    expect(widget.locator(".dagmagic-status")).to_have_attribute("data-status", "done")
    node(widget, "s2", 1).click()
    widget.locator('.dagmagic-detail[data-step-id="s2"] .dagmagic-rerun').click()
    expect(widget.locator('.dagmagic-round[data-round="2"]')).to_have_count(1)
    expect(widget.locator(".dagmagic-status")).to_have_attribute("data-status", "done")
    tab.page.wait_for_timeout(1_000)  # the live view's update, sent as the re-run ends, is drawn
    expect(cell.locator(".dagmagic:visible")).to_have_count(1)
    expect(cell.locator(".jp-OutputArea-child:visible")).to_have_count(1)
    tab.screenshot("rerun-from-the-view", focus=cell.locator(".dagmagic:visible"))
    assert tab.errors == []
