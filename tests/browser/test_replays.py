"""``%dag replay`` in JupyterLab: a replay that diverged from its recording says where in its header, and shows the
diff line by line, monospace, removed and added lines marked.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import expect

from .conftest import CHROMIUM, Lab, NotebookPage, _tab

pytestmark = [
    pytest.mark.browser,
    pytest.mark.timeout(180),
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"Debian's chromium is not installed at {CHROMIUM}"),
]

SETUP = textwrap.dedent(
    """
    from dagmagic.testing import ScriptedLLM

    llm = ScriptedLLM({
        "plan": [{"steps": [{"id": "s1", "task": "Look up Paris"}, {"id": "s2", "task": "Look up Berlin"}]}],
        "step": ["2.1 million", "3.7 million"],
        "analyze": [{"achieved": True, "confidence": 0.9, "reasoning": "Both found.",
                     "final_answer": "Berlin (3.7 M) is larger than Paris (2.1 M)."}],
    })

    def lookup(city: str) -> str:
        \"\"\"The population of a city.\"\"\"
        return "unknown"
    """
)
EDITED = textwrap.dedent(
    '''
    def lookup(city: str) -> str:
        """The number of people living in a city, from its latest census."""
        return "unknown"
    '''
)


@pytest.fixture
def lab_tab(request: pytest.FixtureRequest, browser: Any, lab: Lab) -> Iterator[NotebookPage]:
    """A tab on JupyterLab only: the header is drawn alike in Notebook 7."""
    yield from _tab(request, browser, lab)


def test_a_diverged_replay_says_where_and_shows_the_diff(lab_tab: NotebookPage) -> None:
    notebook = lab_tab
    cells = [
        "%load_ext dagmagic",
        SETUP,
        "%%dag --models llm --tools lookup\nWhich is larger, Paris or Berlin?",
        EDITED,
        "%dag replay 1",
    ]
    notebook.open("replay", cells)
    notebook.run_all()
    notebook.wait_until_done()
    widgets = notebook.widgets()
    expect(widgets).to_have_count(2)
    replayed = widgets.last
    expect(replayed.locator(".dagmagic-status")).to_have_attribute("data-status", "failed")
    error = replayed.locator(".dagmagic-error")
    expect(error.locator(".dagmagic-divergence-headline")).to_have_text(
        "Diverged from the recording at the 'plan' call in round 1: it was not recorded."
    )
    reason = error.locator(".dagmagic-divergence-reason")
    expect(reason.locator('[data-kind="removed"]').first).to_have_text(
        "-    lookup(city: string) — The population of a city."
    )
    expect(reason.locator('[data-kind="added"]').first).to_contain_text("from its latest census")
    font = reason.evaluate("(el) => getComputedStyle(el).fontFamily")
    assert "mono" in font.lower() or "menlo" in font.lower() or "consolas" in font.lower(), font
    removed = reason.locator('[data-kind="removed"]').first.evaluate("(el) => getComputedStyle(el).color")
    added = reason.locator('[data-kind="added"]').first.evaluate("(el) => getComputedStyle(el).color")
    assert removed != added
    expect(replayed.locator(".dagmagic-header")).not_to_contain_text("ReplayMismatch")
    page = notebook.page.locator(f"[id='{notebook.panel_id}']")
    expect(page).to_contain_text("Replay of run ")
    expect(page).to_contain_text("`%dag diff 2` (or `replayed.diff(original)`) shows what changed.")
    notebook.screenshot("replay-diverged", focus=error)
    assert notebook.errors == []
