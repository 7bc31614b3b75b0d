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
- A run shown again in a later cell (a ``--bg`` run awaited or shown there, ``%dag rerun``, ``%dag resume`` of a run
  read back under the same id) is drawn there: the front end shows only the newest view of a widget, so each
  earlier cell's live view is handed off, once: it becomes the run's static views as they are at that moment, led
  by a line saying which cell the run went on in. The earlier cell never goes blank, and a saved notebook holds
  the run once per cell that showed it, the live view only in the newest.
"""

from __future__ import annotations

import asyncio
import uuid
import weakref
from dataclasses import dataclass
from typing import Any

from dagmagic.engine import DagRun
from dagmagic.notebook.fallbacks import run_mimebundle
from dagmagic.notebook.session import run_number, take_back

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
    outlived: dict[str, str] | None = None
    """The run's static views when the cell ended, if the run went on after it (``--bg``)."""
    moved: dict[str, str] | None = None
    """Handed off to a later cell: the run's static views as this cell left it, led by where it went on."""


_live_views: weakref.WeakKeyDictionary[Any, list[_LiveView]] = weakref.WeakKeyDictionary()


def widget_for(run: DagRun) -> Any:
    """The run's widget, made on first use (one per run, so every view shows the same live state)."""
    widget = _widgets.get(run)
    earlier = _widget_of_id(run.run_id) if widget is None else None
    if earlier is not None:
        # the same run read back or resumed as another object: the widget earlier cells show follows it, so
        # they point to where it went on instead of showing what it no longer is
        _hand_off(earlier, run, resumed=not run.read_only and earlier.in_memory and earlier.run is not run)
        earlier.follow(run)
        widget = _widgets[run] = earlier
    if widget is None:
        from dagmagic.notebook.widget import DagWidget

        widget = DagWidget(run)
        widget.take_back = lambda run_id: _taken_back(widget, run_id)
        _widgets[run] = widget
    return widget


def _widget_of_id(run_id: str) -> Any:
    """The open widget a live view shows run ``run_id`` in, whichever object of the run it was made for."""
    return next((w for w in _live_views if w.run_id == run_id and getattr(w, "comm", None) is not None), None)


def _hand_off(widget: Any, run: DagRun, *, resumed: bool = False) -> None:
    """The run goes on in this cell: every live view of ``widget`` in an earlier cell that a front end draws
    becomes the run's static views as they are now, led by a line saying where it went on (once: it keeps
    pointing there). Else the front end, drawing only a widget's newest view, would leave that cell blank.
    """
    cell = _cell_number()
    earlier = [view for view in _live_views.get(widget, []) if view.cell != cell and view.keeps_widget]
    if not earlier:
        return
    try:
        now: dict[str, str] | None = run_mimebundle(widget.run)
    except Exception:  # no longer in memory nor in a store: the line alone says where it went
        now = None
    where = f"cell [{cell}]" if cell is not None else "a later cell"
    number = run_number(run.run_id)
    see = f" (`%dag show {number}` shows it too)" if number is not None else ""
    for view in earlier:
        if view.moved is not None:
            continue
        if resumed:  # below: the run as it stopped, what this view showed last
            line = f"This run was resumed in {where}, which shows it as it is now{see}."
            view.moved = _moved_bundle(f"{line} Below: the run as it stopped.", now)
        elif view.outlived is not None:
            line = f"This run went on after this cell ended: {where} shows it as it is now{see}."
            view.moved = _moved_bundle(f"{line} Below: the run when this cell ended.", view.outlived)
        else:
            goes_on = "goes on in" if not run.done() else "is shown again in"
            line = f"This run {goes_on} {where}, which shows it as it is now{see}."
            view.moved = _moved_bundle(f"{line} Below: the run as this cell left it.", now)
        _update(widget, view)


def _moved_bundle(line: str, static: dict[str, str] | None) -> dict[str, str]:
    """The static views of a handed-off live view: where the run went on, then the run as the cell left it."""
    import html

    static = static or {"text/plain": "", "text/markdown": "", "text/html": ""}
    note = html.escape(line).replace("`", "")
    return {
        "text/plain": f"{line}\n{static['text/plain']}",
        "text/markdown": f"> ↪ {line}\n\n{static['text/markdown']}",
        "text/html": f'<p class="dagmagic-moved">↪ {note}</p>\n{static["text/html"]}',
    }


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
    _hand_off(widget, run)
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
    if not widget.run.done():  # the run outlives its cell: what the cell leaves, should the run go on elsewhere
        view.outlived = run_mimebundle(widget.run)
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
        if view.keeps_widget and view.moved is None:
            _update(widget, view)


def _update(widget: Any, view: _LiveView) -> None:
    from IPython.display import update_display

    metadata = {"dagmagic": {"run_id": widget.run_id}}
    update_display(_view_bundle(widget, view), raw=True, metadata=metadata, display_id=view.display_id)  # type: ignore[no-untyped-call]


def _view_bundle(widget: Any, view: _LiveView) -> dict[str, Any]:
    """What a live view shows: the widget (and, where it stays, the run's static views, for the saved file);
    nothing once settled without a front end. No text stand-in: a reader without widgets has the cell's value.
    """
    if view.moved is not None:
        return view.moved
    if not view.keeps_widget:
        return {} if view.settled else _widget_bundle(widget.run)
    return {**run_mimebundle(widget.run), **_widget_bundle(widget.run)}


def run_bundle(run: DagRun, include: Any = None, exclude: Any = None) -> dict[str, Any]:
    """The run's display as a value: the static views for every reader, and the widget view where a front end
    draws it. Beside the live view shown in the same cell it is the widget alone where the live view keeps the
    static views (it stays up to date, this value could not); where a front end draws widgets, a cell without
    one shows one first.
    """
    static: dict[str, Any] = run_mimebundle(run)
    if run in _static_only or not _in_kernel():
        return static
    widget = _widgets.get(run)
    cell = _cell_number()
    shown_here = [v for v in _live_views.get(widget, []) if v.cell == cell] if widget is not None else []
    if shown_here:
        view = shown_here[-1]
        if view.keeps_widget:
            return {**_widget_bundle(run), "text/plain": static["text/plain"]}
        if view.outlived is not None and not run.done():  # headless, the run goes on after the cell (--bg)
            number = run_number(run.run_id)
            see = f"`%dag show {number}`" if number is not None else "`%dag show`"
            line = f"This run goes on after this cell: a later cell that shows it, or {see}, shows it as it is then."
            return {**_moved_bundle(line, static), "text/plain": static["text/plain"]}
        return static
    if front_end_known():
        # shown as a live view of this cell, as a %%dag cell shows it: a later cell the run goes on in can hand
        # that view off (a value cannot be changed once shown: its widget view would go blank there)
        show_live(run)
        return {**_widget_bundle(run), "text/plain": static["text/plain"]}
    if not _asked_by_a_person():
        return static
    bundle = {**_widget_bundle(run), **static}
    _hand_off(widget_for(run), run)  # drawn here, the widget's views in earlier cells would go blank
    return bundle


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
    """The running cell's number as its prompt shows it (IPython 9 counts the next cell's while one runs; the
    display hook's count is the prompt's in every version).
    """
    from IPython import get_ipython

    shell = get_ipython()
    count = getattr(getattr(shell, "displayhook", None), "prompt_count", None)
    return count if isinstance(count, int) else None


def _in_kernel() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython is a dependency
        return False
    shell = get_ipython()
    return getattr(shell, "kernel", None) is not None
