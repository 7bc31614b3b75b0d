"""The static views of a comparison (``text/plain``, ``text/markdown``, ``text/html``): what a saved notebook shows
in place of the compare widget, reopened without a kernel or untrusted, and what terminal IPython and nbconvert show.

Every text of a run is escaped here; the word differences are ``<del>``/``<ins>`` around escaped text (tags that
JupyterLab's sanitizer keeps, so an untrusted notebook shows them too).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from dagmagic.compare import Piece, RoundPair, RunComparison, Side, SideStep, StepPair

__all__ = ["compare_html", "compare_markdown", "compare_mimebundle", "compare_text", "entries_of"]

PREVIEW_CHARS = 600
"""A step's result as the static views show it (they are saved in the notebook: kept short)."""


def entries_of(comparison: Any) -> tuple[list[tuple[str, RunComparison]], str]:
    """The comparisons an object holds, each with its title ("" for one of two runs), and the whole's title: a
    ``RunComparison`` alone, or an experiment comparison's, one per case.
    """
    if isinstance(comparison, RunComparison):
        return [("", comparison)], ""
    cases = getattr(comparison, "cases", None)
    if isinstance(cases, dict):
        entries = [(str(name), each) for name, each in cases.items() if isinstance(each, RunComparison)]
    else:
        entries = []
        for each in cases or getattr(comparison, "comparisons", None) or []:
            if isinstance(each, RunComparison):
                entries.append((each.a.label, each))
            elif isinstance(each, tuple) and len(each) == 2 and isinstance(each[1], RunComparison):
                entries.append((str(each[0]), each[1]))
    configs = [getattr(comparison, name, None) for name in ("a", "b")]
    title = f"config {configs[0]} vs config {configs[1]}" if all(isinstance(c, str) for c in configs) else ""
    return entries, title


def compare_mimebundle(entries: Sequence[tuple[str, RunComparison]], *, title: str = "") -> dict[str, str]:
    """The three static views of the comparisons."""
    return {
        "text/plain": compare_text(entries, title=title),
        "text/markdown": compare_markdown(entries, title=title),
        "text/html": compare_html(entries, title=title),
    }


def _counts(comparison: RunComparison) -> str:
    pairs = [pair for round_pair in comparison.rounds for pair in round_pair.steps]
    return f"{len(pairs)} step pairs, {len(comparison.changed_steps)} differ"


def compare_text(entries: Sequence[tuple[str, RunComparison]], *, title: str = "") -> str:
    """A few deterministic lines (no timings): which runs, how many pairs differ."""
    lines = [f"Comparison: {title}"] if title else []
    for name, comparison in entries:
        lead = f"{name}: " if name else ("" if title else "Comparison: ")
        lines.append(f"{lead}{comparison.a.label} vs {comparison.b.label} · {_counts(comparison)}")
    return "\n".join(lines) or "Comparison: nothing to compare"


def compare_markdown(entries: Sequence[tuple[str, RunComparison]], *, title: str = "") -> str:
    """Markdown: per comparison, the sides and a table of the step pairs."""
    parts = [f"### Comparison: {_md(title)}"] if title else []
    for name, comparison in entries:
        a, b = comparison.a, comparison.b
        heading = f"{name}: " if name else ""
        parts.append(f"**{_md(heading + a.label)}** vs **{_md(b.label)}** · {_counts(comparison)}\n")
        rows = ["| | " + _md(a.label) + " | " + _md(b.label) + " |", "|---|---|---|"]
        rows += [f"| {label} | {_md(text(a))} | {_md(text(b))} |" for label, text in _SIDE_ROWS]
        parts.append("\n".join(rows))
        for round_pair in comparison.rounds:
            steps = ["| change | " + _md(a.label) + " | " + _md(b.label) + " |", "|---|---|---|"]
            for pair in round_pair.steps:
                steps.append(f"| {_change_words(pair)} | {_md(_step_line(pair.a))} | {_md(_step_line(pair.b))} |")
            parts.append(f"{_round_name(round_pair)}\n\n" + "\n".join(steps))
    return "\n\n".join(parts) + "\n"


_SIDE_ROWS: list[tuple[str, Any]] = [
    ("goal", lambda side: _short(side.goal, 200)),
    ("status", lambda side: side.status + (" (live)" if side.live else "")),
    ("models", lambda side: ", ".join(side.models) or "—"),
    ("tokens", lambda side: f"{side.usage.input_tokens + side.usage.output_tokens:,}"),
    ("cost", lambda side: "—" if side.cost is None else f"{side.cost:.4f} USD"),
]


def compare_html(entries: Sequence[tuple[str, RunComparison]], *, title: str = "") -> str:
    """HTML with only tags JupyterLab's sanitizer keeps (tables, details, del, ins, b, code)."""
    out = ['<div class="dagmagic-compare-static">']
    if title:
        out.append(f"<h4>Comparison: {_e(title)}</h4>")
    for index, (name, comparison) in enumerate(entries):
        body = _comparison_html(comparison)
        if len(entries) > 1:
            summary = f"<b>{_e(name)}</b>: {_e(comparison.a.label)} vs {_e(comparison.b.label)} · {_counts(comparison)}"
            out.append(f"<details{' open' if index == 0 else ''}><summary>{summary}</summary>{body}</details>")
        else:
            out.append(body)
    out.append("</div>")
    return "\n".join(out)


