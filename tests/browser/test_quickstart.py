"""Command 1, tried as a new user would, from a fresh clone with no ``.venv``: ``bash quickstart.sh`` creates
the environment, installs dagmagic with JupyterLab, and opens JupyterLab on the quickstart notebook in the
tutorials' working copy. Run All on each of the nine tutorials there ends without an error, and leaves every
tracked file as it was. A second start finds the install up to date and opens JupyterLab without installing
again; a changed pyproject.toml installs again.

The browser it opens is a recorder (``BROWSER``, as Python's ``webbrowser`` honours it); chromium then loads
what JupyterLab asked the browser to open, and the test looks at the page.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest

from tests.browser.conftest import SCREENSHOTS, WAIT_MS

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(2400)]

ROOT = Path(__file__).resolve().parents[2]
INSTALL_SECONDS = 720.0
"""A fresh virtualenv and dagmagic with JupyterLab from the package index: minutes on a slow network."""
TUTORIAL_MS = 600_000
"""Run All on one tutorial: about ten seconds each under nbval; a loaded machine gets a wide margin."""
TUTORIALS = sorted(path.name for path in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
FAILURE_WORDS = ("Traceback", "No module named", "ModuleNotFoundError", "command not found")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _fresh_environment(tmp_path: Path, recorder: Path) -> dict[str, str]:
    """The user's environment as a shell has it: none of this test run's virtualenv, Jupyter dirs or DAG_*."""
    venv_bin = str(Path(sys.executable).parent)
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DAG_", "JUPYTER_", "VIRTUAL_ENV", "PYTHON", "LITELLM_"))
    }
    env["PATH"] = os.pathsep.join(part for part in env.get("PATH", "").split(os.pathsep) if part != venv_bin)
    env["BROWSER"] = f"{recorder} %s"
    for name in ("CONFIG", "DATA", "RUNTIME"):  # no settings or workspaces of the machine's own Jupyter
        env[f"JUPYTER_{name}_DIR"] = str(tmp_path / f"jupyter-{name.lower()}")
    env["JUPYTERLAB_SETTINGS_DIR"] = str(tmp_path / "lab-settings")
    env["JUPYTERLAB_WORKSPACES_DIR"] = str(tmp_path / "lab-workspaces")
    return env


@contextlib.contextmanager
def _quickstart(clone: Path, env: dict[str, str], log: Path, opened: Path) -> Iterator[str]:
    """``bash quickstart.sh`` in ``clone`` until JupyterLab asks the browser to open a page; that page's URL.
    On leaving, JupyterLab is stopped (with the kernels it started).
    """
    already_opened = len(opened.read_text().split()) if opened.exists() else 0
    with log.open("wb") as output:
        port = _free_port()
        command = ["bash", "quickstart.sh", f"--port={port}", "--ip=127.0.0.1", "--ServerApp.port_retries=0"]
        command.append("--LabApp.expose_app_in_browser=True")  # the test drives JupyterLab's own commands
        server = subprocess.Popen(
            command,
            cwd=clone,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # the script execs jupyter: one process group to stop, kernels included
        )
    try:
        deadline = time.monotonic() + INSTALL_SECONDS
        while not (opened.exists() and len(opened.read_text().split()) > already_opened):
            assert server.poll() is None, f"quickstart.sh ended ({server.returncode}):\n{log.read_text()[-4000:]}"
            assert time.monotonic() < deadline, f"no browser was opened:\n{log.read_text()[-4000:]}"
            time.sleep(0.5)
        yield opened.read_text().split()[already_opened]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=30)


def _run_all(page: Any, origin: str, name: str, working_copy: Path) -> list[str]:
    """Open a tutorial of the working copy in a workspace of its own, Run All, save it, shut its kernel down;
    what went wrong in its saved outputs: error outputs, and tracebacks or missing modules in any text (a shell
    cell's failure is only text).
    """
    page.goto(f"{origin}/lab/workspaces/{name[:2]}/tree/notebooks/{name}?reset", timeout=WAIT_MS)
    ready = """(path) => {
        const panel = window.jupyterapp?.shell?.currentWidget;
        return panel?.context?.path === path && panel.content?.widgets?.length > 0
            && panel.sessionContext?.session?.kernel?.status === "idle";
    }"""
    try:
        page.wait_for_function(ready, arg=f"notebooks/{name}", timeout=WAIT_MS)
    except Exception:
        page.screenshot(path=str(SCREENSHOTS / f"quickstart-not-ready-{name.removesuffix('.ipynb')}.png"))
        seen = page.evaluate(
            """() => {
                const panel = window.jupyterapp?.shell?.currentWidget;
                return {app: !!window.jupyterapp, url: location.href, path: panel?.context?.path,
                        cells: panel?.content?.widgets?.length, kernel: panel?.sessionContext?.session?.kernel?.status,
                        dialog: document.querySelector(".jp-Dialog")?.innerText};
            }"""
        )
        raise AssertionError(f"{name} did not open with an idle kernel: {seen}") from None
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
    page.wait_for_function(
        """() => {
            const panel = window.jupyterapp.shell.currentWidget;
            return panel.sessionContext?.session?.kernel?.status === "idle"
                && panel.content.widgets.every((cell) => cell.model.type !== "code" || cell.model.executionCount);
        }""",
        timeout=TUTORIAL_MS,
    )
    page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
    page.wait_for_function("() => !window.jupyterapp.shell.currentWidget.context.model.dirty", timeout=WAIT_MS)
    page.screenshot(path=str(SCREENSHOTS / f"quickstart-run-all-{name.removesuffix('.ipynb')}.png"))
    page.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext.shutdown()")

    saved = nbformat.read(working_copy / name, as_version=4)
    problems = []
    for index, cell in enumerate(saved.cells):
        if cell.cell_type != "code":
            continue
        if not cell.get("execution_count"):
            problems.append(f"{name} cell {index}: never ran")
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                problems.append(f"{name} cell {index}: {output.get('ename')}: {output.get('evalue')}")
                continue
            text = output.get("text", "") + "".join(
                str(value) for mime, value in output.get("data", {}).items() if mime.startswith("text/")
            )
            problems += [f"{name} cell {index}: {word!r} in its output" for word in FAILURE_WORDS if word in text]
    return problems


def test_command_1_opens_jupyterlab_on_the_quickstart(tmp_path: Path, browser: Any) -> None:
    clone = tmp_path / "dagmagic"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
    assert not (clone / ".venv").exists()
    opened = tmp_path / "opened.txt"
    recorder = tmp_path / "record-browser"
    recorder.write_text(f'#!/bin/sh\nprintf "%s\\n" "$1" >> "{opened}"\n')
    recorder.chmod(recorder.stat().st_mode | stat.S_IXUSR)
    env = _fresh_environment(tmp_path, recorder)

    first = tmp_path / "quickstart-1.log"
    with _quickstart(clone, env, first, opened) as url:
        assert (clone / ".venv" / "bin" / "jupyter").exists()  # it made its own environment
        assert "Installing dagmagic" in first.read_text()
        page = browser.new_page()
        try:
            page.goto(url, timeout=WAIT_MS)
            current = page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab.lm-mod-current")
            current.filter(has_text="01_quickstart.ipynb").wait_for(timeout=WAIT_MS)
            heading = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-RenderedMarkdown h1").first
            heading.wait_for(timeout=WAIT_MS)
            assert "Quickstart" in heading.inner_text()
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SCREENSHOTS / "quickstart-command-1.png"))

            # the tutorials a user opens are a working copy git ignores; every one runs to its end there
            working_copy = clone / "workspace" / "notebooks"
            assert sorted(path.name for path in working_copy.glob("[0-9][0-9]_*.ipynb")) == TUTORIALS
            assert len(TUTORIALS) == 9, TUTORIALS
            origin = "{0.scheme}://{0.netloc}".format(urllib.parse.urlsplit(page.url))  # not the file it was given
            problems = [problem for name in TUTORIALS for problem in _run_all(page, origin, name, working_copy)]
            assert not problems, "\n".join(problems)
            # the documentation page the last tutorial links to (../docs/debugging.md) opens beside it, from the
            # working copy
            link = page.locator('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-RenderedMarkdown a[href*="debugging.md"]')
            link.last.click()
            current.filter(has_text="debugging.md").wait_for(timeout=WAIT_MS)
            shown = page.locator(".jp-MainAreaWidget:not(.lm-mod-hidden)").filter(has_text="%dag fork")
            shown.first.wait_for(timeout=WAIT_MS)  # the page's own text, not an error
            assert page.locator(".jp-Dialog").count() == 0
            page.screenshot(path=str(SCREENSHOTS / "quickstart-docs-from-tutorial-09.png"))
        finally:
            page.close()
        # running and saving every tutorial changed no tracked file and left no untracked one
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=all"],
            cwd=clone,
            capture_output=True,
            text=True,
            check=True,
        )
        assert status.stdout == "", status.stdout

    # a later start: the install is up to date, so JupyterLab opens without installing again
    second = tmp_path / "quickstart-2.log"
    with _quickstart(clone, env, second, opened):
        said = second.read_text()
        assert "up to date" in said, said
        assert "Installing" not in said, said

    # a changed pyproject.toml (a new dependency, say) is installed before JupyterLab opens
    pyproject = clone / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + "\n# a change the environment has not seen\n")
    third = tmp_path / "quickstart-3.log"
    with _quickstart(clone, env, third, opened):
        said = third.read_text()
        assert "Installing dagmagic" in said, said
        assert "up to date" not in said, said
