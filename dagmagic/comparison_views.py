"""The views of a comparison of two runs (``dagmagic.compare``) for readers without the widget: a short text
table, Markdown, and static HTML. Every text a model wrote is escaped; the words that differ are in ``<del>`` and
``<ins>``, coloured with JupyterLab's theme variables (with fallbacks for other viewers).
"""

from __future__ import annotations

import html
from collections import Counter
from collections.abc import Iterable
from typing import Any, Protocol

from dagmagic.comparison import Piece, RoundPair, Side, StepPair
from dagmagic.diff import _markdown_text, _verdict_words
from dagmagic.models._text import cut, no_math

__all__ = ["SUMMARY_COLUMNS", "counts", "markdown", "page", "summary", "text", "title"]

SUMMARY_COLUMNS = ("steps", "answer", "status", "tokens b − a", "cost b − a", "s b − a")
"""The columns of ``summary``: a comparison in one row (an experiment's comparison has one per case)."""


class Compared(Protocol):
    """A comparison as its views read it (``RunComparison``)."""

    a: Side
    b: Side
    differences: dict[str, tuple[Any, Any]]
    rounds: list[RoundPair]
    answer: list[Piece]

    @property
    def answer_changed(self) -> bool: ...


def title(comparison: Compared) -> str:
    """``run A vs run B``."""
    return f"{comparison.a.label} vs {comparison.b.label}"


def counts(comparison: Compared) -> str:
    """``1 round; steps: 1 same, 1 changed; answer changed``."""
    tally = Counter(pair.change for pair in (p for r in comparison.rounds for p in r.steps))
    steps = ", ".join(f"{tally[c]} {c}" for c in ("same", "changed", "added", "removed") if tally[c])
    rounds = f"{len(comparison.rounds)} round{'s' if len(comparison.rounds) != 1 else ''}"
    answer = "answer changed" if comparison.answer_changed else "the same answer"
    return f"{rounds}; steps: {steps or 'none'}; {answer}"


def summary(comparison: Compared) -> tuple[str, ...]:
    """The comparison in one row (``SUMMARY_COLUMNS``): the steps that differ, whether the answer does, the two
    statuses and the deltas.
    """
    a, b = comparison.a, comparison.b
    tally = Counter(pair.change for pair in (p for r in comparison.rounds for p in r.steps) if pair.change != "same")
    steps = ", ".join(f"{count} {change}" for change, count in tally.items()) or "the same"
    return (
        steps,
        "changed" if comparison.answer_changed else "the same",
        a.status if a.status == b.status else f"{a.status} → {b.status}",
        f"{b.usage.total_tokens - a.usage.total_tokens:+d}",
        _delta(a.cost, b.cost, money=True) or "-",
        _delta(a.seconds, b.seconds) or "-",
    )


def _figures(comparison: Compared) -> list[tuple[str, str, str, str]]:
    """(what, a's, b's, b - a) for the figures both sides have."""
    a, b = comparison.a, comparison.b
    return [
        ("status", a.status + (" (live)" if a.live else ""), b.status + (" (live)" if b.live else ""), ""),
        ("models", ", ".join(a.models) or "-", ", ".join(b.models) or "-", ""),
        ("tokens", str(a.usage.total_tokens), str(b.usage.total_tokens),
         f"{b.usage.total_tokens - a.usage.total_tokens:+d}"),
        ("cost", _money(a.cost), _money(b.cost), _delta(a.cost, b.cost, money=True)),
        ("seconds", _seconds(a.seconds), _seconds(b.seconds), _delta(a.seconds, b.seconds)),
        ("calls", _calls(a.calls), _calls(b.calls), ""),
    ]  # fmt: skip


def text(comparison: Compared) -> str:
    """A short text table: the sides' figures, what differs, each round's steps."""
    width = max(len(comparison.a.label), len(comparison.b.label), 12)
    lines = [
        f"{title(comparison)}: {counts(comparison)}",
        f"{'':8} {comparison.a.label:<{width}} {comparison.b.label:<{width}} b - a",
    ]
    lines += [
        f"{what:8} {cut(x, width):<{width}} {cut(y, width):<{width}} {d}" for what, x, y, d in _figures(comparison)
    ]
    lines += [
        f"{name} differs: {cut(str(x), 60)!s} -> {cut(str(y), 60)!s}" for name, (x, y) in comparison.differences.items()
    ]
    for pair in comparison.rounds:
        lines.append(f"{_round_name(pair, comparison)}:")
        for step in pair.steps:
            what = step.change + (f" ({', '.join(step.fields)})" if step.fields else "")
            lines.append(f"  {_ref(step):10} {what:30} {cut(_task(step), 60)}")
    lines.append("answer: " + ("changed" if comparison.answer_changed else "the same"))
    return "\n".join(lines)


