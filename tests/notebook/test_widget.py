from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from dagmagic import DagSession, DagSettings, ModelRegistry
from dagmagic.notebook.widget import DagWidget, widget_state

from .conftest import scripted


def session(**overrides: Any) -> DagSession:
    return DagSession(ModelRegistry().register("m", scripted(**overrides)), DagSettings(store="none"))


async def test_state_describes_the_run_in_plain_json() -> None:
    run = await session().run("goal")
    state = widget_state(run)
    json.dumps(state)  # everything synced is plain JSON
    assert (state["status"], state["answer"], state["answer_fallback"]) == ("done", "The answer is 42.", False)
    (first,) = state["rounds"]
    assert [n["id"] for n in first["nodes"]] == ["s1", "s2"]
    assert first["nodes"][0]["status"] == "completed" and first["nodes"][0]["result"] == "a result"
    assert first["edges"] == [
        {"source": "s1", "target": "s2", **{k: first["edges"][0][k] for k in ("x1", "y1", "x2", "y2")}}
    ]
    assert first["analysis"] == {"achieved": True, "confidence": 0.9, "reasoning": "fine"}
    assert first["decision"]["action"] == "synthesize"
    assert [c["purpose"] for c in state["calls"]] == ["route", "plan", "step", "step", "analyze", "synthesize"]
    assert "messages" not in state["calls"][0]  # the trace stays small


async def test_long_results_are_capped_in_the_saved_state() -> None:
    run = await session(step=["x" * 20000]).run("goal")
    node = widget_state(run)["rounds"][0]["nodes"][0]
    assert len(node["result"]) < 5000 and node["result"].endswith("more characters)")


async def test_syncs_are_throttled_while_an_answer_streams() -> None:
    tokens = [f"t{i} " for i in range(500)]
    llm = scripted(synthesize=[tokens])
    llm.chunk_delay = 0.002
    run = DagSession(ModelRegistry().register("m", llm), DagSettings(store="none")).start("goal")
    widget = DagWidget(run)
    started = asyncio.get_running_loop().time()
    await run
    elapsed = asyncio.get_running_loop().time() - started
    assert widget.answer == "".join(tokens)  # the last sync carries everything
    assert widget.syncs <= 20 * elapsed + 3, (widget.syncs, elapsed)
    assert widget.syncs < len(tokens) / 5
    widget.close()


async def test_messages_from_the_front_end_drive_the_run() -> None:
    gate = asyncio.Event()

    async def slow(request: Any) -> str:
        gate.set()
        await asyncio.sleep(0.2)
        return "r"

    run = session(step=slow, analyze=[{"achieved": False, "confidence": 0.1, "reasoning": "no"}]).start("goal")
    widget = DagWidget(run)
    sent: list[Any] = []
    widget.send = sent.append  # type: ignore[method-assign]
    await gate.wait()
    widget._on_message(widget, {"type": "follow_up", "text": "also Spain"}, [])
    await asyncio.sleep(0)
    assert run._pending_follow_ups == ["also Spain"] or run.state.follow_ups == ["also Spain"]
    widget._on_message(widget, {"type": "stop"}, [])
    await run
    assert run.rounds[0].plan.step("s2").status == "skipped"
    widget._on_message(widget, {"type": "follow_up", "text": "too late"}, [])
    assert sent and sent[-1]["type"] == "error" and "follow-up can only steer a running run" in sent[-1]["message"]
    widget.close()


async def test_cancel_from_the_front_end() -> None:
    gate = asyncio.Event()

    async def slow(request: Any) -> str:
        gate.set()
        await asyncio.sleep(5)
        return "r"

    run = session(step=slow).start("goal")
    widget = DagWidget(run)
    await gate.wait()
    widget._on_message(widget, {"type": "cancel"}, [])
    await run
    assert run.status == "cancelled" and widget.status == "cancelled"
    widget.close()


def test_the_repr_is_deterministic() -> None:
    run = asyncio.run(session().run("goal"))
    widget = DagWidget(run)
    assert repr(widget) == f"DagWidget({run!r})" and "0x" not in repr(widget)
    widget.close()


@pytest.mark.parametrize("name", ["widget.js", "widget.css"])
def test_the_bundle_is_shipped(name: str) -> None:
    from dagmagic.notebook import widget

    path = widget._STATIC / name
    assert path.is_file() and path.stat().st_size > 1000
    text = path.read_text()
    for remote in ('from"https:', 'from "https:', 'import("https:', "@import url(http"):
        assert remote not in text  # everything is bundled: nothing is fetched from a CDN
