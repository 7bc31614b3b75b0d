"""A comparison shown as a cell's value: its static views beside the compare widget (``compare_display``).

Apart from ``compare_widget``, which the run widget uses too (a what-if round's "Compare with round N"): deciding
whether to show a widget needs ``display``, which imports the run widget.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dagmagic.notebook.compare_widget import CompareWidget, entries_of, static_views
from dagmagic.side_by_side import ExperimentComparison, RunComparison

if TYPE_CHECKING:
    from dagmagic.engine import DagRun

__all__ = ["compare_display"]


def _live_runs(comparison: RunComparison) -> tuple[DagRun, DagRun] | None:
    """The two runs of a comparison with a side still going, when this kernel's notebook session holds both."""
    from dagmagic.notebook.session import in_memory

    if comparison.a.round is not None or comparison.b.round is not None:
        return None  # two rounds: what they hold is fixed once they have ended
    a, b = in_memory(comparison.a.run_id), in_memory(comparison.b.run_id)
    return (a, b) if a is not None and b is not None else None


def compare_display(comparison: RunComparison | ExperimentComparison) -> tuple[dict[str, Any], dict[str, Any]]:
    """A comparison shown as a cell's value: its static views for every reader and, where a front end draws
    widgets, the compare widget too (following the runs while one of them goes on, when they are in memory).
    """
    from dagmagic.notebook.display import front_end_known, might_draw_widgets, widget_view

    entries, title = entries_of(comparison)
    bundle: dict[str, Any] = static_views(comparison)
    # a cell run from a front end a person uses may draw it though no widget said so yet (the kernel's first)
    if front_end_known() or might_draw_widgets():
        widget = CompareWidget(entries, title=title)
        if isinstance(comparison, RunComparison) and (comparison.a.live or comparison.b.live):
            runs = _live_runs(comparison)
            if runs is not None:
                widget.follow(*runs)
        bundle.update(widget_view(widget))
    # the mark the server extension drops the widget view by, when the notebook is saved
    marker = [[c.a.run_id, c.b.run_id] for _, c in entries[:20]]
    return bundle, {"dagmagic": {"comparison": marker}}
