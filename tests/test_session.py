from __future__ import annotations

import asyncio
from typing import Any

import pytest

from dagmagic import ConfigurationError, DagError, DagRun, DagSession, DagSettings
from dagmagic.engine.steps.executor import STOPPED_REASON
from dagmagic.testing import ScriptedLLM, ScriptedRequest
from tests.engine.conftest import plan_reply, session_for, verdict

PARALLEL = plan_reply(("s1", []), ("s2", []), ("s3", ["s1", "s2"]))


def script(step: Any, **overrides: Any) -> dict[str, Any]:
    return {
        "plan": [PARALLEL],
        "step": step,
        "analyze": [verdict(True, 0.9, "ok", "Answer text.")],
        "synthesize": [["Answer ", "text."]],
        **overrides,
    }


def our_tasks() -> list[asyncio.Task[Any]]:
    return [t for t in asyncio.all_tasks() if t.get_name().startswith("dagmagic:") and not t.done()]


class Gate:
    """Steps wait here until the test has acted; tells when the first one is running."""

    def __init__(self, hold: float = 5.0) -> None:
        self.running = asyncio.Event()
        self.cancelled: list[str] = []
        self.hold = hold

    async def step(self, request: ScriptedRequest) -> str:
        self.running.set()
        try:
            await asyncio.sleep(self.hold if request.step_id == "s1" else 0.3)
        except asyncio.CancelledError:
            self.cancelled.append(str(request.step_id))
            raise
        return f"result of {request.step_id}"


async def test_start_returns_a_running_run_that_can_be_awaited() -> None:
    run = session_for(ScriptedLLM(script("r"))).start("goal")
    assert isinstance(run, DagRun) and run.status == "running" and not run.done()
    finished = await run
    assert finished is run and run.status == "done" and run.answer == "Answer text."
    assert await run is run  # awaiting again is harmless


async def test_stop_skips_pending_steps_lets_running_ones_finish_and_answers() -> None:
    gate = Gate(hold=0.3)
    llm = ScriptedLLM(script(gate.step, analyze=[verdict(False, 0.3, "stopped early")]))
    run = session_for(llm).start("goal")
    await gate.running.wait()
    run.stop()
    await run
    assert run.status == "done" and len(run.rounds) == 1
    assert (run.steps["s1"].status, run.steps["s2"].status) == ("completed", "completed")
    assert (run.steps["s3"].status, run.steps["s3"].error) == ("skipped", STOPPED_REASON)
    decision = run.rounds[0].decision
    assert decision is not None and decision.action == "synthesize" and decision.partial
    assert run.answer == "Answer text." and run.partial  # written from what completed, and marked partial
    (synthesis,) = llm.requests_for("synthesize")
    assert "result of s1" in synthesis.prompt and "the answer is partial" in synthesis.prompt


async def test_cancel_cancels_running_steps_and_leaves_no_task_behind() -> None:
    gate = Gate()
    llm = ScriptedLLM(script(gate.step))
    run = session_for(llm).start("goal")
    await gate.running.wait()
    await asyncio.sleep(0.01)
    assert run.cancel() is True
    await run
    assert run.status == "cancelled"
    assert sorted(gate.cancelled) == ["s1", "s2"]
    assert [run.steps[s].status for s in ("s1", "s2", "s3")] == ["cancelled", "cancelled", "cancelled"]
    assert run.events[-1].type == "run_finished" and run.events[-1].status == "cancelled"
    assert our_tasks() == []
    assert run.cancel() is False


async def test_cancelling_session_run_cancels_the_run_and_propagates() -> None:
    gate = Gate()
    session = session_for(ScriptedLLM(script(gate.step)))
    waiter = asyncio.create_task(session.run("goal"))
    await gate.running.wait()
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    (run,) = session.runs
    assert run.status == "cancelled" and our_tasks() == []


async def test_history_carries_over_between_runs_and_reset_forgets_it() -> None:
    answers = [verdict(True, 0.9, "ok", answer) for answer in ("Paris.", "Berlin.", "Rome.")]
    llm = ScriptedLLM(script("r", analyze=answers))
    session = session_for(llm)
    await session.run("Capital of France?")
    await session.run("And of Germany?")
    second_plan = llm.requests_for("plan")[1].prompt
    assert "Previous conversation:\nUser: Capital of France?\nAssistant: Paris." in second_plan
    assert "Current request: And of Germany?" in second_plan
    assert [e.goal for e in session.history] == ["Capital of France?", "And of Germany?"]
    session.reset()
    await session.run("And of Italy?")
    assert "Previous conversation" not in llm.requests_for("plan")[2].prompt


async def test_steps_see_the_goal_not_the_history() -> None:
    llm = ScriptedLLM(script("r", synthesize=[["Paris."]]))
    session = session_for(llm)
    await session.run("first goal")
    await session.run("second goal")
    step_prompt = llm.requests_for("step")[-1].prompt
    assert "second goal" in step_prompt and "first goal" not in step_prompt


async def test_a_follow_up_on_a_finished_run_says_what_to_do() -> None:
    run = await session_for(ScriptedLLM(script("r"))).run("goal")
    with pytest.raises(DagError, match="Start a new one in the same session"):
        run.follow_up("more")
    with pytest.raises(ValueError, match="needs some text"):
        run.follow_up("  ")


async def test_bad_goals_are_refused_clearly() -> None:
    session = session_for(ScriptedLLM(script("r")))
    with pytest.raises(ValueError, match="a goal needs some text"):
        session.start("   ")


def test_start_without_a_running_loop_explains_itself() -> None:
    session = session_for(ScriptedLLM(script("r")))
    with pytest.raises(RuntimeError, match=r"asyncio.run\(session.run\(goal\)\)"):
        session.start("goal")


