"""A prompt-injected model's payloads, in a real browser: neither the live widget nor the static views run them or
let them fetch anything.

The payloads (tests/notebook/test_hostile_static.py) point at a local HTTP server the test starts, which counts
every request it receives. They are in everything a model writes: the plan's step ids and tasks, step results, a
tool's observation, a step's error, the verdict, the streamed answer, and (a second run) the run's error. The
planner keeps a model-written id as written (``<img src=x onerror=...>`` included): the widget shows it through
``textContent`` and attributes, the static views escape it. After every place they appear has been opened, the
page must have fired no dialog, set no ``window.__pwned``, loaded no ``<img>`` but the DAG's pictures (SVG
documents inside the page), and the server must have seen nothing; a control request from the page proves it
would have.
"""

from __future__ import annotations

import textwrap
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from playwright.sync_api import Locator, expect

from tests.notebook.test_hostile_static import HOSTILE_ID, hostile, payloads

from .conftest import CHROMIUM, WAIT_MS, NotebookPage

pytestmark = [
    pytest.mark.browser,
    pytest.mark.timeout(300),  # the first test also starts the server and chromium; two runs, every view opened
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"Debian's chromium is not installed at {CHROMIUM}"),
]


class Counter:
    """A local HTTP server that records every request it receives (any method), and answers 204."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        counter = self

        class Handler(BaseHTTPRequestHandler):
            def _record(self) -> None:
                counter.requests.append(f"{self.command} {self.path}")
                self.send_response(204)
                self.send_header("Access-Control-Allow-Origin", "*")
                self.end_headers()

            do_GET = do_POST = do_HEAD = do_OPTIONS = _record

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, name="leak-counter", daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def counter() -> Iterator[Counter]:
    server = Counter()
    try:
        yield server
    finally:
        server.close()


MODELS = textwrap.dedent(
    """
    from IPython.display import display
    from dagmagic.notebook.fallbacks import run_html, run_markdown
    from dagmagic.testing import ScriptedLLM, ToolCall

    def probe(query: str) -> str:
        "Look something up."
        return HOSTILE

    def step(request):
        if request.step_id == "s2":
            raise RuntimeError(HOSTILE)
        return HOSTILE

    PLAN = {"steps": [
        {"id": HOSTILE_ID, "task": HOSTILE},
        {"id": "s2", "task": HOSTILE, "dependencies": [HOSTILE_ID]},
        {"id": "s3", "task": HOSTILE, "tool_hint": "probe"},
    ]}

    def scripted(**overrides):
        script = {
            "plan": [PLAN],
            "step": step,
            "step:s3": [ToolCall("probe", {"query": "x"}), HOSTILE],
            "analyze": [{"achieved": True, "confidence": 0.9, "reasoning": HOSTILE,
                         "final_answer": "".join(payload + "\\n\\n" for payload in PAYLOADS)}],
        }
        return ScriptedLLM({**script, **overrides}, chunk_delay=0.02)

    llm = scripted()
    failing = scripted(analyze=[RuntimeError(HOSTILE)])
    """
)

STATIC = textwrap.dedent(
    """
    for run in (answered, failed):
        display({"text/markdown": run_markdown(run)}, raw=True)
        display({"text/html": run_html(run)}, raw=True)
    """
)


def open_everything(widget: Locator) -> None:
    """Every step's detail (and its tool calls), the verdict, the timeline, the trace and each call in it."""
    nodes = widget.locator(".dagmagic-node")
    for index in range(nodes.count()):
        nodes.nth(index).click()
        detail = widget.locator(".dagmagic-detail")
        expect(detail).to_be_visible()
        expect(detail.locator(".dagmagic-detail-task")).to_contain_text("<script>window.__pwned=1</script>")
        for summary in detail.locator("summary").all():
            summary.click()
    for section in (".dagmagic-timeline", ".dagmagic-trace"):
        widget.locator(f"{section} summary").first.click()
    rows = widget.locator(".dagmagic-trace-row[data-index]")
    for index in range(rows.count()):
        rows.nth(index).click()
        call = rows.nth(index).get_attribute("data-index")
        expect(widget.locator(f'.dagmagic-trace-detail[data-index="{call}"]')).to_be_visible()
    expect(widget.locator(".dagmagic-trace-detail")).to_have_count(rows.count())  # every call open at once


