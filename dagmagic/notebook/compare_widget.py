"""``CompareWidget``: two runs side by side (a ``RunComparison``), or one comparison per case of two configs of an
experiment (an ``ExperimentComparison``), drawn by ``js/src/compare.js``.

Its state is the comparisons as JSON (``comparisons``: ``[{"title", "comparison"}]``), long results cut at
``RESULT_CHARS``, always assigned as a new list. A comparison of runs still going fills in: the widget holds the two
runs, recomputes the comparison on their events (at most ``max_rate`` syncs a second, the last one as soon as both
have ended) and lets them go once both have.

Shown as a cell's value (``compare_display``, in ``dagmagic.notebook.compare_cell``), a comparison carries its own
static views (its ``__repr__``, ``_repr_markdown_`` and ``_repr_html_``) beside the widget: a saved notebook reopened
without a kernel, or untrusted, shows those, never "model not found". The run widget opens one under a what-if round.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import traitlets

from dagmagic.events import Event, RunFinished
from dagmagic.notebook.answering import AnsweringWidget
from dagmagic.notebook.throttle import Throttle
from dagmagic.side_by_side import ExperimentComparison, RunComparison

if TYPE_CHECKING:
    from dagmagic.engine import DagRun

__all__ = ["RESULT_CHARS", "CompareWidget", "compare_state", "entries_of", "static_views"]

_STATIC = Path(__file__).resolve().parent.parent / "static"
RESULT_CHARS = 4000
"""A step's result or error as the widget gets it (the whole text is the comparison's, in Python); the word-level
difference of two results is cut at twice that."""
ANSWER_CHARS = 20_000
"""The word-level difference of the answers as the widget gets it."""


class CompareWidget(AnsweringWidget):
    """The view of a comparison: a ``RunComparison``, or several (one per case) under a picker."""

    _esm = _STATIC / "compare.js"
    _css = _STATIC / "widget.css"

    title = traitlets.Unicode("").tag(sync=True)
    """What the view is headed with ("" for a comparison of two runs: the view names both sides)."""
    comparisons: traitlets.List[dict[str, Any]] = traitlets.List().tag(sync=True)
    """``{"title", "comparison"}`` per comparison: a case's id (or "") and the comparison as JSON."""
    live = traitlets.Bool(False).tag(sync=True)
    """Whether a side still runs (the view fills in)."""

    def __init__(
        self,
        comparisons: RunComparison | Sequence[tuple[str, RunComparison]],
        *,
        title: str = "",
        max_rate: float = 10.0,
        **kwargs: Any,
    ) -> None:
        entries = [("", comparisons)] if isinstance(comparisons, RunComparison) else list(comparisons)
        super().__init__(**compare_state(entries, title=title), **kwargs)
        self.entries = entries
        self._throttle = Throttle(lambda: self.sync(), max_rate)  # looked up when it sends
        self.syncs = 0
        """State syncs sent since it opened (for tests)."""
        self._runs: tuple[DagRun, DagRun] | None = None
        self._rebuild: Callable[[DagRun, DagRun], RunComparison] | None = None
        self._unsubscribe: list[Callable[[], None]] = []

    def __repr__(self) -> str:
        sides = ", ".join(f"{c.a.label} vs {c.b.label}" for _, c in self.entries[:3])
        more = f" and {len(self.entries) - 3} more" if len(self.entries) > 3 else ""
        return f"CompareWidget({sides}{more})"

    def follow(self, a: DagRun, b: DagRun, rebuild: Callable[[DagRun, DagRun], RunComparison] | None = None) -> None:
        """Recompute the comparison of ``a`` and ``b`` (with ``rebuild``, by default ``RunComparison.between``)
        as they go on, until both have ended.
        """
        self._stop_following()
        self._runs = (a, b)
        self._rebuild = rebuild or _between
        if a.done() and b.done():
            self.sync()
            self._runs = None
            return
        self._unsubscribe = [a.subscribe(self._on_event), b.subscribe(self._on_event)]
        self.sync()

    @property
    def following(self) -> bool:
        """Whether it still follows two runs (one of them has not ended)."""
        return self._runs is not None

    def sync(self) -> None:
        """Recompute the comparison of the runs followed (if any) and send it now, as one message."""
        self._throttle.sent()
        if self._runs is not None and self._rebuild is not None:
            self.entries = [(self.entries[0][0] if self.entries else "", self._rebuild(*self._runs))]
        state = compare_state(self.entries, title=self.title)
        if self._runs is not None:
            state["live"] = not all(run.done() for run in self._runs)
        with self.hold_sync():
            for name, value in state.items():
                setattr(self, name, value)
        self.syncs += 1

    def close(self) -> None:
        """Stop following the runs and close the comm."""
        self._stop_following()
        super().close()

    def _stop_following(self) -> None:
        for unsubscribe in self._unsubscribe:
            unsubscribe()
        self._unsubscribe = []
        self._throttle.cancel()

    def _on_event(self, event: Event) -> None:
        runs = self._runs
        if runs is None:
            return
        if isinstance(event, RunFinished) and not event.depth and all(run.done() for run in runs):
            self.sync()  # the last one, at once; then the runs are let go
            self._stop_following()
            self._runs = None
            return
        self._throttle.soon()


