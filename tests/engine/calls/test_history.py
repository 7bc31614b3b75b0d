"""The conversation's summary, kept up to date after each answer: the next run plans at once, the summary is
extended (the previous one and the new exchanges), never made again from the whole conversation.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from pathlib import Path
from typing import Any

from dagmagic import DagRun, DagSession, DagSettings, ModelRegistry
from dagmagic.events import RunWarning
from dagmagic.testing import ScriptedLLM, ScriptedRequest, TokenRate
from tests.engine.conftest import plan_reply, verdict

SUMMARIZING = "dagmagic:history-summary"


def conversation(store: Path | None = None, **latency: float) -> tuple[DagSession, ScriptedLLM]:
    """A session whose planner may read 1,000 tokens of history: past that from the fifth answer on (each about
    150 tokens).
    """

    def summary(request: ScriptedRequest) -> str:
        return f"SUMMARY-{request.index}: the user asked questions and got long answers about forty-two."

    def answer(request: ScriptedRequest) -> dict[str, Any]:
        return verdict(True, 0.9, "ok", "The answer is " + "forty-two " * 60)

    llm = ScriptedLLM(
        {"plan": [plan_reply(("s1", []))], "step": ["found"], "analyze": answer, "history_summary": summary},
        latency=latency,
    )
    models = ModelRegistry().register("scripted", llm, roles=["smart", "general", "fast"])
    return DagSession(models, DagSettings(store=str(store or "none"), planner_input_tokens=1000)), llm


async def summary_made() -> None:
    """Until no summary is being made (as when the user reads an answer before asking again)."""
    while any(task.get_name() == SUMMARIZING and not task.done() for task in asyncio.all_tasks()):
        await asyncio.sleep(0.001)


async def test_the_101st_run_of_a_conversation_plans_at_once_from_a_summary_extended_after_each_answer() -> None:
    """Before: past its limit, every run summarized the whole conversation before its plan call (the summary
    was kept by the whole history, so each new exchange missed it): 95 of 101 runs made that call first.
    """
    session, llm = conversation()
    for n in range(100):
        await session.run(f"question {n}")
        await summary_made()
    before = len(llm.requests)

    run = await session.run("question 100")

    asked = [request.purpose for request in llm.requests[before:]]
    assert asked[:3] == ["plan", "step", "analyze"]  # before: ["history_summary", "plan", ...]
    (summarized,) = [call for call in run.calls if call.purpose == "history_summary"]
    assert summarized.started_at < run.state.started_at and summarized.round == 1  # made after run 100, counted here
    summaries = [request for request in llm.requests[:before] if request.purpose == "history_summary"]
    plan = llm.requests_for("plan")[-1].prompt
    assert f"Previous conversation (summary):\nSUMMARY-{summaries[-1].index}:" in plan  # made after run 100
    assert "User: question" not in plan  # it covers every exchange: none is read as written

    assert len(summaries) >= 90  # one per answer past the limit
    assert "User: question 0\n" in summaries[0].prompt  # the first: the whole conversation
    for earlier, later in itertools.pairwise(summaries):  # then: the last one and what is new
        assert f"SUMMARY-{earlier.index}:" in later.prompt and later.prompt.count("User: question") == 1
    sizes = [len(request.prompt) for request in summaries[1:]]
    assert max(sizes) < 2000 and max(sizes[-10:]) <= max(sizes[:10]) + 10  # bounded: not growing with the talk
    await session.aclose()


async def test_the_101st_run_is_no_slower_than_the_first_when_time_follows_tokens() -> None:
    """At a provider that charges by the token (issue 40's model, ten times faster: 0.03 s to the first token,
    20,000 input and 400 output tokens a second), the 101st run of a conversation takes no more than 10 % longer
    than the first: no summary call on its path, and a prompt that does not grow with the conversation. The runs
    between answer at once.
    """
    session, llm = conversation()
    rate = TokenRate(first_token=0.03, input_tokens_per_s=20_000, output_tokens_per_s=400)
    llm.latency = rate
    started = time.perf_counter()
    await session.run("question 0")
    first = time.perf_counter() - started
    llm.latency = 0.0
    for n in range(1, 100):
        await session.run(f"question {n}")
        await summary_made()
    llm.latency = rate
    started = time.perf_counter()
    last = await session.run("question 100")
    hundred_first = time.perf_counter() - started
    assert last.status == "done" and last.calls[0].purpose == "history_summary"  # made before it
    assert last.calls[0].started_at < last.state.started_at  # ... after run 100's answer, off this run's path
    assert hundred_first <= first * 1.10, (first, hundred_first)
    await session.aclose()


async def test_runs_back_to_back_do_not_wait_for_the_summary_being_made() -> None:
    """A summary call that takes 5 s, runs that take a few milliseconds: no run waits for it. Before, each run
    past the limit took 5 s more than the first.
    """
    session, llm = conversation(history_summary=5.0)
    durations = []
    runs: list[DagRun] = []
    for n in range(30):
        started = time.perf_counter()
        runs.append(await session.run(f"question {n}"))
        durations.append(time.perf_counter() - started)

    assert all(run.status == "done" for run in runs)
    # before: 5 s more from the sixth run on; the first run is left out (it pays the imports of a cold process).
    # Half the call leaves a loaded machine its margin (a run once took 0.48 s in CI).
    assert max(durations[1:]) < 5.0 / 2, durations
    assert 1 <= len(llm.requests_for("history_summary")) < 10  # answers joining meanwhile go together in the next
    assert "User: question 28\n" in llm.requests_for("plan")[-1].prompt  # the latest exchanges, as written
    await session.aclose()
    assert not [task for task in asyncio.all_tasks() if task.get_name() == SUMMARIZING and not task.done()]


async def test_a_summary_made_while_runs_went_on_is_read_with_the_exchanges_since() -> None:
    session, llm = conversation()
    for n in range(6):
        await session.run(f"question {n}")
        await summary_made()
    made = llm.requests_for("history_summary")[-1]
    llm.latency = {"history_summary": 10.0}  # the next summary is slow: the runs after it do not wait
    for n in range(6, 9):
        await session.run(f"question {n}")

    plan = llm.requests_for("plan")[-1].prompt
    assert f"Previous conversation (summary):\nSUMMARY-{made.index}:" in plan  # made after the sixth answer
    assert "Since then:" in plan and "User: question 6\n" in plan and "User: question 7\n" in plan
    assert "User: question 5\n" not in plan
    await session.aclose()


async def test_a_failed_summary_call_keeps_the_summary_before_it_and_the_next_run_says_so() -> None:
    session, llm = conversation()
    llm.script["history_summary"] = ["SUMMARY-A: what was said.", RuntimeError("fast model down"), "SUMMARY-C: more."]
    runs = []
    for n in range(10):
        runs.append(await session.run(f"question {n}"))
        await summary_made()

    failed_after = next(i for i, r in enumerate(runs) if any(c.error for c in r.calls))  # recorded in the next run
    said = [event.message for event in runs[failed_after].events if isinstance(event, RunWarning)]
    assert any("could not be summarized" in message for message in said)
    plan = llm.requests_for("plan")[failed_after].prompt
    assert "SUMMARY-A:" in plan and "Since then:" in plan  # the summary before it, then the exchanges since
    assert "SUMMARY-C:" in llm.requests_for("plan")[-1].prompt  # the next answer's call extended it again
    await session.aclose()


async def test_reset_forgets_the_summary_and_cancels_the_call_under_way() -> None:
    session, llm = conversation(history_summary=10.0)
    for n in range(6):
        await session.run(f"question {n}")
    assert any(task.get_name() == SUMMARIZING and not task.done() for task in asyncio.all_tasks())

    session.reset()
    await asyncio.sleep(0)
    assert not any(task.get_name() == SUMMARIZING and not task.done() for task in asyncio.all_tasks())
    run = await session.run("a new question")
    assert "Previous conversation" not in llm.requests_for("plan")[-1].prompt
    assert not any(call.purpose == "history_summary" for call in run.calls)


async def test_a_run_planned_from_the_summary_replays_in_a_new_session_as_it_read_it(tmp_path: Path) -> None:
    """The summary a run read was made outside it (after the run before answered): a replay reads the conversation
    as the run read it, and makes no summary of its own (the recording has none of that shape).
    """
    store = tmp_path / "runs.sqlite"
    session, _ = conversation(store, history_summary=0.2)
    runs = [await session.run(f"question {n}") for n in range(9)]  # back to back: some plan while one is made
    await summary_made()
    runs.append(await session.run("question 9"))  # and one after it was made
    await session.aclose()

    nobody = ScriptedLLM({})  # a new kernel: no model is asked
    later = DagSession(ModelRegistry().register("scripted", nobody, roles=["smart", "general", "fast"]),
                       DagSettings(store=str(store), planner_input_tokens=1000))  # fmt: skip
    for original in runs[6:]:
        replayed = await later.replay(original.run_id)
        assert replayed.status == "done", replayed.error
        assert replayed.rounds[0].plan.query == original.rounds[0].plan.query
    assert nobody.requests == []
    await later.aclose()
