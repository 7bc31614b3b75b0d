from __future__ import annotations

import itertools

from dagmagic.engine.run import DagRun
from dagmagic.models import AnalysisResult, ExecutionPlan, PlanStep, RoundRecord, RunState
from dagmagic.notebook.fallbacks import run_html, run_markdown, run_mimebundle, svg
from dagmagic.notebook.layout import layout

from .samples import FALLBACK_ERROR, FALLBACK_WARNING, tool_step_run


def plan(*steps: tuple[str, list[str]]) -> ExecutionPlan:
    return ExecutionPlan(goal="g", steps=[PlanStep(id=i, task=f"task {i}", dependencies=d) for i, d in steps])


WIDE = plan(
    ("s1", []), ("s2", []), ("s3", []), ("s4", ["s1", "s2"]), ("s5", ["s3"]), ("s6", ["s4", "s5"]), ("s7", ["r1.s2"])
)


def test_layout_is_deterministic() -> None:
    assert layout(WIDE) == layout(WIDE)
    shuffled = ExecutionPlan(goal="g", steps=list(reversed(WIDE.steps)))
    assert layout(shuffled) == layout(WIDE)


def test_no_two_nodes_overlap_and_edges_point_down() -> None:
    placed = layout(WIDE)
    for a, b in itertools.combinations(placed.nodes, 2):
        apart = a.x + a.w <= b.x or b.x + b.w <= a.x or a.y + a.h <= b.y or b.y + b.h <= a.y
        assert apart, (a, b)
    layers = {n.id: n.layer for n in placed.nodes}
    assert len(placed.edges) == 5  # the earlier-round reference r1.s2 is not drawn
    for edge in placed.edges:
        assert layers[edge.source] < layers[edge.target] and edge.y1 < edge.y2
    assert all(n.x >= 0 and n.x + n.w <= placed.width and n.y + n.h <= placed.height for n in placed.nodes)


def test_children_sit_under_their_parents() -> None:
    placed = {n.id: n for n in layout(plan(("a", []), ("b", []), ("c", ["b"]), ("d", ["a"]))).nodes}
    assert placed["d"].x < placed["c"].x  # d's parent a is left of c's parent b


def test_a_cyclic_plan_is_still_drawable() -> None:
    placed = layout(plan(("a", ["b"]), ("b", ["a"])))
    assert [n.id for n in placed.nodes] == ["a", "b"] and placed.edges == []


def finished_run(answer: str = "The **answer** <script>alert(1)</script>") -> DagRun:
    steps = [
        PlanStep(id="s1", task="look | up", status="completed", result="found <b>it</b>", started_at=1, completed_at=3),
        PlanStep(id="s2", task="compare", status="failed", error="RuntimeError: boom", dependencies=["s1"]),
    ]
    record = RoundRecord(
        index=1, plan=ExecutionPlan(goal="g", steps=steps), analysis=AnalysisResult(achieved=True, confidence=0.8)
    )
    state = RunState(run_id="abc", goal="Compare <x>", status="done", rounds=[record], answer=answer)
    return DagRun(state)


def test_markdown_has_the_answer_and_the_step_table() -> None:
    text = run_markdown(finished_run())
    assert "| s1 | completed | look \\| up |" in text
    assert "| s2 | failed | compare |  |  | RuntimeError: boom |" in text
    assert "The **answer** &lt;script>alert(1)&lt;/script>" in text
    assert "achieved: yes · confidence: 0.80" in text


def test_html_escapes_everything_the_model_wrote() -> None:
    page = run_html(finished_run())
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert "found &lt;b&gt;it&lt;/b&gt;" in page
    assert "<details open><summary>Round 1 · 2 steps · achieved, confidence 80%</summary>" in page
    assert "<svg" in page and "Compare &lt;x&gt;" in page
    assert "<details><summary><b>s2</b> · failed · compare</summary><p><i>Error:</i> RuntimeError: boom" in page


def test_the_answer_is_rendered_from_markdown_and_sanitized() -> None:
    answer = (
        "## Result\n\nThe **answer** is\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n"
        "<script>alert(1)</script> <img src=x onerror=alert(1)> [click](javascript:alert(1)) "
        "![leak](http://127.0.0.1:9/leak?d=secret) [docs](https://example.org)"
    )
    page = run_html(finished_run(answer))
    body = page[page.index("<b>Answer</b>") :]
    assert "<h2>Result</h2>" in body and "<strong>answer</strong>" in body and "<table>" in body
    assert "<td>1</td>" in body
    assert "<script" not in body and "onerror" not in body.replace("onerror=alert(1)&gt;", "")
    assert 'href="javascript:' not in body and "<img" not in body  # an unsafe link stays inert text
    assert 'src="http' not in body  # no remote image: nothing is fetched when the notebook is read
    assert '<a href="https://example.org" rel="noopener noreferrer nofollow">docs</a>' in body


