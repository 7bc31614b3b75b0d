"""The documentation site as a reader gets it: built with ``mkdocs build --strict`` from this checkout, served
from 127.0.0.1, opened in Debian's chromium. The front page is the README with its picture, the configuration
reference holds every setting, and a tutorial shows its stored outputs; no page loads anything from elsewhere
(the site must read offline: no fonts, scripts or styles from a CDN).

mkdocs missing fails these tests (the docs extra is part of dev): the site is checked, never skipped.
"""

from __future__ import annotations

import functools
import http.server
import os
import re
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from dagmagic.settings import DagSettings

from .conftest import CHROMIUM, SCREENSHOTS, WAIT_MS

pytestmark = [
    pytest.mark.browser,
    pytest.mark.timeout(300),  # the build, then chromium's first start
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"Debian's chromium is not installed at {CHROMIUM}"),
]

ROOT = Path(__file__).resolve().parents[2]


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # the test's output is its assertions
        pass


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The site built from this checkout, served on a free port of 127.0.0.1; its base URL."""
    built = tmp_path_factory.mktemp("docs") / "site"
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(built)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        # the settings' table shows defaults: no DAG_* variable of this shell in it
        env={**{k: v for k, v in os.environ.items() if not k.startswith("DAG_")}, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert build.returncode == 0, (
        f"mkdocs build --strict failed (is the docs extra installed?):\n{build.stderr[-4000:]}"
    )
    handler = functools.partial(_QuietHandler, directory=str(built))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, name="docs-site", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture
def page(browser: Any, site: str) -> Iterator[Any]:
    """A tab on the site; anything it asks of another host is refused and remembered in ``page.elsewhere``."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    tab = context.new_page()
    tab.elsewhere = []

    def only_the_site(route: Any) -> None:
        if urllib.parse.urlsplit(route.request.url).hostname == "127.0.0.1":
            route.continue_()
        else:
            tab.elsewhere.append(route.request.url)
            route.abort()

    tab.route("**/*", only_the_site)
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        yield tab
        assert tab.elsewhere == [], f"the site loaded from elsewhere: {tab.elsewhere}"
        assert errors == [], errors
    finally:
        context.close()


def test_the_front_page_is_the_readme_with_its_picture_and_the_settings_are_generated(page: Any, site: str) -> None:
    page.goto(site, timeout=WAIT_MS)
    expect(page).to_have_title("dagmagic")
    content = page.locator("article.md-content__inner")
    expect(content.locator("h1")).to_have_text(re.compile(r"^dagmagic"))  # and its permalink's ¶
    expect(content.locator("h2", has_text="The two commands")).to_be_visible()
    expect(content.locator("code", has_text="bash .ci/run")).to_be_visible()
    picture = content.locator('img[src$="widget.png"]')
    expect(picture).to_be_visible()
    assert picture.evaluate("img => img.complete && img.naturalWidth") > 0, "the widget's picture did not load"
    # the README's links are the site's: a documentation page, a rendered tutorial
    content.locator("a", has_text="Getting started").first.click()
    expect(page.locator("article h1")).to_have_text(re.compile(r"^Getting started"))
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.goto(site, timeout=WAIT_MS)
    page.screenshot(path=str(SCREENSHOTS / "docs-front-page.png"))

    page.goto(site + "configuration/", timeout=WAIT_MS)
    table = page.locator("article table")
    for name in DagSettings.model_fields:
        expect(table.locator("td code", has_text=name).first).to_be_visible()
    expect(table).to_contain_text("DAG_MAX_CONCURRENCY")

    # the API reference, from the docstrings: the session, and what a run answers (from its base class)
    page.goto(site + "api/", timeout=WAIT_MS)
    expect(page.locator("article h2", has_text="DagSession").first).to_be_visible()
    expect(page.locator('[id="dagmagic.engine.run.dag_run.DagRun.answer"]')).to_have_count(1)
    page.screenshot(path=str(SCREENSHOTS / "docs-api.png"))


def test_a_tutorial_is_rendered_with_its_stored_outputs(page: Any, site: str) -> None:
    page.goto(site, timeout=WAIT_MS)
    page.locator("article.md-content__inner a", has_text="Quickstart").first.click()
    expect(page).to_have_url(site + "tutorials/01_quickstart/")
    notebook = page.locator(".jupyter-wrapper")
    expect(notebook.locator("h1").first).to_contain_text("Quickstart")
    expect(notebook.locator(".jp-InputArea", has_text="%load_ext dagmagic").first).to_be_visible()
    # the %dag demo cell's stored output: the run's static view, each round's DAG a picture in its <details>
    view = notebook.locator(".dagmagic-static").first
    expect(view).to_contain_text("status: done")
    view.locator("details > summary", has_text="Round 1").first.click()
    picture = view.locator('img[alt^="The plan of round 1"]').first
    expect(picture).to_be_visible()
    assert picture.evaluate("img => img.complete && img.naturalWidth") > 0, "the stored DAG picture did not load"
    picture.scroll_into_view_if_needed()
    page.screenshot(path=str(SCREENSHOTS / "docs-tutorial-01-stored-output.png"))
    # a tutorial's link to the next one leads to its page on the site, not to a .ipynb file
    next_link = notebook.locator('a[href*="02_tools"]').first
    assert not (next_link.get_attribute("href") or "").endswith(".ipynb")
    next_link.click()
    expect(page).to_have_url(site + "tutorials/02_tools/")
