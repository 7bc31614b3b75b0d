"""Command 1, tried as a new user would, from a fresh clone with no ``.venv``: ``bash quickstart.sh`` creates
the environment, installs dagmagic with JupyterLab, and opens JupyterLab on the quickstart notebook.

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
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import SCREENSHOTS, WAIT_MS

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(900)]

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


def test_command_1_opens_jupyterlab_on_the_quickstart(tmp_path: Path, browser: Any) -> None:
    clone = tmp_path / "dagmagic"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
    assert not (clone / ".venv").exists()
    opened = tmp_path / "opened.txt"
    recorder = tmp_path / "record-browser"
    recorder.write_text(f'#!/bin/sh\nprintf "%s\\n" "$1" >> "{opened}"\n')
    recorder.chmod(recorder.stat().st_mode | stat.S_IXUSR)
    port = _free_port()
    log = tmp_path / "quickstart.log"
    with log.open("wb") as output:
        command = ["bash", "quickstart.sh", f"--port={port}", "--ip=127.0.0.1", "--ServerApp.port_retries=0"]
        server = subprocess.Popen(
            command,
            cwd=clone,
            env=_fresh_environment(tmp_path, recorder),
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # the script execs jupyter: one process group to stop, kernels included
        )
    try:
        deadline = time.monotonic() + INSTALL_SECONDS
        while not (opened.exists() and opened.read_text().strip()):
            assert server.poll() is None, f"quickstart.sh ended ({server.returncode}):\n{log.read_text()[-4000:]}"
            assert time.monotonic() < deadline, f"no browser was opened:\n{log.read_text()[-4000:]}"
            time.sleep(0.5)
        assert (clone / ".venv" / "bin" / "jupyter").exists()  # it made its own environment
        url = opened.read_text().split()[0]

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
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=30)
