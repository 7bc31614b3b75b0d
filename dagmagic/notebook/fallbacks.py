"""Static views of a run for nbconvert, GitHub, Colab and terminals: Markdown, and HTML with every round's steps
and a picture of its DAG (picture.py: an SVG shown as an image, sanitizers keep it; a legend of its glyphs under
it). Everything the LLM wrote is escaped.

A model's output is untrusted (a prompt-injected model writes payloads), and front ends render these views:
JupyterLab renders ``text/markdown`` and would fetch a remote image from it. So in the Markdown view every string
the model wrote is inert text, except the answer, which keeps its Markdown with its images turned into links
(``![x](url)`` -> ``!`` and a link ``x``), raw HTML as text, and links only to http(s)/mailto; an answer that
still parses to anything else is shown escaped whole. The HTML view lets through plain tags only (nh3), the SVG
escapes every text and attribute.
"""

from __future__ import annotations

import html
import re
import textwrap

import nh3
from markdown_it import MarkdownIt

from dagmagic.engine import DagRun
from dagmagic.models import ExecutionPlan, PlanCut, PlanStep, RoundRecord, no_math, split_round_reference
from dagmagic.notebook.picture import STATUS_COLORS, legend, picture, svg
from dagmagic.notebook.tool_steps import call_text, direct_call, fell_back, is_tool_step

__all__ = [
    "EDITED",
    "STATUS_COLORS",
    "answer_unreached",
    "follow_ups",
    "inert_markdown",
    "markdown_html",
    "picture",
    "round_label",
    "round_origin",
    "run_html",
    "run_markdown",
    "run_mimebundle",
    "step_rows",
    "svg",
    "what_if_line",
    "what_if_said",
]

_PREVIEW = 160

PARTIAL_NOTE = "partial: the run was stopped before it finished"
UNREACHED_NOTE = "goal not reached: written from what completed, it says what is missing"


PARTIAL_VERDICT = "Partial answer: the run was stopped before it finished; the answer covers what completed."
"""What a round's verdict adds when its answer is partial (whatever the verdict found of the goal)."""


def follow_ups(record: RoundRecord) -> list[tuple[str, str]]:
    """The user's follow-ups that shaped the round, each with how, in words: its plan was made for it, or it came
    while the round ran and its verdict and answer took it into account (no new round followed).
    """
    return [(f"planned for in round {record.index}", text) for text in record.follow_ups] + [
        (f"taken into account by round {record.index}'s verdict and answer", text)
        for text in record.answered_follow_ups
    ]


def answer_unreached(run: DagRun) -> bool:
    """Whether the answer is one for a goal not reached: the last verdict says not achieved and its round ended
    in an answer (not a partial one: that note says more), e.g. once the rounds were spent.
    """
    record = run.rounds[-1] if run.rounds else None
    return bool(
        run.answer
        and record is not None
        and record.analysis is not None
        and not record.analysis.achieved
        and record.decision is not None
        and record.decision.action != "replan"
        and not record.decision.partial
    )


def _answer_note(run: DagRun) -> str:
    """What the answer's title adds: partial, or a goal not reached ("" for neither)."""
    if run.partial:
        return PARTIAL_NOTE
    return UNREACHED_NOTE if answer_unreached(run) else ""


def step_rows(plan: ExecutionPlan | None) -> list[tuple[str, str, str, str, str, str]]:
    """(id, status, task, model, seconds, result or error) for each step, texts shortened."""
    if plan is None:
        return []
    rows: list[tuple[str, str, str, str, str, str]] = []
    for step in plan.steps:
        seconds = f"{step.run_time:.1f}" if step.run_time is not None and not step.edited else ""
        outcome = step.error if step.status != "completed" else step.result
        task, model = _short(step.task), step.model or ""
        if is_tool_step(step):
            task = f"{task} · {call_text(step)}"
            model = model if fell_back(step) else "direct call" if direct_call(step) else "tool call"
        if step.edited:  # the user wrote its result: no model did
            status, model = f"{step.status}, {EDITED}", ""
        else:
            status = step.status
        rows.append((step.id, status, task, model, seconds, _short(outcome or "")))
    return rows


STATIC_ANSWER_CHARS = 12_000
"""The answer as the static views quote it: a model that writes a megabyte must not put it in the saved notebook
twice (Markdown and HTML); ``run.answer`` keeps all of it."""


