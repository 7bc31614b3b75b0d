from __future__ import annotations

import asyncio
import gc
import json
import time
import weakref
from typing import Any

import pytest

from dagmagic import DagRun, DagSession, DagSettings, ModelRegistry
from dagmagic.errors import RateLimitError
from dagmagic.notebook.answering import AnsweringWidget
from dagmagic.notebook.widget import DagWidget, widget_state

from .conftest import scripted
from .samples import tool_step_run


def session(**overrides: Any) -> DagSession:
    return DagSession(ModelRegistry().register("m", scripted(**overrides)), DagSettings(store="none"))


class FrontEnd:
    """Sends the widget requests the way its front end does (anywidget's command protocol, through the comm's
    message dispatch) and collects what the widget sends back.
    """

    def __init__(self, widget: DagWidget) -> None:
        self.widget = widget
        self.sent: list[Any] = []
        self.count = 0
        widget.send = lambda content, buffers=None: self.sent.append(content)  # type: ignore[method-assign]

    def ask(self, name: str, **msg: Any) -> dict[str, Any]:
        """Sends request ``name`` and returns its answer's response: exactly one answer, with its id."""
        self.count += 1
        request_id = f"view-{self.count}"
        before = len(self.sent)
        self.widget._handle_custom_msg({"kind": "anywidget-command", "id": request_id, "name": name, "msg": msg}, [])
        (answer,) = self.sent[before:]
        assert answer["id"] == request_id and answer["kind"] == "anywidget-command-response"
        response: dict[str, Any] = answer["response"]
        json.dumps(response)  # plain JSON, as the comm sends it
        return response

    def refused(self, name: str, **msg: Any) -> str:
        """The message of a request's refusal."""
        response = self.ask(name, **msg)
        assert response["ok"] is False, response
        return str(response["error"])


async def test_state_describes_the_run_in_plain_json() -> None:
    run = await session().run("goal")
    state = widget_state(run)
    json.dumps(state)  # everything synced is plain JSON
    assert (state["status"], state["answer"], state["answer_fallback"]) == ("done", "The answer is 42.", False)
    (first,) = state["rounds"]
    assert [n["id"] for n in first["nodes"]] == ["s1", "s2"]
    assert first["nodes"][0]["status"] == "completed" and first["nodes"][0]["result"] == "a result"
    assert [n["dependencies"] for n in first["nodes"]] == [[], ["s1"]]  # the edges: the browser lays them out
    # no coordinates: the browser lays the graph out (the static SVG keeps layout.py's)
    assert not {"edges", "width", "height"} & set(first)
    assert not {"x", "y", "w", "h", "layer"} & set(first["nodes"][0])
    assert first["analysis"] == {"achieved": True, "confidence": 0.9, "reasoning": "fine"}
    assert first["decision"]["action"] == "synthesize"
    assert [c["purpose"] for c in state["calls"]] == ["plan", "step", "step", "analyze"]  # it wrote the answer
    assert "messages" not in state["calls"][0]  # the trace stays small


async def test_an_answer_for_a_goal_not_reached_is_marked_so_and_is_no_fallback() -> None:
    not_reached = {"achieved": False, "confidence": 0.3, "reasoning": "The 2024 figure is missing."}
    run = await session(analyze=[not_reached]).run("goal")
    state = widget_state(run)
    assert len(run.rounds) == 3 and state["answer"].endswith("\n\nThe answer is 42.")  # written from what completed
    assert (state["answer_unreached"], state["answer_fallback"], state["answer_partial"]) == (True, False, False)
    assert widget_state(await session().run("goal"))["answer_unreached"] is False


async def test_an_answer_being_written_again_is_not_marked_as_the_earlier_fallback() -> None:
    confident_but_short = {"achieved": False, "confidence": 0.9, "reasoning": "partly"}
    reached = {"achieved": True, "confidence": 0.9, "reasoning": "ok", "final_answer": "The re-run's answer, whole."}
    run = await session(analyze=[confident_but_short, reached], synthesize=[RuntimeError("down")]).run("goal")
    assert widget_state(run)["answer_fallback"] is True  # the listing of the steps' results
    while_written: list[tuple[str, bool]] = []

    def look(event: Any) -> None:
        if event.type == "answer_delta":
            state = widget_state(run)
            while_written.append((state["answer"], state["answer_fallback"]))

    run.subscribe(look)
    await run.rerun("s2")
    assert while_written and not any(fallback for _, fallback in while_written), while_written
    assert widget_state(run)["answer_fallback"] is False


