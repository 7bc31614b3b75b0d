"""A round's DAG as an SVG picture for the static views (laid out by layout.py): a box per step, coloured by its
status, with its status glyph, id and task; every text cut to its box (the whole of it in the box's ``<title>``),
and a one-line legend of the glyphs the picture uses, for the HTML under it. Everything the model wrote is
escaped.

No layout engine measures text here, and the picture is read in whatever font the reader's browser has: widths
come from a table of advances close to DejaVu Sans's (the widest of the usual UI fonts; the widget's layout.js
uses the same), bold a fifth wider (as DejaVu Sans Bold is), the middle dot as a thin letter, any other
character a whole em. A text is cut to what that estimate fits.
"""

from __future__ import annotations

import base64
import html
import itertools

from dagmagic.models import ExecutionPlan, PlanStep
from dagmagic.notebook.layout import layout
from dagmagic.notebook.tool_steps import is_tool_step

__all__ = ["STATUS_COLORS", "STATUS_GLYPHS", "fit_text", "legend", "picture", "svg", "text_width"]

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

STATUS_GLYPHS = {
    "pending": "○",
    "queued": "◔",
    "running": "◉",
    "retrying": "↻",
    "paused": "‖",
    "completed": "✓",
    "failed": "✗",
    "skipped": "⤼",
    "cancelled": "⊘",
}
"""A glyph per status, so colour is not the only cue: the widget's (js/src/graph.js ``STATUS_GLYPH``)."""

FONT_SIZE = 11
"""px, every text of the picture."""
PADDING = 8
"""Between a box's border and its text, on either side."""
TITLE_CHARS = 1000

_NARROW = "ijlI.,:;'|!"
_THIN = 'ftr()[]{} -/\\"·'
_WIDE = "mwMW@%"
_CAPS = "ABCDEFGHJKLNOPQRSTUVXYZ&"
_BOLD = 1.2


def text_width(text: str, size: float = FONT_SIZE, *, bold: bool = False) -> float:
    """The width of ``text`` in px at ``size``, estimated on the wide side (js/src/layout.js ``textWidth``)."""
    em = 0
    for char in text:
        if not char.isascii():
            em += 1000  # a glyph, an accented or CJK letter: a whole em, whatever the font
        elif char in _NARROW:
            em += 280
        elif char in _THIN:
            em += 400
        elif char in _WIDE:
            em += 960
        elif char in _CAPS:
            em += 730
        else:
            em += 625
    return em / 1000 * size * (_BOLD if bold else 1)


def fit_text(text: str, width: float, *, bold: bool = False) -> str:
    """``text`` on one line, cut with an ellipsis to ``width`` px (whole when it fits)."""
    flat = " ".join(text.split())
    if text_width(flat, bold=bold) <= width:
        return flat
    chars = list(flat)
    while chars and text_width("".join(chars).rstrip() + "…", bold=bold) > width:
        chars.pop()
    return "".join(chars).rstrip() + "…"


def svg(plan: ExecutionPlan, reused: frozenset[str] | set[str] = frozenset()) -> str:
    """The plan's DAG as an SVG document, coloured by status: edges curve down around the boxes, each ending in an
    arrowhead drawn as a shape (no ``<marker>``: a marker's id would be shared by every picture on a page).
    ``reused``: the ids of earlier rounds' results the plan builds on (``r1.s3``), drawn dashed as reused.
    """
    placed = layout(plan)
    steps = {step.id: step for step in plan.steps}
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{placed.width:g}" height="{placed.height:g}" '
        f'viewBox="0 0 {placed.width:g} {placed.height:g}" font-family="sans-serif" font-size="{FONT_SIZE}">',
        # its own background: shown as an image, the picture must read on a dark theme as on a light one
        f'<rect width="{placed.width:g}" height="{placed.height:g}" rx="6" fill="#ffffff"/>',
    ]
    for edge in placed.edges:
        parts.append(f'<path class="edge" d="{_edge_path(edge.points)}" fill="none" stroke="{_EDGE_COLOR}"/>')
        x, y = edge.points[-1]
        head = f"M{x - 4:g},{y - 8:g} L{x + 4:g},{y - 8:g} L{x:g},{y:g} Z"
        parts.append(f'<path class="arrowhead" d="{head}" fill="{_EDGE_COLOR}"/>')
    for node in placed.nodes:
        parts.append(_svg_node(steps[node.id], node.x, node.y, node.w, node.h, reused=node.id in reused))
    parts.append("</svg>")
    return "".join(parts)


