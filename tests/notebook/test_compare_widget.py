"""``CompareWidget``: the comparison's synced state (fresh containers, long results cut), its static views (escaped,
words that differ as ``<del>``/``<ins>``), how a comparison displays as a cell's value, and a comparison of runs
still going recomputed on their events, throttled, until both have ended.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from dagmagic import DagRun, DagSession, DagSettings, ModelRegistry
from dagmagic.notebook.answering import AnsweringWidget
from dagmagic.notebook.compare_cell import compare_display
from dagmagic.notebook.compare_widget import (
    RESULT_CHARS,
    CompareWidget,
    compare_state,
    entries_of,
    static_views,
)
from dagmagic.notebook.display import WIDGET_VIEW
from dagmagic.side_by_side import ExperimentComparison, Piece, RunComparison
from tests.compare_samples import HOSTILE, twelve_a_side

from .conftest import scripted

SAMPLE = Path(__file__).resolve().parents[2] / "js" / "test" / "compare-sample.json"


def test_the_state_is_the_comparison_as_json_in_fresh_containers() -> None:
    comparison = twelve_a_side()
    widget = CompareWidget(comparison)
    assert widget.title == "" and widget.live is False
    (entry,) = widget.comparisons
    assert entry["title"] == ""
    assert entry["comparison"] == json.loads(comparison.model_dump_json())
    before = widget.comparisons
    widget.sync()
    assert widget.comparisons is not before and widget.comparisons == before  # a new list: it is sent
    json.dumps(widget.comparisons)
    assert repr(widget) == "CompareWidget(run aaaa1111 vs run bbbb2222)"


def test_the_front_ends_sample_is_what_python_syncs() -> None:
    """js/test/compare-sample.json, which the front end's tests draw, is this state (regenerate it if not)."""
    assert json.loads(SAMPLE.read_text(encoding="utf-8")) == compare_state([("", twelve_a_side(unmatched=True))])


def test_long_results_are_cut_in_the_state() -> None:
    comparison = twelve_a_side()
    step = comparison.rounds[0].steps[0].a
    assert step is not None
    step.result = "x" * (RESULT_CHARS * 3)
    state = compare_state([("", comparison)])
    sent = state["comparisons"][0]["comparison"]["rounds"][0]["steps"][0]["a"]["result"]
    assert len(sent) == RESULT_CHARS and sent.endswith("…")
    assert step.result == "x" * (RESULT_CHARS * 3)  # the comparison itself keeps it whole


def test_long_word_differences_are_cut_in_the_state() -> None:
    comparison = twelve_a_side()
    pair = comparison.rounds[0].steps[2]
    pair.result = [Piece(op="removed", text="a " * RESULT_CHARS), Piece(op="added", text="b " * RESULT_CHARS)] * 3
    sent = compare_state([("", comparison)])["comparisons"][0]["comparison"]["rounds"][0]["steps"][2]["result"]
    assert sum(len(piece["text"]) for piece in sent) <= 2 * RESULT_CHARS + 1
    assert sent[-1] == {"op": "same", "text": "…"} and len(pair.result) == 6


def test_a_comparison_with_a_live_side_is_live() -> None:
    assert CompareWidget(twelve_a_side(live=True)).live is True


def test_the_static_views_are_the_comparisons_own_escaped() -> None:
    comparison = twelve_a_side(unmatched=True)
    bundle = static_views(comparison)
    assert bundle["text/plain"] == repr(comparison) and "0x" not in bundle["text/plain"]
    page = bundle["text/html"]
    assert HOSTILE not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    assert ">3000</del>" in page and ">3500</ins>" in page


def test_an_experiment_comparison_shows_one_comparison_per_case() -> None:
    comparison = ExperimentComparison(
        experiment="towns",
        a="small",
        b="big",
        cases={"louvre": twelve_a_side(), "eiffel": twelve_a_side(unmatched=True)},
        missing={"hostile": "its cell has not run"},
    )
    entries, title = entries_of(comparison)
    assert [name for name, _ in entries] == ["louvre", "eiffel"]
    assert title == "towns: config small vs config big (1 cases not compared: hostile)"
    widget = CompareWidget(entries, title=title)
    assert [entry["title"] for entry in widget.comparisons] == ["louvre", "eiffel"]
    assert static_views(comparison)["text/html"].count("<details") == 2


