"""The static picture's text: every text fits its box (the whole of it in the box's <title>), and every glyph is
explained in the legend under the picture."""

from __future__ import annotations

import base64
import re
from pathlib import Path
from xml.etree import ElementTree

from dagmagic.engine.run.dag_run import DagRun
from dagmagic.models import ExecutionPlan, PlanStep, RoundRecord, RunState
from dagmagic.notebook.fallbacks import run_html, svg

SVG = "{http://www.w3.org/2000/svg}"
LONG_ID = "submit_plandraft_and_then_some_more_words"
LONG_TASK = "Summarise every finding of the earlier steps in one table with sources, dates and caveats"


def estimated_width(text: str, size: float, *, bold: bool) -> float:
    """The test's own estimate, independent of the renderer's: 0.6 em a character (DejaVu Sans's lowercase and
    digits average about that), bold 0.66 em, anything not ASCII a whole em."""
    return sum(1.0 if not char.isascii() else 0.66 if bold else 0.6 for char in text) * size


def long_plan() -> ExecutionPlan:
    steps = [
        PlanStep(id=LONG_ID, task=LONG_TASK, status="completed", tool_hint="add", tool_args={"a": 1}),
        PlanStep(id="s2", task=LONG_TASK, status="skipped", dependencies=[LONG_ID]),
        PlanStep(id="s3", task="WWWWWWWWWWWWWWWWWWWWWWWWWWWWWW", status="failed", dependencies=[LONG_ID]),
    ]
    return ExecutionPlan(goal="g", steps=steps)


def test_every_text_fits_its_box_and_the_boxs_title_holds_it_whole() -> None:
    root = ElementTree.fromstring(svg(long_plan()))
    size = float(root.get("font-size", "0"))
    groups = [g for g in root.iter(f"{SVG}g") if g.get("data-step-id")]
    assert len(groups) == 3
    for group in groups:
        rect = group.find(f"{SVG}rect")
        assert rect is not None
        left, width = float(rect.get("x", "0")), float(rect.get("width", "0"))
        for text in group.iter(f"{SVG}text"):
            words = text.text or ""
            right = float(text.get("x", "0")) + estimated_width(words, size, bold=text.get("font-weight") == "bold")
            assert right <= left + width, f"{words!r} runs out of its box"
        title = group.find(f"{SVG}title")
        assert title is not None and title.text is not None, "no <title> holds the whole text"
        step_id = group.get("data-step-id", "")
        assert step_id in title.text
        assert (LONG_TASK if step_id != "s3" else "W" * 30) in title.text
    first = groups[0]
    head = next(first.iter(f"{SVG}text")).text or ""
    assert head.endswith("… · tool") and head.startswith("✓ submit_")  # the id is cut, what follows stays


def pictures_and_legends(page: str) -> list[tuple[str, str]]:
    """Each picture's SVG and the paragraph under it."""
    found = re.findall(r'<img src="data:image/svg\+xml;base64,([^"]+)"[^>]*></p>(<p>[^<]*</p>)?', page)
    return [(base64.b64decode(data).decode(), legend) for data, legend in found]


def test_each_glyph_of_a_picture_is_explained_under_it() -> None:
    run = DagRun(
        RunState(run_id="r", goal="g", status="done", rounds=[RoundRecord(index=1, plan=long_plan())], answer="a")
    )
    ((drawing, legend),) = pictures_and_legends(run_html(run))
    texts = "".join(text.text or "" for text in ElementTree.fromstring(drawing).iter(f"{SVG}text"))
    glyphs = {char for char in texts if not char.isascii()} - {"·", "…"}
    assert glyphs == {"✓", "⤼", "✗"}
    assert legend == "<p>✓ completed · ✗ failed · ⤼ skipped</p>"


def test_the_glyphs_are_the_widgets() -> None:
    from dagmagic.notebook.picture import STATUS_GLYPHS

    source = (Path(__file__).parents[2] / "js" / "src" / "graph.js").read_text(encoding="utf-8")
    table = source[source.index("STATUS_GLYPH =") : source.index("});", source.index("STATUS_GLYPH ="))]
    assert dict(re.findall(r'(\w+): "(.)"', table)) == STATUS_GLYPHS
