"""What a round says about itself, in JupyterLab: a plan cut to ``plan_max_steps`` (in the round and beside the
answer, with the setting that allows more), what changed since the round before (steps matched by what they
are, reused results as reused), and a long plan call that shows what has arrived, in the header's phase.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import expect

from .conftest import CHROMIUM, WAIT_MS, Lab, NotebookPage, _tab
from .test_e2e import Gate, cells, node

pytestmark = [
    pytest.mark.browser,
    pytest.mark.timeout(180),
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"Debian's chromium is not installed at {CHROMIUM}"),
]


@pytest.fixture
def lab_tab(request: pytest.FixtureRequest, browser: Any, lab: Lab) -> Iterator[NotebookPage]:
    """A tab on JupyterLab only: what is checked here is the widget's own drawing, the same in Notebook 7."""
    yield from _tab(request, browser, lab)


FOURTEEN = [
    {"id": "s1", "task": "Look up the first half"},
    {"id": "s2", "task": "Look up the second half"},
    {"id": "s3", "task": "Multiply both halves", "dependencies": ["s1", "s2"]},
    *({"id": f"s{i}", "task": f"Check the product a {i}th way", "dependencies": ["s3"]} for i in range(4, 15)),
]
RENUMBERED = [  # round 2: its s1 is round 1's s2 again, its s2 is new and uses round 1's s1 as it is
    {"id": "s1", "task": "Look up the second half"},
    {"id": "s2", "task": "Give the product in base 13", "dependencies": ["r1.s1", "s1"]},
]


def test_a_cut_plan_and_a_renumbered_replan_say_what_happened(lab_tab: NotebookPage) -> None:
    notebook = lab_tab
    gate = Gate(notebook, "cut")
    model = (
        f"scripted(plan=[{{'steps': {FOURTEEN!r}}}, {{'steps': {FOURTEEN!r}}}, {{'steps': {RENUMBERED!r}}}], "
        'analyze=[{"achieved": False, "confidence": 0.95, "reasoning": "Not in base 13."}, ACHIEVED])'
    )
    load, setup, dag = cells(gate, model, "What is six times seven?")
    notebook.open("cut", [load, setup, dag, "%dag config plan_max_steps=14"])
    notebook.run_all()
    widget = notebook.widget()
    first = widget.locator('.dagmagic-round[data-round="1"]')
    expect(node(widget, "s1", 1)).to_have_attribute("data-status", "running")
    expect(first.locator(".dagmagic-node")).to_have_count(6)
    banner = first.locator(".dagmagic-plan-cut")
    expect(banner).to_contain_text("The plan had 14 steps: only the first 6 ran.")
    expect(banner.locator("code")).to_have_text("%dag config plan_max_steps=14")
    expect(first.locator(".dagmagic-round-summary")).to_contain_text("6 of 14 planned steps")
    expect(first.locator(".dagmagic-round-warnings")).not_to_contain_text("the first 6 run")  # said once, above
    notebook.screenshot("plan-cut-round", focus=banner)

    widget.locator(".dagmagic-followup-input").fill("Give it in base 13")
    widget.locator(".dagmagic-followup-send").click()
    expect(node(widget, "s3", 1)).to_have_attribute("data-status", "skipped")
    gate.open()
    expect(widget.locator(".dagmagic-status")).to_have_attribute("data-status", "done")
    notebook.wait_until_done()
    widget = notebook.widgets().first

    second = widget.locator('.dagmagic-round[data-round="2"]')
    items = second.locator(".dagmagic-diff li")
    expect(items).to_have_text(
        [
            "s1 (was s2) changed: result",
            "s2 added",
            "r1.s1 reused",  # round 2 uses it: not "removed"
            *(f"s{i} removed" for i in range(3, 7)),
        ]
    )
    reused = second.locator('.dagmagic-diff li[data-change="reused"] button')
    notebook.screenshot("diff-reused", focus=second.locator(".dagmagic-diff-wrap"))

    near = widget.locator(".dagmagic-answer .dagmagic-answer-cut")
    expect(near).to_be_visible()
    expect(near).to_contain_text("This answer comes from 6 of the 14 steps planned in round 1")
    expect(near.locator("code")).to_have_text("%dag config plan_max_steps=14")
    notebook.screenshot("plan-cut-answer", focus=near)

    reused.click()  # the reused result is one click away, in its round
    expect(widget.locator('.dagmagic-detail[data-step-id="s1"]')).to_contain_text("Look up the first half")
    page = notebook.page.locator(f"[id='{notebook.panel_id}']")
    expect(page).to_contain_text("plan_max_steps = 14 (was 6): from the next %%dag cell on.")
    assert notebook.errors == []