def test_a_comparison_displays_static_alone_without_a_front_end_and_with_the_widget_where_one_draws(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    comparison = twelve_a_side()
    monkeypatch.setattr(AnsweringWidget, "front_end_seen", False)
    bundle, metadata = compare_display(comparison)
    assert WIDGET_VIEW not in bundle and "text/html" in bundle
    assert metadata == {"dagmagic": {"comparison": [["aaaa1111", "bbbb2222"]]}}  # the saved file drops the widget
    monkeypatch.setattr(AnsweringWidget, "front_end_seen", True)
    bundle, _ = compare_display(comparison)
    assert WIDGET_VIEW in bundle and bundle["text/plain"] == repr(comparison)


def test_the_shell_shows_a_comparison_through_the_display_hook(shell: Any) -> None:
    comparison = twelve_a_side()
    data, metadata = shell.display_formatter.format(comparison)
    assert data["text/plain"] == repr(comparison) and ">3000</del>" in data["text/html"]
    assert metadata["dagmagic"] == {"comparison": [["aaaa1111", "bbbb2222"]]}


async def test_a_comparison_of_runs_still_going_fills_in_then_lets_them_go() -> None:
    llms = [scripted(), scripted(step=["another result"])]
    for llm in llms:
        llm.latency = 0.05
    runs = [DagSession(ModelRegistry().register("m", llm), DagSettings(store="none")).start("goal") for llm in llms]
    statuses: list[tuple[str, str]] = []

    def between(a: DagRun, b: DagRun) -> RunComparison:
        statuses.append((a.status, b.status))
        return RunComparison.between(a, b)

    widget = CompareWidget(RunComparison.between(*runs))
    widget.follow(runs[0], runs[1], between)
    assert widget.following and widget.live
    started = asyncio.get_running_loop().time()
    await asyncio.gather(*runs)
    await asyncio.sleep(0.05)
    elapsed = asyncio.get_running_loop().time() - started
    assert not widget.following and widget.live is False
    compared = widget.comparisons[0]["comparison"]
    assert (compared["a"]["status"], compared["b"]["status"]) == ("done", "done")
    pairs = compared["rounds"][0]["steps"]
    assert [(pair["change"], pair["fields"]) for pair in pairs] == [("changed", ["result"])] * 2
    assert statuses[0] != ("done", "done") and statuses[-1] == ("done", "done")  # it filled in as they ran
    assert 2 <= widget.syncs <= 10 * elapsed + 3, (widget.syncs, elapsed)
    count = widget.syncs
    await asyncio.sleep(0.15)
    assert widget.syncs == count  # nothing follows the runs any more
    widget.close()


def test_dag_compare_of_runs_still_going_shows_a_widget_that_fills_in(ip: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from ipywidgets.widgets.widget import _instances

    from tests.notebook.test_magics import run_cell

    monkeypatch.setattr(AnsweringWidget, "front_end_seen", True)
    ip.user_ns["llm"] = scripted(step=["slow"])
    ip.user_ns["llm"].latency = {"step": 0.3}
    ip.user_ns["other"] = scripted(step=["slower"])
    ip.user_ns["other"].latency = {"step": 0.4}
    run_cell(ip, "%%dag --models llm --bg -o first\ngoal")
    run_cell(ip, "%%dag --models other --bg -o second\ngoal")
    comparison = run_cell(ip, "%dag compare first second")
    assert isinstance(comparison, RunComparison) and comparison.live
    data, _ = ip.display_formatter.format(comparison)
    widget = _instances[data[WIDGET_VIEW]["model_id"]]
    assert isinstance(widget, CompareWidget) and widget.following and widget.live
    run_cell(ip, "await first")
    run_cell(ip, "await second")
    run_cell(ip, "import asyncio; await asyncio.sleep(0.05)")
    assert not widget.following and widget.live is False
    compared = widget.comparisons[0]["comparison"]
    assert (compared["a"]["status"], compared["b"]["status"]) == ("done", "done")
    assert [pair["change"] for pair in compared["rounds"][0]["steps"]] == ["changed", "changed"]
    widget.close()