async def test_long_results_are_capped_in_the_saved_state() -> None:
    run = await session(step=["x" * 20000]).run("goal")
    node = widget_state(run)["rounds"][0]["nodes"][0]
    assert len(node["result"]) < 5000 and node["result"].endswith("more characters)")


async def test_syncs_are_throttled_while_an_answer_streams() -> None:
    tokens = [f"t{i} " for i in range(500)]
    answer = "".join(tokens)
    llm = scripted(analyze=[{"achieved": True, "confidence": 0.9, "reasoning": "ok", "final_answer": answer}])
    llm.chunk_delay = 0.002
    run = DagSession(ModelRegistry().register("m", llm), DagSettings(store="none")).start("goal")
    widget = DagWidget(run)
    shown: list[tuple[str, str]] = []
    widget.observe(lambda change: shown.append((widget.phase, change["new"])), names="answer")
    started = asyncio.get_running_loop().time()
    await run
    elapsed = asyncio.get_running_loop().time() - started
    assert widget.answer == answer  # the last sync carries everything
    assert widget.syncs <= 20 * elapsed + 3, (widget.syncs, elapsed)
    assert widget.syncs < len(tokens) / 5
    # the answer shows while the verdict that writes it is still being made
    assert any(phase == "analyzing" and 0 < len(text) < len(answer) for phase, text in shown), shown
    widget.close()


async def test_messages_from_the_front_end_drive_the_run() -> None:
    gate = asyncio.Event()

    async def slow(request: Any) -> str:
        gate.set()
        await asyncio.sleep(0.2)
        return "r"

    run = session(step=slow, analyze=[{"achieved": False, "confidence": 0.1, "reasoning": "no"}]).start("goal")
    widget = DagWidget(run)
    front = FrontEnd(widget)
    await gate.wait()
    answer = front.ask("follow_up", text="also Spain")
    assert answer["ok"] and answer["value"]["notice"].startswith("Follow-up sent: steps not started are skipped")
    await asyncio.sleep(0)
    assert run.pending_follow_ups == ["also Spain"] and run.follow_ups == []  # not seen by a plan yet
    assert front.ask("stop")["ok"]
    await run
    assert run.rounds[0].plan.step("s2").status == "skipped"
    assert "follow-up can only steer a running run" in front.refused("follow_up", text="too late")
    widget.close()


async def test_cancel_from_the_front_end() -> None:
    gate = asyncio.Event()

    async def slow(request: Any) -> str:
        gate.set()
        await asyncio.sleep(5)
        return "r"

    run = session(step=slow).start("goal")
    widget = DagWidget(run)
    front = FrontEnd(widget)
    await gate.wait()
    assert front.ask("cancel")["ok"]
    await run
    assert run.status == "cancelled" and widget.status == "cancelled"
    assert front.refused("cancel") == "Nothing to cancel: the run has ended (cancelled)."
    widget.close()


async def test_retry_now_from_the_front_end_runs_a_waiting_step_at_once() -> None:
    calls: list[float] = []

    async def rate_limited_once(request: Any) -> str:
        calls.append(time.monotonic())
        if len(calls) == 1:
            raise RateLimitError("429 slow down", model="m")
        return "r"

    settings = DagSettings(store="none", step_immediate_retries=0, step_retry_delays=(600,), llm_retries=0)
    llm = scripted(step=rate_limited_once, plan=[{"steps": [{"id": "s1", "task": "t"}]}])
    run = DagSession(ModelRegistry().register("m", llm), settings).start("goal")
    widget = DagWidget(run)
    front = FrontEnd(widget)
    while run.steps.get("s1") is None or run.steps["s1"].status != "retrying":
        await asyncio.sleep(0.01)
    widget.sync()
    (node,) = widget.rounds[0]["nodes"]
    assert node["status"] == "retrying" and node["failures"] == 1
    assert node["retry_at"] == pytest.approx(time.time() + 600, abs=30)  # what the countdown counts to
    assert front.ask("retry_now", step="s1") == {"ok": True, "value": None}
    await run
    assert run.status == "done" and run.steps["s1"].result == "r" and len(calls) == 2
    assert calls[1] - calls[0] < 60  # not after the 600 s delay
    assert front.refused("retry_now", step="s1") == "That step is not waiting to retry any more."
    # a view made without a way to resume says so
    assert "use %dag resume" in front.refused("resume") and not widget.resumable
    widget.close()


