"""A Jupyter server extension: saved notebooks keep dagmagic's static views and drop its live ones.

JupyterLab and Notebook 7 render an output with the richest type they have a renderer for, and with
ipywidgets installed that is the widget view whenever the output holds one. Widget state is not saved by
default, so a notebook reopened without its kernel would show "Error displaying widget: model not found"
where each run was. The browser keeps the live widget while the kernel lives; only the file on disk changes:
before a notebook is written, each dagmagic output loses its widget view. The live view keeps the run's static
views (HTML, Markdown, SVG), which the kernel keeps up to date as the run changes; an output left with nothing
but its one-line repr (the cell's value beside the live view) is dropped. A reader without a kernel —
JupyterLab, GitHub, nbconvert — sees the static view of the whole run as it was when saved.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MARKER", "strip_live_views"]

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
MARKER = "dagmagic"
"""The output metadata key that marks dagmagic's outputs."""


def strip_live_views(model: dict[str, Any], **_: Any) -> None:
    """The pre-save hook: remove dagmagic's widget views from a notebook model about to be written."""
    if model.get("type") != "notebook" or not isinstance(model.get("content"), dict):
        return
    for cell in model["content"].get("cells", []):
        outputs = cell.get("outputs") if isinstance(cell, dict) else None
        if not outputs:
            continue
        kept = []
        for output in outputs:
            if isinstance(output, dict) and MARKER in (output.get("metadata") or {}):
                data = output.get("data") or {}
                data.pop(WIDGET_VIEW, None)
                if set(data) <= {"text/plain"}:
                    continue  # a widget's stand-in: the run's static view is in the cell's other output
            kept.append(output)
        cell["outputs"] = kept


def _load_jupyter_server_extension(serverapp: Any) -> None:
    hooked: list[Any] = []

    def hook(contents_manager: Any) -> None:
        if not any(contents_manager is done for done in hooked):
            contents_manager.register_pre_save_hook(strip_live_views)
            hooked.append(contents_manager)

    hook(serverapp.contents_manager)
    # An extension loaded after this one may replace the contents manager (jupytext's does, and mkdocs-jupyter
    # brings it): once every extension is loaded, the one that saves gets the hook too.
    serverapp.io_loop.add_callback(
        lambda: hook(serverapp.web_app.settings.get("contents_manager", serverapp.contents_manager))
    )
    serverapp.log.info("dagmagic: saved notebooks keep the static views of runs, not their live widgets")
