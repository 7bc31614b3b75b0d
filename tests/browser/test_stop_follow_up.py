"""Stop and follow-up mid-steps in JupyterLab and chromium, as the issue met them: the verdict finds the goal met
(achieved, 90 %) although a step was skipped. The view must say the answer is partial after a Stop, confirm a
follow-up with what will then happen, and show the follow-up in the round it shaped. Screenshots land in
``test-output/e2e/``.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import Locator, expect

from .conftest import CHROMIUM, NotebookPage
from .test_e2e import Gate, cells, expect_waiting_for_the_gate, node

pytestmark = [
    pytest.mark.browser,
    pytest.mark.timeout(180),  # the first test also starts JupyterLab and chromium
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"Debian's chromium is not installed at {CHROMIUM}"),
]

FOLLOW_UP = "Also give it in Roman numerals"


def centred(locator: Locator) -> None:
    """Scroll ``locator`` to the middle of the page, so its screenshot shows what is around it."""
    locator.evaluate("el => el.scrollIntoView({block: 'center'})")


def test_a_stop_mid_steps_makes_the_answer_partial_even_when_the_verdict_finds_the_goal_met(
    jupyterlab: NotebookPage,
) -> None:
    notebook = jupyterlab
    gate = Gate(notebook, "stop_met")
    notebook.open("stop_met", cells(gate, "scripted()", "Stop me though the goal is met"))  # its verdict: achieved
    notebook.run_all()
    widget = notebook.widget()
    expect_waiting_for_the_gate(widget)
    widget.locator(".dagmagic-stop").click()
    expect(node(widget, "s3")).to_have_attribute("data-status", "skipped")
    gate.open()
    expect(widget.locator(".dagmagic-status")).to_have_attribute("data-status", "done")
    notebook.wait_until_done()
    widget = notebook.widgets().last

    expect(widget.locator(".dagmagic-status")).to_have_text("stopped by you")
    round_ = widget.locator('.dagmagic-round[data-round="1"]')
    expect(round_.locator(".dagmagic-round-summary")).to_contain_text("achieved 90% · synthesize · partial answer")
    expect(round_.locator(".dagmagic-verdict-mark")).to_have_text("✓ achieved")  # what the verdict found stands...
    banner = round_.locator(".dagmagic-verdict-partial")  # ...and beside it, that the answer is partial
    expect(banner).to_be_visible()
    expect(banner).to_contain_text("Partial answer: the run was stopped before it finished")
    expect(widget.locator(".dagmagic-answer-partial")).to_be_visible()
    centred(banner)
    notebook.screenshot("stop-mid-steps-partial", focus=banner)

    said = notebook.kernel_print(  # what the saved notebook keeps, and the cell's value
        "from dagmagic.notebook.fallbacks import run_markdown\nr = dagmagic.last_run()\n"
        "print(r.partial)\nprint(repr(r))\nprint(run_markdown(r))"
    )
    assert said.startswith("True\n<DagRun done (stopped by you, partial answer):"), said
    assert "· partial answer" in said and "**Answer** (partial: the run was stopped before it finished)" in said, said
    assert notebook.errors == []


def test_a_follow_up_mid_steps_is_confirmed_as_it_happens_and_shown_in_its_round(jupyterlab: NotebookPage) -> None:
    notebook = jupyterlab
    gate = Gate(notebook, "follow_up_met")
    notebook.open("follow_up_met", cells(gate, "scripted()", "What is six times seven?"))  # its verdict: achieved
    notebook.run_all()
    widget = notebook.widget()
    expect_waiting_for_the_gate(widget)
    widget.locator(".dagmagic-followup-input").fill(FOLLOW_UP)
    widget.locator(".dagmagic-followup-send").click()
    notice = widget.locator(".dagmagic-notice")
    expect(notice).to_contain_text("Then the verdict judges what completed against the goal with your follow-up")
    expect(notice).to_contain_text("and then the answer takes it into account")
    expect(notice).not_to_contain_text("will replan")
    expect(node(widget, "s3")).to_have_attribute("data-status", "skipped")
    centred(notice)
    notebook.screenshot("follow-up-mid-steps-notice", focus=notice)
    gate.open()
    expect(widget.locator(".dagmagic-status")).to_have_attribute("data-status", "done")
    notebook.wait_until_done()
    widget = notebook.widgets().last

    # what the notice said happened: no new round; the verdict and answer of round 1 took it in, and round 1 says so
    expect(widget.locator(".dagmagic-round")).to_have_count(1)
    shown = widget.locator('.dagmagic-round[data-round="1"] .dagmagic-round-followup[data-kind="answered"]')
    expect(shown).to_have_text(f"Follow-up, taken into account by this round's verdict and answer: {FOLLOW_UP}")
    centred(shown)
    notebook.screenshot("follow-up-mid-steps-round", focus=shown)

    said = notebook.kernel_print(
        "from dagmagic.notebook.fallbacks import run_html, run_markdown\nr = dagmagic.last_run()\n"
        "print(run_markdown(r))\nprint(run_html(r))"
    )
    assert f"your follow-up (taken into account by round 1's verdict and answer): {FOLLOW_UP}" in said, said
    assert f"<b>Your follow-up</b> (taken into account by round 1&#x27;s verdict and answer): {FOLLOW_UP}" in said
    assert notebook.errors == []