def test_the_repr_is_deterministic() -> None:
    run = asyncio.run(session().run("goal"))
    widget = DagWidget(run)
    assert repr(widget) == f"DagWidget({run!r})" and "0x" not in repr(widget)
    widget.close()


@pytest.mark.parametrize("name", ["widget.js", "experiment.js", "compare.js", "widget.css"])
def test_the_bundle_is_shipped(name: str) -> None:
    from dagmagic.notebook import widget

    path = widget._STATIC / name
    assert path.is_file() and path.stat().st_size > 1000
    text = path.read_text()
    for remote in ('from"https:', 'from "https:', 'import("https:', "@import url(http"):
        assert remote not in text  # everything is bundled: nothing is fetched from a CDN


class Agreement:
    """Checks, whenever asked, that the run's answer is the one being written (as its events tell it), that
    status and phase agree, and that the widget's state is the run's.
    """

    def __init__(self, run: DagRun) -> None:
        self.run = run
        self.written = ""
        self.seen: set[str] = {""}
        self.problems: list[str] = []

    def on_event(self, event: Any) -> None:
        if event.type == "answer_delta":
            self.written += event.text
        elif event.type == "answer_cleared":
            self.written = ""
        elif event.type == "answer_ready":
            self.written = event.answer
        self.check(event.type)

    def check(self, where: str) -> None:
        run, state = self.run, widget_state(self.run)
        self.seen.add(run.answer)
        if (state["answer"], state["status"], state["phase"]) != (run.answer, run.status, run.phase):
            self.problems.append(f"{where}: the widget state differs from the run")
        if (run.status == "running") != (run.phase != "finished"):
            self.problems.append(f"{where}: status {run.status} in phase {run.phase}")
        if run.answer != self.written:
            self.problems.append(f"{where}: answer {run.answer[:30]!r} is not the one being written")
        if "first" in run.answer and "second" in run.answer:
            self.problems.append(f"{where}: two answers mixed")

    async def sample(self) -> None:
        while not self.run.done():
            self.check("sample")
            await asyncio.sleep(0.002)


async def test_answer_status_phase_and_widget_agree_at_every_moment() -> None:
    """Sampled at every event and every 2 ms through a run whose first answer is dropped by a follow-up:
    ``run.answer`` is always the answer being written now, status and phase agree, and the widget only
    ever shows what the run showed.
    """
    first, second = [f"first{i} " for i in range(40)], [f"second{i} " for i in range(40)]
    llm = scripted(synthesize=[first, second], analyze=[{"achieved": True, "confidence": 0.9, "reasoning": "ok"}])
    llm.chunk_delay = 0.004
    settings = DagSettings(store="none", streaming_planner=False)
    run = DagSession(ModelRegistry().register("m", llm), settings).start("goal")
    widget = DagWidget(run, max_rate=50)
    shown: list[tuple[str, str, str]] = []
    real_sync = widget.sync

    def recording_sync() -> None:
        real_sync()
        shown.append((widget.answer, widget.status, widget.phase))

    widget.sync = recording_sync  # type: ignore[method-assign]
    agreement = Agreement(run)
    run.subscribe(agreement.on_event)
    run.subscribe(lambda e: run.follow_up("and in euros") if getattr(e, "text", None) == "first5 " else None)
    sampler = asyncio.create_task(agreement.sample())
    await run
    await sampler
    widget.close()

    assert agreement.problems == []
    assert run.answer == "".join(second) and len(run.rounds) == 2
    assert shown and shown[-1] == (run.answer, "done", "finished")
    assert all(answer in agreement.seen for answer, _, _ in shown)  # never a mix the run did not show
    assert any("first" in answer for answer, _, _ in shown)  # the dropped answer was visible while written