def _static_answer(answer: str) -> str:
    if len(answer) <= STATIC_ANSWER_CHARS:
        return answer
    more = len(answer) - STATIC_ANSWER_CHARS
    return f"{answer[:STATIC_ANSWER_CHARS]}\n\n… {more} more characters: run.answer has all of it."


def run_markdown(run: DagRun) -> str:
    """The run as Markdown: header, verdict, step table, answer."""
    lines = [f"**dagmagic** · {_md(run.goal)}", "", _md(_summary(run)), ""]
    if (divergence := run.divergence) is not None and divergence.detail:  # the diff keeps its lines, as written
        lines += [_code_block(divergence.detail), ""]
    lines += [f"- warning: {_md(_cap(warning, 1000))}" for warning in run.warnings] + ([""] if run.warnings else [])
    said = [(how, text) for record in run.rounds for how, text in follow_ups(record)]
    lines += [f"- your follow-up ({how}): {_md(_cap(text, 1000))}" for how, text in said]
    lines += [""] if said else []
    edits = [line for record in run.rounds if (line := what_if_line(run, record))]
    lines += [f"- {_md(line)}" for line in edits] + ([""] if edits else [])
    rows = _reused_rows(run) + step_rows(run.plan)
    if rows:
        lines += ["| step | status | task | model | s | result |", "|---|---|---|---|---|---|"]
        lines += ["| " + " | ".join(_md(cell) for cell in row) + " |" for row in rows]
        lines.append("")
    # our own words and numbers only: no escaping needed (and none wanted inside the code span)
    lines += [f"**⚠ {cut.describe()}** To allow more: `{cut_hint(cut)}`\n" for cut in _cuts(run)]
    if run.answer:
        note = _answer_note(run)
        title = f"**Answer** ({note})" if note else "**Answer**"
        lines += [title, "", inert_markdown(_static_answer(run.answer))]
    return "\n".join(lines)


def run_html(run: DagRun) -> str:
    """The run as self-contained HTML for readers without a kernel: every round (its DAG, each step in a
    ``<details>`` with its result, the verdict and what followed), and the answer rendered from Markdown and
    sanitized. No script, no style sheet, no remote resource, and no math typesetting (``no_math``).
    """
    e = html.escape
    latest = run.rounds[-1].index if run.rounds else 0
    rounds = "".join(_round_html(run, record, open_=record.index == latest) for record in run.rounds)
    note = _answer_note(run)
    title = f"<b>Answer</b> ({html.escape(note)})" if note else "<b>Answer</b>"
    cuts = "".join(_cut_html(cut) for cut in _cuts(run))
    answer_html = markdown_html(_images_as_links(_static_answer(run.answer)))
    answer = f"<div>{title}{cuts}{answer_html}</div>" if run.answer else ""
    warnings = "".join(f"<li>{e(_cap(warning, 1000))}</li>" for warning in run.warnings)
    divergence = run.divergence
    diff = f'<pre style="white-space: pre-wrap">{e(_cap(divergence.detail))}</pre>' if divergence else ""
    return no_math(
        f'<div class="dagmagic-static"><p><b>dagmagic</b> · {e(run.goal)}</p>'
        f"<p>{e(_summary(run))}</p>{diff}{f'<ul>{warnings}</ul>' if warnings else ''}{rounds}{answer}</div>"
    )


def _round_html(run: DagRun, record: RoundRecord, *, open_: bool) -> str:
    e = html.escape
    steps = record.plan.steps
    reused = reused_steps(run, record)
    parts = [f"<summary>{e(round_label(record))}</summary>"]
    if said := what_if_said(record):  # under a title that says where the round came from
        parts.append(f"<p><i>{e(said)}: the steps that use its result ran again, the others were kept.</i></p>")
    parts += [f"<p><b>Your follow-up</b> ({e(how)}): {e(_cap(text, 1000))}</p>" for how, text in follow_ups(record)]
    if record.error:
        parts.append(f"<p>{e(record.error)}</p>")
    if record.plan_cut is not None:
        dropped = "; ".join(_short(task) for task in record.plan_cut.dropped[:20])
        parts.append(_cut_html(record.plan_cut, f"Dropped: {dropped}" if dropped else ""))
    if steps:
        drawn = drawn_plan(record, reused)
        ids = {step.id for step in reused}
        parts.append(f"<p>{picture(drawn, _caption(record), reused=ids)}</p>")
        if glyphs := legend(drawn, ids):  # what the picture's glyphs mean, under it
            parts.append(f"<p>{html.escape(glyphs)}</p>")
        parts += [_step_html(step, reused=True) for step in reused]
        parts += [_step_html(step) for step in steps]
    if record.analysis is not None and record.analysis.reasoning:
        parts.append(f"<p><i>Verdict:</i> {e(record.analysis.reasoning)}</p>")
    if record.decision is not None and record.decision.reason != (record.analysis and record.analysis.reasoning):
        parts.append(f"<p><i>Then:</i> {e(record.decision.reason)}</p>")
    if record.decision is not None and record.decision.partial:
        parts.append(f"<p><b>⚠ {e(PARTIAL_VERDICT)}</b></p>")
    return f"<details{' open' if open_ else ''}>{''.join(parts)}</details>"


