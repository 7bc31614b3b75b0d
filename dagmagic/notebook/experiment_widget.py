"""``ExperimentWidget``: the live grid of an experiment (cases × configs), and the run of the cell the user opens.

The grid's state is compact, for experiments of thousands of cells: the cases and configs once, then one short
list per cell (``[case, config, status, score, cost, latency]``: positions in ``cases`` and ``configs``, and the
score of the column shown). ``sync`` sends the experiment as it is now; the ``%%dag eval`` cell calls it at most
a few times a second while cells change. Opening a cell shows its run's own widget (a ``DagWidget``) under the
grid, through anywidget's widget composition (``WidgetTrait``, ``host.getWidget`` in the front end); so does a
comparison of two cells, or of two configs case by case (``dagmagic.compare``), in a compare widget.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import anywidget
import traitlets

from dagmagic.errors import DagError
from dagmagic.notebook.answering import AnsweringWidget, Reply
from dagmagic.notebook.experiment_view import progress_line, summary_header, summary_rows

if TYPE_CHECKING:
    from dagmagic.engine import DagRun
    from dagmagic.evaluation import Experiment
    from dagmagic.notebook.compare_widget import CompareWidget
    from dagmagic.side_by_side import ExperimentComparison, RunComparison

__all__ = ["ExperimentWidget", "experiment_display", "experiment_state"]

_STATIC = Path(__file__).resolve().parent.parent / "static"
GOAL_CHARS = 300
"""A case's goal as the grid sends it (the full goal is the case's, in Python)."""


class ExperimentWidget(AnsweringWidget):
    """The live view of one ``Experiment``: its grid, progress and summary; a cell opens its run below."""

    _esm = _STATIC / "experiment.js"
    _css = _STATIC / "widget.css"

    name = traitlets.Unicode("").tag(sync=True)
    configs: traitlets.List[str] = traitlets.List().tag(sync=True)
    cases: traitlets.List[list[str]] = traitlets.List().tag(sync=True)
    """``[id, goal]`` per case, the goal cut at ``GOAL_CHARS``."""
    cells: traitlets.List[list[Any]] = traitlets.List().tag(sync=True)
    """``[case, config, status, score, cost, latency]`` per cell, in grid order (cases, configs, repetitions)."""
    repeat = traitlets.Int(1).tag(sync=True)
    score_column = traitlets.Unicode("").tag(sync=True)
    """The score the cells show ("" when there is none)."""
    score_columns: traitlets.List[str] = traitlets.List().tag(sync=True)
    progress = traitlets.Unicode("").tag(sync=True)
    """One line: cells done of all, failures, cost so far, the time left; once stopped early, how to go on."""
    counts = traitlets.Dict().tag(sync=True)
    """``total``, ``ended``, ``failed``, ``running`` (the progress bar)."""
    running = traitlets.Bool(True).tag(sync=True)
    summary_header: traitlets.List[str] = traitlets.List().tag(sync=True)
    summary_rows: traitlets.List[list[str]] = traitlets.List().tag(sync=True)
    opened = anywidget.WidgetTrait().tag(sync=True)
    """The run widget of the cell opened (None: none is)."""
    opened_cell = traitlets.Int(-1).tag(sync=True)
    opened_label = traitlets.Unicode("").tag(sync=True)
    comparison = anywidget.WidgetTrait().tag(sync=True)
    """The compare widget of the two cells or configs compared (None: none are)."""
    comparison_label = traitlets.Unicode("").tag(sync=True)

    def __init__(
        self,
        experiment: Experiment,
        *,
        open_run: Callable[[Experiment, int], DagRun] | None = None,
        resume_hint: str | None = None,
        started_at: float | None = None,
        **kwargs: Any,
    ) -> None:
        state = experiment_state(experiment, resume_hint=resume_hint, started_at=started_at)
        super().__init__(**state, **kwargs)  # the model opens with the experiment's state: no second message
        self.experiment = experiment
        self.open_run = open_run or (lambda found, index: found.run_of(index))
        """The run of a cell: the experiment's, or as the notebook finds it."""
        self.resume_hint = resume_hint
        self.started_at = started_at
        self.syncs = 0
        """State syncs sent since it opened (for tests)."""

    def __repr__(self) -> str:
        return f"ExperimentWidget({self.experiment!r})"

    def sync(self) -> None:
        """Send the experiment's current state now, as one message."""
        state = experiment_state(
            self.experiment, self.score_column or None, resume_hint=self.resume_hint, started_at=self.started_at
        )
        with self.hold_sync():
            for name, value in state.items():
                setattr(self, name, value)
        self.syncs += 1

    def open_cell(self, index: int) -> DagRun:
        """Show cell ``index``'s run under the grid (its live widget while it runs)."""
        from dagmagic.notebook.display import widget_for

        experiment = self.experiment
        if not 0 <= index < len(experiment.cells):
            raise DagError(f"there is no cell {index} in experiment {experiment.name!r}")
        cell = experiment.cells[index]
        if cell.run_id is None:
            raise DagError(f"cell {index} ({cell.case_id} × {cell.config}) has not started: it has no run yet")
        run = self.open_run(experiment, index)
        repetition = f", repetition {cell.repetition}" if experiment.definition.repeat > 1 else ""
        with self.hold_sync():
            self.opened = widget_for(run)
            self.opened_cell = index
            self.opened_label = f"{cell.case_id} × {cell.config}{repetition} · run {run.run_id}"
        return run

    def compare_cells(self, first: int, second: int) -> CompareWidget:
        """Show the comparison of cells ``first`` and ``second`` under the grid (filling in while one runs)."""
        from dagmagic.notebook.compare_widget import CompareWidget
        from dagmagic.side_by_side import compare

        experiment = self.experiment
        cells = []
        for index in (first, second):
            if not 0 <= index < len(experiment.cells):
                raise DagError(f"there is no cell {index} in experiment {experiment.name!r}")
            cell = experiment.cells[index]
            if cell.run_id is None:
                raise DagError(f"cell {cell.case_id} × {cell.config} has not started: it has no run to compare yet")
            cells.append(cell)
        if first == second:
            raise DagError("choose two different cells to compare")

        def rebuild(*_: Any) -> RunComparison:
            return cast("RunComparison", compare(experiment, first, second))

        view = CompareWidget(rebuild())
        runs = (self.open_run(experiment, first), self.open_run(experiment, second))
        if not all(run.done() for run in runs):
            view.follow(runs[0], runs[1], rebuild)
        labels = [f"{cell.case_id} × {cell.config}" for cell in cells]
        self._show_comparison(view, f"{labels[0]} vs {labels[1]}")
        return view

    def compare_configs(self, first: str, second: str) -> CompareWidget:
        """Show the comparison of configs ``first`` and ``second``, case by case, under the grid."""
        from dagmagic.notebook.compare_widget import CompareWidget, entries_of
        from dagmagic.side_by_side import compare

        if first == second:
            raise DagError("choose two different configs to compare")
        compared = cast("ExperimentComparison", compare(self.experiment, first, second))
        entries, title = entries_of(compared)
        view = CompareWidget(entries, title=title)
        self._show_comparison(view, f"config {first} vs config {second}, case by case")
        return view

    def _show_comparison(self, view: Any, label: str) -> None:
        earlier = self.comparison
        with self.hold_sync():
            self.comparison = view
            self.comparison_label = label
        if earlier is not None:
            earlier.close()


