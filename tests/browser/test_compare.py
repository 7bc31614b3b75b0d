"""The compare widget in JupyterLab: two runs of twelve steps a side (one row per pair, the changed pairs marked,
the words that differ in ``<del>``/``<ins>``, the deltas), in the light and the dark theme; a comparison opened from
the experiment grid; and the saved notebook, reopened untrusted without its kernel, showing the static comparison.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from playwright.sync_api import expect

from .conftest import CHROMIUM, SCREENSHOTS, WAIT_MS, Lab, NotebookPage, _tab

pytestmark = [
    pytest.mark.browser,
    pytest.mark.timeout(300),  # JupyterLab and chromium start with the first test
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"Debian's chromium is not installed at {CHROMIUM}"),
]

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = textwrap.dedent(
    f"""
    import sys
    sys.path.insert(0, {str(ROOT)!r})
    from tests.compare_samples import twelve_a_side
    twelve_a_side()
    """
).strip()

GRID_SETUP = textwrap.dedent(
    """
    from dagmagic.testing import ScriptedLLM

    PLAN = {"steps": [
        {"id": "s1", "task": "Find where the place is"},
        {"id": "s2", "task": "Name its city", "dependencies": ["s1"]},
    ]}

    def answering(answer, found):
        verdict = {"achieved": True, "confidence": 0.9, "reasoning": "found", "final_answer": answer}
        return ScriptedLLM({"plan": [PLAN], "step": [found], "analyze": [verdict]}, latency=0.05)

    small, big = answering("It is in Lyon.", "found it in Lyon"), answering("It is in Paris.", "found it in Paris")
    configs = {"small": {"models": {"smart": small}}, "big": {"models": {"smart": big}}}
    cases = [{"place": "the Louvre", "id": "louvre"}, {"place": "the Eiffel Tower", "id": "eiffel"}]
    """
).strip()

EVAL = (
    "%%dag eval --cases cases --configs configs --models small --concurrency 2 --name towns\nWhich city is {place} in?"
)


@pytest.fixture
def jupyterlab(request: pytest.FixtureRequest, browser: Any, lab: Lab) -> Iterator[NotebookPage]:
    yield from _tab(request, browser, lab)


def _shoot(tab: NotebookPage, name: str, view: Any) -> Path:
    """The whole view, in a window tall enough to hold it (JupyterLab scrolls the notebook, not the page)."""
    view.scroll_into_view_if_needed()
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    view.screenshot(path=str(path))
    return path


def _theme(tab: NotebookPage, theme: str) -> None:
    tab.page.evaluate(f"() => window.jupyterapp.commands.execute('apputils:change-theme', {{theme: '{theme}'}})")
    tab.page.wait_for_function(
        "(light) => document.body.dataset.jpThemeLight === light", arg=str(theme.endswith("Light")).lower()
    )


def test_two_runs_side_by_side_in_light_and_dark_and_reopened_static(jupyterlab: NotebookPage) -> None:
    page = jupyterlab.page
    page.set_viewport_size({"width": 1400, "height": 3000})
    jupyterlab.open("compare", ["%load_ext dagmagic", SAMPLE])
    jupyterlab.run_all()

    view = page.locator(".dagmagic-compare-view")
    expect(view).to_be_visible(timeout=WAIT_MS)
    expect(view.locator(".dagmagic-compare-header thead th")).to_have_text(["run aaaa1111", "", "run bbbb2222"])
    rows = view.locator("tr.dagmagic-compare-pair")
    expect(rows).to_have_count(12)
    changed = view.locator("tr[data-change='changed']")
    expect(changed).to_have_count(2)
    expect(view.locator("tr[data-change='same']")).to_have_count(10)
    expect(changed.first.locator(".dagmagic-compare-field")).to_have_text(["model", "result"])
    expect(changed.first.locator(".dagmagic-compare-step--a del")).to_have_text(["3000", "."])
    expect(changed.first.locator(".dagmagic-compare-step--b ins").first).to_have_text("3500")
    expect(changed.first.locator(".dagmagic-compare-step--b .dagmagic-compare-delta")).to_have_text(
        ["+50 tok", re.compile(r"^\+"), "−0.5s"]
    )
    expect(view.locator(".dagmagic-compare-header tr[data-row='tokens'] .dagmagic-compare-delta--up")).to_have_text(
        "+200"
    )
    expect(view.locator(".dagmagic-compare-edited")).to_have_count(1)
    expect(view.locator(".dagmagic-compare-answers del")).to_have_text("35000")
    expect(view.locator(".dagmagic-compare-answers ins")).to_have_text("about 38000")
    expect(view.locator(".dagmagic-compare-calls tr[data-purpose='analyze']")).to_contain_text("+1")
    expect(view.locator("img")).to_have_count(0)  # the hostile result is text
    expect(changed.first).to_contain_text("<img src=x onerror=alert(1)>")
    jupyterlab.wait_until_done()

    # a step cell expands to its full result
    long_cells = view.locator("td.dagmagic-compare-step--long")
    expect(long_cells).to_have_count(2)  # s9's, on both sides
    result = long_cells.first.locator(".dagmagic-compare-result")
    folded = result.bounding_box()["height"]
    long_cells.first.click()
    expect(long_cells.first).to_have_attribute("aria-expanded", "true")
    expect(result).to_contain_text("Room 8 shows paintings")
    assert result.bounding_box()["height"] > folded
    long_cells.first.click()
    expect(long_cells.first).to_have_attribute("aria-expanded", "false")

    _shoot(jupyterlab, "compare-light", view)
    _theme(jupyterlab, "JupyterLab Dark")
    background = view.evaluate("(el) => getComputedStyle(el).backgroundColor")
    assert sum(int(v) for v in re.findall(r"\d+", background)[:3]) / (3 * 255) < 0.3, background
    _shoot(jupyterlab, "compare-dark", view)
    _theme(jupyterlab, "JupyterLab Light")

    page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
    page.wait_for_function("() => !window.jupyterapp.shell.currentWidget.context.model.dirty", timeout=WAIT_MS)
    path = jupyterlab.lab.root / "compare.ipynb"
    assert "application/vnd.jupyter.widget-view+json" not in path.read_text(encoding="utf-8")
    notebook = nbformat.read(path, as_version=4)
    notebook.metadata["edited elsewhere"] = True  # its signature no longer matches: it opens untrusted
    nbformat.write(notebook, path)

    jupyterlab.lab.shut_down_kernels()
    page.goto(jupyterlab.url_of("compare.ipynb", "compare-reopened"))
    page.wait_for_function(
        """() => {
            const panel = window.jupyterapp?.shell?.currentWidget;
            return panel?.context?.path === "compare.ipynb" && panel.content?.widgets?.length > 0;
        }""",
        timeout=WAIT_MS,
    )
    static = page.locator(".jp-OutputArea-output .dagmagic-compare")
    expect(static).to_have_count(1)
    expect(static).to_contain_text("run aaaa1111 vs run bbbb2222")
    expect(static.locator("del").first).to_be_visible()
    expect(static.locator("ins").first).to_be_visible()
    expect(static.locator("img")).to_have_count(0)
    expect(static).to_contain_text("<img src=x onerror=alert(1)>")
    expect(page.get_by_text("Error displaying widget")).to_have_count(0)
    expect(page.get_by_text("model not found")).to_have_count(0)
    _shoot(jupyterlab, "compare-reopened", static)
    assert jupyterlab.errors == []


def test_a_comparison_opens_from_the_experiment_grid(jupyterlab: NotebookPage) -> None:
    page = jupyterlab.page
    page.set_viewport_size({"width": 1400, "height": 2400})
    jupyterlab.open("compare-grid", ["%load_ext dagmagic", GRID_SETUP, EVAL])
    jupyterlab.run_all()
    grid = page.locator(".dagmagic-experiment-view")
    expect(grid.locator(".dagmagic-experiment-progress")).to_contain_text("4 of 4 cells done", timeout=WAIT_MS)
    jupyterlab.wait_until_done()

    grid.get_by_role("button", name="Compare…").click()
    expect(grid.locator(".dagmagic-experiment-compare-hint")).to_contain_text("two config columns")
    grid.locator("td[data-case='louvre'][data-config='small']").click()
    expect(grid.locator(".dagmagic-experiment-cell--picked")).to_have_count(1)
    grid.locator("td[data-case='louvre'][data-config='big']").click()
    box = grid.locator(".dagmagic-experiment-comparison")
    expect(box).to_be_visible()
    expect(box).to_contain_text("Comparing louvre × small vs louvre × big")
    view = box.locator(".dagmagic-compare-view")
    expect(view.locator(".dagmagic-compare-header thead th")).to_have_text(["config small", "", "config big"])
    expect(view.locator("tr.dagmagic-compare-pair")).to_have_count(2)
    expect(view.locator("tr[data-change='changed'] .dagmagic-compare-step--a del").first).to_have_text(
        re.compile("Lyon")
    )
    expect(view.locator("tr[data-change='changed'] .dagmagic-compare-step--b ins").first).to_have_text(
        re.compile("Paris")
    )
    expect(view.locator(".dagmagic-compare-answers ins")).to_contain_text(["Paris"])
    _shoot(jupyterlab, "compare-from-grid-cells", box)

    grid.get_by_role("button", name="Compare…").click()
    grid.locator("thead th[data-config='small']").click()
    grid.locator("thead th[data-config='big']").click()
    expect(box).to_contain_text("Comparing config small vs config big, case by case")
    view = box.locator(".dagmagic-compare-view")
    picker = view.locator("select.dagmagic-compare-picker")
    expect(picker.locator("option")).to_have_text(["louvre", "eiffel"])
    expect(view.locator(".dagmagic-compare-title")).to_contain_text("towns: config small vs config big")
    picker.select_option(label="eiffel")
    expect(view.locator(".dagmagic-compare-answers ins")).to_contain_text(["Paris"])
    _shoot(jupyterlab, "compare-from-grid-configs", box)

    box.get_by_role("button", name="Close comparison").click()
    expect(box).to_be_hidden()
    assert jupyterlab.errors == []


def test_the_compare_widget_draws_in_notebook7(notebook7: NotebookPage) -> None:
    notebook7.open("compare-nb7", ["%load_ext dagmagic", SAMPLE])
    notebook7.run_all()
    view = notebook7.page.locator(".dagmagic-compare-view")
    expect(view).to_be_visible(timeout=WAIT_MS)
    expect(view.locator("tr.dagmagic-compare-pair")).to_have_count(12)
    expect(view.locator("tr[data-change='changed'] ins").first).to_have_text("3500")
    notebook7.screenshot("compare", focus=view)
    assert notebook7.errors == []