async def test_debugging_messages_from_the_front_end_drive_the_run() -> None:
    llm = scripted(
        plan=[{"steps": [{"id": "s1", "task": "look"}, {"id": "s2", "task": "compare", "dependencies": ["s1"]}]}]
    )
    session = DagSession(ModelRegistry().register("m", llm), DagSettings(store="none"), approve_plans=True)
    run = session.start("goal")
    widget = DagWidget(run)
    front = FrontEnd(widget)
    while not run.awaiting_approval:
        await asyncio.sleep(0.005)
    run.break_before("s2")
    widget.sync()
    assert widget.phase == "awaiting_approval" and widget.rounds[0]["approval"] == "pending"
    edited = {"steps": [{"id": "s1", "task": "look closely", "dependencies": []}, {"id": "s2", "task": "compare",
              "dependencies": ["s1"], "tool_hint": None, "model_hint": None}]}  # fmt: skip
    assert front.ask("approve", plan=edited)["ok"]
    while run.paused != ["s2"]:
        await asyncio.sleep(0.005)
    widget.sync()
    node = widget.rounds[0]["nodes"][1]
    assert node["status"] == "paused" and node["paused_tools"] == []
    assert [m["role"] for m in node["paused_messages"]] == ["system", "user"]
    assert "look closely" in node["paused_messages"][1]["content"]  # the edited dependency, and its result
    assert front.ask("continue", step="s2", task="compare twice")["ok"]
    await run
    assert run.steps["s2"].task == "compare twice" and run.steps["s2"].status == "completed"
    widget.sync()
    assert widget.can_rerun and all(m["response"]["ok"] for m in front.sent)

    assert front.ask("rerun", step="s2", task="compare three times") == {"ok": True, "value": None}
    assert not widget.can_rerun or run.status == "running"
    while run.paused != ["s2"]:  # its breakpoint holds for the re-run too
        await asyncio.sleep(0.005)
    assert front.ask("skip", step="s2")["ok"]
    await run
    widget.sync()
    second = widget.rounds[1]
    assert (second["rerun_of"], second["rerun_step"]) == (1, "s2")
    assert second["diff"] == [
        {"id": "s2", "change": "changed", "fields": ["task", "status", "result"], "round": 2, "was": None}
    ]
    # nothing waits: an answer, not a crash
    assert "no plan of this run is waiting" in front.refused("reject", feedback="no")
    assert "no plan of this run is waiting" in front.refused("approve", plan=None)
    widget.close()


async def test_a_composite_steps_nested_run_is_in_its_node() -> None:
    outer = {"steps": [{"id": "s1", "task": "big", "tool_hint": "subplan"}]}
    inner = {"steps": [{"id": "s1", "task": "small"}, {"id": "s2", "task": "smaller", "dependencies": ["s1"]}]}
    verdicts = [
        {"achieved": True, "confidence": 0.9, "reasoning": "ok", "final_answer": a}
        for a in ("inner answer", "outer answer")
    ]
    llm = scripted(plan=[outer, inner], analyze=verdicts)
    run = await DagSession(ModelRegistry().register("m", llm), DagSettings(store="none")).run("goal")
    (node,) = widget_state(run)["rounds"][0]["nodes"]
    sub = node["subrun"]
    assert (sub["status"], sub["answer"], sub["error"]) == ("done", "inner answer", "")
    assert [n["id"] for n in sub["rounds"][0]["nodes"]] == ["s1", "s2"]
    assert {n["status"] for n in sub["rounds"][0]["nodes"]} == {"completed"} and node["result"] == "inner answer"
    json.dumps(node)


