"""How a ``DagRun`` shows in IPython: the live widget plus the static views, from one formatter.

What a saved notebook shows depends on where each view ends up, and a notebook is saved along many paths:

- The live view shown while a ``%%dag`` cell runs is displayed with a display id. Where a front end draws
  widgets (JupyterLab, Notebook 7, VS Code: see ``front_end_known``), it carries the run's static views beside
  the widget, brought up to date with ``update_display`` each time the run ends — also when a re-run or a
  follow-up started from the view after the cell ended changes it. What the Jupyter server saves (its
  extension, ``dagmagic.server``, drops the widget) is then the run as it is now; the cell's value beside it
  carries the widget alone.
- Where nothing drew the view by the end of the cell (nbclient, papermill, ``jupyter nbconvert --execute``),
  the live view is emptied and the cell's value holds the static views alone: a file with a widget view and no
  front end behind it would read "Error displaying widget: model not found" in JupyterLab.
"""

from __future__ import annotations

import asyncio
import uuid
import weakref
from dataclasses import dataclass
from typing import Any

from dagmagic.engine import DagRun
from dagmagic.notebook.fallbacks import run_mimebundle
from dagmagic.notebook.session import take_back

__all__ = [
    "WIDGET_VIEW",
    "front_end_known",
    "marker",
    "marker_of_experiment",
    "might_draw_widgets",
    "render_static",
    "run_bundle",
    "settle_live_view",
    "settle_live_view_once_seen",
    "show_live",
    "widget_for",
    "widget_view",
]

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
_widgets: weakref.WeakKeyDictionary[DagRun, Any] = weakref.WeakKeyDictionary()
_static_only: weakref.WeakSet[DagRun] = weakref.WeakSet()
FRONT_END_WAIT = 3.0
"""Seconds the first live view of a kernel waits for a front end to say it made the widget (a browser answers
within a fraction of that). A cell run headless (nbclient, papermill: no stdin) does not wait at all."""
_nobody_answered = False
"""No front end answered the first wait: no front end that draws widgets is here, later cells do not wait."""


@dataclass
class _LiveView:
    """One display of a widget, which the kernel keeps up to date."""

    display_id: str
    cell: int | None
    """The execution count of the cell that displayed it (its value is formatted in the same cell)."""
    keeps_widget: bool
    """A front end draws it: it shows the widget and the static views. Else it is emptied once settled."""
    settled: bool = False
    """Decided for good: the cell that shows it has ended, or no cell waits for it."""


_live_views: weakref.WeakKeyDictionary[Any, list[_LiveView]] = weakref.WeakKeyDictionary()


def widget_for(run: DagRun) -> Any:
    """The run's widget, made on first use (one per run, so every view shows the same live state)."""
    widget = _widgets.get(run)
    if widget is None:
        from dagmagic.notebook.widget import DagWidget

        widget = DagWidget(run)
        widget.take_back = lambda run_id: _taken_back(widget, run_id)
        _widgets[run] = widget
    return widget


def _taken_back(widget: Any, run_id: str) -> DagRun:
    """The run a widget shows, taken back for its controls once the session let it go (the widget holds an ended
    run weakly): the run's widget from now on, as ``%dag show`` finds it.
    """
    run = take_back(run_id)
    _widgets.setdefault(run, widget)
    return run


def render_static(run: DagRun) -> None:
    """Show this run without the widget (``--no-widget``)."""
    _static_only.add(run)


def front_end_known() -> bool:
    """Whether a front end that draws widgets is connected to this kernel: one made a dagmagic widget here
    (its view says so as its model is made). nbclient, papermill and nbconvert never do.
    """
    from dagmagic.notebook.answering import AnsweringWidget

    return AnsweringWidget.front_end_seen


def _widget_bundle(run: DagRun) -> dict[str, Any]:
    """The run widget's view alone."""
    return widget_view(widget_for(run))


def widget_view(widget: Any) -> dict[str, Any]:
    """A widget's view alone (ipywidgets returns it as ``(data, metadata)`` or alone, with a ``text/plain`` repr
    that the static views' replaces).
    """
    bundle = widget._repr_mimebundle_()
    data = bundle[0] if isinstance(bundle, tuple) else bundle
    return {WIDGET_VIEW: data[WIDGET_VIEW]}


def marker(run: DagRun) -> dict[str, Any]:
    """Output metadata that marks a dagmagic output (the server extension drops its widget view on save)."""
    return {"dagmagic": {"run_id": run.run_id}}


def marker_of_experiment(experiment: Any) -> dict[str, Any]:
    """The same mark on an experiment's grid."""
    return {"dagmagic": {"experiment_id": experiment.id}}


def might_draw_widgets() -> bool:
    """Whether the cell was run from a front end a person uses, though none said yet that it draws widgets
    (see ``run_bundle``): a live view is worth showing there.
    """
    return _asked_by_a_person()