def markdown(comparison: Compared) -> str:
    """Markdown: the figures, what differs, a table per round, the answers word by word."""
    md = _markdown_text
    lines = [f"**dagmagic compare** · {md(title(comparison))}", "", md(counts(comparison)), ""]
    lines += [f"| | {md(comparison.a.label)} | {md(comparison.b.label)} | b − a |", "|---|---|---|---|"]
    lines += [f"| {what} | {md(x)} | {md(y)} | {md(d)} |" for what, x, y, d in _figures(comparison)]
    if comparison.differences:
        lines += ["", "**Differences before anything ran**", ""]
        lines += [f"- {md(name)}: {md(cut(str(x), 200))} → {md(cut(str(y), 200))}"
                  for name, (x, y) in comparison.differences.items()]  # fmt: skip
    for pair in comparison.rounds:
        lines += ["", f"**{md(_round_name(pair, comparison))}**", "", "| step | change | task | result | tokens | s |",
                  "|---|---|---|---|---|---|"]  # fmt: skip
        for step in pair.steps:
            what = step.change + (f" ({', '.join(step.fields)})" if step.fields else "")
            result = _pieces_html(step.result, 600, markdown=True) if step.result else md(cut(_result(step), 300))
            figures = (_tokens_cell(step), _seconds_cell(step))
            lines.append(f"| {md(_ref(step))} | {what} | {md(cut(_task(step), 200))} | {result} | "
                         + " | ".join(md(f) for f in figures) + " |")  # fmt: skip
        lines += _verdict_lines(pair)
    lines += ["", "**Answers**" + ("" if comparison.answer_changed else " (the same)"), ""]
    lines.append(_pieces_html(comparison.answer, 4000, markdown=True, lines=True) or "(none)")
    return "\n".join(lines)


def page(comparison: Compared) -> str:
    """Static HTML: the figures, what differs, a table per round, the answers word by word."""
    e = html.escape
    head = f"<tr><th></th><th>{e(comparison.a.label)}</th><th>{e(comparison.b.label)}</th><th>b − a</th></tr>"
    figures = "".join(
        f"<tr><th style='text-align:left'>{what}</th>" + "".join(f"<td>{e(c)}</td>" for c in (x, y, d)) + "</tr>"
        for what, x, y, d in _figures(comparison)
    )
    differences = "".join(
        f"<li>{e(name)}: {e(cut(str(x), 200))} → {e(cut(str(y), 200))}</li>"
        for name, (x, y) in comparison.differences.items()
    )
    rounds = "".join(_round_html(pair, comparison) for pair in comparison.rounds)
    answer = _pieces_html(comparison.answer, 4000, lines=True) or "(none)"
    same = "" if comparison.answer_changed else " (the same)"
    return no_math(
        f'<div class="dagmagic-compare" style="color: var(--jp-content-font-color1, inherit)">'
        f"<p><b>dagmagic compare</b> · {e(title(comparison))}</p><p>{e(counts(comparison))}</p>"
        f"<table>{head}{figures}</table>"
        + (f"<p><b>Differences before anything ran</b></p><ul>{differences}</ul>" if differences else "")
        + f"{rounds}<p><b>Answers</b>{same}</p><div style='white-space: pre-wrap'>{answer}</div></div>"
    )


# --- view helpers -------------------------------------------------------------------------------------

_DEL = "background:var(--jp-error-color3,#fdd)"
_INS = "background:var(--jp-success-color3,#dfd)"
_CONTEXT = 80
"""Characters of an unchanged stretch kept on either side of a change (the middle of a long one is left out)."""


def _pieces_html(pieces: Iterable[Piece], limit: int, *, markdown: bool = False, lines: bool = False) -> str:
    """The pieces as inert text, removed words in ``<del>``, added ones in ``<ins>`` (about ``limit`` characters).
    ``markdown``: for a Markdown view (its specials backslashed too); ``lines``: line breaks kept (else one line,
    for a table's cell).
    """
    out, left, pieces = [], limit, list(pieces)
    for number, piece in enumerate(pieces):
        if left <= 0:
            out.append("…")
            break
        text = (
            _around_changes(piece.text, first=number == 0, last=number == len(pieces) - 1)
            if piece.op == "same"
            else piece.text
        )
        text = text[:left]
        left -= len(text)
        shown = ("<br>" if markdown else "\n").join(
            _inert(line, markdown=markdown) for line in (text.split("\n") if lines else [text])
        )
        tag = {"same": "", "removed": "del", "added": "ins"}[piece.op]
        out.append(f"<{tag} style='{_DEL if tag == 'del' else _INS}'>{shown}</{tag}>" if tag and shown else shown)
    return "".join(out).replace("|", "&#124;")