async def test_a_calls_messages_and_a_steps_whole_result_are_sent_on_request() -> None:
    run = await session(step=["x" * 9000]).run("goal")
    widget = DagWidget(run)
    front = FrontEnd(widget)
    state = widget_state(run)
    assert [c["index"] for c in state["calls"]] == list(range(len(run.calls)))
    assert state["calls"][0]["started_at"] == run.calls[0].started_at and state["stopped_by_user"] is False
    assert state["phase_since"] >= run.state.started_at
    plan_call = next(c["index"] for c in state["calls"] if c["purpose"] == "plan")
    answer = front.ask("call_detail", index=plan_call)
    assert answer["ok"]
    detail = answer["value"]
    assert detail["index"] == plan_call
    assert detail["messages"][0]["role"] == "system" and "Plan how to reach" in detail["messages"][0]["content"]
    assert detail["reply"].startswith("1. ") and detail["error"] == ""  # the plan as its lines
    assert len(state["rounds"][0]["nodes"][0]["result"]) < 5000  # cut in the state...
    whole = front.ask("full_text", round=1, step="s1", field="result")
    assert whole == {"ok": True, "value": {"text": "x" * 9000}}  # ...whole on request
    assert front.ask("call_detail", index=999) == {"ok": False, "error": "there is no LLM call 999"}
    assert front.refused("full_text", round=1, step="s9", field="result") == "there is no step 's9' in round 1"
    assert front.refused("full_text", round="1", step="s1") == "the request's round must be a whole number, not '1'"
    widget.close()


async def test_every_request_gets_one_answer_by_its_id_and_never_a_traceback() -> None:
    run = await session().run("goal")
    widget = DagWidget(run)
    front = FrontEnd(widget)
    assert front.refused("approve") == "no plan of this run is waiting for approval (the run is done)"
    assert front.refused("teleport") == "this view asked for 'teleport', which this kernel's dagmagic does not know"
    assert front.refused("skip", step="s9") == "step 's9' cannot be skipped: it is not in the latest round"

    def broken() -> None:
        raise RuntimeError("the store is gone")

    run.stop = broken  # type: ignore[method-assign]
    assert front.refused("stop") == "stop failed: RuntimeError: the store is gone"  # what failed, not a traceback

    # what is not a request, or could not be answered to anyone, gets no answer
    for content in ({"type": "stop"}, {"kind": "anywidget-command", "name": "stop", "msg": {}}, "stop"):
        widget._handle_custom_msg(content, [])
    answered = len(front.sent)
    widget._handle_custom_msg({"kind": "anywidget-command", "id": 7, "name": "cancel", "msg": None}, [])
    refusal = {"ok": False, "error": "Nothing to cancel: the run has ended (done)."}
    assert front.sent[answered:] == [{"id": 7, "kind": "anywidget-command-response", "response": refusal}]
    widget.close()


def test_every_state_key_is_a_synced_trait() -> None:
    run = asyncio.run(session().run("goal"))
    synced = set(DagWidget(run).trait_names(sync=True))
    assert set(widget_state(run)) <= synced  # a key without a trait would never reach the browser


async def test_what_to_know_about_the_whole_run_is_shown_in_every_view(tmp_path: Any) -> None:
    from dagmagic.notebook.fallbacks import run_html, run_markdown
    from dagmagic.notebook.progress import progress_line

    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    registry = ModelRegistry().register("m", scripted())
    run = await DagSession(registry, DagSettings(store=str(blocker / "runs.sqlite"))).run("goal")
    assert run.status == "done" and not run.durable
    (warning,) = run.warnings
    assert warning.startswith("This run is not saved") and "cannot be written" in warning
    assert widget_state(run)["warnings"] == [warning]
    assert "This run is not saved" in run_html(run) and "This run is not saved" in run_markdown(run)
    (event,) = [event for event in run.events if event.type == "warning"]
    assert progress_line(event) == f"warning: {warning}"
    reread = DagRun(run.state, events=run.events, read_only=True)  # read back: the same list, from its events
    assert reread.warnings == [warning]


def test_a_tool_step_sends_its_planned_arguments_and_its_direct_call() -> None:
    state = widget_state(tool_step_run())
    json.dumps(state)
    nodes = {node["id"]: node for node in state["rounds"][0]["nodes"]}
    assert nodes["s2"]["tool_args"] == {"a": "$s1", "b": 12}  # what the planner wrote, references and all
    assert nodes["s1"]["tool_args"] is None  # an agent step
    (direct,) = nodes["s2"]["tool_calls"]
    assert (direct["name"], direct["turn"], direct["arguments"]) == ("add", 0, {"a": "68.4", "b": 12})
    assert [call["turn"] for call in nodes["s3"]["tool_calls"]] == [0, 1]  # the failed direct call, then the agent's


