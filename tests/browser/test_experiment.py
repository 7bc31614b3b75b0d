"""``%%dag eval`` in JupyterLab: the live grid fills in as cells run (progress, time left), a click on a grid cell
opens that cell's run view under the grid, and the saved notebook, reopened untrusted without its kernel, shows the
static grid as the experiment ended.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterator
from typing import Any

import nbformat
import pytest
from playwright.sync_api import expect

from .conftest import CHROMIUM, WAIT_MS, Lab, NotebookPage, _tab

pytestmark = [
    pytest.mark.browser,
    pytest.mark.timeout(240),  # JupyterLab and chromium start with the first test
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"Debian's chromium is not installed at {CHROMIUM}"),
]

SETUP = textwrap.dedent(
    """
    from dagmagic.testing import ScriptedLLM

    PLAN = {"steps": [
        {"id": "s1", "task": "Find where the place is"},
        {"id": "s2", "task": "Name its city", "dependencies": ["s1"]},
    ]}

    def answering(answer):
        verdict = {"achieved": True, "confidence": 0.9, "reasoning": "found", "final_answer": answer}
        return ScriptedLLM({"plan": [PLAN], "step": ["found it"], "analyze": [verdict]}, latency=0.15)

    small, big = answering("Lyon"), answering("Paris")
    configs = {"small": {"models": {"smart": small}}, "big": {"models": {"smart": big}}}
    cases = [{"place": "the Louvre", "id": "louvre"}, {"place": "the Eiffel Tower", "id": "eiffel"},
             {"place": "<img src=x onerror=alert(1)>", "id": "hostile"}]

    def says_paris(case, run):
        return "Paris" in run.answer
    """
).strip()

EVAL = (
    "%%dag eval --cases cases --configs configs --models small --scorers says_paris --concurrency 1 --name towns\n"
    "Which city is {place} in?"
)


@pytest.fixture
def jupyterlab(request: pytest.FixtureRequest, browser: Any, lab: Lab) -> Iterator[NotebookPage]:
    yield from _tab(request, browser, lab)


def test_the_grid_fills_in_opens_a_cells_run_and_reopens_static(jupyterlab: NotebookPage) -> None:
    page = jupyterlab.page
    jupyterlab.open("experiment", ["%load_ext dagmagic", SETUP, EVAL])
    jupyterlab.run_all()

    grid = page.locator(".dagmagic-experiment-view")
    expect(grid).to_be_visible(timeout=WAIT_MS)
    progress = grid.locator(".dagmagic-experiment-progress")
    expect(progress).to_contain_text(re.compile(r"[1-5] of 6 cells done .* about [0-9.]+ (s|min) left"))
    expect(grid.locator("td[data-status='running']")).to_have_count(1)  # --concurrency 1
    headers = grid.locator(".dagmagic-experiment-grid thead th")
    expect(headers).to_have_text(["case", "small", "big"])
    expect(grid.locator(".dagmagic-experiment-grid tbody th").last).to_contain_text("<img src=x onerror=alert(1)>")
    expect(grid.locator("img")).to_have_count(0)
    jupyterlab.screenshot("experiment-running", focus=grid)

    expect(progress).to_contain_text("6 of 6 cells done", timeout=WAIT_MS)
    jupyterlab.wait_until_done()
    expect(grid.locator("td[data-status='done']")).to_have_count(6)
    louvre_big = grid.locator("td[data-case='louvre'][data-config='big']")
    expect(louvre_big).to_contain_text("✓ done · 1.00")
    expect(grid.locator("td[data-case='louvre'][data-config='small']")).to_contain_text("✓ done · 0.00")
    expect(grid.locator(".dagmagic-experiment-summary tbody tr")).to_have_count(2)

    louvre_big.click()
    opened = grid.locator(".dagmagic-experiment-opened")
    expect(opened).to_be_visible()
    expect(opened.locator(".dagmagic-experiment-opened-label")).to_contain_text("louvre × big · run ")
    run_view = opened.locator(".dagmagic-experiment-run .dagmagic")
    expect(run_view.locator(".dagmagic-status")).to_have_attribute("data-status", "done")
    expect(run_view.locator(".dagmagic-answer")).to_contain_text("Paris")
    expect(run_view.locator('.dagmagic-node[data-step-id="s2"]').first).to_be_visible()
    expect(louvre_big).to_have_class(re.compile("dagmagic-experiment-cell--opened"))
    jupyterlab.screenshot("experiment-opened-run", focus=opened)

    grid.locator("td[data-case='eiffel'][data-config='small']").click()  # another cell: its run replaces it
    expect(opened.locator(".dagmagic-experiment-opened-label")).to_contain_text("eiffel × small")
    expect(run_view.locator(".dagmagic-answer")).to_contain_text("Lyon")
    expect(opened.locator(".dagmagic-experiment-run > *")).to_have_count(1)
    opened.get_by_role("button", name="Close").click()
    expect(opened).to_be_hidden()

    page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
    page.wait_for_function("() => !window.jupyterapp.shell.currentWidget.context.model.dirty", timeout=WAIT_MS)
    path = jupyterlab.lab.root / "experiment.ipynb"
    assert "application/vnd.jupyter.widget-view+json" not in path.read_text(encoding="utf-8")
    notebook = nbformat.read(path, as_version=4)
    notebook.metadata["edited elsewhere"] = True  # its signature no longer matches: it opens untrusted
    nbformat.write(notebook, path)

    jupyterlab.lab.shut_down_kernels()
    page.goto(jupyterlab.url_of("experiment.ipynb", "experiment-reopened"))
    page.wait_for_function(
        """() => {
            const panel = window.jupyterapp?.shell?.currentWidget;
            return panel?.context?.path === "experiment.ipynb" && panel.content?.widgets?.length > 0;
        }""",
        timeout=WAIT_MS,
    )
    static = page.locator(".jp-OutputArea-output .dagmagic-experiment")
    expect(static).to_have_count(1)
    expect(static).to_contain_text("Experiment towns")
    expect(static).to_contain_text("6 of 6 cells done")
    expect(static.locator("tbody tr").first).to_contain_text("louvre: Which city is the Louvre in?")
    expect(static).to_contain_text("big")
    expect(static.locator("img")).to_have_count(0)
    expect(page.get_by_text("Error displaying widget")).to_have_count(0)
    expect(page.get_by_text("model not found")).to_have_count(0)
    jupyterlab.screenshot("experiment-reopened", focus=static)
    assert jupyterlab.errors == []
