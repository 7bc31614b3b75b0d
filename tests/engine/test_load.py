"""Load without leaks: a 200-step plan at concurrency 50, many runs in one session, and runs cancelled in every
phase, leaving no task, no file descriptor and no growing memory behind.
"""

from __future__ import annotations

import asyncio
import gc
import os
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import dagmagic
from dagmagic import DagRun, DagSession, DagSettings, ModelRegistry
from dagmagic.errors import RateLimitError
from dagmagic.store import RunStore
from dagmagic.testing import ScriptedLLM, ScriptedRequest, ToolCall

from .conftest import plan_reply, verdict

STEPS, CONCURRENCY, TOOL_CALLS, ANSWER_CHUNKS = 200, 50, 20, 12_000


async def lookup(q: str) -> str:
    """Look a thing up.

    Args:
        q: What to look up.
    """
    await asyncio.sleep(0)
    return f"value for {q}: " + "x" * 40


def calls_then_answers(calls: int) -> Callable[[ScriptedRequest], Any]:
    """A step model that calls ``lookup`` ``calls`` times (new arguments each time), then answers."""

    def step(request: ScriptedRequest) -> Any:
        done = sum(message.get("role") == "tool" for message in request.messages)
        if done < calls:
            return ToolCall("lookup", {"q": f"{request.step_id}-{done}"})
        return f"Result of {request.step_id}: " + " ".join(f"word{k}" for k in range(60))

    return step


def peak_overlap(spans: list[tuple[float, float]]) -> int:
    """Most spans open at one instant (an end at the same instant as a start closes first)."""
    edges = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans], key=lambda e: (e[0], e[1]))
    running = peak = 0
    for _, change in edges:
        running += change
        peak = max(peak, running)
    return peak


@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_a_200_step_plan_at_concurrency_50_runs_every_step_once_and_stores_every_result(tmp_path: Path) -> None:
    import litellm  # loaded before the clock starts: the import is not the run's time

    assert litellm.token_counter is not None
    plan = {
        "steps": [
            {"id": f"s{i}", "task": f"measure item {i}", "dependencies": [f"s{i - 100}"] if i > 100 else []}
            for i in range(1, STEPS + 1)
        ]
    }
    llm = ScriptedLLM(
        {
            "plan": [plan],
            "step": calls_then_answers(TOOL_CALLS),
            "analyze": [verdict(True, 0.9, "all measured")],
            "synthesize": [[f"w{i} " for i in range(ANSWER_CHUNKS)]],
        },
        context_window=32_000,  # the analyzer's 200 results are counted to fit, as with a real model
    )
    settings = DagSettings(
        store=str(tmp_path / "runs.sqlite"),
        plan_max_steps=STEPS,
        max_concurrency=CONCURRENCY,
        step_max_iterations=TOOL_CALLS + 5,
        domain_routing=False,
        citation_verification=False,
    )
    session = DagSession(ModelRegistry().register("scripted", llm), settings, tools=[lookup])
    began = time.perf_counter()
    run = await session.run("measure 200 items")
    wall = time.perf_counter() - began

    assert run.status == "done", run.error
    assert len(run.events) >= 20_000
    steps = run.plan.steps if run.plan else []
    assert len(steps) == STEPS and all(step.status == "completed" and step.attempts == 1 for step in steps)
    started = Counter(e.step_id for e in run.events if e.type == "step_started")  # type: ignore[union-attr]
    completed = Counter(e.step_id for e in run.events if e.type == "step_completed")  # type: ignore[union-attr]
    assert set(started.values()) == set(completed.values()) == {1} and len(started) == STEPS
    spans = [(step.started_at or 0.0, step.completed_at or 0.0) for step in steps]
    assert all(0 < start <= end for start, end in spans)
    peak = peak_overlap(spans)
    assert CONCURRENCY // 2 <= peak <= CONCURRENCY  # the limit was reached for, and held
    for step in steps[100:]:  # a dependent started only once its dependency had completed
        dependency = run.steps[step.dependencies[0]]
        assert (step.started_at or 0.0) >= (dependency.completed_at or 0.0)
    stored = RunStore.open(tmp_path / "runs.sqlite").load(run.run_id).state.rounds[0].plan.steps
    assert [(s.id, s.status, s.result) for s in stored] == [(s.id, "completed", s.result) for s in steps]
    assert all(s.result and s.result.startswith(f"Result of {s.id}:") for s in stored)
    print(
        f"\n{STEPS} steps at concurrency {CONCURRENCY}: {len(run.events)} events in {wall:.2f} s "
        f"({len(run.events) / wall:.0f} events/s), {len(run.calls)} LLM calls, peak {peak} steps at once"
    )


