"""The static view of a run as a reader of a fresh clone sees it: the notebook opened UNTRUSTED (a file nobody ran
here), so JupyterLab and Notebook 7 sanitize its HTML. The pictures of the DAG must survive, with their arrowheads,
and the steps must read as lines of their own (issue 23, points 2 and 6).

The notebook is the first tutorial's opening, its ``%dag demo`` cell holding the static views the current code
writes for the demo's run (made in a separate process: the browser's event loop is this one's).
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import nbformat
import pytest
from playwright.sync_api import expect

from .conftest import CHROMIUM, WAIT_MS, NotebookPage

pytestmark = [
    pytest.mark.browser,
    pytest.mark.timeout(240),  # the first test also starts the server and chromium
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"Debian's chromium is not installed at {CHROMIUM}"),
]

ROOT = Path(__file__).resolve().parents[2]

DEMO_VIEWS = textwrap.dedent(
    """
    import asyncio, json
    from dagmagic.notebook.demo import DEMO_GOAL, demo_session
    from dagmagic.notebook.fallbacks import drawn_plan, reused_steps, run_mimebundle
    from dagmagic.notebook.layout import layout

    run = asyncio.run(demo_session().run(DEMO_GOAL))
    drawn = [drawn_plan(record, reused_steps(run, record)) for record in run.rounds]  # with the results reused
    tips = [[list(edge.points[-1]) for edge in layout(plan).edges] for plan in drawn]
    print(json.dumps({"bundle": run_mimebundle(run), "run_id": run.run_id, "tips": tips}))
    """
)


def demo_views() -> dict[str, Any]:
    """The demo run's static views, and where each round's arrowheads point (their tips, in picture pixels)."""
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "DAG_STORE": "none"}
    done = subprocess.run(
        [sys.executable, "-c", DEMO_VIEWS], capture_output=True, text=True, timeout=120, env=env, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-3000:]
    views: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return views


def write_untrusted_tutorial(notebook: NotebookPage, views: dict[str, Any]) -> str:
    """The first tutorial up to its demo cell, the demo's static views stored as its output, as a saved file
    that was never run here: untrusted."""
    tutorial = nbformat.read(ROOT / "notebooks" / "01_quickstart.ipynb", as_version=4)
    demo = next(index for index, cell in enumerate(tutorial.cells) if cell.source.strip() == "%dag demo")
    tutorial.cells = tutorial.cells[: demo + 1]
    tutorial.cells[demo].outputs = [
        nbformat.v4.new_output(
            "execute_result",
            data=views["bundle"],
            metadata={"dagmagic": {"run_id": views["run_id"]}},
            execution_count=1,
        )
    ]
    tutorial.cells[demo].execution_count = 1
    nbformat.write(tutorial, notebook.lab.root / "untrusted.ipynb")
    return "untrusted.ipynb"


def open_saved(notebook: NotebookPage, path: str) -> None:
    """Open a notebook file as it is (``NotebookPage.open`` writes one of code cells first)."""
    notebook.page.goto(notebook.url_of(path, "untrusted"))
    notebook.page.wait_for_function(
        """(path) => {
            const panel = window.jupyterapp?.shell?.currentWidget;
            return panel?.context?.path === path && panel.content?.widgets?.length > 0;
        }""",
        arg=path,
        timeout=WAIT_MS,
    )


ARROWHEAD_PIXELS = """(image, tips) => {
    // the picture drawn at its own size: the pixel just above each tip is inside the arrowhead
    const canvas = document.createElement("canvas");
    canvas.width = image.naturalWidth;
    canvas.height = image.naturalHeight;
    const context = canvas.getContext("2d");
    context.drawImage(image, 0, 0);
    const pixel = (x, y) => Array.from(context.getImageData(x, y, 1, 1).data.slice(0, 3));
    return { heads: tips.map(([x, y]) => pixel(Math.round(x), Math.round(y) - 3)), background: pixel(4, 40) };
}"""


def assert_arrowheads_shown(image: Any, tips: list[list[float]]) -> None:
    expect(image).to_be_visible()
    box = image.bounding_box()
    assert box is not None and box["width"] > 100 and box["height"] > 50, box
    assert image.evaluate("(image) => image.complete && image.naturalWidth > 0")  # it loaded: not a broken image
    pixels = image.evaluate(ARROWHEAD_PIXELS, tips)
    assert pixels["background"] == [255, 255, 255], pixels
    for head in pixels["heads"]:
        assert all(100 <= channel <= 170 for channel in head), pixels  # the edges' grey (#888), not the background


def test_an_untrusted_notebook_shows_the_pictures_with_arrowheads_and_the_steps_as_lines(
    notebook: NotebookPage,
) -> None:
    views = demo_views()
    open_saved(notebook, write_untrusted_tutorial(notebook, views))
    page = notebook.page
    demo = page.wait_for_function(
        """() => {
            const cells = window.jupyterapp.shell.currentWidget.content.model.cells;
            for (let i = 0; i < cells.length; i++) {
                const cell = cells.get(i);
                if (cell.sharedModel.getSource().trim() === "%dag demo") return { trusted: cell.trusted };
            }
            return null;
        }""",
        timeout=WAIT_MS,
    ).json_value()
    assert demo == {"trusted": False}  # as in a fresh clone: its HTML goes through the sanitizer

    output = page.locator(".jp-OutputArea-output .dagmagic-static")
    expect(output).to_be_visible()
    rounds = output.locator(":scope > details")
    expect(rounds).to_have_count(2)
    latest, first = rounds.nth(1), rounds.nth(0)
    expect(latest.locator(":scope > summary")).to_contain_text("Round 2 · 2 steps · achieved")

    # the picture of the open round survives the sanitizer, drawn with its arrowheads
    picture = latest.locator("img")
    expect(picture).to_have_count(1)
    picture.scroll_into_view_if_needed()
    assert_arrowheads_shown(picture, views["tips"][1])
    notebook.screenshot("static-untrusted", focus=latest)

    # round 1 (collapsed) opened: its picture too; each step a line of its own, its status readable
    first.locator(":scope > summary").click()
    picture = first.locator("img")
    picture.scroll_into_view_if_needed()
    assert_arrowheads_shown(picture, views["tips"][0])
    steps = first.locator(":scope > details > summary")
    expect(steps).to_have_count(4)
    lines = [line.strip() for line in first.inner_text().splitlines() if line.strip()]
    for step, status in (("s1", "completed"), ("s2", "completed"), ("s3", "failed"), ("s4", "skipped")):
        assert any(line.startswith(f"{step} · {status} · ") for line in lines), lines
    tops = [box["y"] for box in (steps.nth(i).bounding_box() for i in range(4)) if box is not None]
    assert len(tops) == 4 and all(b - a >= 10 for a, b in itertools.pairwise(tops)), tops  # stacked lines
    assert "completedFind" not in first.inner_text()  # the sanitized SVG's bare text, run together
    notebook.screenshot("static-untrusted-round1", focus=first)
    assert notebook.errors == []


DOLLAR_VIEWS = textwrap.dedent(
    """
    import asyncio, json
    from dagmagic import DagSession, DagSettings, ModelRegistry
    from dagmagic.notebook.fallbacks import run_mimebundle
    from dagmagic.testing import ScriptedLLM

    llm = ScriptedLLM(
        {
            "plan": [{"steps": [{"id": "s1", "task": "Price the two plans: $5 and $10 a month"}]}],
            "step": ["The basic plan is $5 and the full one $10 a month."],
            "analyze": [{"achieved": True, "confidence": 0.9, "reasoning": "Both prices, $5 and $10, found."}],
            "synthesize": ["Take the $5 plan unless you need the $10 one."],
        }
    )
    session = DagSession(models=ModelRegistry().register("m", llm), settings=DagSettings(store="none"))
    run = asyncio.run(session.run("Which plan, $5 or $10 a month?"))
    print(json.dumps({"bundle": run_mimebundle(run), "run_id": run.run_id}))
    """
)


def test_dollar_amounts_in_a_saved_run_are_not_typeset_as_math(jupyterlab: NotebookPage) -> None:
    """JupyterLab's MathJax typesets ``$…$`` in HTML outputs: ``$5 and $10`` would read "5 and" in italics."""
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "DAG_STORE": "none"}
    done = subprocess.run(
        [sys.executable, "-c", DOLLAR_VIEWS], capture_output=True, text=True, timeout=120, env=env, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-3000:]
    views = json.loads(done.stdout.splitlines()[-1])
    saved = nbformat.v4.new_notebook()
    saved.metadata = nbformat.read(ROOT / "notebooks" / "01_quickstart.ipynb", as_version=4).metadata
    cell = nbformat.v4.new_code_cell("%%dag\nWhich plan, $5 or $10 a month?", execution_count=1)
    cell.outputs = [
        nbformat.v4.new_output(
            "execute_result",
            data=views["bundle"],
            metadata={"dagmagic": {"run_id": views["run_id"]}},
            execution_count=1,
        )
    ]
    saved.cells = [nbformat.v4.new_markdown_cell("A run about prices, saved; some math: $x^2$."), cell]
    nbformat.write(saved, jupyterlab.lab.root / "dollars.ipynb")
    open_saved(jupyterlab, "dollars.ipynb")
    page = jupyterlab.page
    output = page.locator(".jp-OutputArea-output .dagmagic-static")
    expect(output).to_be_visible()
    output.evaluate("(view) => view.querySelectorAll('details').forEach((details) => { details.open = true; })")
    # MathJax typesets asynchronously: the Markdown cell's math typeset shows it has run on this page
    expect(page.locator(".jp-MarkdownCell mjx-container")).to_have_count(1, timeout=WAIT_MS)
    expect(output.locator("mjx-container")).to_have_count(0)
    text = output.inner_text()
    assert "Take the $5 plan unless you need the $10 one." in text, text
    assert "$5 and the full one $10" in text, text
    jupyterlab.screenshot("static-dollars", focus=output)
    assert jupyterlab.errors == []


def test_every_text_of_the_picture_stays_in_its_box_in_the_browsers_font(browser: Any) -> None:
    """What the picture's width estimate promises, measured: each text's box as chromium lays it out (DejaVu Sans
    here, the widest of the usual UI fonts) ends inside its step's box."""
    from dagmagic.notebook.picture import svg

    from ..notebook.test_static_picture import long_plan

    page = browser.new_page()
    try:
        page.set_content(f"<!doctype html><html><body>{svg(long_plan())}</body></html>")
        overflows = page.evaluate(
            """() => [...document.querySelectorAll("g[data-step-id]")].flatMap((g) => {
                const box = g.querySelector("rect").getBBox();
                return [...g.querySelectorAll("text")]
                    .map((text) => [text.textContent, text.getBBox()])
                    .filter(([, b]) => b.x < box.x || b.x + b.width > box.x + box.width - 4)
                    .map(([words, b]) => `${words}: ${b.x + b.width} > ${box.x + box.width - 4}`);
            })"""
        )
        assert overflows == []
    finally:
        page.close()