def _open(widget: ExperimentWidget, content: dict[str, Any]) -> Reply:
    index = content.get("cell")
    if not isinstance(index, int) or isinstance(index, bool):
        raise DagError(f"the request's cell must be a whole number, not {index!r}")
    run = widget.open_cell(index)
    return {"run_id": run.run_id}


def _close(widget: ExperimentWidget, content: dict[str, Any]) -> Reply:
    with widget.hold_sync():
        widget.opened = None
        widget.opened_cell = -1
        widget.opened_label = ""
    return None


def _show_score(widget: ExperimentWidget, content: dict[str, Any]) -> Reply:
    column = str(content.get("column", ""))
    if column not in widget.experiment.score_columns():
        raise DagError(f"experiment {widget.experiment.name!r} has no score {column!r}")
    widget.score_column = column
    widget.sync()
    return None


def _compare(widget: ExperimentWidget, content: dict[str, Any]) -> Reply:
    cells, configs = content.get("cells"), content.get("configs")
    if isinstance(configs, list) and len(configs) == 2 and all(isinstance(name, str) for name in configs):
        widget.compare_configs(configs[0], configs[1])
        return None
    if (
        isinstance(cells, list)
        and len(cells) == 2
        and all(isinstance(index, int) and not isinstance(index, bool) for index in cells)
    ):
        widget.compare_cells(cells[0], cells[1])
        return None
    raise DagError(f"a comparison takes two cells or two configs, not {content!r}")