# --- many runs in one session: memory ------------------------------------------------------------------


def few_steps_script() -> dict[str, Any]:
    return {
        "plan": [plan_reply(("s1", []), ("s2", []), ("s3", ["s1", "s2"]))],
        "step": calls_then_answers(3),
        "analyze": [verdict(True, 0.9, "fine")],
        "synthesize": [[f"w{i} " for i in range(300)]],
    }


def traced_now() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_thirty_runs_in_one_session_keep_memory_flat_and_older_runs_in_the_store(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    llm = ScriptedLLM(few_steps_script())
    session = DagSession(
        ModelRegistry().register("scripted", llm),
        DagSettings(store=str(path), domain_routing=False, citation_verification=False),
        tools=[lookup],
    )
    assert session.settings.runs_in_memory == 10
    await session.run("warm-up")  # what loads once (litellm, tokenizers) loads before tracing starts
    memory: dict[int, int] = {}
    ids: list[str] = []
    tracemalloc.start()
    try:
        for number in range(1, 31):
            run = await session.run(f"goal {number}")
            assert run.status == "done"
            ids.append(run.run_id)
            del run
            llm.requests.clear()  # the test double records every request; that is the test's memory, not ours
            if number in (5, 10, 20, 30):
                memory[number] = traced_now()
    finally:
        tracemalloc.stop()

    assert [run.run_id for run in session.runs] == ids[-10:]  # the latest ten; the others are in the store
    assert len(session.history) == 31  # the conversation keeps every answer
    oldest = dagmagic.load_run(ids[0], store=str(path))
    assert oldest.status == "done" and oldest.answer == session.history[1].answer
    one_run = (memory[10] - memory[5]) / 5  # runs 6-10 were all kept: five runs' worth of memory
    # Ten more runs, ten more dropped: nothing kept but their answers. Measured from run 20: until then each
    # query also grows with the past conversation it carries, up to its budget (113 KB over runs 10-20, 9 KB
    # over runs 20-40), which made runs 10-20 grow 210-445 KB from one machine's load to another's.
    growth = memory[30] - memory[20]
    print(
        f"\ntraced memory after runs 5/10/20/30: {', '.join(f'{memory[n] / 1e6:.2f} MB' for n in (5, 10, 20, 30))}; "
        f"one run holds {one_run / 1e3:.0f} KB; runs 20-30 grew {growth / 1e3:.0f} KB"
    )
    assert one_run > 100_000  # a run's events and calls: a leak of them would show
    assert growth < one_run  # ten runs leaking even a tenth of themselves each would break this (unbounded
    # session.runs, as before runs_in_memory: 2.9 MB for ten runs, 292 KB a run)


async def test_only_finished_runs_leave_memory_and_a_session_takes_one_back_to_rerun_a_step(tmp_path: Path) -> None:
    llm = ScriptedLLM({**few_steps_script(), "step": ["a result"], "synthesize": [["The ", "answer."]]}, latency=0.05)
    settings = DagSettings(store=str(tmp_path / "runs.sqlite"), domain_routing=False, runs_in_memory=1)
    session = DagSession(ModelRegistry().register("scripted", llm), settings)
    first, second, third = (session.start(f"goal {n}") for n in range(3))
    assert session.runs == [first, second, third]  # running runs are never dropped
    await asyncio.gather(first.wait(), second.wait(), third.wait())
    assert session.runs == [third]
    with pytest.raises(dagmagic.DagError, match="no run 'nope' in the run store"):
        session.reopen("nope")
    taken = session.reopen(first.run_id)
    assert taken is not first and taken.status == "done" and session.runs == [taken]  # the newest kept
    await taken.rerun("s2", task="again")
    assert taken.status == "done" and len(taken.rounds) == 2
    assert dagmagic.load_run(taken.run_id, store=settings.store).steps["s2"].task == "again"


async def test_a_run_awaited_has_its_answer_in_the_history_and_older_runs_out_of_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The waiter wakes often here, so that a wake-up meets the run's end: before the fix a third of the runs
    returned before the session's bookkeeping (history, runs kept) had run.
    """
    import dagmagic.engine.run.dag_run

    monkeypatch.setattr(dagmagic.engine.run.dag_run, "WAKE_EVERY", 0.001)
    script = {**few_steps_script(), "plan": [plan_reply(("s1", []))], "step": ["r"], "synthesize": [["a"]]}
    settings = DagSettings(store="none", domain_routing=False, runs_in_memory=2)
    session = DagSession(ModelRegistry().register("scripted", ScriptedLLM(script)), settings)
    late = []
    for number in range(1, 61):
        await session.run(f"goal {number}")
        if len(session.history) != number or len(session.runs) > 2:
            late.append(number)
    assert late == []


# --- no task of ours alive after a run ends or is cancelled --------------------------------------------


def ours(task: asyncio.Task[Any]) -> bool:
    coroutine: Any = task.get_coro()
    where = f"{getattr(coroutine, '__qualname__', '')} {getattr(coroutine, '__module__', '') or ''}"
    frame = getattr(coroutine, "cr_frame", None)
    module = frame.f_globals.get("__name__", "") if frame is not None else ""
    return task.get_name().startswith("dagmagic:") or "dagmagic" in where or str(module).startswith("dagmagic")


async def leftover_tasks(before: set[asyncio.Task[Any]]) -> list[str]:
    """Tasks started since ``before`` and still alive after two loop iterations (cancellations settle)."""
    for _ in range(2):
        await asyncio.sleep(0)
    alive = [t for t in asyncio.all_tasks() - before - {asyncio.current_task()} if not t.done()]
    return [f"{t.get_name()} {t.get_coro()!r} ours={ours(t)}" for t in alive]


async def until(condition: Callable[[], bool]) -> None:
    for _ in range(2000):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("the run never reached the phase the test waits for")


async def hang(_: ScriptedRequest) -> str:
    await asyncio.sleep(30)
    return "never"


def rate_limited(request: ScriptedRequest) -> str:
    if request.step_id == "s1":
        raise RateLimitError("429 slow down", model="scripted")
    return "ok"


def session_with(script: dict[str, Any], **options: Any) -> DagSession:
    base: dict[str, Any] = {
        "plan": [plan_reply(("s1", []), ("s2", ["s1"]))],
        "step": ["a result"],
        "analyze": [verdict(True, 0.9, "fine")],
        "synthesize": [["The ", "answer."]],
    }
    settings = DagSettings(
        store="none",
        domain_routing=False,
        streaming_planner=options.pop("streaming_planner", False),
        llm_retries=0,
        step_immediate_retries=0,
        step_retry_delays=(30.0,),
    )
    approve = options.pop("approve_plans", False)
    llm = ScriptedLLM({**base, **script}, **options)
    return DagSession(ModelRegistry().register("scripted", llm), settings, approve_plans=approve)


CANCELLED_WHILE: dict[str, tuple[dict[str, Any], dict[str, Any], Callable[[DagRun], bool]]] = {
    "planning, its first step running while the plan streams": (
        {"step": hang},
        {"streaming_planner": True, "chunk_delay": 0.02},
        lambda run: run.phase == "planning" and "s1" in run.steps and run.steps["s1"].status == "running",
    ),
    "executing": ({"step": hang}, {}, lambda run: run.phase == "executing" and bool(run.steps)),
    "analyzing": ({"analyze": hang}, {}, lambda run: run.phase == "analyzing"),
    "analyzing, the verdict's answer streaming": (
        {"analyze": [verdict(True, 0.9, "fine", " ".join(f"w{i}" for i in range(2000)))]},
        {"chunk_delay": 0.01},
        lambda run: run.phase == "analyzing" and bool(run.answer),
    ),
    "synthesizing": (
        {"synthesize": [[f"w{i} " for i in range(2000)]]},
        {"chunk_delay": 0.01},
        lambda run: run.phase == "synthesizing" and bool(run.answer),
    ),
    "waiting for a retry": (
        {"step": rate_limited},
        {},
        lambda run: "s1" in run.steps and run.steps["s1"].status == "retrying",
    ),
    "awaiting approval": ({}, {"approve_plans": True}, lambda run: run.awaiting_approval),
    "paused at a breakpoint": ({}, {}, lambda run: run.paused == ["s2"]),
}


async def test_the_check_sees_a_task_left_behind() -> None:
    before = asyncio.all_tasks()
    stray = asyncio.get_running_loop().create_task(asyncio.sleep(30), name="dagmagic:stray")
    assert [line.split()[0] for line in await leftover_tasks(before)] == ["dagmagic:stray"]
    stray.cancel()
    assert await leftover_tasks(before) == []


async def test_a_finished_run_leaves_no_task_behind() -> None:
    before = asyncio.all_tasks()
    run = await session_with({}).run("goal")
    assert run.status == "done"
    assert await leftover_tasks(before) == []


async def test_runs_stopped_or_steered_while_steps_run_leave_no_task_behind() -> None:
    async def slow(request: ScriptedRequest) -> str:
        await asyncio.sleep(0.05)
        return f"result of {request.step_id}"

    before = asyncio.all_tasks()
    session = session_with({"step": slow, "plan": [plan_reply(("s1", []), ("s2", ["s1"]))]})
    stopped, steered = session.start("goal"), session.start("other goal")
    await until(lambda: stopped.phase == "executing" and steered.phase == "executing")
    stopped.stop()
    steered.follow_up("also this")
    await asyncio.gather(stopped.wait(), steered.wait())
    assert (stopped.status, steered.status) == ("done", "done") and steered.follow_ups == ["also this"]
    assert await leftover_tasks(before) == []


@pytest.mark.parametrize("phase", list(CANCELLED_WHILE))
async def test_a_run_cancelled_in_any_phase_leaves_no_task_behind(phase: str) -> None:
    script, options, reached = CANCELLED_WHILE[phase]
    before = asyncio.all_tasks()
    run = session_with(script, **options).start("goal")
    if phase == "paused at a breakpoint":
        run.break_before("s2")
    await until(lambda: reached(run))
    assert run.cancel()
    await run
    assert run.status == "cancelled"
    assert await leftover_tasks(before) == []


# --- no file descriptor leaked ---------------------------------------------------------------------------


def open_descriptors() -> set[str]:
    return {f"{fd} -> {_target(fd)}" for fd in os.listdir("/proc/self/fd")}


def _target(fd: str) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:  # the directory listing's own descriptor, closed by now
        return "?"


needs_proc = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc/self/fd")


@needs_proc
@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_twenty_runs_with_the_store_leave_no_descriptor_open(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    RunStore.open(path)  # one connection per file and process, for the process's life: open before counting
    session = DagSession(
        ModelRegistry().register("scripted", ScriptedLLM(few_steps_script())),
        DagSettings(store=str(path), domain_routing=False, citation_verification=False),
        tools=[lookup],
    )
    await session.run("warm-up")
    before = open_descriptors()
    for number in range(20):
        assert (await session.run(f"goal {number}")).status == "done"
    gc.collect()
    after = open_descriptors()
    print(f"\ndescriptors before/after 20 runs: {len(before)}/{len(after)}")
    assert len(after) <= len(before), sorted(after - before)


@needs_proc
async def test_steps_running_python_leave_no_pipe_open(tmp_path: Path) -> None:
    def code(request: ScriptedRequest) -> Any:
        done = sum(message.get("role") == "tool" for message in request.messages)
        return ToolCall("python", {"code": f"print({done} + 1)"}) if done < 2 else "printed"

    llm = ScriptedLLM(
        {
            "plan": [plan_reply(("s1", []), ("s2", []), ("s3", []))],
            "step": code,
            "analyze": [verdict(True, 0.9, "fine")],
            "synthesize": [["Done."]],
        }
    )
    settings = DagSettings(store="none", domain_routing=False, code_without_sandbox=True)
    session = DagSession(ModelRegistry().register("scripted", llm), settings, allow_code=True)
    before = open_descriptors()
    run = await session.run("print things")
    assert run.status == "done" and all(len(step.tool_calls) == 2 for step in run.steps.values())
    assert "exit code 0" in str(run.steps["s1"].tool_calls[0])

    llm.script["step"] = ToolCall("python", {"code": "import time; print('started', flush=True); time.sleep(30)"})
    cancelled = session.start("sleep in three processes")
    await until(lambda: [step.status for step in cancelled.steps.values()] == ["running"] * 3)
    await asyncio.sleep(0.3)  # the processes are up
    cancelled.cancel()
    await cancelled
    assert cancelled.status == "cancelled"
    gc.collect()
    after = open_descriptors()
    print(f"\ndescriptors before/after 6 python calls and 3 killed ones: {len(before)}/{len(after)}")
    assert len(after) <= len(before), sorted(after - before)