def test_long_tool_arguments_are_capped_in_the_saved_state() -> None:
    run = tool_step_run()
    step = run.step_of(1, "s2")
    assert step is not None
    step.tool_args = {"text": "$s1 " + "p" * 20000}
    step.tool_calls[0].arguments = {"text": "x" * 20000, "pages": ["y" * 20000], "more": {"z": "z" * 20000}}
    node = widget_state(run)["rounds"][0]["nodes"][1]
    arguments = node["tool_calls"][0]["arguments"]
    for text in (node["tool_args"]["text"], arguments["text"], arguments["pages"][0], arguments["more"]["z"]):
        assert len(text) < 5000 and text.endswith("more characters)")


def test_a_long_note_of_a_round_or_a_step_reaches_the_view_whole_to_open_in_place() -> None:
    run = asyncio.run(session().run("goal"))
    note = "The verdict could not be read: litellm.APIConnectionError: " + "connection refused; " * 40
    run.rounds[0].warnings.append(note)
    run.rounds[0].plan.steps[0].warnings.append(note)
    (sent,) = widget_state(run)["rounds"]
    assert sent["warnings"][-1] == note and "more characters" not in sent["warnings"][-1]
    assert sent["nodes"][0]["warnings"][-1] == note


async def test_a_rerun_marks_the_results_it_reused_and_its_clock_counts_running_time_only() -> None:
    """An ended run's clock stands at its end, however much later it is shown; a re-run started after a while
    counts only the time the run ran (not the wait before the click); its round marks the steps it carried over.
    """
    run = await session().run("goal")
    state = widget_state(run)
    assert run.state.finished_at is not None
    assert state["now"] == run.state.finished_at  # not the moment it is shown: the elapsed time would grow
    assert state["idle"] == 0.0
    await asyncio.sleep(0.3)  # the run stands ended a while before the user re-runs a step
    await run.rerun("s2")
    state = widget_state(run)
    assert state["now"] == run.state.finished_at
    ended = next(e.at for e in run.events if e.type == "run_finished")
    relaunched = next(e.at for e in run.events if e.type == "user_action" and e.action == "rerun")
    assert state["idle"] == pytest.approx(relaunched - ended)
    assert state["idle"] >= 0.3
    assert state["now"] - state["started_at"] - state["idle"] < run.state.finished_at - run.state.started_at - 0.29
    second = state["rounds"][1]
    assert [(n["id"], n["reused_from"]) for n in second["nodes"]] == [("s1", 1), ("s2", None)]
    assert [n["reused_from"] for n in state["rounds"][0]["nodes"]] == [None, None]
    await run.rerun("s2")  # s1 carried over twice: from the round where it ran
    third = widget_state(run)["rounds"][2]
    assert [(n["id"], n["reused_from"]) for n in third["nodes"]] == [("s1", 1), ("s2", None)]


def test_a_run_that_did_not_end_shows_the_time_it_ran_until_its_last_event() -> None:
    """Read back after its kernel died, a run that never finished stands at its last event, not at the moment it
    is shown again (days later, its elapsed time would count the days).
    """
    from dagmagic.events import RoundStarted, RunStarted
    from dagmagic.models import RunState

    start = 1_700_000_000.0
    events = [RunStarted(run_id="gone", goal="goal", at=start), RoundStarted(round=1, at=start + 7.5)]
    run = DagRun(
        RunState(run_id="gone", goal="goal", status="running", started_at=start), events=events, read_only=True
    )
    assert widget_state(run)["now"] == start + 7.5