def _between(a: DagRun, b: DagRun) -> RunComparison:
    return RunComparison.between(a, b)


def entries_of(comparison: RunComparison | ExperimentComparison) -> tuple[list[tuple[str, RunComparison]], str]:
    """The comparisons a comparison holds, each with its title ("" for one of two runs: the view names its sides),
    and the whole's title: a ``RunComparison`` alone, or an experiment comparison's, one per case.
    """
    if isinstance(comparison, RunComparison):
        return [("", comparison)], ""
    title = f"{comparison.experiment}: config {comparison.a} vs config {comparison.b}"
    if comparison.missing:
        title += f" ({len(comparison.missing)} cases not compared: {', '.join(comparison.missing)})"
    return list(comparison.cases.items()), title


def static_views(comparison: RunComparison | ExperimentComparison) -> dict[str, str]:
    """The comparison's own static views: what a reader without the widget sees."""
    return {
        "text/plain": repr(comparison),
        "text/markdown": comparison._repr_markdown_(),
        "text/html": comparison._repr_html_(),
    }


def compare_state(entries: Sequence[tuple[str, RunComparison]], *, title: str = "") -> dict[str, Any]:
    """Every synced trait's value, as fresh containers: the comparisons as JSON, long texts cut."""
    return {
        "title": title,
        "comparisons": [{"title": name, "comparison": _capped(comparison)} for name, comparison in entries],
        "live": any(c.a.live or c.b.live for _, c in entries),
    }


def _capped(comparison: RunComparison) -> dict[str, Any]:
    data: dict[str, Any] = comparison.model_dump(mode="json")
    for round_pair in data["rounds"]:
        for pair in round_pair["steps"]:
            for side in ("a", "b"):
                step = pair.get(side)
                for field in ("result", "error"):
                    if step and isinstance(step.get(field), str) and len(step[field]) > RESULT_CHARS:
                        step[field] = step[field][: RESULT_CHARS - 1] + "…"
            pair["result"] = _cut_pieces(pair["result"], 2 * RESULT_CHARS)
    data["answer"] = _cut_pieces(data["answer"], ANSWER_CHARS)
    return data


def _cut_pieces(pieces: list[dict[str, str]], limit: int) -> list[dict[str, str]]:
    """The pieces of a word-level difference up to about ``limit`` characters (both sides'), then "…"."""
    kept: list[dict[str, str]] = []
    left = limit
    for piece in pieces:
        if left <= 0:
            kept.append({"op": "same", "text": "…"})
            break
        kept.append({**piece, "text": piece["text"][:left]})
        left -= len(piece["text"])
    return kept
