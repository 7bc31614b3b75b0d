"""How a ``DagRun`` shows in IPython: the live widget plus the static views, from one formatter."""

from __future__ import annotations

import weakref
from typing import Any

from dagmagic.engine.run import DagRun
from dagmagic.notebook.fallbacks import run_mimebundle

__all__ = ["live_bundle", "marker", "render_static", "run_bundle", "show_live", "widget_for"]

_widgets: weakref.WeakKeyDictionary[DagRun, Any] = weakref.WeakKeyDictionary()
_static_only: weakref.WeakSet[DagRun] = weakref.WeakSet()


def widget_for(run: DagRun) -> Any:
    """The run's widget, made on first use (one per run, so every view shows the same live state)."""
    widget = _widgets.get(run)
    if widget is None:
        from dagmagic.notebook.widget import DagWidget

        widget = DagWidget(run)
        _widgets[run] = widget
    return widget


def render_static(run: DagRun) -> None:
    """Show this run without the widget (``--no-widget``)."""
    _static_only.add(run)


def _widget_bundle(run: DagRun) -> dict[str, Any]:
    """The widget's own mime bundle (ipywidgets returns it alone or as ``(data, metadata)``)."""
    bundle = widget_for(run)._repr_mimebundle_()
    return dict(bundle[0] if isinstance(bundle, tuple) else bundle)


def marker(run: DagRun) -> dict[str, Any]:
    """Output metadata that marks a dagmagic output (the server extension drops its widget view on save)."""
    return {"dagmagic": {"run_id": run.run_id}}


def show_live(run: DagRun) -> None:
    """Display the run's live widget (marked: a saved notebook keeps the cell's static value instead)."""
    from IPython.display import display

    display(live_bundle(run), raw=True, metadata=marker(run))  # type: ignore[no-untyped-call]


def live_bundle(run: DagRun) -> dict[str, Any]:
    """The widget alone, for the live view shown while a cell runs."""
    bundle = _widget_bundle(run)
    bundle["text/plain"] = f"dagmagic live view of {run.goal[:60]!r}"
    return bundle


def run_bundle(run: DagRun, include: Any = None, exclude: Any = None) -> dict[str, Any]:
    """The run's display: the widget view (in a kernel) and the static views for everything else."""
    bundle: dict[str, Any] = run_mimebundle(run)
    if run not in _static_only and _in_kernel():
        bundle = {**_widget_bundle(run), **bundle}
    return bundle


def _in_kernel() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython is a dependency
        return False
    shell = get_ipython()
    return getattr(shell, "kernel", None) is not None