async def test_a_long_plan_call_shows_what_has_arrived_while_it_streams() -> None:
    plan = {"steps": [{"id": f"s{i}", "task": f"step number {i}"} for i in range(1, 5)]}
    llm = scripted(plan=[plan])
    llm.chunk_delay = 0.05
    run = DagSession(ModelRegistry().register("m", llm), DagSettings(store="none")).start("goal")
    seen: list[dict[str, Any]] = []
    while run.status == "running":
        state = widget_state(run)
        seen += [call for call in state["live_calls"] if call["purpose"] == "plan"]
        await asyncio.sleep(0.01)
    await run
    assert (
        seen
        and {call["round"] for call in seen} == {1}
        and all(call["stream"] for call in seen)
        and seen[0]["started_at"] == next(c for c in run.calls if c.purpose == "plan").started_at
    )
    tokens = [call["tokens"] for call in seen]
    assert tokens == sorted(tokens) and tokens[-1] > tokens[0]  # it grows while the plan is written
    assert widget_state(run)["live_calls"] == []  # a finished call is in the trace instead


async def test_the_front_ends_word_and_each_end_of_the_run_reach_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """The front end says it made the widget (no answer: it asks nothing); every end of the run, a re-run's
    included, calls what keeps the saved view up to date.
    """
    monkeypatch.setattr(AnsweringWidget, "front_end_seen", False)
    run = await session().run("goal")
    widget = DagWidget(run)
    front = FrontEnd(widget)
    ended: list[int] = []
    widget.on_run_ended.append(lambda: ended.append(len(widget.run.rounds)))
    widget._handle_custom_msg({"kind": "dagmagic-front-end"}, [])
    assert widget.front_end and AnsweringWidget.front_end_seen and front.sent == []
    assert front.ask("rerun", step="s2")["ok"]
    await run.wait()
    assert ended == [2]
    widget.close()


async def test_a_rerun_whose_step_comes_back_the_same_says_it_ran_again() -> None:
    run = await session(step=["the same"]).run("goal")
    await run.rerun("s2")
    diff = widget_state(run)["rounds"][1]["diff"]
    assert diff[0] == {"id": "s2", "change": "re-run", "fields": [], "round": 2, "was": None}, diff


async def test_a_widget_lets_its_run_go_once_it_ended_and_the_session_dropped_it() -> None:
    kept_one = DagSession(ModelRegistry().register("m", scripted()), DagSettings(store="none", runs_in_memory=1))
    run = kept_one.start("first")
    widget = DagWidget(run)
    front = FrontEnd(widget)
    shown = weakref.ref(run)
    await run
    del run
    await kept_one.run("second")  # the session keeps the latest finished run only
    gc.collect()
    assert shown() is None and not widget.in_memory  # the widget no longer keeps it alive
    assert (widget.status, widget.answer) == ("done", "The answer is 42.") and widget.rounds  # what it draws stays
    assert front.ask("stop") == {"ok": True, "value": None}  # it ended: nothing to stop, as for any ended run
    assert front.refused("cancel") == "Nothing to cancel: the run has ended (done)."
    refusal = front.refused("call_detail", index=0)  # no notebook to take it back from: says where it is
    assert "is no longer in memory" in refusal and f"dagmagic.load_run({widget.run_id!r})" in refusal
    assert repr(widget) == f"DagWidget(run {widget.run_id}, no longer in memory)"
    widget.close()


async def test_a_widget_holds_its_run_while_it_runs_and_again_while_a_step_is_rerun() -> None:
    run = session().start("goal")
    widget = DagWidget(run)
    assert widget._running is run
    await run
    assert widget._running is None and widget.run is run  # ended: held weakly, still shown
    rerun = run.start_rerun("s2", task="compare again")
    await asyncio.sleep(0)
    assert widget._running is run and not run.done()
    await rerun
    assert widget._running is None and len(widget.rounds) == 2  # the widget followed the re-run
    widget.close()


# --- Stop and follow-up, as every view tells them ---------------------------------------------------------------

PARALLEL = {
    "steps": [
        {"id": "s1", "task": "slow lookup", "dependencies": []},
        {"id": "s2", "task": "quick lookup", "dependencies": []},
        {"id": "s3", "task": "summary of s1", "dependencies": ["s1"]},
    ]
}


def slow_s1() -> tuple[asyncio.Event, Any]:
    started = asyncio.Event()

    async def step(request: Any) -> str:
        if request.step_id == "s1":
            started.set()
            await asyncio.sleep(0.2)
        return f"result of {request.step_id}"

    return started, step