def _close_comparison(widget: ExperimentWidget, content: dict[str, Any]) -> Reply:
    widget._show_comparison(None, "")
    return None


ExperimentWidget.handlers = {
    "open": _open,
    "close": _close,
    "show_score": _show_score,
    "compare": _compare,
    "close_comparison": _close_comparison,
}

_widgets: weakref.WeakKeyDictionary[Experiment, ExperimentWidget] = weakref.WeakKeyDictionary()


def experiment_display(experiment: Experiment) -> tuple[dict[str, Any], dict[str, Any]]:
    """An experiment shown as a cell's value: the static grid for every reader, and where a front end draws
    widgets and the experiment has stopped, its grid widget too (one per experiment), whose cells open their runs.
    A running one shows as it is now: only the cell that runs it keeps a grid up to date.
    """
    from dagmagic.notebook.display import front_end_known, marker_of_experiment, widget_view
    from dagmagic.notebook.experiment_view import experiment_mimebundle

    bundle: dict[str, Any] = experiment_mimebundle(experiment)
    if experiment.done() and front_end_known():
        widget = _widgets.get(experiment)
        if widget is None:
            widget = _widgets[experiment] = ExperimentWidget(experiment)
        else:
            widget.sync()
        bundle.update(widget_view(widget))
    return bundle, marker_of_experiment(experiment)


def experiment_state(
    experiment: Experiment,
    column: str | None = None,
    *,
    resume_hint: str | None = None,
    started_at: float | None = None,
) -> dict[str, Any]:
    """Every synced trait's value but the opened run's, as fresh containers. ``column``: the score the cells show
    (default: the first).
    """
    columns = experiment.score_columns()
    shown = column if column in columns else (columns[0] if columns else "")
    configs = list(experiment.definition.configs)
    config_place = {name: place for place, name in enumerate(configs)}
    case_place = {case.id: place for place, case in enumerate(experiment.cases)}
    cells = []
    for cell in experiment.cells:
        score = cell.scores.get(shown) if shown else None
        cells.append(
            [
                case_place[cell.case_id],
                config_place[cell.config],
                cell.status,
                None if score is None else _rounded(float(score)),
                None if cell.cost is None else _rounded(cell.cost),
                None if cell.latency is None else round(cell.latency, 2),
            ]
        )
    return {
        "name": experiment.name,
        "configs": configs,
        "cases": [[case.id, _short(case.goal)] for case in experiment.cases],
        "cells": cells,
        "repeat": experiment.definition.repeat,
        "score_column": shown,
        "score_columns": columns,
        "progress": progress_line(experiment, started_at=started_at, resume_hint=resume_hint),
        "counts": {
            "total": len(experiment.cells),
            "ended": sum(cell.ended for cell in experiment.cells),
            "failed": sum(cell.status == "failed" for cell in experiment.cells),
            "running": sum(cell.status == "running" for cell in experiment.cells),
        },
        "running": not experiment.done(),
        "summary_header": summary_header(experiment),
        "summary_rows": summary_rows(experiment),
    }


def _rounded(value: float) -> float | None:
    """Six significant digits: enough to show, and the state stays short (None for NaN or infinity: not JSON)."""
    return float(f"{value:.6g}") if math.isfinite(value) else None


def _short(goal: str) -> str:
    flat = " ".join(goal.split())
    return flat if len(flat) <= GOAL_CHARS else flat[: GOAL_CHARS - 1] + "…"
