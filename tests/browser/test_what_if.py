"""What if a step had said something else, in JupyterLab: a finished run's step detail offers an editable copy of
its result; "Continue with this result" makes a new round where the step's result is the user's (marked "edited by
you"), the steps that use it run again and the rest is kept; the round offers to compare with the one it continued
from, and the compare widget opens under it, inside the run widget. Light and dark screenshots land in
``test-output/e2e/``.
"""

from __future__ import annotations

import re
import textwrap

import pytest
from playwright.sync_api import expect

from .conftest import CHROMIUM, WAIT_MS, NotebookPage
from .test_e2e import node

pytestmark = [
    pytest.mark.browser,
    pytest.mark.timeout(180),
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"Debian's chromium is not installed at {CHROMIUM}"),
]

# s3 multiplies what s1 and s2 said; each verdict's answer holds only what the step results hold (words, no figures)
SETUP = textwrap.dedent(
    """
    from dagmagic.testing import ScriptedLLM

    PLAN = {"steps": [
        {"id": "s1", "task": "Look up the first half"},
        {"id": "s2", "task": "Look up the second half"},
        {"id": "s3", "task": "Multiply both halves", "dependencies": ["s1", "s2"]},
    ]}

    def step(request):
        if request.step_id == "s3":
            return "forty-eight" if "eight" in request.prompt else "forty-two"
        return {"s1": "six", "s2": "seven"}[request.step_id]

    def verdict(request):
        product = "forty-eight" if "forty-eight" in request.prompt else "forty-two"
        return {"achieved": True, "confidence": 0.9, "reasoning": f"The product is {product}.",
                "final_answer": f"Six times the second half makes {product}."}

    llm = ScriptedLLM({"plan": [PLAN], "step": step, "analyze": verdict, "synthesize": [["The product."]]},
                      latency={"step": 0.6})
    """
)