def static_views(run: DagRun) -> tuple[str, str, str]:
    from dagmagic.notebook.fallbacks import run_mimebundle

    bundle = run_mimebundle(run)
    return bundle["text/plain"], bundle["text/markdown"], bundle["text/html"]


async def test_a_stop_that_skipped_a_step_is_partial_in_every_view() -> None:
    started, step = slow_s1()
    llm = scripted(plan=[PARALLEL], step=step, synthesize=[["Only ", "s1 and s2."]])
    models = ModelRegistry().register("m", llm)
    run = DagSession(models, DagSettings(store="none", max_concurrency=2)).start("goal")
    widget = DagWidget(run)
    front = FrontEnd(widget)
    await started.wait()
    assert front.ask("stop")["ok"]
    await run
    widget.sync()

    assert run.steps["s3"].status == "skipped" and run.partial  # the verdict found the goal met: partial all the same
    assert widget.answer_partial and widget.stopped_by_user
    (first,) = widget.rounds
    assert first["analysis"]["achieved"] and first["decision"]["partial"]  # the verdict's banner says partial
    plain, markdown, html = static_views(run)
    assert "(stopped by you, partial answer)" in plain
    assert "· partial answer" in markdown and "**Answer** (partial: the run was stopped before it finished)" in markdown
    assert "achieved, confidence 90% · partial answer</summary>" in html
    assert "⚠ Partial answer: the run was stopped before it finished" in html
    widget.close()


async def test_a_follow_up_while_steps_run_is_confirmed_as_it_happens_and_shown_in_its_round(tmp_path: Any) -> None:
    import dagmagic

    started, step = slow_s1()
    llm = scripted(plan=[PARALLEL], step=step)  # the verdict finds the goal, with the follow-up, met
    store = str(tmp_path / "runs.sqlite")
    run = DagSession(ModelRegistry().register("m", llm), DagSettings(store=store, max_concurrency=2)).start("goal")
    widget = DagWidget(run)
    front = FrontEnd(widget)
    await started.wait()
    answer = front.ask("follow_up", text="also cover Spain")
    await run
    widget.sync()

    notice = answer["value"]["notice"]
    assert answer["ok"] and notice.startswith("Follow-up sent: steps not started are skipped")
    assert "the answer takes it into account" in notice  # what then happened: no new round, the answer saw it
    assert len(run.rounds) == 1 and run.steps["s3"].status == "skipped"
    (first,) = widget.rounds
    assert first["answered_follow_ups"] == ["also cover Spain"] and first["follow_ups"] == []
    for shown in (run, dagmagic.load_run(run.run_id, store=store)):  # the saved run says it too
        _, markdown, html = static_views(shown)
        assert "your follow-up (taken into account by round 1's verdict and answer): also cover Spain" in markdown
        assert (
            "<b>Your follow-up</b> (taken into account by round 1&#x27;s verdict and answer): also cover Spain" in html
        )
    widget.close()


async def test_a_follow_up_that_gets_a_round_is_shown_in_that_round() -> None:
    started, step = slow_s1()
    not_yet = {"achieved": False, "confidence": 0.3, "reasoning": "Spain is missing"}
    llm = scripted(
        plan=[PARALLEL, PARALLEL],
        step=step,
        analyze=[not_yet, {"achieved": True, "confidence": 0.9, "reasoning": "fine", "final_answer": "With Spain."}],
    )
    run = DagSession(ModelRegistry().register("m", llm), DagSettings(store="none", max_concurrency=2)).start("goal")
    widget = DagWidget(run)
    front = FrontEnd(widget)
    await started.wait()
    notice = front.ask("follow_up", text="also cover Spain")["value"]["notice"]
    await run
    widget.sync()
    assert "a new round plans for it" in notice and len(run.rounds) == 2
    assert [r["follow_ups"] for r in widget.rounds] == [[], ["also cover Spain"]]
    _, markdown, html = static_views(run)
    assert "your follow-up (planned for in round 2): also cover Spain" in markdown
    assert "<b>Your follow-up</b> (planned for in round 2): also cover Spain" in html
    widget.close()
