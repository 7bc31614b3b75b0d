"""The server extension: a saved notebook keeps the static views of runs, not their widget views."""

from __future__ import annotations

import copy
import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import nbformat

import dagmagic
from dagmagic.server import WIDGET_VIEW, strip_live_views

WIDGET = {WIDGET_VIEW: {"version_major": 2, "version_minor": 0, "model_id": "abc"}}
MARK = {"dagmagic": {"run_id": "r1"}}


def notebook(outputs: list[dict[str, Any]]) -> dict[str, Any]:
    cell = {"cell_type": "code", "source": "%%dag\ngoal", "metadata": {}, "outputs": outputs, "execution_count": 1}
    other = {"cell_type": "code", "source": "w", "metadata": {}, "execution_count": 2, "outputs": [
        {"output_type": "display_data", "data": {**WIDGET, "text/plain": "IntSlider()"}, "metadata": {}}]}  # fmt: skip
    return {"type": "notebook", "content": {"cells": [cell, other, {"cell_type": "markdown", "source": "x"}]}}


STATIC = {"text/plain": "<DagRun done>", "text/html": "<div>run</div>", "text/markdown": "run"}
LIVE = {
    "output_type": "display_data",
    "data": {**WIDGET, "text/plain": "dagmagic live view of 'goal'"},
    "metadata": MARK,
}


def test_a_saved_notebook_keeps_the_static_view_and_drops_the_live_widget() -> None:
    value = {"output_type": "execute_result", "execution_count": 1, "metadata": MARK, "data": {**WIDGET, **STATIC}}
    printed = {"output_type": "stream", "name": "stdout", "text": "hello"}
    model = notebook([printed, copy.deepcopy(LIVE), value])
    untouched = copy.deepcopy(model["content"]["cells"][1])
    strip_live_views(model, path="a.ipynb", contents_manager=None)
    cells = model["content"]["cells"]
    assert cells[0]["outputs"] == [printed, {**value, "data": STATIC}]
    assert cells[1] == untouched  # another library's widget is not ours to change
    json.dumps(model)


def test_the_live_view_keeps_its_static_view_and_the_value_beside_it_leaves() -> None:
    """The live view carries the run's static view, kept current by the kernel; the cell's value beside it
    then carries only the widget and its repr, and nothing of it is saved.
    """
    live = {**LIVE, "data": {**WIDGET, **STATIC}}
    beside = {**WIDGET, "text/plain": "<DagRun done>"}
    value = {"output_type": "execute_result", "execution_count": 1, "metadata": MARK, "data": beside}
    model = notebook([copy.deepcopy(live), value])
    strip_live_views(model)
    assert model["content"]["cells"][0]["outputs"] == [{**live, "data": STATIC}]


def test_a_cell_interrupted_before_its_value_keeps_a_text_line_not_a_broken_widget() -> None:
    error = {"output_type": "error", "ename": "CancelledError", "evalue": "", "traceback": []}
    model = notebook([copy.deepcopy(LIVE), error])
    strip_live_views(model)
    assert model["content"]["cells"][0]["outputs"] == [error]
    strip_live_views({"type": "file", "content": "text"})  # other files pass through


def test_the_package_enables_the_extension() -> None:
    assert dagmagic._jupyter_server_extension_points() == [{"module": "dagmagic.server"}]
    listed = subprocess.run(
        [sys.executable, "-m", "jupyter", "server", "extension", "list"], capture_output=True, text=True, timeout=60
    )
    assert "dagmagic" in listed.stdout + listed.stderr and "enabled" in listed.stdout + listed.stderr


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_a_notebook_saved_through_a_server_whose_contents_manager_jupytext_replaced_loses_its_widget_views(
    tmp_path: Path,
) -> None:
    """jupytext's server extension (mkdocs-jupyter brings it) loads after dagmagic's and replaces the contents
    manager: the hook registered on the first one never ran, and saved notebooks kept broken widget views.
    """
    port, token = _free_port(), "t0k3n"
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "server", f"--port={port}", "--ip=127.0.0.1", "--no-browser",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={tmp_path}", "--allow-root",
         "--ServerApp.jpserver_extensions={'jupyterlab_jupytext': True, 'dagmagic': True}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}/api/contents/saved.ipynb?token={token}"
        value = {"output_type": "execute_result", "execution_count": 1, "metadata": MARK, "data": {**WIDGET, **STATIC}}
        outputs = [nbformat.from_dict(copy.deepcopy(LIVE)), nbformat.from_dict(value)]
        content = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("%%dag\ngoal", outputs=outputs)])
        body = json.dumps({"type": "notebook", "format": "json", "content": content}).encode()
        request = urllib.request.Request(url, data=body, method="PUT", headers={"Content-Type": "application/json"})
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(request, timeout=10).close()
                break
            except (urllib.error.URLError, ConnectionError):
                assert server.poll() is None and time.monotonic() < deadline, server.stderr
                time.sleep(0.2)
    finally:
        server.terminate()
        _, log = server.communicate(timeout=30)
    assert "jupytext" in log.lower()  # its contents manager was the one that saved
    saved = json.loads((tmp_path / "saved.ipynb").read_text())
    outputs = saved["cells"][0]["outputs"]
    assert all(WIDGET_VIEW not in output.get("data", {}) for output in outputs), outputs
    assert outputs and "".join(outputs[-1]["data"]["text/html"]) == "<div>run</div>"