def _around_changes(text: str, *, first: bool, last: bool) -> str:
    """An unchanged stretch as the views show it: whole when short or alone, else only its ends next to the changes
    (the first stretch's end, the last one's start).
    """
    if len(text) <= 3 * _CONTEXT or (first and last):
        return text
    if first:
        return "… " + text[-_CONTEXT:]
    if last:
        return text[:_CONTEXT] + " …"
    return text[:_CONTEXT] + " … " + text[-_CONTEXT:]


def _inert(text: str, *, markdown: bool) -> str:
    """One line of a model's text, escaped, its spacing made single (a space at either end kept)."""
    words = _markdown_text(text) if markdown else html.escape(" ".join(text.split()))
    if not words:
        return " " if text else ""
    return (" " if text[:1].isspace() else "") + words + (" " if text[-1:].isspace() else "")


def _round_name(pair: RoundPair, comparison: Compared) -> str:
    """``round 2``, ``round 1 vs round 2``, ``round 3: only in run 3f2a19c0``."""
    if pair.a is None:
        return f"round {pair.b}: only in {comparison.b.label}"
    if pair.b is None:
        return f"round {pair.a}: only in {comparison.a.label}"
    return f"round {pair.a}" if pair.a == pair.b else f"round {pair.a} vs round {pair.b}"


def _ref(pair: StepPair) -> str:
    a, b = pair.a.ref if pair.a else None, pair.b.ref if pair.b else None
    return a or b or "" if a == b or not (a and b) else f"{a} / {b}"


def _task(pair: StepPair) -> str:
    step = pair.b or pair.a
    return step.task if step is not None else ""


def _result(pair: StepPair) -> str:
    step = pair.b or pair.a
    return (step.result or step.error or "") if step is not None else ""


def _tokens_cell(pair: StepPair) -> str:
    """The tokens' delta when both ran, else the tokens of the one step there is."""
    if pair.tokens_delta is not None:
        return f"{pair.tokens_delta:+d}"
    step = pair.b or pair.a
    return str(step.tokens) if step is not None else ""


def _seconds_cell(pair: StepPair) -> str:
    return _signed(pair.seconds_delta) if pair.seconds_delta is not None else ""


def _verdict_lines(pair: RoundPair) -> list[str]:
    a, b = _verdict_words(pair.verdict_a), _verdict_words(pair.verdict_b)
    return ["", f"Verdict: {a}" + ("" if a == b else f" → {b}")]


def _round_html(pair: RoundPair, comparison: Compared) -> str:
    e = html.escape
    rows = []
    for step in pair.steps:
        what = step.change + (f" ({', '.join(step.fields)})" if step.fields else "")
        result = _pieces_html(step.result, 600) if step.result else e(cut(_result(step), 300))
        cells = (
            e(_ref(step)),
            e(what),
            e(cut(_task(step), 300)),
            result,
            e(_tokens_cell(step)),
            e(_seconds_cell(step)),
        )
        rows.append(
            "<tr>" + "".join(f"<td style='text-align:left; vertical-align:top'>{c}</td>" for c in cells) + "</tr>"
        )
    head = "<tr>" + "".join(f"<th>{h}</th>" for h in ("step", "change", "task", "result", "tokens", "s")) + "</tr>"
    verdict = _verdict_lines(pair)[1]
    return f"<p><b>{e(_round_name(pair, comparison))}</b></p><table>{head}{''.join(rows)}</table><p>{e(verdict)}</p>"


def _money(value: float | None) -> str:
    return "unknown" if value is None else f"${value:.4f}"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _delta(a: float | None, b: float | None, *, money: bool = False) -> str:
    if a is None or b is None:
        return ""
    return f"{'+' if b >= a else '-'}${abs(b - a):.4f}" if money else _signed(b - a)


def _signed(seconds: float) -> str:
    """``+1.2``, ``-0.3``; ``0.0`` for what rounds to nothing (not ``-0.0``)."""
    return f"{seconds:+.1f}" if round(seconds, 1) else "0.0"


def _calls(calls: dict[str, int]) -> str:
    return ", ".join(f"{purpose} {count}" for purpose, count in calls.items()) or "-"
