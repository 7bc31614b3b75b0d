from __future__ import annotations

import base64
import itertools
import random
import re
from xml.etree import ElementTree

import pytest

from dagmagic.engine.run.dag_run import DagRun
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
        ys = [y for _, y in edge.points]
        assert layers[edge.source] < layers[edge.target] and ys == sorted(ys) and ys[0] < ys[-1]
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
    assert '<img src="data:image/svg+xml;base64,' in page and "Compare &lt;x&gt;" in page
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
    assert drawing.count('class="edge"') == 1


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


def test_a_run_the_user_stopped_reads_stopped_by_you_in_every_static_view() -> None:
    from dagmagic.events import RunFinished

    run = finished_run()
    assert "status: done" in run_markdown(run) and "stopped by you" not in run_html(run)
    stopped = DagRun(run.state, events=[RunFinished(status="done", stopped_by_user=True)])
    assert stopped.status == "done"  # the contract's value; the views say what happened
    for view in (run_markdown(stopped), run_html(stopped), repr(stopped)):
        assert "stopped by you" in view and "status: done" not in view


def test_a_plans_table_aligns_its_text_to_the_left() -> None:
    page = WIDE._repr_html_()
    cells = re.findall(r"<t[hd][^>]*>", page)
    assert cells and all("text-align:left" in cell for cell in cells), cells  # JupyterLab right-aligns by default


def test_an_answer_for_a_goal_not_reached_says_so_in_every_static_view() -> None:
    from dagmagic.models import Decision

    run = finished_run()
    assert "not reached" not in run_markdown(run) and "not reached" not in run_html(run)
    run.rounds[-1].analysis = AnalysisResult(achieved=False, confidence=0.3, reasoning="The 2024 figure is missing.")
    run.rounds[-1].decision = Decision(action="stop", reason="No rounds left (3 of 3).")
    note = "goal not reached: written from what completed, it says what is missing"
    assert f"**Answer** ({note})" in run_markdown(run) and f"<b>Answer</b> ({note})" in run_html(run)
    run.rounds[-1].decision = Decision(action="synthesize", reason="Stopped by the user.", partial=True)
    assert "(partial: the run was stopped before it finished)" in run_markdown(run)  # the partial note says more
    assert note not in run_markdown(run)


def test_layers_put_s2_before_s10() -> None:
    steps = plan(*((f"s{i}", []) for i in (10, 2, 1)))
    assert steps.layers() == [["s1", "s2", "s10"]]
    assert [node.id for node in sorted(layout(steps).nodes, key=lambda n: n.x)] == ["s1", "s2", "s10"]


def test_a_tool_step_shows_its_call_and_substituted_values_in_the_static_views() -> None:
    run = tool_step_run()
    page = run_html(run)
    arrow = 'title="→: the value the tool was called with, once the step it names had run"'  # what → means
    assert f"<p><i>Tool call</i> (direct, no LLM call): <code {arrow}>add(a=$s1 → 68.4, b=12)</code></p>" in page
    fallback = (
        f"<p><i>Tool call</i> (failed, so an agent ran the step): <code {arrow}>search(query=&quot;population of $s1 "
        "million&quot; → &quot;population of 68.4 million&quot;, limit=&quot;many&quot;)</code><br>"
        f"{FALLBACK_ERROR}</p>"
    )
    assert fallback in page
    assert f"<p><i>Note:</i> {FALLBACK_WARNING}</p>" in page
    assert ">✓ s2 · tool</text>" in pictures(page)[0]  # the DAG's box says it too

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


# Static pictures: edges routed around the boxes, arrowheads drawn without ids, each picture an image a
# sanitizer keeps (issue 23, points 2 and 6).

SKIP = plan(("a", []), ("b", ["a"]), ("c", ["a", "b"]))
"""a -> c skips b's layer: a straight line from a to c would go through b."""


def random_plans(count: int) -> list[ExecutionPlan]:
    """Plans of 3 to 16 steps, each depending on some earlier ones: long edges, fans in and out."""
    plans = []
    for seed in range(count):
        rng = random.Random(seed)
        size = rng.randint(3, 16)
        steps = [(f"s{i}", [f"s{j}" for j in range(1, i) if rng.random() < 0.3]) for i in range(1, size + 1)]
        plans.append(plan(*steps))
    return plans


LONG_EDGES = [SKIP, WIDE, *random_plans(40)]


def boxes_of(drawing: str) -> dict[str, tuple[float, float, float, float]]:
    """Each step's box in a picture: left, top, right, bottom."""
    root = ElementTree.fromstring(drawing)
    boxes = {}
    for group in root.iter(f"{SVG}g"):
        if group.get("data-step-id") is not None:
            rect = group.find(f"{SVG}rect")
            assert rect is not None
            x, y, w, h = (float(rect.get(name, "0")) for name in ("x", "y", "width", "height"))
            boxes[str(group.get("data-step-id"))] = (x, y, x + w, y + h)
    return boxes


SVG = "{http://www.w3.org/2000/svg}"
NUMBER = re.compile(r"-?[0-9.]+")


def edge_pieces(drawing: str) -> list[list[tuple[float, float]]]:
    """Each piece of each edge line as the points that bound it: a straight segment's two ends, or a cubic curve's
    start, control points and end (the curve stays inside their convex hull, so inside their bounding box).
    """
    root = ElementTree.fromstring(drawing)
    pieces = []
    for line in root.iter(f"{SVG}line"):
        x1, y1, x2, y2 = (float(line.get(name, "0")) for name in ("x1", "y1", "x2", "y2"))
        pieces.append([(x1, y1), (x2, y2)])
    for path in root.iter(f"{SVG}path"):
        if path.get("class") != "edge":
            continue
        current = (0.0, 0.0)
        for command, numbers in re.findall(r"([MLC])([^MLC]*)", str(path.get("d"))):
            values = [float(n) for n in NUMBER.findall(numbers)]
            points = list(zip(values[::2], values[1::2], strict=True))
            if command != "M":
                pieces.append([current, *points])
            current = points[-1]
    return pieces