def show_live(run: DagRun, *, settled_later: bool = False) -> None:
    """Display the run's live view. ``settled_later``: the caller settles it (``settle_live_view``) before its
    cell ends, which decides what the view keeps; otherwise it is decided now, and without a front end that
    draws widgets the run shows as its static views alone.
    """
    from IPython.display import display

    known = front_end_known()
    if not known and not settled_later:
        display(run_mimebundle(run), raw=True, metadata=marker(run))  # type: ignore[no-untyped-call]
        return
    widget = widget_for(run)
    view = _LiveView(f"dagmagic-{uuid.uuid4().hex}", _cell_number(), keeps_widget=known, settled=not settled_later)
    views = _live_views.get(widget)
    if views is None:
        views = _live_views[widget] = []
        widget.on_run_ended.append(lambda: _refresh(widget))
    views.append(view)
    display(_view_bundle(widget, view), raw=True, metadata=marker(run), display_id=view.display_id)  # type: ignore[no-untyped-call]


def settle_live_view(run: DagRun) -> None:
    """At the end of the cell that showed the run's live view: keep the widget (with the run's static views,
    up to date) if a front end made it, else empty the view — the cell's value then holds the static views.
    """
    widget = _widgets.get(run)
    views = _live_views.get(widget) if widget is not None else None
    if widget is None or not views or views[-1].settled:
        return
    view = views[-1]
    view.settled = True
    view.keeps_widget = view.keeps_widget or widget.front_end or front_end_known()
    _update(widget, view)


async def settle_live_view_once_seen(run: DagRun) -> None:
    """``settle_live_view``, after giving a front end that has not spoken yet in this kernel a moment to say
    it made the widget (a run can end, or a ``--bg`` cell return, before its word arrives). A cell run headless
    (``_asked_by_a_person`` says no: nbclient, papermill, ``nbconvert --execute``) does not wait: nothing there
    draws widgets. Where nothing answered once, later cells do not wait either.
    """
    global _nobody_answered
    widget = _widgets.get(run)
    if widget is not None and not front_end_known() and _asked_by_a_person():
        loop = asyncio.get_running_loop()
        deadline = loop.time() + FRONT_END_WAIT
        while not widget.front_end and loop.time() < deadline:
            await asyncio.sleep(0.02)
        _nobody_answered = not widget.front_end
    settle_live_view(run)


def _refresh(widget: Any) -> None:
    """The run shown changed (it ended again, after a re-run or a follow-up): the views that keep the widget
    show its static views as they are now.
    """
    for view in _live_views.get(widget, []):
        if view.keeps_widget:
            _update(widget, view)


def _update(widget: Any, view: _LiveView) -> None:
    from IPython.display import update_display

    run = widget.run
    update_display(_view_bundle(widget, view), raw=True, metadata=marker(run), display_id=view.display_id)  # type: ignore[no-untyped-call]


def _view_bundle(widget: Any, view: _LiveView) -> dict[str, Any]:
    """What a live view shows: the widget (and, where it stays, the run's static views, for the saved file);
    nothing once settled without a front end. No text stand-in: a reader without widgets has the cell's value.
    """
    if not view.keeps_widget:
        return {} if view.settled else _widget_bundle(widget.run)
    return {**run_mimebundle(widget.run), **_widget_bundle(widget.run)}


def run_bundle(run: DagRun, include: Any = None, exclude: Any = None) -> dict[str, Any]:
    """The run's display as a value: the static views for every reader, and the widget view where a front end
    draws it. Beside the live view shown in the same cell it is the widget alone where the live view keeps the
    static views (it stays up to date, this value could not).
    """
    static: dict[str, Any] = run_mimebundle(run)
    if run in _static_only or not _in_kernel():
        return static
    widget = _widgets.get(run)
    cell = _cell_number()
    shown_here = [v for v in _live_views.get(widget, []) if v.cell == cell] if widget is not None else []
    if shown_here:
        return {**_widget_bundle(run), "text/plain": static["text/plain"]} if shown_here[-1].keeps_widget else static
    return {**_widget_bundle(run), **static} if front_end_known() or _asked_by_a_person() else static


def _asked_by_a_person() -> bool:
    """Whether the cell was run from a front end a person uses, before any widget of this kernel said so: it can
    answer ``input()``. nbclient (papermill, ``nbconvert --execute``) asks without stdin: nobody there to type,
    and nothing to draw a widget; nor does a kernel where a live view already waited in vain.
    """
    if _nobody_answered:
        return False
    from IPython import get_ipython

    kernel = getattr(get_ipython(), "kernel", None)
    try:
        request = kernel.get_parent("shell") if kernel is not None else {}
    except Exception:  # an older ipykernel without get_parent: assume the widget can be drawn, as before
        return True
    return bool((request or {}).get("content", {}).get("allow_stdin", False))


def _cell_number() -> int | None:
    from IPython import get_ipython

    shell = get_ipython()
    count = getattr(shell, "execution_count", None)
    return count if isinstance(count, int) else None


def _in_kernel() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython is a dependency
        return False
    shell = get_ipython()
    return getattr(shell, "kernel", None) is not None