def _comparison_html(comparison: RunComparison) -> str:
    a, b = comparison.a, comparison.b
    head = f"<p><b>{_e(a.label)}</b> vs <b>{_e(b.label)}</b> · {_counts(comparison)}</p>"
    rows = "".join(
        f"<tr><th>{label}</th><td>{_e(text(a))}</td><td>{_e(text(b))}</td></tr>" for label, text in _SIDE_ROWS
    )
    head_row = f"<tr><th></th><th>{_e(a.label)}</th><th>{_e(b.label)}</th></tr>"
    sides = f"<table><thead>{head_row}</thead><tbody>{rows}</tbody></table>"
    settings = "".join(
        f"<tr><th>{_e(key)}</th><td>{_e(_value(pair[0]))}</td><td>{_e(_value(pair[1]))}</td></tr>"
        for key, pair in comparison.differences.items()
        if key != "goal"
    )
    parts = [head, sides]
    if settings:
        parts.append(f"<p>Settings that differ:</p><table><tbody>{settings}</tbody></table>")
    parts += [_round_html(round_pair, a, b) for round_pair in comparison.rounds]
    if comparison.answer:
        parts.append(
            "<p><b>Answers</b></p><table><tbody><tr>"
            f"<td>{_pieces_html(comparison.answer, 'a')}</td><td>{_pieces_html(comparison.answer, 'b')}</td>"
            "</tr></tbody></table>"
        )
    elif a.answer or b.answer:
        parts.append(
            f"<p><b>Answers</b></p><table><tbody><tr><td>{_e(_short(a.answer, 2000))}</td>"
            f"<td>{_e(_short(b.answer, 2000))}</td></tr></tbody></table>"
        )
    purposes = sorted(set(a.calls) | set(b.calls))
    if purposes:
        calls = "".join(
            f"<tr><th>{_e(p)}</th><td>{a.calls.get(p, 0)}</td><td>{b.calls.get(p, 0)}</td></tr>" for p in purposes
        )
        parts.append(f"<p>LLM calls per purpose:</p><table><tbody>{calls}</tbody></table>")
    return "\n".join(parts)


def _round_html(round_pair: RoundPair, a: Side, b: Side) -> str:
    rows = []
    for pair in round_pair.steps:
        rows.append(
            f"<tr><td>{_step_html(pair.a, pair, 'a')}</td><td>{_e(_change_words(pair))}</td>"
            f"<td>{_step_html(pair.b, pair, 'b')}</td></tr>"
        )
    verdicts = [
        "—" if v is None else f"{'achieved' if v.achieved else 'not achieved'} ({v.confidence:.0%}): {v.reasoning}"
        for v in (round_pair.verdict_a, round_pair.verdict_b)
    ]
    rows.append(
        f"<tr><td>{_e(_short(verdicts[0], 400))}</td><td>verdict</td><td>{_e(_short(verdicts[1], 400))}</td></tr>"
    )
    head = f"<thead><tr><th>{_e(a.label)}</th><th></th><th>{_e(b.label)}</th></tr></thead>"
    return f"<p><b>{_e(_round_name(round_pair))}</b></p><table>{head}<tbody>{''.join(rows)}</tbody></table>"


def _step_html(step: SideStep | None, pair: StepPair, side: str) -> str:
    if step is None:
        return "—"
    edited = " <b>(result edited by you)</b>" if step.edited else ""
    head = f"<code>{_e(step.ref)}</code> {_e(step.status)}{edited} — {_e(_short(step.task, 200))}"
    if step.error:
        body = _e(_short("error: " + step.error, PREVIEW_CHARS))
    elif pair.result:
        body = _pieces_html(pair.result, side, PREVIEW_CHARS)
    else:
        body = _e(_short(step.result or "", PREVIEW_CHARS))
    return f"{head}<br>{body}"


def _pieces_html(pieces: list[Piece], side: str, limit: int = 4000) -> str:
    own = "removed" if side == "a" else "added"
    tag = "del" if side == "a" else "ins"
    out, used = [], 0
    for piece in pieces:
        if piece.op not in ("same", own):
            continue
        text = piece.text[: max(limit - used, 0)]
        used += len(text)
        out.append(_e(text) if piece.op == "same" else f"<{tag}>{_e(text)}</{tag}>")
        if used >= limit:
            out.append("…")
            break
    return "".join(out)


def _round_name(round_pair: RoundPair) -> str:
    if round_pair.a == round_pair.b:
        return f"Round {round_pair.a}"
    first, second = ("—" if n is None else str(n) for n in (round_pair.a, round_pair.b))
    return f"Round {first} ↔ round {second}"


def _change_words(pair: StepPair) -> str:
    if pair.change == "changed":
        return "changed: " + ", ".join(pair.fields) if pair.fields else "changed"
    return {"same": "same", "added": "only in b", "removed": "only in a"}[pair.change]


def _step_line(step: SideStep | None) -> str:
    if step is None:
        return "—"
    edited = " (result edited by you)" if step.edited else ""
    return f"{step.ref} {step.status}{edited}: {_short(step.task, 80)} → {_short(step.error or step.result or '', 120)}"


def _value(value: Any) -> str:
    return "—" if value is None else str(value)


def _short(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _e(text: str) -> str:
    return html.escape(text).replace("$", "&#36;")


def _md(text: str) -> str:
    flat = " ".join(text.split())
    for char in "\\`*_[]<>|#$":
        flat = flat.replace(char, "\\" + char)
    return flat
