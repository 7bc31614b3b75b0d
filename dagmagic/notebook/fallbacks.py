"""Static views of a run for nbconvert, GitHub, Colab and terminals: Markdown, HTML with a step table, and an
SVG of the DAG drawn from the widget's own layout. Everything the LLM wrote is escaped.
"""

from __future__ import annotations

import html
import textwrap

from dagmagic.engine.run import DagRun
from dagmagic.models import ExecutionPlan, PlanStep
from dagmagic.notebook.layout import layout

__all__ = ["STATUS_COLORS", "run_html", "run_markdown", "run_mimebundle", "step_rows", "svg"]

STATUS_COLORS = {
    "pending": "#9e9e9e",
    "queued": "#b0bec5",
    "paused": "#fb8c00",
    "running": "#1e88e5",
    "retrying": "#fb8c00",
    "completed": "#43a047",
    "failed": "#e53935",
    "skipped": "#bdbdbd",
    "cancelled": "#757575",
}

_PREVIEW = 160

PARTIAL_NOTE = "partial: the run was stopped before it finished"


def step_rows(plan: ExecutionPlan | None) -> list[tuple[str, str, str, str, str, str]]:
    """(id, status, task, model, seconds, result or error) for each step, texts shortened."""
    if plan is None:
        return []
    rows: list[tuple[str, str, str, str, str, str]] = []
    for step in plan.steps:
        seconds = f"{step.run_time:.1f}" if step.run_time is not None else ""
        outcome = step.error if step.status != "completed" else step.result
        rows.append((step.id, step.status, _short(step.task), step.model or "", seconds, _short(outcome or "")))
    return rows


def run_markdown(run: DagRun) -> str:
    """The run as Markdown: header, verdict, step table, answer."""
    lines = [f"**dagmagic** · {_md(run.goal)}", "", _summary(run), ""]
    rows = step_rows(run.plan)
    if rows:
        lines += ["| step | status | task | model | s | result |", "|---|---|---|---|---|---|"]
        lines += ["| " + " | ".join(_md(cell) for cell in row) + " |" for row in rows]
        lines.append("")
    if run.answer:
        title = f"**Answer** ({PARTIAL_NOTE})" if run.partial else "**Answer**"
        lines += [title, "", run.answer.replace("<", "&lt;")]  # Markdown stays, tags go inert
    return "\n".join(lines)


def run_html(run: DagRun) -> str:
    """The run as self-contained HTML: header, SVG of the DAG, step table, answer (escaped)."""
    rows = "".join(
        "<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>" for row in step_rows(run.plan)
    )
    table = (
        "<table><thead><tr><th>step</th><th>status</th><th>task</th><th>model</th><th>s</th><th>result</th>"
        f"</tr></thead><tbody>{rows}</tbody></table>"
        if rows
        else ""
    )
    title = f"<b>Answer</b> ({PARTIAL_NOTE})" if run.partial else "<b>Answer</b>"
    answer = (
        f'<div>{title}<div style="white-space: pre-wrap">{html.escape(run.answer)}</div></div>' if run.answer else ""
    )
    drawing = svg(run.plan) if run.plan is not None and run.plan.steps else ""
    return (
        f'<div class="dagmagic-static"><p><b>dagmagic</b> · {html.escape(run.goal)}</p>'
        f"<p>{html.escape(_summary(run))}</p>{drawing}{table}{answer}</div>"
    )


def run_mimebundle(run: DagRun) -> dict[str, str]:
    """Every static representation at once."""
    return {"text/plain": repr(run), "text/markdown": run_markdown(run), "text/html": run_html(run)}


def svg(plan: ExecutionPlan) -> str:
    """The plan's DAG as an SVG, coloured by status."""
    placed = layout(plan)
    steps = {step.id: step for step in plan.steps}
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{placed.width:g}" height="{placed.height:g}" '
        f'viewBox="0 0 {placed.width:g} {placed.height:g}" font-family="sans-serif" font-size="11">',
        '<defs><marker id="dagmagic-arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" '
        'markerHeight="6" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#888"/></marker></defs>',
    ]
    for edge in placed.edges:
        parts.append(
            f'<line x1="{edge.x1:g}" y1="{edge.y1:g}" x2="{edge.x2:g}" y2="{edge.y2:g}" stroke="#888" '
            'marker-end="url(#dagmagic-arrow)"/>'
        )
    for node in placed.nodes:
        parts.append(_svg_node(steps[node.id], node.x, node.y, node.w, node.h))
    parts.append("</svg>")
    return "".join(parts)


def _svg_node(step: PlanStep, x: float, y: float, w: float, h: float) -> str:
    color = STATUS_COLORS.get(step.status, "#9e9e9e")
    task = html.escape(textwrap.shorten(step.task, 26, placeholder="…"))
    return (
        f'<g data-step-id="{html.escape(step.id)}"><rect x="{x:g}" y="{y:g}" width="{w:g}" height="{h:g}" rx="6" '
        f'fill="{color}" fill-opacity="0.18" stroke="{color}"/>'
        f'<text x="{x + 8:g}" y="{y + 18:g}" font-weight="bold">{html.escape(step.id)} · {step.status}</text>'
        f'<text x="{x + 8:g}" y="{y + 36:g}">{task}</text></g>'
    )


def _summary(run: DagRun) -> str:
    parts = [f"status: {run.status}", f"rounds: {len(run.rounds)}"]
    if run.analysis is not None:
        parts += [f"achieved: {'yes' if run.achieved else 'no'}", f"confidence: {run.confidence:.2f}"]
    if run.error:
        parts.append(f"error: {run.error}")
    return " · ".join(parts)


def _short(text: str) -> str:
    return textwrap.shorten(" ".join(text.split()), _PREVIEW, placeholder="…") if text else ""


def _md(text: str) -> str:
    """Text safe inside a Markdown table cell (pipes and HTML escaped)."""
    return html.escape(text).replace("|", "\\|").replace("\n", " ")
