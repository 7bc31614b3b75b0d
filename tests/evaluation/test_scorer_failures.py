"""Whatever a scorer does, it marks only its cell: whatever it raises (``KeyboardInterrupt``, ``SystemExit``,
``GeneratorExit``, a ``CancelledError`` of its own), a hang (``scorer_timeout``), a sync scorer's blocking (it runs
in a thread, the event loop goes on); while cancelling ``evaluate`` itself still stops the experiment.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from dagmagic import DagSession, DagSettings, ModelRegistry
from dagmagic.engine.run.dag_run import DagRun
from dagmagic.evaluation import Case, Experiment
from dagmagic.testing import ScriptedLLM

pytestmark = pytest.mark.timeout(120)

PLAN = {"steps": [{"id": "s1", "task": "look it up"}]}
VERDICT = {"achieved": True, "confidence": 0.8, "reasoning": "ok"}
GOALS = ["goal 1", "goal 2", "goal 3", "goal 4"]
GIVE_UP = 60.0
"""A guard against a hang that would otherwise hold the test: never reached when the scorer is bounded."""


def session(settings: DagSettings | None = None) -> DagSession:
    llm = ScriptedLLM({"plan": [PLAN], "step": ["found it"], "analyze": [VERDICT], "synthesize": ["the answer"]})
    return DagSession(ModelRegistry().register("scripted", llm), settings or DagSettings(store="none"))


def evaluated_apart(scorers: list[Callable[..., Any]], settings: Callable[[], DagSettings] | None = None) -> Experiment:
    """``evaluate`` over ``GOALS`` on an event loop of its own thread, so that what escapes it (a
    ``KeyboardInterrupt`` out of the loop) is seen here rather than ending the test run.
    """
    outcome: list[Any] = []

    async def evaluate() -> Experiment:
        chosen = session(settings() if settings is not None else None)
        return await asyncio.wait_for(chosen.evaluate(GOALS, scorers=scorers, concurrency=4), GIVE_UP)

    def main() -> None:
        try:
            outcome.append(asyncio.run(evaluate()))
        except BaseException as exc:  # what escaped evaluate, whatever it is
            outcome.append(exc)

    thread = threading.Thread(target=main)
    thread.start()
    thread.join()
    (result,) = outcome
    assert isinstance(result, Experiment), f"evaluate ended with {type(result).__name__}: {result!r}"
    return result


def fine(case: Case, run: DagRun) -> float:
    return 1.0


def on_the_second_case(raised: BaseException) -> Callable[[Case, DagRun], float]:
    def scorer(case: Case, run: DagRun) -> float:
        if case.id == "c2":
            raise raised
        return 0.5

    return scorer


def only_the_second_cell_failed(experiment: Experiment, told: str) -> None:
    assert [cell.status for cell in experiment.cells] == ["done"] * 4
    assert [cell.scores for cell in experiment.cells] == [
        {"fine": 1.0, "scorer": 0.5},
        {"fine": 1.0},
        {"fine": 1.0, "scorer": 0.5},
        {"fine": 1.0, "scorer": 0.5},
    ]
    errors = [cell.score_errors for cell in experiment.cells]
    assert errors[0] == errors[2] == errors[3] == {}
    assert list(errors[1]) == ["scorer"] and errors[1]["scorer"].startswith(told), errors[1]


def test_a_scorer_raising_keyboard_interrupt_marks_its_cell_only() -> None:
    experiment = evaluated_apart([fine, on_the_second_case(KeyboardInterrupt())])
    only_the_second_cell_failed(experiment, "KeyboardInterrupt")


def test_a_scorer_raising_system_exit_marks_its_cell_only() -> None:
    experiment = evaluated_apart([fine, on_the_second_case(SystemExit(3))])
    only_the_second_cell_failed(experiment, "SystemExit: 3")


def test_a_scorer_raising_generator_exit_marks_its_cell_only() -> None:
    experiment = evaluated_apart([fine, on_the_second_case(GeneratorExit())])
    only_the_second_cell_failed(experiment, "GeneratorExit")


def test_an_async_scorer_raising_its_own_cancelled_error_marks_its_cell_only() -> None:
    async def scorer(case: Case, run: DagRun) -> float:
        await asyncio.sleep(0)
        if case.id == "c2":
            raise asyncio.CancelledError("the scorer's own")
        return 0.5

    experiment = evaluated_apart([fine, scorer])
    only_the_second_cell_failed(experiment, "CancelledError")


def test_a_hanging_async_scorer_times_out_on_its_cell_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DAG_SCORER_TIMEOUT", "0.3")

    async def scorer(case: Case, run: DagRun) -> float:
        if case.id == "c2":
            await asyncio.Event().wait()  # never set
        return 0.5

    experiment = evaluated_apart([fine, scorer], settings=DagSettings)
    only_the_second_cell_failed(experiment, "TimeoutError")
    assert "scorer_timeout" in experiment.cells[1].score_errors["scorer"]


def test_a_hanging_sync_scorer_times_out_on_its_cell_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DAG_SCORER_TIMEOUT", "0.3")
    release = threading.Event()

    def scorer(case: Case, run: DagRun) -> float:
        if case.id == "c2":
            release.wait(GIVE_UP)  # a thread cannot be stopped: it is let go once the test is done
        return 0.5

    try:
        experiment = evaluated_apart([fine, scorer], settings=DagSettings)
    finally:
        release.set()
    only_the_second_cell_failed(experiment, "TimeoutError")


async def test_a_sync_scorer_that_blocks_leaves_the_event_loop_responsive() -> None:
    sleep = 1.5
    largest_stall = 0.0

    async def ticker() -> None:
        nonlocal largest_stall
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.005)
            now = time.monotonic()
            largest_stall = max(largest_stall, now - last)
            last = now

    def slow(case: Case, run: DagRun) -> float:
        time.sleep(sleep)
        return 1.0

    ticking = asyncio.create_task(ticker())
    try:
        experiment = await session().evaluate(GOALS[:2], scorers=[slow], concurrency=2)
    finally:
        ticking.cancel()
    assert [cell.scores for cell in experiment.cells] == [{"slow": 1.0}] * 2
    assert largest_stall < sleep / 3, f"the loop stalled {largest_stall:.2f}s while a scorer slept {sleep}s"


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_cancelling_evaluate_during_scoring_stops_the_experiment(kind: str) -> None:
    sleep = 3.0
    scoring = threading.Event()

    def sync_scorer(case: Case, run: DagRun) -> float:
        scoring.set()
        time.sleep(sleep)
        return 1.0

    async def async_scorer(case: Case, run: DagRun) -> float:
        scoring.set()
        await asyncio.sleep(sleep)
        return 1.0

    scorer = sync_scorer if kind == "sync" else async_scorer
    chosen = session()
    waiter = asyncio.create_task(chosen.evaluate(GOALS[:1], scorers=[scorer]))
    while not scoring.is_set():
        await asyncio.sleep(0.005)
    started = time.monotonic()
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    stopped_after = time.monotonic() - started
    (experiment,) = chosen.experiments
    assert experiment.done()
    assert experiment.cells[0].status != "done"  # cut while scoring: resuming it scores it again
    assert stopped_after < sleep / 3, f"evaluate went on {stopped_after:.2f}s after it was cancelled"