SLOW_PLAN = textwrap.dedent(
    """
    PLAN_GATE = pathlib.Path("slow_plan.gate")
    FIVE = {"steps": [
        {"id": "s1", "task": "Look up the first half of the product"},
        {"id": "s2", "task": "Look up the second half of the product"},
        {"id": "s3", "task": "Multiply both halves together", "dependencies": ["s1", "s2"]},
        {"id": "s4", "task": "Check the multiplication another way", "dependencies": ["s3"]},
        {"id": "s5", "task": "Write the result in words for the reader", "dependencies": ["s4"]},
    ]}

    async def slow_plan(request):
        while not PLAN_GATE.exists():  # the model thinks before its first token
            await asyncio.sleep(0.05)
        return FIVE

    llm = scripted(plan=slow_plan)
    llm.chunk_delay = 0.3  # a slow local model: a few pieces a second
    """
)


def test_a_long_plan_call_shows_what_arrives_in_the_headers_phase(lab_tab: NotebookPage) -> None:
    notebook = lab_tab
    gate = Gate(notebook, "slow")
    gate.open()  # round 1's steps run as soon as they arrive
    plan_gate = notebook.lab.root / "slow_plan.gate"
    plan_gate.unlink(missing_ok=True)
    load, setup, dag = cells(gate, "None", "What is six times seven?")
    notebook.open("slow", [load, setup + SLOW_PLAN, dag])
    notebook.run_all()
    widget = notebook.widget()
    status = widget.locator(".dagmagic-status")
    planning = widget.locator('.dagmagic-round[data-round="1"] .dagmagic-planning')
    expect(planning).to_have_text("Planning the first steps… waiting for the model's first token")
    expect(status).to_have_text(re.compile(r"^planning… \d+s$"))
    widget.locator(".dagmagic-timeline-summary").click()
    expect(widget.locator(".dagmagic-timeline-bar--call-running")).to_have_count(1)  # the plan call, growing
    notebook.screenshot("slow-plan-waiting", focus=widget.locator(".dagmagic-header"))

    plan_gate.touch()
    progress = widget.locator('.dagmagic-round[data-round="1"] .dagmagic-plan-progress')
    expect(progress).to_have_text(re.compile(r"^Writing the plan: [12] steps? so far · \d+ tokens$"))
    counts: list[tuple[str, str]] = []
    while True:  # while the plan streams, the round and the header say the same phase, and the counts grow
        header, round_text = status.inner_text(), widget.locator('.dagmagic-round[data-round="1"]').inner_text()
        if not header.startswith("planning"):
            break
        assert "Judging" not in round_text, round_text
        found = re.search(r"Writing the plan: (\d+) steps? so far · (\d+) tokens", round_text)
        tokens = re.search(r"· (\d+) tokens$", header)
        if found and tokens:
            counts.append((found.group(2), tokens.group(1)))
            if len(counts) == 3:
                notebook.screenshot("slow-plan-streaming", focus=widget.locator('.dagmagic-round[data-round="1"]'))
        notebook.page.wait_for_timeout(200)
    streamed = [int(round_tokens) for round_tokens, _ in counts]
    assert len(set(streamed)) >= 3 and streamed == sorted(streamed), counts  # it grew, step by step
    expect(status).to_have_attribute("data-status", "done", timeout=WAIT_MS)
    notebook.wait_until_done()
    expect(widget.locator('.dagmagic-round[data-round="1"] .dagmagic-node')).to_have_count(5)
    assert notebook.errors == []