def enters(piece: list[tuple[float, float]], box: tuple[float, float, float, float]) -> bool:
    """Whether the piece's bounding box overlaps the box's inside (touching its border is not entering)."""
    xs, ys = [x for x, _ in piece], [y for _, y in piece]
    left, top, right, bottom = box
    margin = 0.5
    return min(xs) < right - margin and max(xs) > left + margin and min(ys) < bottom - margin and max(ys) > top + margin


@pytest.mark.parametrize("steps", LONG_EDGES, ids=["skip", "wide", *(f"random{i}" for i in range(40))])
def test_no_edge_goes_through_a_box(steps: ExecutionPlan) -> None:
    drawing = svg(steps)
    boxes = boxes_of(drawing)
    pieces = edge_pieces(drawing)
    assert pieces, "every one of these plans has an edge"
    for piece in pieces:
        for step_id, box in boxes.items():
            assert not enters(piece, box), (piece, step_id, box)


def test_an_edge_that_skips_a_layer_bends_around_the_box_in_its_way() -> None:
    placed = layout(SKIP)
    route = next(edge for edge in placed.edges if (edge.source, edge.target) == ("a", "c"))
    b = next(node for node in placed.nodes if node.id == "b")
    passing = [x for x, y in route.points if b.y <= y <= b.y + b.h]
    assert passing and all(x < b.x or x > b.x + b.w for x in passing)  # beside b, in the gap
    assert len({x for x, _ in route.points}) > 1  # it bends


def test_every_edge_ends_in_an_arrowhead_at_its_target_without_marker_ids() -> None:
    for steps in (SKIP, WIDE):
        drawing = svg(steps)
        assert "marker" not in drawing and "url(#" not in drawing
        root = ElementTree.fromstring(drawing)
        heads = [path for path in root.iter(f"{SVG}path") if path.get("class") == "arrowhead"]
        placed = layout(steps)
        assert len(heads) == len(placed.edges)
        tips = set()
        for head in heads:
            values = [float(n) for n in NUMBER.findall(str(head.get("d")))]
            corners = list(zip(values[::2], values[1::2], strict=True))
            tips.add(max(corners, key=lambda point: point[1]))  # it points down, at the target's top
        assert tips == {edge.points[-1] for edge in placed.edges}
        tops = {(node.x, node.x + node.w, node.y) for node in placed.nodes}
        assert all(any(left < x < right and y == top for left, right, top in tops) for x, y in tips)


def pictures(page: str) -> list[str]:
    """The SVG documents of a page's pictures, decoded from their data URIs."""
    return [base64.b64decode(data).decode() for data in re.findall(r'src="data:image/svg\+xml;base64,([^"]+)"', page)]


def two_round_run() -> DagRun:
    run = finished_run()
    run.rounds.append(RoundRecord(index=2, plan=SKIP, rerun_of=1, rerun_step="s1"))
    return run


def test_ids_are_unique_across_the_pictures_of_a_page() -> None:
    page = run_html(two_round_run())
    documents = [page, *pictures(page)]
    ids = [found for document in documents for found in re.findall(r'\bid="([^"]*)"', document)]
    assert len(ids) == len(set(ids)), ids


def test_each_rounds_picture_is_an_image_that_an_untrusted_notebook_keeps() -> None:
    """JupyterLab's sanitizer (untrusted notebooks) strips inline <svg> to its text, but keeps an <img> whose src
    is a data URI; an SVG shown as an image runs nothing and loads nothing.
    """
    run = two_round_run()
    page = run_html(run)
    assert "<svg" not in page
    assert pictures(page) == [svg(record.plan) for record in run.rounds]
    assert re.findall(r'<img src="data:[^"]+" alt="([^"]*)" width="[0-9.]+" height="[0-9.]+"', page) == [
        "The plan of round 1: s1 first; s2 after s1",
        "The plan of round 2: a first; b after a; c after a, b",
    ]


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


def replanned_run() -> DagRun:
    """Round 2 builds on round 1's completed s1 (``r1.s1``) and plans a new s1 of its own."""
    run = finished_run()
    steps = [
        PlanStep(id="s1", task="look elsewhere", status="completed", result="found again"),
        PlanStep(id="s2", task="combine", status="completed", result="42", dependencies=["r1.s1", "s1"]),
    ]
    run.rounds.append(RoundRecord(index=2, plan=ExecutionPlan(goal="g", steps=steps, round=2)))
    return run


def test_a_round_shows_the_earlier_results_it_reused_in_its_picture_its_steps_and_the_table() -> None:
    run = replanned_run()
    page = run_html(run)
    second = page[page.index("<summary>Round 2") :]
    (drawing,) = pictures(second)
    assert set(boxes_of(drawing)) == {"r1.s1", "s1", "s2"}  # the reused result is drawn, its edge to s2 too
    assert "r1.s1 · reused" in drawing
    assert "<b>r1.s1</b> · reused from round 1" in second and "found &lt;b&gt;it&lt;/b&gt;" in second
    text = run_markdown(run)
    assert "| r1.s1 | reused from round 1 | look \\| up |" in text
