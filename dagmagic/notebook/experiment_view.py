"""The static view of an ``Experiment``: a grid of cases × configs (each cell's status, first score, cost and
latency), a progress line, and the summary per config, as HTML and Markdown.

It shows while ``%%dag eval`` runs (updated in place) and stays in the saved notebook, so it must read well
without a kernel. Goals come from the user's data and scores from their code, but a case's goal may hold
anything (and answers are model output): every string is escaped, and no answer is shown.
"""

from __future__ import annotations

import html
import re
import statistics
import time
from typing import TYPE_CHECKING

from dagmagic.models import no_math

if TYPE_CHECKING:
    from dagmagic.evaluation import Cell, Experiment

__all__ = [
    "experiment_html",
    "experiment_markdown",
    "experiment_mimebundle",
    "progress_line",
    "summary_header",
    "summary_rows",
]

_GOAL_WIDTH = 60
_STATUS_MARKS = {
    "pending": "·",
    "running": "…",
    "done": "✓",
    "failed": "✗",
    "cancelled": "⏸",
    "not_started": "–",
}
_MARKDOWN_SPECIALS = re.compile(r"([\\`*_{}\[\]()#+\-.!|~>$])")
"""Markdown's specials, and ``$``: JupyterLab would typeset the text between two costs as math."""


def experiment_mimebundle(
    experiment: Experiment, *, resume_hint: str | None = None, started_at: float | None = None
) -> dict[str, str]:
    """The experiment's ``text/plain`` (its repr), ``text/html`` and ``text/markdown`` views."""
    return {
        "text/plain": repr(experiment),
        "text/html": experiment_html(experiment, resume_hint=resume_hint, started_at=started_at),
        "text/markdown": experiment_markdown(experiment, resume_hint=resume_hint, started_at=started_at),
    }


def progress_line(experiment: Experiment, *, started_at: float | None = None, resume_hint: str | None = None) -> str:
    """``3 of 8 cells done · 1 failed · $0.0123 so far · about 40 s left``; once stopped with cells not run, what
    continues them. ``started_at``: when this stretch of running began (for the estimate of the time left).
    """
    cells = experiment.cells
    ended = [cell for cell in cells if cell.ended]
    failed = sum(cell.status == "failed" for cell in cells)
    costs = [cell.cost for cell in cells if cell.cost is not None]
    parts = [f"{len(ended)} of {len(cells)} cells done"]
    if failed:
        parts.append(f"{failed} failed")
    if costs:
        parts.append(f"${sum(costs):.4f} so far" if not experiment.done() else f"${sum(costs):.4f}")
    left = len(cells) - len(ended)
    if not experiment.done():
        running = sum(cell.status == "running" for cell in cells)
        parts.append(f"{running} running")
        if started_at is not None and ended and left:
            seconds = (time.time() - started_at) / len(ended) * left
            parts.append(f"about {_seconds(seconds)} left")
    elif left:
        unrun = [cell for cell in cells if not cell.ended]
        parts.append(f"stopped with {len(unrun)} not run")
        if experiment.stopped_reason:
            parts.append(experiment.stopped_reason)
        parts.append(
            f"continue with {resume_hint}"
            if resume_hint
            else f'continue with await session.resume_evaluation("{experiment.name}")'
        )
    return " · ".join(parts)


def experiment_html(experiment: Experiment, *, resume_hint: str | None = None, started_at: float | None = None) -> str:
    """The grid, the progress line and the summary per config, as HTML (every string escaped, no math typeset)."""
    configs = experiment.definition.configs
    column = _first_score(experiment)
    head = "".join(f"<th>{html.escape(config)}</th>" for config in configs)
    rows = []
    for case in experiment.cases:
        cells = "".join(
            f"<td>{html.escape(_cell_text(experiment, case.id, config, column))}</td>" for config in configs
        )
        goal = html.escape(_short(case.goal))
        rows.append(f"<tr><th title='{html.escape(case.id)}'>{html.escape(case.id)}: {goal}</th>{cells}</tr>")
    progress = html.escape(progress_line(experiment, started_at=started_at, resume_hint=resume_hint))
    summary_body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(value)}</td>" for value in row) + "</tr>"
        for row in summary_rows(experiment)
    )
    summary_head = "".join(f"<th>{html.escape(name)}</th>" for name in summary_header(experiment))
    score_note = f" (cells show {html.escape(column)})" if column else ""
    return no_math(
        f"<div class='dagmagic-experiment'><p><b>Experiment {html.escape(experiment.name)}</b>{score_note}</p>"
        f"<table><thead><tr><th>case</th>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
        f"<p>{progress}</p>"
        f"<table><thead><tr>{summary_head}</tr></thead><tbody>{summary_body}</tbody></table></div>"
    )