def test_hostile_text_is_shown_and_never_runs_or_fetches(notebook: NotebookPage, counter: Counter) -> None:
    page = notebook.page
    dialogs: list[str] = []

    def on_dialog(dialog: Any) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", on_dialog)
    setup = f"HOSTILE = {hostile(counter.url)!r}\nHOSTILE_ID = {HOSTILE_ID!r}\nPAYLOADS = {payloads(counter.url)!r}\n"
    cells = [
        "%load_ext dagmagic",
        setup + MODELS,
        "%%dag --models llm --tools probe -o answered\nAnswer from what the steps find",
        "%%dag --models failing --tools probe -o failed --new\nThis run fails",
        STATIC,
    ]
    notebook.open("hostile", cells)
    notebook.run_all()
    notebook.wait_until_done()
    widgets = notebook.widgets()
    expect(widgets).to_have_count(2)
    answered, failed = widgets.nth(0), widgets.nth(1)
    expect(answered.locator(".dagmagic-status")).to_have_attribute("data-status", "done")
    expect(failed.locator(".dagmagic-status")).to_have_attribute("data-status", "failed")

    # the model-written id, kept as written, is a node's attribute and text: nothing more
    ids = answered.locator(".dagmagic-node").evaluate_all("(nodes) => nodes.map((n) => n.dataset.stepId)")
    assert HOSTILE_ID in ids, ids
    expect(answered.locator(".dagmagic-node").nth(ids.index(HOSTILE_ID))).to_contain_text(HOSTILE_ID[:20])
    for widget in (answered, failed):
        open_everything(widget)

    # shown as text: the streamed answer, the verdict, a step's error, the run's error
    answer = answered.locator(".dagmagic-answer-body")
    expect(answer).to_contain_text("<script>window.__pwned=1</script>")
    expect(answer).to_contain_text('<img src=x onerror="window.__pwned=2">')
    image = answer.locator("a.dagmagic-image-link").first  # a remote image: a link to it, not an <img>
    expect(image).to_have_text("[image: x]")
    expect(image).to_have_attribute("href", f"{counter.url}/leak?d=secret")
    expect(answer).to_contain_text("click")  # a javascript: link: only its text
    expect(answered.locator(".dagmagic-verdict")).to_contain_text("<script>window.__pwned=1</script>")
    expect(failed.locator(".dagmagic-error")).to_contain_text("RuntimeError: <script>window.__pwned=1</script>")
    if not answered.locator('.dagmagic-detail[data-step-id="s3"]').is_visible():  # a second click closes it
        answered.locator('.dagmagic-node[data-step-id="s3"]').click()
    expect(answered.locator(".dagmagic-toolcall-obs").first).to_contain_text("<script>window.__pwned=1</script>")
    notebook.screenshot("hostile-widget", focus=answer)

    # the static views, as JupyterLab renders them (Markdown through its own renderer): as inert
    static = page.locator(".jp-OutputArea-output .dagmagic-static")
    expect(static).to_have_count(2)
    expect(static.first).to_contain_text("<script>window.__pwned=1</script>")
    outputs = page.locator(".jp-RenderedMarkdown")
    expect(outputs.filter(has_text="dagmagic")).to_have_count(2)
    expect(outputs.filter(has_text="<script>window.__pwned=1</script>")).to_have_count(2)
    for name, shown in (("hostile-static-markdown", outputs.first), ("hostile-static-html", static.first)):
        shown.scroll_into_view_if_needed()
        expect(shown).to_be_in_viewport()  # JupyterLab draws cells scrolled to only when they are in view
        notebook.screenshot(name, focus=shown)

    for where in (".dagmagic", ".jp-OutputArea-output"):
        for element in ("iframe", "video", "audio", "object", "embed", "form", "picture", "script", "style"):
            expect(page.locator(f"{where} {element}")).to_have_count(0)
        # the DAG's pictures only: SVG documents inside the page (an image's SVG runs and fetches nothing)
        expect(page.locator(f"{where} img:not([src^='data:image/svg+xml;base64,'])")).to_have_count(0)
    # the widget's own fields (follow-up, re-run) are its only inputs
    expect(page.locator(".jp-OutputArea-output input:not([class^='dagmagic-']), input[type=image]")).to_have_count(0)
    expect(page.locator(".jp-OutputArea-output [style*='url(']")).to_have_count(0)
    expect(page.locator(".dagmagic a[href^='javascript'], .jp-OutputArea-output a[href^='javascript']")).to_have_count(
        0
    )
    assert page.evaluate("() => window.__pwned") is None
    assert dialogs == []

    # the control: a fetch from this page does reach the counter, so an empty count means nothing was fetched
    page.evaluate("(url) => fetch(url, {mode: 'no-cors'}).catch(() => {})", f"{counter.url}/control")
    for _ in range(WAIT_MS // 100):
        if counter.requests:
            break
        page.wait_for_timeout(100)
    assert counter.requests == ["GET /control"], counter.requests
    assert notebook.errors == []