def test_every_round_is_in_the_static_view() -> None:
    run = finished_run()
    second = RoundRecord(index=2, plan=plan(("s1", [])), rerun_of=1, rerun_step="s1")
    run.rounds.append(second)
    page = run_html(run)
    assert page.count("<details><summary>Round") == 1 and page.count("<details open><summary>Round") == 1
    assert "Round 2 · 1 step · re-run of round 1 (s1)" in page


def test_svg_colours_nodes_by_status_and_escapes_tasks() -> None:
    drawing = svg(finished_run().plan)  # type: ignore[arg-type]
    assert drawing.count("<g data-step-id=") == 2 and "#e53935" in drawing and "look | up" in drawing
    assert drawing.count("<line") == 1


def test_the_static_bundle_is_consistent() -> None:
    run = finished_run()
    bundle = run_mimebundle(run)
    assert bundle["text/plain"] == repr(run)
    for needle in ("s1", "completed", "RuntimeError: boom", "answer"):
        assert needle in bundle["text/html"] and needle in bundle["text/markdown"]


def test_a_partial_answer_says_so_in_every_static_view() -> None:
    from dagmagic.models import Decision

    run = finished_run()
    assert "partial" not in run_markdown(run) and "partial" not in run_html(run)
    run.rounds[-1].decision = Decision(action="synthesize", reason="Stopped by the user.", partial=True)
    assert "**Answer** (partial: the run was stopped before it finished)" in run_markdown(run)
    assert "<b>Answer</b> (partial: the run was stopped before it finished)" in run_html(run)


def test_layers_put_s2_before_s10() -> None:
    steps = plan(*((f"s{i}", []) for i in (10, 2, 1)))
    assert steps.layers() == [["s1", "s2", "s10"]]
    assert [node.id for node in sorted(layout(steps).nodes, key=lambda n: n.x)] == ["s1", "s2", "s10"]


def test_a_tool_step_shows_its_call_and_substituted_values_in_the_static_views() -> None:
    run = tool_step_run()
    page = run_html(run)
    assert "<p><i>Tool call</i> (direct, no LLM call): <code>add(a=$s1 → 68.4, b=12)</code></p>" in page
    fallback = (
        "<p><i>Tool call</i> (failed, so an agent ran the step): <code>search(query=&quot;population of $s1 "
        "million&quot; → &quot;population of 68.4 million&quot;, limit=&quot;many&quot;)</code><br>"
        f"{FALLBACK_ERROR}</p>"
    )
    assert fallback in page
    assert f"<p><i>Note:</i> {FALLBACK_WARNING}</p>" in page
    assert ">s2 · completed · tool</text>" in page  # the DAG's box says it too

    text = run_markdown(run)  # `$` escaped: JupyterLab would typeset "$s1 … $s2" as math
    assert "| s2 | completed | Add the two figures · add(a=\\$s1 → 68.4, b=12) | direct call | 0.2 | 80.4 |" in text
    assert "| s3 | completed | Search for the source · search(query=&quot;population of \\$s1 million&quot; → " in text
    assert "| m | 3.0 | INSEE |" in text  # the agent that ran it instead


def test_a_tool_step_that_has_not_run_shows_its_planned_call() -> None:
    run = tool_step_run()
    step = run.step_of(1, "s2")
    assert step is not None
    step.status, step.result, step.tool_calls, step.started_at = "pending", None, [], None
    assert "<p><i>Tool call</i> (planned): <code>add(a=$s1, b=12)</code></p>" in run_html(run)
    assert "| s2 | pending | Add the two figures · add(a=\\$s1, b=12) | tool call |  |  |" in run_markdown(run)


def test_a_plan_cut_is_said_in_the_round_and_with_the_answer_with_how_to_allow_more() -> None:
    from dagmagic.models import PlanCut

    run = finished_run("Forty-two.")
    run.rounds[0].plan_cut = PlanCut(planned=14, kept=6, dropped=["check <b>twice</b>"])
    note = "The plan had 14 steps: only the first 6 ran (plan_max_steps)."
    hint = "%dag config plan_max_steps=14"
    page, text = run_html(run), run_markdown(run)
    assert page.count(note) == 2 and page.count(hint) == 2  # in its round and beside the answer
    assert "<summary>Round 1 · 2 of 14 planned steps" in page
    assert page.index(note, page.index("<summary>Round 1")) < page.index("<b>Answer</b>") < page.rindex(note)
    assert "check &lt;b&gt;twice&lt;/b&gt;" in page and "<b>twice</b>" not in page  # the model's text, escaped
    assert note in text and f"`{hint}`" in text and text.index(note) < text.index("Forty-two.")