def test_run_works_from_synchronous_code_through_asyncio_run() -> None:
    run = asyncio.run(session_for(ScriptedLLM(script("r"))).run("goal"))
    assert run.status == "done"


def test_no_model_configured_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="DAG_SMART_MODEL"):
        DagSession(settings=DagSettings(store="none"))


def test_models_come_from_the_environment_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DAG_SMART_MODEL", "openai/gpt-4.1")
    monkeypatch.setenv("DAG_FAST_MODEL", "openai/gpt-4.1-mini")
    session = DagSession()
    assert session.models.roles == {"smart": "openai/gpt-4.1", "fast": "openai/gpt-4.1-mini"}


async def test_the_repr_is_deterministic() -> None:
    run = await session_for(ScriptedLLM(script("r"))).run("goal")
    assert repr(run) == "<DagRun done: 'goal' rounds=1 steps=3/3 completed achieved=True confidence=0.90>"


async def test_step_models_follow_their_hints() -> None:
    from dagmagic import ModelRegistry

    smart = ScriptedLLM(script("big"))
    fast = ScriptedLLM({"step": ["small"]})
    plan = {"steps": [{"id": "s1", "task": "t", "model_hint": "fast"}, {"id": "s2", "task": "t"}]}
    smart.script["plan"] = [plan]
    registry = (
        ModelRegistry().register("big", smart, roles=["smart", "general"]).register("small", fast, roles=["fast"])
    )
    run = await DagSession(registry, DagSettings(store="none")).run("goal")
    assert (run.steps["s1"].model, run.steps["s1"].result) == ("small", "small")
    assert (run.steps["s2"].model, run.steps["s2"].result) == ("big", "big")


async def test_a_long_history_is_summarized_once_then_extended_after_each_answer_and_reused_while_unchanged() -> None:
    from dagmagic import ModelRegistry
    from dagmagic.models import Exchange

    smart = ScriptedLLM(script("r", analyze=[verdict(False, 0.3, "not yet")]))
    fast = ScriptedLLM({"history_summary": lambda r: f"summary {r.index}", "step": ["r"]})
    registry = ModelRegistry().register("smart", smart, roles=["smart"]).register("fast", fast, roles=["fast"])
    session = DagSession(registry, DagSettings(store="none", planner_input_tokens=2000))
    session.history = [Exchange(f"question {i}", "a long answer " * 400) for i in range(6)]

    first = await session.run("a goal that takes three rounds")
    assert len(first.rounds) == 3
    made = fast.requests_for("history_summary")
    assert [request.round for request in made[:1]] == [1]  # given without a summary: made before the first plan
    assert all("summary 0" in request.prompt for request in smart.requests_for("plan"))  # not once per round
    while len(fast.requests_for("history_summary")) < 2:  # the first run answered: extended in the background
        await asyncio.sleep(0.001)
    extended = fast.requests_for("history_summary")[1]
    assert "summary 0" in extended.prompt and extended.prompt.count("User: ") == 1  # the last one, and what is new

    cancelled = session.start("a run that is cancelled while it plans")  # leaves the history as it is
    while not smart.requests_for("plan")[3:]:
        await asyncio.sleep(0.001)
    cancelled.cancel()
    await cancelled
    assert "summary 1" in smart.requests_for("plan")[3].prompt
    assert [call.purpose for call in cancelled.calls].count("history_summary") == 1  # recorded in the next to plan

    another = await session.run("another goal")
    assert not [call for call in another.calls if call.purpose == "history_summary"]  # unchanged history: reused
    assert "summary 1" in smart.requests_for("plan")[-1].prompt


class _ClosingWatch:
    """Notes, when the session stops what runs use (its tools: MCP servers, the python tool), whether each run
    had ended by then.
    """

    def __init__(self, session: DagSession, monkeypatch: pytest.MonkeyPatch) -> None:
        self.seen: list[tuple[str, list[str]]] = []
        self.closed = asyncio.Event()
        toolbox = session._toolbox
        for name in ("close", "aclose"):
            monkeypatch.setattr(toolbox, name, self._noting(name, getattr(toolbox, name), session))

    def _noting(self, name: str, original: Any, session: DagSession) -> Any:
        def noted(*args: Any) -> Any:
            self.seen.append((name, [run.status for run in session.runs]))
            self.closed.set()
            return original(*args)

        return noted


async def test_aclose_cancels_and_awaits_a_background_run_before_it_stops_what_the_run_uses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gate = Gate(hold=60.0)
    session = session_for(ScriptedLLM(script(gate.step)))
    watch = _ClosingWatch(session, monkeypatch)
    run = session.start("goal")  # a --bg run: nobody awaits it
    await gate.running.wait()
    await session.aclose()
    assert run.done() and run.status == "cancelled"
    assert "s1" in gate.cancelled  # its step was cancelled, not left running
    assert watch.seen and all(statuses == ["cancelled"] for _, statuses in watch.seen), watch.seen
    assert not our_tasks()


async def test_close_on_the_loop_cancels_a_background_run_and_stops_its_tools_once_it_ended(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gate = Gate(hold=60.0)
    session = session_for(ScriptedLLM(script(gate.step)))
    watch = _ClosingWatch(session, monkeypatch)
    run = session.start("goal")
    await gate.running.wait()
    session.close()  # synchronous, on the run's own loop: it cannot wait here
    assert not watch.seen  # nothing the run uses is stopped while it still runs
    await asyncio.wait_for(watch.closed.wait(), 30)
    assert run.done() and run.status == "cancelled"
    assert watch.seen == [("close", ["cancelled"])]
