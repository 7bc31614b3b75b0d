"""The saved notebook, wherever it was saved, read in JupyterLab: a notebook executed headless, and one whose
run changed after its cell ended (a re-run started from the view), both readable without their kernel and
showing the run as it is.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import nbformat
import pytest
from playwright.sync_api import expect

from .conftest import CHROMIUM, WAIT_MS, Lab, NotebookPage, _tab
from .test_e2e import ANSWER_TEXT, Gate, cells, node

pytestmark = [
    pytest.mark.browser,
    pytest.mark.timeout(240),  # JupyterLab and chromium start with the first test
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"Debian's chromium is not installed at {CHROMIUM}"),
]

NEW_ANSWER = "After the re-run the answer is **43**."

HEADLESS_MODEL = textwrap.dedent(
    """
    from dagmagic.testing import ScriptedLLM

    llm = ScriptedLLM({
        "plan": [{"steps": [
            {"id": "s1", "task": "Find the population of Paris"},
            {"id": "s2", "task": "Find the population of Berlin"},
            {"id": "s3", "task": "Compare both cities", "dependencies": ["s1", "s2"]},
        ]}],
        "step": ["about 2.1 million", "about 3.8 million", "Berlin has more inhabitants"],
        "analyze": [{"achieved": True, "confidence": 0.9, "reasoning": "both known",
                     "final_answer": "Berlin has more inhabitants than Paris."}],
    })
    """
).strip()


@pytest.fixture
def jupyterlab(request: pytest.FixtureRequest, browser: Any, lab: Lab) -> Iterator[NotebookPage]:
    """A tab on JupyterLab: the front end the issue's readers opened these files in."""
    yield from _tab(request, browser, lab)


def expect_readable(tab: NotebookPage, name: str, *texts: str) -> Any:
    """Open ``name`` (its kernel gone): the run's static view shows ``texts``, and no widget error anywhere."""
    page = tab.page
    page.goto(tab.url_of(name, name.removesuffix(".ipynb") + "-reopened"))
    page.wait_for_function(  # a fresh kernel (knowing no widget): JupyterLab's widget manager then restores
        """(path) => {
            const panel = window.jupyterapp?.shell?.currentWidget;
            return panel?.context?.path === path && panel.sessionContext?.session?.kernel?.status === "idle";
        }""",
        arg=name,
        timeout=WAIT_MS,
    )
    expect(page.get_by_text("Loading widget")).to_have_count(0)  # what it shows until it has restored
    output = page.locator(".jp-OutputArea-output .dagmagic-static")
    expect(output).to_have_count(1)
    expect(output).to_be_visible()
    for text in texts:
        expect(output).to_contain_text(text)
    expect(page.get_by_text("model not found")).to_have_count(0)
    expect(page.get_by_text("Error displaying widget")).to_have_count(0)
    return output


def test_a_notebook_executed_headless_opens_readable_in_jupyterlab(jupyterlab: NotebookPage) -> None:
    lab = jupyterlab.lab
    name = lab.write_notebook(
        "headless", ["%load_ext dagmagic", HEADLESS_MODEL, "%%dag --models llm\nParis or Berlin?"]
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("DAG_")}
    env.update(LITELLM_LOCAL_MODEL_COST_MAP="True", DAG_STORE="none", PYDEVD_DISABLE_FILE_VALIDATION="1")
    command = [sys.executable, "-m", "jupyter", "nbconvert", "--execute", "--to", "notebook", "--inplace", name]
    done = subprocess.run(command, cwd=lab.root, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    path = lab.root / name
    nb = nbformat.read(path, as_version=4)
    nb.metadata.pop("widgets", None)  # as VS Code saves it, or nbstripout --keep-output leaves it: no widget state
    nbformat.write(nb, path)
    # trusted, as the user's own notebook is once trusted: JupyterLab then draws widget views (an untrusted
    # one falls back to the text and sanitized HTML beside them)
    trusted = subprocess.run([sys.executable, "-m", "jupyter", "trust", name], cwd=lab.root, env=env, timeout=60)
    assert trusted.returncode == 0

    output = expect_readable(
        jupyterlab, name, "Round 1 · 3 steps · achieved", "Berlin has more inhabitants than Paris."
    )
    jupyterlab.screenshot("headless-reopened", focus=output)
    assert jupyterlab.errors == []


def test_a_run_rerun_from_its_view_after_the_cell_is_saved_as_it_is_now(jupyterlab: NotebookPage) -> None:
    gate = Gate(jupyterlab, "saved-rerun")
    gate.open()
    model = f"scripted(analyze=[ACHIEVED, {{**ACHIEVED, 'final_answer': {NEW_ANSWER!r}}}])"
    jupyterlab.open("saved-rerun", cells(gate, model, "Save me after a re-run"))
    jupyterlab.run_all()
    expect(jupyterlab.widget().locator(".dagmagic-status")).to_have_attribute("data-status", "done")
    jupyterlab.wait_until_done()
    widget = jupyterlab.widgets().last

    node(widget, "s2", 1).click()  # the cell has ended: the re-run is started from the view
    widget.locator('.dagmagic-detail[data-step-id="s2"] .dagmagic-rerun').click()
    second = widget.locator('.dagmagic-round[data-round="2"]')
    expect(second.locator(".dagmagic-rerun-label")).to_contain_text("re-run of round 1 (s2)")
    expect(widget.locator(".dagmagic-status")).to_have_attribute("data-status", "done")
    expect(widget.locator(".dagmagic-answer")).to_contain_text("43")

    page = jupyterlab.page
    page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
    page.wait_for_function("() => !window.jupyterapp.shell.currentWidget.context.model.dirty", timeout=WAIT_MS)
    text = (jupyterlab.lab.root / "saved-rerun.ipynb").read_text(encoding="utf-8")
    assert "application/vnd.jupyter.widget-view+json" not in text and "rounds: 2" in text

    jupyterlab.lab.shut_down_kernels()
    output = expect_readable(jupyterlab, "saved-rerun.ipynb", "rounds: 2", "re-run of round 1 (s2)", "the answer is 43")
    expect(output).not_to_contain_text(ANSWER_TEXT)  # the answer the re-run replaced
    jupyterlab.screenshot("saved-after-rerun", focus=output)
    assert jupyterlab.errors == []