EDITED = "result edited by you"
"""What every view says of a step whose result the user wrote (``run.what_if``)."""


def round_origin(record: RoundRecord) -> str:
    """Where a re-run round came from, in words: "re-run of round 1 (s2)", or for a what-if round "continued from
    round 1 with s2's result edited by you" ("" for a round that is neither).
    """
    if record.rerun_of is None:
        return ""
    if record.what_if:
        return f"continued from round {record.rerun_of} with {record.rerun_step}'s {EDITED}"
    return f"re-run of round {record.rerun_of} ({record.rerun_step})"


def what_if_said(record: RoundRecord) -> str:
    """What a what-if round supposed: "What if s2 had said “…”" with the start of what the user wrote ("" for
    another round).
    """
    if not record.what_if or record.rerun_step is None:
        return ""
    step = next((s for s in record.plan.steps if s.id == record.rerun_step), None)
    said = f" “{_short(step.result)}”" if step is not None and step.result else ""
    return f"What if {record.rerun_step} had said{said}"


def what_if_line(run: DagRun, record: RoundRecord) -> str:
    """A what-if round in one line, for a view that shows no round titles: "Round 2: what if s2 had said “…”
    (continued from round 1 with s2's result edited by you)" ("" for another round).
    """
    said = what_if_said(record)
    return f"Round {record.index}: {said[0].lower()}{said[1:]} ({round_origin(record)})" if said else ""


def round_label(record: RoundRecord) -> str:
    """A round's title in the static views: its steps, where it came from, its verdict."""
    count = len(record.plan.steps)
    label = f"Round {record.index} · {_steps(count)}"
    if record.plan_cut is not None:
        label = f"Round {record.index} · {count} of {record.plan_cut.planned} planned steps"
    if record.rerun_of is not None:
        label += f" · {round_origin(record)}"
    if record.analysis is not None:
        achieved = "achieved" if record.analysis.achieved else "not achieved"
        label += f" · {achieved}, confidence {record.analysis.confidence:.0%}"
    if record.decision is not None and record.decision.partial:
        label += " · partial answer"
    return label


def reused_steps(run: DagRun, record: RoundRecord) -> list[PlanStep]:
    """The earlier rounds' steps this round's plan builds on (a dependency ``r1.s3``), each under that name, in
    the order first named; a reference to a round or step that is not there is left out.
    """
    rounds = {earlier.index: earlier for earlier in run.rounds if earlier.index < record.index}
    found: dict[str, PlanStep] = {}
    for step in record.plan.steps:
        for dependency in step.dependencies:
            reference = split_round_reference(dependency)
            if reference is None or dependency in found or reference[0] not in rounds:
                continue
            earlier = next((s for s in rounds[reference[0]].plan.steps if s.id == reference[1]), None)
            if earlier is not None:
                found[dependency] = earlier.model_copy(update={"id": dependency, "dependencies": []})
    return list(found.values())


def drawn_plan(record: RoundRecord, reused: list[PlanStep]) -> ExecutionPlan:
    """The round's plan as its picture draws it: the earlier results it builds on first, then its own steps."""
    return record.plan.model_copy(update={"steps": [*reused, *record.plan.steps]}) if reused else record.plan


def _reused_words(step: PlanStep) -> str:
    reference = split_round_reference(step.id)
    return f"reused from round {reference[0]}" if reference else "reused"