def experiment_markdown(
    experiment: Experiment, *, resume_hint: str | None = None, started_at: float | None = None
) -> str:
    """The same as Markdown tables (every string inert)."""
    configs = experiment.definition.configs
    column = _first_score(experiment)
    score_note = f" (cells show {_md(column)})" if column else ""
    lines = [f"**Experiment {_md(experiment.name)}**{score_note}", ""]
    lines.append("| case | " + " | ".join(_md(config) for config in configs) + " |")
    lines.append("|---" * (len(configs) + 1) + "|")
    for case in experiment.cases:
        cells = " | ".join(_md(_cell_text(experiment, case.id, config, column)) for config in configs)
        lines.append(f"| {_md(case.id)}: {_md(_short(case.goal))} | {cells} |")
    lines += ["", _md(progress_line(experiment, started_at=started_at, resume_hint=resume_hint)), ""]
    header = summary_header(experiment)
    lines.append("| " + " | ".join(_md(name) for name in header) + " |")
    lines.append("|---" * len(header) + "|")
    lines += ["| " + " | ".join(_md(value) for value in row) + " |" for row in summary_rows(experiment)]
    return "\n".join(lines) + "\n"


def _first_score(experiment: Experiment) -> str | None:
    columns = experiment.score_columns()
    return columns[0] if columns else None


def _cell_text(experiment: Experiment, case_id: str, config: str, column: str | None) -> str:
    """A grid cell: its repetitions' statuses, the mean of the first score, the cost and mean latency."""
    cells = [cell for cell in experiment.cells if cell.case_id == case_id and cell.config == config]
    parts = ["".join(_STATUS_MARKS.get(cell.status, "?") for cell in cells) + " " + _status_word(cells)]
    if column is not None:
        values = [float(cell.scores[column]) for cell in cells if column in cell.scores]
        if values:
            parts.append(f"{statistics.fmean(values):.2f}")
        elif any(column in cell.score_errors for cell in cells):
            parts.append("score error")
    costs = [cell.cost for cell in cells if cell.cost is not None]
    if costs:
        parts.append(f"${sum(costs):.4f}")
    latencies = [cell.latency for cell in cells if cell.latency is not None]
    if latencies:
        parts.append(_seconds(statistics.fmean(latencies)))
    return " · ".join(parts)


def _status_word(cells: list[Cell]) -> str:
    statuses = {cell.status for cell in cells}
    return statuses.pop().replace("_", " ") if len(statuses) == 1 else "mixed"


def summary_header(experiment: Experiment) -> list[str]:
    """The summary table's columns: config, cells done, failures, each score, cost, median latency."""
    return ["config", "done", "failed", *experiment.score_columns(), "cost", "latency p50"]


def summary_rows(experiment: Experiment) -> list[list[str]]:
    """The summary table's rows, one per config, as the texts shown."""
    rows = []
    for config, summary in experiment.summary().items():
        scores = []
        for column in experiment.score_columns():
            found = summary.scores.get(column)
            if found is None:
                scores.append("–")
            elif found.low is None or found.high is None:
                scores.append(f"{found.mean:.2f}")
            else:
                scores.append(f"{found.mean:.2f} [{found.low:.2f}, {found.high:.2f}]")
        rows.append(
            [
                config,
                f"{summary.finished}/{summary.cells}",
                str(summary.failures),
                *scores,
                "–" if summary.cost is None else f"${summary.cost:.4f}",
                "–" if summary.latency_p50 is None else _seconds(summary.latency_p50),
            ]
        )
    return rows


def _short(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _GOAL_WIDTH else flat[: _GOAL_WIDTH - 1] + "…"


def _seconds(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 60 else f"{seconds / 60:.1f} min"


def _md(text: str) -> str:
    """Text shown as itself in a Markdown table cell: HTML escaped, Markdown's specials backslashed."""
    return html.escape(_MARKDOWN_SPECIALS.sub(r"\\\1", " ".join(text.splitlines())))