_EDGE_COLOR = "#888888"


def _edge_path(points: tuple[tuple[float, float], ...]) -> str:
    """Straight down through a slot; between layers a curve whose control points stay between its ends, so it
    stays in the gap between the two layers, and leaves and arrives vertically (the arrowhead points down).
    """
    x, y = points[0]
    path = [f"M{x:g},{y:g}"]
    for (x0, y0), (x1, y1) in itertools.pairwise(points):
        if x0 == x1:
            path.append(f"L{x1:g},{y1:g}")
        else:
            middle = (y0 + y1) / 2
            path.append(f"C{x0:g},{middle:g} {x1:g},{middle:g} {x1:g},{y1:g}")
    return " ".join(path)


def picture(plan: ExecutionPlan, caption: str, reused: frozenset[str] | set[str] = frozenset()) -> str:
    """The plan's DAG as an ``<img>`` holding the SVG as a data URI: JupyterLab's sanitizer (an untrusted
    notebook) strips an inline ``<svg>`` to its bare text but keeps this, and GitHub shows it. A browser shows an
    SVG image as a picture only: no script in it runs, nothing it names is fetched (nor its tooltips shown: the
    step list under the picture has every id and task whole).
    """
    placed = layout(plan)
    data = base64.b64encode(svg(plan, reused).encode()).decode("ascii")
    return (
        f'<img src="data:image/svg+xml;base64,{data}" alt="{html.escape(caption)}" width="{placed.width:g}" '
        f'height="{placed.height:g}" style="max-width: 100%; height: auto">'
    )


def legend(plan: ExecutionPlan, reused: frozenset[str] | set[str] = frozenset()) -> str:
    """What the picture's glyphs mean, those it uses only, in the order of the statuses: ``✓ completed ·
    ✗ failed`` ("" when it uses none).
    """
    shown = {step.status for step in plan.steps if step.id not in reused}
    return " · ".join(f"{glyph} {status}" for status, glyph in STATUS_GLYPHS.items() if status in shown)


def _svg_node(step: PlanStep, x: float, y: float, w: float, h: float, *, reused: bool = False) -> str:
    """A step's box: its glyph and id (the id cut, so what follows it stays whole), under them its task; the
    whole of each, and the status in words, in its ``<title>`` (a tooltip where the SVG is shown inline).
    """
    e = html.escape
    color = STATUS_COLORS.get(step.status, "#9e9e9e")
    room = w - 2 * PADDING
    status, dashes = ("reused", ' stroke-dasharray="4 3"') if reused else (step.status, "")
    edited = not reused and step.edited  # its result is the user's (run.what_if)
    status += ", result edited by you" if edited else ""
    before = "" if reused else f"{STATUS_GLYPHS.get(step.status, '?')} "
    after = " · reused" if reused else " · edited" if edited else " · tool" if is_tool_step(step) else ""
    rest = room - text_width(before + after, bold=True)
    head = before + fit_text(step.id, rest, bold=True) + after
    if text_width(head, bold=True) > room:  # no room for the id at all: cut the whole line
        head = fit_text(before + step.id + after, room, bold=True)
    task = fit_text(step.task, room)
    kind = ", a tool step" if is_tool_step(step) else ""
    title = _cap(f"{step.id} ({status}{kind}): {' '.join(step.task.split())}")
    return (
        f'<g data-step-id="{e(step.id)}"><title>{e(title)}</title>'
        f'<rect x="{x:g}" y="{y:g}" width="{w:g}" height="{h:g}" rx="6" '
        f'fill="{color}" fill-opacity="0.18" stroke="{color}"{dashes}/>'
        f'<text x="{x + PADDING:g}" y="{y + 18:g}" font-weight="bold">{e(head)}</text>'
        f'<text x="{x + PADDING:g}" y="{y + 36:g}">{e(task)}</text></g>'
    )


def _cap(text: str) -> str:
    return text if len(text) <= TITLE_CHARS else f"{text[:TITLE_CHARS]}…"
