"""JupyterLab on a free port and Debian's chromium driven by playwright, for the end-to-end tests.

The server runs in its own session (process group) with isolated config, settings, workspaces and runtime
directories, and never fetches news or update checks. Every wait is bounded; teardown always stops the
browser and the server (and with it the kernels it started).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat
import pytest
from playwright.sync_api import Error as PlaywrightError

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",  # fixed a first-launch crash here
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
SCREENSHOTS = Path(__file__).resolve().parents[2] / "test-output" / "e2e"
"""Screenshots for humans (git-ignored)."""

STARTUP_TIMEOUT = 60.0
WAIT_MS = 60_000
"""The longest any single wait on the page may take."""


@dataclass
class Lab:
    """A running JupyterLab (or Notebook 7) server."""

    url: str
    root: Path
    process: subprocess.Popen[bytes]
    log: Path
    app: str = "lab"
    """``lab`` or ``notebook`` (Notebook 7): how a notebook's page is addressed."""

    def api(self, method: str, path: str) -> Any:
        request = urllib.request.Request(f"{self.url}{path}", method=method)
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read()
        return json.loads(body) if body else None

    def write_notebook(self, name: str, cells: list[str]) -> str:
        """Save a notebook of code cells in the server's root; returns its path there."""
        nb = nbformat.v4.new_notebook(
            metadata={"kernelspec": {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}}
        )
        nb.cells = [nbformat.v4.new_code_cell(source) for source in cells]
        nbformat.write(nb, self.root / f"{name}.ipynb")
        return f"{name}.ipynb"

    def shut_down_kernels(self) -> None:
        for session in self.api("GET", "/api/sessions") or []:
            self.api("DELETE", f"/api/sessions/{session['id']}")

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM (the server shuts its kernels down), then SIGKILL to the process group it leads."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=15)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)  # the server and anything it left behind: its kernels
    process.wait(timeout=10)


# Module scope: the sync playwright API keeps an event loop of its own for as long as it runs, which would
# break the asyncio tests of the modules that follow; it must be gone before they start.
@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    yield from _serve(tmp_path_factory, "lab")


@pytest.fixture(scope="module")
def notebook7_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """The same server as Notebook 7 (the ``notebook`` package) serves it."""
    yield from _serve(tmp_path_factory, "notebook")


def _serve(tmp_path_factory: pytest.TempPathFactory, app: str) -> Iterator[Lab]:
    if not CHROMIUM.exists():
        pytest.skip(f"Debian's chromium is not installed at {CHROMIUM} (apt-get install chromium)")
    base = tmp_path_factory.mktemp("jupyterlab")
    root, settings = base / "root", base / "settings"
    root.mkdir()
    notification = settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    notification.parent.mkdir(parents=True)
    # no "get notified about Jupyter news?" toast over the screenshots, no request to a news feed
    notification.write_text(json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("DAG_")}
    env.update(
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        DAG_STORE="none",
        PYDEVD_DISABLE_FILE_VALIDATION="1",
        JUPYTER_CONFIG_DIR=str(base / "config"),
        JUPYTER_RUNTIME_DIR=str(base / "runtime"),
    )
    port = _free_port()
    command = [
        sys.executable,
        "-m",
        "jupyter",
        "lab",
        "--no-browser",
        "--allow-root",
        "--ServerApp.token=",
        "--ServerApp.password=",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        "--ServerApp.disable_check_xsrf=True",  # lets the fixture shut kernels down through the REST API
        f"--ServerApp.root_dir={root}",
    ]
    if app == "lab":
        command += [
            "--LabApp.expose_app_in_browser=True",
            f"--LabApp.user_settings_dir={settings}",
            f"--LabApp.workspaces_dir={base / 'workspaces'}",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        ]
    else:
        command[3] = "notebook"
        command += [
            "--JupyterNotebookApp.expose_app_in_browser=True",
            f"--JupyterNotebookApp.user_settings_dir={settings}",
        ]
    log = base / "server.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            command,
            env=env,
            cwd=root,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    server = Lab(f"http://127.0.0.1:{port}", root, process, log, app)
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while True:
            if process.poll() is not None:
                raise AssertionError(f"JupyterLab exited with {process.returncode}:\n{server.log_tail()}")
            try:
                server.api("GET", "/api/status")
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
                if time.monotonic() > deadline:
                    tail = server.log_tail()
                    raise AssertionError(f"JupyterLab did not answer within {STARTUP_TIMEOUT} s:\n{tail}") from exc
                time.sleep(0.2)
        yield server
    finally:
        _stop(process)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import expect, sync_playwright

    if not CHROMIUM.exists():
        pytest.skip(f"Debian's chromium is not installed at {CHROMIUM} (apt-get install chromium)")

    expect.set_options(timeout=WAIT_MS)
    with sync_playwright() as playwright:  # never `playwright install`: Debian's chromium is used
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, timeout=WAIT_MS)
        try:
            yield chromium
        finally:
            chromium.close()