def _reused_rows(run: DagRun) -> list[tuple[str, str, str, str, str, str]]:
    """The step table's rows for the earlier results the last round built on."""
    if not run.rounds:
        return []
    reused = reused_steps(run, run.rounds[-1])
    return [
        (step.id, _reused_words(step), *row[2:])
        for step, row in zip(reused, step_rows(ExecutionPlan(goal="", steps=reused)), strict=True)
    ]


def _caption(record: RoundRecord) -> str:
    """The picture in words (its alt text: read aloud, or shown where the picture is not): what runs after what."""
    first = [step.id for step in record.plan.steps if not step.dependencies]
    parts = [f"{', '.join(first)} first"] if first else []
    parts += [f"{step.id} after {', '.join(step.dependencies)}" for step in record.plan.steps if step.dependencies]
    return _cap(f"The plan of round {record.index}: {'; '.join(parts)}", 1000)


def _steps(count: int) -> str:
    return f"{count} step{'' if count == 1 else 's'}"


def cut_hint(cut: PlanCut) -> str:
    """The command that lets a plan of this many steps run whole."""
    return f"%dag config plan_max_steps={cut.planned}"


def _cuts(run: DagRun) -> list[PlanCut]:
    """The cuts of the plans the answer comes from (every round's: a later round reuses earlier results)."""
    return [record.plan_cut for record in run.rounds if record.plan_cut is not None]


def _cut_html(cut: PlanCut, more: str = "") -> str:
    e = html.escape
    extra = f"<br>{e(more)}" if more else ""
    return f"<p><b>⚠ {e(cut.describe())}</b> To allow more: <code>{e(cut_hint(cut))}</code>{extra}</p>"


def _step_html(step: PlanStep, *, reused: bool = False) -> str:
    e = html.escape
    seconds = f" · {step.run_time:.1f}s" if step.run_time is not None and not step.edited else ""
    status = _reused_words(step) if reused else step.status
    if step.edited:
        status = f"{status} · {EDITED}"
    head = f"<b>{e(step.id)}</b> · {e(status)}{seconds} · {e(_short(step.task))}"
    body = [_tool_call_html(step)] if is_tool_step(step) else []
    body += [f"<p><i>Note:</i> {e(_cap(warning, 1000))}</p>" for warning in step.warnings]
    if step.result:
        body.append(f'<pre style="white-space: pre-wrap">{e(_cap(step.result))}</pre>')
    if step.error:
        label = "Why" if step.status in ("skipped", "cancelled") else "Error"
        body.append(f"<p><i>{label}:</i> {e(step.error)}</p>")
    return f"<details><summary>{head}</summary>{''.join(body) or '<p>No result.</p>'}</details>"


def _tool_call_html(step: PlanStep) -> str:
    """A tool step's call (in ``<code>``: math typesetting leaves its ``$s1`` alone), and how it went."""
    call = direct_call(step)
    how = "planned" if call is None else "failed, so an agent ran the step" if call.error else "direct, no LLM call"
    error = f"<br>{html.escape(_cap(call.error, 1000))}" if call is not None and call.error else ""
    text = call_text(step, 200)
    became = f' title="{_BECAME}"' if " → " in text else ""
    return f"<p><i>Tool call</i> ({how}): <code{became}>{html.escape(text)}</code>{error}</p>"


_BECAME = "→: the value the tool was called with, once the step it names had run"
"""What the arrow in a tool step's call means (the widget's tooltip says the same)."""


def _cap(text: str, limit: int = 4000) -> str:
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text) - limit} more characters)"


_MARKDOWN = MarkdownIt("commonmark", {"html": False}).enable("table")
_ALLOWED_TAGS = {
    "a", "b", "blockquote", "br", "code", "del", "em", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "i", "li", "ol",
    "p", "pre", "s", "strong", "table", "tbody", "td", "th", "thead", "tr", "ul",
}  # fmt: skip
"""No ``img``: a model's answer must not make the reader's browser fetch anything."""


def markdown_html(text: str) -> str:
    """Markdown (a model's answer: untrusted) as sanitized HTML: raw HTML in it stays text, only plain tags
    survive, links keep absolute http(s) and mailto targets only.
    """
    return nh3.clean(
        _MARKDOWN.render(text),
        tags=_ALLOWED_TAGS,
        attributes={"a": {"href", "title"}, "th": {"align"}, "td": {"align"}},
        url_schemes={"http", "https", "mailto"},
        attribute_filter=_absolute_links_only,
        link_rel="noopener noreferrer nofollow",
    )


