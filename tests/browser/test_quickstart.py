"""Command 1, tried as a new user would, from a fresh clone with no ``.venv``: ``bash quickstart.sh`` creates
the environment, installs dagmagic with JupyterLab, and opens JupyterLab on the quickstart notebook. A second
start finds the install up to date and opens JupyterLab without installing again; a changed pyproject.toml
installs again.

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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import SCREENSHOTS, WAIT_MS

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(1200)]

ROOT = Path(__file__).resolve().parents[2]
INSTALL_SECONDS = 720.0
"""A fresh virtualenv and dagmagic with JupyterLab from the package index: minutes on a slow network."""


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
        finally:
            page.close()

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