@dataclass
class NotebookPage:
    """A browser tab on the Lab server: open a notebook, run it, find its widgets, take a screenshot."""

    page: Any
    lab: Lab
    errors: list[str] = field(default_factory=list)
    """Uncaught page errors, and console errors that mention dagmagic."""

    panel_id: str = ""

    def open(self, name: str, cells: list[str]) -> None:
        """Write the notebook, open it in a workspace of its own, and wait until its kernel is idle."""
        path = self.lab.write_notebook(name, cells)
        # a fresh workspace: the server would otherwise reopen the tabs of earlier tests
        self.page.goto(self.url_of(path, name))
        handle = self.page.wait_for_function(
            """(path) => {
                const panel = window.jupyterapp?.shell?.currentWidget;
                const ready = panel?.context?.path === path && panel.content?.widgets?.length > 0
                    && panel.sessionContext?.session?.kernel?.status === "idle";
                return ready ? panel.id : null;
            }""",
            arg=path,
            timeout=WAIT_MS,
        )
        self.panel_id = str(handle.json_value())

    def url_of(self, path: str, workspace: str) -> str:
        """Where the notebook at ``path`` opens: a JupyterLab workspace of its own, or Notebook 7's page."""
        if self.lab.app == "notebook":
            return f"{self.lab.url}/notebooks/{path}"
        return f"{self.lab.url}/lab/workspaces/{workspace}/tree/{path}?reset"

    def run_all(self) -> None:
        """Run every cell of the notebook. Not awaited: the command resolves only when every cell is done."""
        self.page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")

    def widgets(self) -> Any:
        """The notebook's visible dagmagic widgets."""
        return self.page.locator(f"[id='{self.panel_id}'] .dagmagic:visible")

    def widget(self) -> Any:
        """The notebook's first visible dagmagic widget: the live view of its run while the cell runs."""
        return self.widgets().first

    def wait_until_done(self) -> None:
        """Wait until every code cell has run and the kernel is idle (the cells' final outputs are drawn)."""
        self.page.wait_for_function(
            """(id) => {
                const panel = window.jupyterapp.shell.currentWidget;
                return panel?.id === id && panel.sessionContext?.session?.kernel?.status === "idle"
                    && panel.content.widgets.every((cell) => cell.model.type !== "code" || cell.model.executionCount);
            }""",
            arg=self.panel_id,
            timeout=WAIT_MS,
        )

    def kernel_print(self, code: str) -> str:
        """Run ``code`` in the notebook's kernel (not as a cell) and return what it printed: how a test
        checks the run's Python state beside the page. Only between cells: a running cell holds the kernel.
        """
        text = self.page.evaluate(
            """async (code) => {
                const kernel = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
                const full = `import dagmagic\n${code}`;
                const future = kernel.requestExecute({ code: full, silent: false, store_history: false });
                let out = "";
                future.onIOPub = (msg) => {
                    if (msg.header.msg_type === "stream") out += msg.content.text;
                    if (msg.header.msg_type === "error") out += `ERROR ${msg.content.ename}: ${msg.content.evalue}`;
                };
                await future.done;
                return out;
            }""",
            code,
        )
        return str(text)

    def screenshot(self, name: str, focus: Any = None) -> Path:
        """Save the page as ``test-output/e2e/<name>.png``, scrolled to ``focus`` (a locator) if given."""
        if focus is not None:
            for attempt in range(3):  # a view re-drawn meanwhile replaces the element: the locator finds the new one
                try:
                    focus.scroll_into_view_if_needed()
                    break
                except PlaywrightError as exc:
                    if "not attached" not in str(exc) or attempt == 2:
                        raise
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        path = SCREENSHOTS / f"{'notebook7-' if self.lab.app == 'notebook' else ''}{name}.png"
        self.page.screenshot(path=str(path))
        return path


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Remember each phase's report on the test, so a fixture can tell that its test failed."""
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


@pytest.fixture(params=["lab", "notebook7"], ids=["jupyterlab", "notebook7"])
def notebook(request: pytest.FixtureRequest, browser: Any) -> Iterator[NotebookPage]:
    """A tab on JupyterLab 4, then on Notebook 7: every browser test runs in both front ends."""
    server: Lab = request.getfixturevalue("lab" if request.param == "lab" else "notebook7_server")
    yield from _tab(request, browser, server)


@pytest.fixture
def jupyterlab(request: pytest.FixtureRequest, browser: Any, lab: Lab) -> Iterator[NotebookPage]:
    """A tab on JupyterLab 4 only: for what the widget shows alike in both front ends, or what only its layout
    (the file browser beside the notebook) shows."""
    yield from _tab(request, browser, lab)


@pytest.fixture
def notebook7(request: pytest.FixtureRequest, browser: Any, notebook7_server: Lab) -> Iterator[NotebookPage]:
    """A tab on Notebook 7."""
    yield from _tab(request, browser, notebook7_server)


def _tab(request: pytest.FixtureRequest, browser: Any, lab: Lab) -> Iterator[NotebookPage]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(WAIT_MS)
    tab = NotebookPage(context.new_page(), lab)
    tab.page.on("pageerror", lambda exc: _page_error(tab, exc))
    tab.page.on(
        "console",
        lambda msg: (
            tab.errors.append(f"console {msg.type}: {msg.text}")
            if msg.type == "error" and "dagmagic" in msg.text.lower()
            else None
        ),
    )
    try:
        yield tab
        report = getattr(request.node, "report_call", None)
        if report is not None and report.failed:  # what the page looked like when the test failed
            tab.screenshot(f"FAILED-{request.node.name}")
    finally:
        context.close()
        lab.shut_down_kernels()


def _page_error(tab: NotebookPage, exc: Any) -> None:
    """Keep an uncaught page error, with its stack; Notebook 7.6's own startup error (its notebook_core bundle
    reading a settings schema) is not ours and happens on every page.
    """
    text = f"page error: {exc} {getattr(exc, 'stack', '')}"
    if "notebook_core" not in text:
        tab.errors.append(text)