def _absolute_links_only(tag: str, attribute: str, value: str) -> str | None:
    """A relative link would point into the Jupyter server the notebook is read on: dropped (its text stays)."""
    if attribute == "href" and not _SAFE_HREF.match(value):
        return None
    return value


def run_mimebundle(run: DagRun) -> dict[str, str]:
    """Every static representation at once."""
    return {"text/plain": repr(run), "text/markdown": run_markdown(run), "text/html": run_html(run)}


def _summary(run: DagRun) -> str:
    parts = [f"status: {run.status_words}", f"rounds: {len(run.rounds)}"]
    if run.replay_of:
        parts.append(f"replay of run {run.replay_of}")
    if run.forked_from:
        parts.append(f"fork of run {run.forked_from} at {run.forked_at}")
    if run.state.detached_on:
        parts.append(f"on Temporal's workers ({run.state.detached_on})")
    if run.analysis is not None:
        parts += [f"achieved: {'yes' if run.achieved else 'no'}", f"confidence: {run.confidence:.2f}"]
    if run.partial and run.answer:
        parts.append("partial answer")
    if (divergence := run.divergence) is not None:  # the diff follows, on lines of its own
        parts.append(f"{divergence.headline}: {divergence.why}")
    elif run.error:
        parts.append(f"error: {run.error}")  # quotes model-written ids and messages: escaped where it is shown
    return " · ".join(parts)


def _code_block(text: str) -> str:
    """``text`` as a fenced code block: shown as written, inert, whatever backticks it holds."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{_cap(text)}\n{fence}"


def _short(text: str) -> str:
    return textwrap.shorten(" ".join(text.split()), _PREVIEW, placeholder="…") if text else ""


_MARKDOWN_SPECIALS = re.compile(r"([\\`*_\[\]!|~$])")
"""``$`` too: JupyterLab typesets ``$…$`` in Markdown as math (``\\$`` stays a dollar)."""


def _md(text: str) -> str:
    """Text shown as itself on one Markdown line or table cell: HTML escaped, Markdown's specials backslashed."""
    return html.escape(_MARKDOWN_SPECIALS.sub(r"\\\1", " ".join(text.splitlines())))


_IMAGE_OPENER = re.compile(r"(\\*)!\[")
_UNSAFE_LINK_END = re.compile(r"(\\*)\](?=\s*\[|\(\s*(?!https?://|mailto:))", re.IGNORECASE)
_DEFINITION = re.compile(r"^( {0,3}(?:>\s*)*)\[(?=[^\]\n]*\]:)", re.MULTILINE)
_SAFE_HREF = re.compile(r"^(?:https?://|mailto:)", re.IGNORECASE)
_CHECKER = MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])
_CHECKER.validateLink = lambda url: True  # type: ignore[method-assign] # every link, as marked would render it


def _unescaped(pattern: re.Pattern[str], replacement: str, text: str) -> str:
    """Replace ``pattern``'s matches whose first group (the backslashes before them) is even: not escaped."""

    def sub(match: re.Match[str]) -> str:
        backslashes = match.group(1)
        return match.group(0) if len(backslashes) % 2 else backslashes + replacement

    return pattern.sub(sub, text)


def _images_as_links(text: str) -> str:
    """Markdown whose images are links: an escaped ``!`` before what stays a link, so nothing is fetched."""
    return _unescaped(_IMAGE_OPENER, "\\![", text)


def inert_markdown(text: str) -> str:
    """A model's Markdown that renders without fetching or running anything in any Markdown renderer: raw HTML
    as text, images as links, links only to http(s) and mailto (others and reference links as their text).
    Checked by parsing the result; if anything else survives, the whole text is shown escaped.
    """
    inert = _images_as_links(text.replace("<", "&lt;"))
    inert = _unescaped(_UNSAFE_LINK_END, "\\]", inert)
    inert = _DEFINITION.sub(lambda match: f"{match.group(1)}\\[", inert)
    if _renders_inert(inert):
        return inert
    return "\n\n".join(_md(line) for line in text.splitlines())


def _renders_inert(markdown: str) -> bool:
    tokens = list(_CHECKER.parse(markdown))
    while tokens:
        token = tokens.pop()
        tokens += token.children or []
        if token.type in ("image", "html_inline", "html_block"):
            return False
        if token.type == "link_open" and not _SAFE_HREF.match(str(token.attrGet("href") or "")):
            return False
    return True