def test_a_step_goes_on_with_its_result_edited_and_what_uses_it_runs_again(jupyterlab: NotebookPage) -> None:
    notebook = jupyterlab
    notebook.open("what-if", ["%load_ext dagmagic", SETUP, "%%dag --models llm\nWhat is six times seven?"])
    notebook.run_all()
    widget = notebook.widget()
    expect(widget.locator(".dagmagic-status")).to_have_attribute("data-status", "done")
    notebook.wait_until_done()
    # the run widget's view (the compare widget it later draws inside itself is a `.dagmagic` view too)
    widget = notebook.widgets().and_(notebook.page.locator(":not(.dagmagic-compare-view)")).last
    expect(widget.locator(".dagmagic-answer-body")).to_contain_text("forty-two")
    before = notebook.kernel_print("print(len(llm.requests_for('step')))").strip()

    node(widget, "s2", 1).click()
    detail = widget.locator('.dagmagic-detail[data-step-id="s2"]')
    box = detail.locator(".dagmagic-whatif-box")
    expect(box.locator("h4")).to_have_text("What if s2 had said…")
    area = box.locator("textarea.dagmagic-whatif-result")
    expect(area).to_have_value("seven")
    area.fill("eight")
    notebook.screenshot("what-if-panel", focus=box)
    box.locator(".dagmagic-whatif").click()

    second = widget.locator('.dagmagic-round[data-round="2"]')
    expect(second.locator(".dagmagic-rerun-label")).to_have_text(
        "continued from round 1 with s2's result edited by you"
    )
    expect(widget.locator(".dagmagic-status")).to_have_attribute("data-status", "done")
    edited = node(widget, "s2", 2)
    expect(edited).to_have_attribute("data-edited", "true")
    expect(edited.locator(".dagmagic-badge-edited")).to_have_text("edited by you")
    expect(node(widget, "s1", 2)).to_have_attribute("data-reused-from", "1")  # kept
    expect(node(widget, "s3", 2)).to_have_attribute("data-status", "completed")
    expect(node(widget, "s3", 2)).not_to_have_attribute("data-reused-from", re.compile(".*"))  # ran again
    # the detail followed s2 into the new round: its result is the user's
    followed = second.locator('.dagmagic-detail[data-step-id="s2"]')
    expect(followed.locator(".dagmagic-edited-pill")).to_have_text("result edited by you")
    expect(followed.locator(".dagmagic-detail-result")).to_have_text("eight")
    expect(widget.locator(".dagmagic-answer-body")).to_contain_text("forty-eight")
    expect(second.locator('.dagmagic-diff li[data-step-id="s2"]')).to_have_text("s2 changed: result (edited by you)")
    expect(second.locator('.dagmagic-diff li[data-step-id="s3"]')).to_have_text("s3 changed: result")
    compare = second.locator(".dagmagic-compare-rounds")
    expect(compare).to_have_text("Compare with round 1")
    notebook.screenshot("what-if-round", focus=second.locator(".dagmagic-graph"))
    notebook.screenshot("what-if-round-detail", focus=followed)

    node(widget, "s3", 2).click()
    s3 = second.locator('.dagmagic-detail[data-step-id="s3"]')
    expect(s3.locator(".dagmagic-detail-result")).to_have_text("forty-eight")
    expect(s3.locator(".dagmagic-edited-pill")).to_have_count(0)  # a model wrote it

    compare.click()
    # the compare widget opens under the round, drawn inside the run widget (anywidget's widget composition)
    shown = second.locator(".dagmagic-comparison--widget")
    expect(shown.locator(".dagmagic-comparison-head")).to_contain_text("Comparing round 1 vs round 2")
    view = shown.locator(".dagmagic-comparison-slot .dagmagic-compare-view")
    expect(view).to_be_visible()
    pairs = view.locator("tr.dagmagic-compare-pair")
    expect(pairs).to_have_count(3)
    expect(view.locator("tr[data-change='same']")).to_have_count(1)  # s1, kept
    changed = view.locator("tr[data-change='changed']")
    expect(changed).to_have_count(2)  # s2 (edited by you) and s3 (ran again)
    expect(changed.nth(0).locator("del")).to_have_text("seven")
    expect(changed.nth(0).locator("ins")).to_have_text("eight")
    expect(changed.nth(1).locator("del")).to_have_text("forty-two")
    expect(changed.nth(1).locator("ins")).to_have_text("forty-eight")
    expect(view.locator(".dagmagic-compare-answers ins")).to_contain_text("forty-eight")
    expect(second.locator("details.dagmagic-comparison")).to_have_count(0)  # no Markdown beside it
    notebook.screenshot("what-if-compare", focus=shown)

    state = notebook.kernel_print(
        f"r = dagmagic.last_run()\nq = llm.requests_for('step')[{before}:]\n"
        "print(len(r.rounds), r.rounds[1].what_if, r.steps['s2'].edited, r.steps['s2'].result, "
        "r.steps['s3'].result, [x.step_id for x in q])"
    )
    assert state == "2 True True eight forty-eight ['s3']\n"  # only what uses s2 ran again

    dark(notebook)
    try:
        expect(second.locator(".dagmagic-graph")).to_be_visible()
        notebook.screenshot("what-if-round-dark", focus=second.locator(".dagmagic-graph"))
        expect(view).to_be_visible()
        notebook.screenshot("what-if-compare-dark", focus=shown)
        node(widget, "s2", 2).click()
        expect(followed).to_be_visible()
        notebook.screenshot("what-if-detail-dark", focus=followed)
        # the comparison stayed open while the round was drawn again; Close comparison closes it
        expect(view).to_be_visible()
        shown.locator(".dagmagic-comparison-close").click()
        expect(second.locator(".dagmagic-comparison")).to_have_count(0)
    finally:
        notebook.page.evaluate(
            "() => window.jupyterapp.commands.execute('apputils:change-theme', {theme: 'JupyterLab Light'})"
        )
    assert notebook.errors == []


def dark(notebook: NotebookPage) -> None:
    """Switch JupyterLab to its dark theme."""
    notebook.page.evaluate(
        "() => window.jupyterapp.commands.execute('apputils:change-theme', {theme: 'JupyterLab Dark'})"
    )
    notebook.page.wait_for_function("() => document.body.dataset.jpThemeLight === 'false'", timeout=WAIT_MS)
    # JupyterLab covers the page with its splash while the theme changes: the screenshots wait until it has gone
    notebook.page.wait_for_function("() => !document.querySelector('#jupyterlab-splash')", timeout=WAIT_MS)
