"""``session.evaluate``: the grid of cells, each a stored run, scored; the cap, ``max_cost``, interrupt and resume."""

from __future__ import annotations

import asyncio
import math
import statistics
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from dagmagic import DagError, DagSession, DagSettings, ModelRegistry
from dagmagic.engine.run.dag_run import DagRun
from dagmagic.evaluation import Case, Cell, Experiment, llm_judge
from dagmagic.testing import ScriptedLLM, ScriptedRequest

PLAN = {"steps": [{"id": "s1", "task": "look it up"}]}
VERDICT = {"achieved": True, "confidence": 0.8, "reasoning": "ok"}


def script(answer: str, **overrides: Any) -> dict[str, Any]:
    return {"plan": [PLAN], "step": ["found it"], "analyze": [VERDICT], "synthesize": [answer], **overrides}


def session_over(llm: ScriptedLLM, store: Path | None = None) -> DagSession:
    settings = DagSettings(store=str(store) if store is not None else "none")
    return DagSession(ModelRegistry().register("scripted", llm), settings)


def says_paris(case: Case, run: DagRun) -> bool:
    return "Paris" in run.answer


async def test_two_cases_two_configs_twice_make_eight_stored_runs_one_row_each(tmp_path: Path) -> None:
    small, big = ScriptedLLM(script("Lyon")), ScriptedLLM(script("Paris"))
    session = session_over(small, tmp_path / "runs.sqlite")
    configs = {"small": {"models": {"smart": small}}, "big": {"models": {"smart": big}}}

    def length(case: Case, run: DagRun) -> dict[str, float]:
        return {"chars": float(len(run.answer)), "words": float(len(run.answer.split()))}

    experiment = await session.evaluate(
        ["Capital of France?", {"goal": "Where is the Louvre?", "expected": "Paris"}],
        configs=configs,
        scorers=[says_paris, length],
        repeat=2,
        name="capitals",
    )

    frame = experiment.to_dataframe()
    assert len(frame) == 8 and set(frame["status"]) == {"done"}
    assert list(frame.columns) == [
        "case_id", "goal", "config", "repetition", "status", "achieved", "confidence",
        "says_paris", "length.chars", "length.words",
        "answer", "cost", "tokens", "latency", "rounds", "run_id", "error", "score_errors",
    ]  # fmt: skip
    grid = sorted(zip(frame["case_id"], frame["config"], frame["repetition"], strict=True))
    assert grid == sorted((c, k, r) for c in ("c1", "c2") for k in ("small", "big") for r in (1, 2))
    assert dict(zip(frame["config"], frame["says_paris"], strict=False)) == {"small": False, "big": True}
    assert set(frame["length.chars"]) == {4.0, 5.0} and set(frame["rounds"]) == {1}
    assert set(frame["confidence"]) == {0.8} and frame["achieved"].all()
    assert frame["run_id"].nunique() == 8
    assert len(small.requests_for("plan")) == len(big.requests_for("plan")) == 4

    store = session.store
    assert store is not None
    for run_id in frame["run_id"]:  # each cell is an ordinary stored run
        assert store.load(run_id).state.status == "done"
    replayed = await session.replay(frame["run_id"][0])  # replayable like any run
    assert replayed.answer == frame["answer"][0]
    assert session.history == []  # and none joined the conversation, so none saw another's answer
    assert all("Lyon" not in r.prompt and "Paris" not in r.prompt for r in big.requests_for("plan"))


async def test_a_raising_scorer_scores_that_cell_as_an_error_only() -> None:
    session = session_over(ScriptedLLM(script("Paris")))

    def picky(case: Case, run: DagRun) -> float:
        if case.id == "c2":
            raise ValueError("cannot judge this one")
        return 1.0

    async def judged(case: Case, run: DagRun) -> float:
        await asyncio.sleep(0)
        return 0.5

    experiment = await session.evaluate(["a", "b", "c"], scorers=[picky, judged])

    assert [cell.status for cell in experiment.results] == ["done"] * 3
    assert [cell.scores for cell in experiment.results] == [
        {"picky": 1.0, "judged": 0.5},
        {"judged": 0.5},
        {"picky": 1.0, "judged": 0.5},
    ]
    assert experiment.results[1].score_errors == {"picky": "ValueError: cannot judge this one"}
    summary = experiment.summary()["default"]
    assert summary.score_errors == 1 and summary.scores["picky"].n == 2


async def test_a_goal_template_over_a_dataframe() -> None:
    llm = ScriptedLLM(script("ok"))
    frame = pd.DataFrame({"a": ["cats", "tea"], "b": ["dogs", "coffee"]})

    experiment = await session_over(llm).evaluate(frame, goal="Compare {a} and {b}")

    assert [case.goal for case in experiment.cases] == ["Compare cats and dogs", "Compare tea and coffee"]
    assert any("Compare tea and coffee" in request.prompt for request in llm.requests_for("plan"))


async def test_cells_run_concurrently_up_to_the_cap() -> None:
    in_flight = most = 0

    async def step(request: ScriptedRequest) -> str:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        for _ in range(400):  # wait (2 s at most) for another cell, so that the cap is reached if it allows it
            if in_flight >= 2:
                break
            await asyncio.sleep(0.005)
        await asyncio.sleep(0.01)  # and stay a while, so that a third cell would be seen if the cap let it start
        in_flight -= 1
        return "found it"

    session = session_over(ScriptedLLM(script("ok", step=step)))
    experiment = await session.evaluate([f"goal {n}" for n in range(6)], concurrency=2)

    assert most == 2
    assert [cell.status for cell in experiment.results] == ["done"] * 6


async def test_max_cost_stops_starting_cells_and_says_so() -> None:
    llm = ScriptedLLM(script("ok"), price=(0.001, 0.001))
    session = session_over(llm)
    one_cell = (await session.run("goal 0", conversation=False)).cost
    assert one_cell
    plans_before = len(llm.requests_for("plan"))

    experiment = await session.evaluate(
        [f"goal {n}" for n in range(5)], concurrency=1, max_cost=1.5 * one_cell, name="budget"
    )

    statuses = [cell.status for cell in experiment.results]
    assert statuses == ["done", "done", "not_started", "not_started", "not_started"]
    assert len(llm.requests_for("plan")) - plans_before == 2
    assert experiment.stopped_reason is not None
    assert "max_cost" in experiment.stopped_reason and "3 cells not started" in experiment.stopped_reason
    assert experiment.results[2].error is not None and "max_cost" in experiment.results[2].error
    assert repr(experiment).startswith("Experiment('budget', 5 cells: 2 done, 3 not_started; spent $")


async def test_cancelling_evaluate_cuts_its_running_cells_and_goes_on(tmp_path: Path) -> None:
    gate = asyncio.Event()

    async def step(request: ScriptedRequest) -> str:
        await gate.wait()
        return "found it"

    llm = ScriptedLLM(script("ok", step=step))
    session = session_over(llm, tmp_path / "runs.sqlite")
    waiter = asyncio.create_task(session.evaluate(["one", "two"], name="cut"))
    while len(llm.requests_for("step")) < 2:
        await asyncio.sleep(0.01)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    store = session.store
    assert store is not None
    found = store.load_experiment("cut")
    assert found is not None
    cells = [Cell.model_validate_json(data) for data in found[1]]
    assert [cell.status for cell in cells] == ["cancelled", "cancelled"]
    assert all(cell.run_id and store.load(cell.run_id).state.status == "cancelled" for cell in cells)


async def test_an_interrupted_evaluation_resumes_only_the_cells_that_did_not_end(tmp_path: Path) -> None:
    gate = asyncio.Event()
    slow_steps_started = 0

    def plan(request: ScriptedRequest) -> dict[str, Any]:
        task = "slow work" if "slow" in request.prompt else "fast work"
        return {"steps": [{"id": "s1", "task": task}]}

    async def step(request: ScriptedRequest) -> str:
        nonlocal slow_steps_started
        if "slow work" in request.prompt:
            slow_steps_started += 1
            await gate.wait()
        return "found it"

    llm = ScriptedLLM(script("ok", plan=plan, step=step))
    session = session_over(llm, tmp_path / "runs.sqlite")
    seen: list[tuple[str, str]] = []
    experiment = session.start_evaluation(
        ["fast one", "fast two", "slow three", "slow four"],
        scorers=[lambda case, run: 1.0],
        concurrency=2,
        name="interrupted",
        on_cell=lambda cell: seen.append((cell.case_id, cell.status)),
    )
    while slow_steps_started < 2:
        await asyncio.sleep(0.01)
    experiment.cancel()
    assert await experiment is experiment
    assert [cell.status for cell in experiment.results] == ["done", "done", "cancelled", "cancelled"]
    assert ("c3", "running") in seen and ("c3", "cancelled") in seen
    kept = [cell.run_id for cell in experiment.results]
    assert len(llm.requests_for("plan")) == 4

    gate.set()
    resumed = await session.resume_evaluation("interrupted")

    assert [cell.status for cell in resumed.results] == ["done"] * 4
    assert [cell.run_id for cell in resumed.results] == kept  # the cut runs were resumed, not started again
    assert len(llm.requests_for("plan")) == 4  # nothing planned again: the cut runs went on from their round
    assert len(llm.requests_for("synthesize")) == 4
    assert sum("fast work" in request.prompt for request in llm.requests_for("step")) == 2
    assert [cell.scores for cell in resumed.results] == [{"<lambda>": 1.0}] * 4


async def test_a_new_session_resumes_a_stored_experiment_given_its_configs_and_scorers(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    llm = ScriptedLLM(script("Paris"), price=(0.001, 0.001))
    first = session_over(llm, path)
    cost = (await first.run("warm up", conversation=False)).cost
    assert cost
    configs = {"one": {"settings": {"max_replan_rounds": 1}}}
    stopped = await first.evaluate(
        ["a", "b", "c"], configs=configs, scorers=[says_paris], concurrency=1, max_cost=cost / 2
    )
    assert [cell.status for cell in stopped.results] == ["done", "not_started", "not_started"]

    later = session_over(llm, path)
    with pytest.raises(DagError, match=r"ran with the configs one: pass configs="):
        await later.resume_evaluation(stopped.id, scorers=[says_paris])
    with pytest.raises(DagError, match=r"was scored by says_paris: pass scorers="):
        await later.resume_evaluation(stopped.name, configs=configs)
    plans = len(llm.requests_for("plan"))
    again = await later.resume_evaluation(stopped.name, configs=configs, scorers=[says_paris])
    assert [cell.status for cell in again.results] == ["done", "not_started", "not_started"]  # the same budget
    assert len(llm.requests_for("plan")) == plans
    resumed = await later.resume_evaluation(stopped.name, max_cost=10 * cost)

    assert len(llm.requests_for("plan")) - plans == 2
    assert [cell.status for cell in resumed.results] == ["done"] * 3
    assert resumed.results[0].run_id == stopped.results[0].run_id
    assert [cell.scores for cell in resumed.results] == [{"says_paris": True}] * 3


def _cell(index: int, case_id: str, config: str, score: float, latency: float, cost: float) -> Cell:
    return Cell(
        index=index,
        case_id=case_id,
        config=config,
        repetition=1,
        status="done",
        scores={"quality": score},
        latency=latency,
        cost=cost,
    )


def _experiment(cells: list[Cell]) -> Experiment:
    from dagmagic.evaluation.experiment import ExperimentDefinition

    cases = [Case(id=f"c{n}", goal=f"goal {n}") for n in (1, 2, 3)]
    definition = ExperimentDefinition(
        id="x", name="x", created_at=0.0, cases=cases, configs=["small", "big"], scorers=["quality"], repeat=1
    )
    return Experiment(definition, cells)


def test_the_summary_matches_a_hand_computation() -> None:
    small = [(0.2, 1.0, 0.01), (0.6, 3.0, 0.02), (1.0, 2.0, 0.03)]
    cells = [_cell(n, f"c{n + 1}", "small", *values) for n, values in enumerate(small)]
    cells.append(Cell(index=3, case_id="c1", config="big", repetition=1, status="failed", latency=5.0))
    summary = _experiment(cells).summary()

    half = 1.96 * statistics.stdev([0.2, 0.6, 1.0]) / math.sqrt(3)  # stdev 0.4: half ≈ 0.4526
    quality = summary["small"].scores["quality"]
    assert quality.n == 3 and quality.mean == pytest.approx(0.6)
    assert quality.low == pytest.approx(0.6 - half) and quality.high == pytest.approx(0.6 + half)
    assert summary["small"].cost == pytest.approx(0.06)
    assert summary["small"].latency_p50 == pytest.approx(2.0)
    assert summary["small"].latency_p90 == pytest.approx(2.8)  # between 2.0 and 3.0, 0.8 of the way
    assert (summary["big"].failures, summary["big"].finished, summary["big"].scores) == (1, 1, {})


def test_a_bool_score_is_a_proportion_whose_interval_stays_within_zero_and_one() -> None:
    cells = [_cell(n, f"c{n + 1}", "small", True, 1.0, 0.0) for n in range(3)]
    cells += [_cell(3 + n, f"c{n + 1}", "big", n == 0, 1.0, 0.0) for n in range(3)]
    summary = _experiment(cells).summary()

    always = summary["small"].scores["quality"]
    assert always.mean == 1.0 and always.high == 1.0  # the normal approximation would give [1, 1]
    assert always.low == pytest.approx(0.4385, abs=1e-4)  # Wilson: 3 of 3 does not prove it is always so
    once = summary["big"].scores["quality"]
    assert once.mean == pytest.approx(1 / 3)
    assert once.low == pytest.approx(0.0615, abs=1e-4) and once.high == pytest.approx(0.7923, abs=1e-4)


async def test_a_scorer_named_like_a_fixed_column_is_refused() -> None:
    session = session_over(ScriptedLLM(script("ok")))

    def cost(case: Case, run: DagRun) -> float:
        return 1.0

    with pytest.raises(ValueError, match="a scorer is named 'cost', as a column every experiment has"):
        session.start_evaluation(["a"], scorers=[cost])


def test_compare_says_which_config_wins_each_case() -> None:
    cells = [
        _cell(0, "c1", "small", 1.0, 1.0, 0.0),
        _cell(1, "c1", "big", 0.0, 1.0, 0.0),
        _cell(2, "c2", "small", 0.5, 1.0, 0.0),
        _cell(3, "c2", "big", 0.5, 1.0, 0.0),
        _cell(4, "c3", "small", 0.0, 1.0, 0.0),
        _cell(5, "c3", "big", 1.0, 1.0, 0.0),
        _cell(6, "c3", "big", 0.5, 1.0, 0.0),
    ]
    comparison = _experiment(cells).compare("small", "big")

    assert comparison.score == "quality"
    assert [(row.case_id, row.difference, row.winner) for row in comparison.cases] == [
        ("c1", -1.0, "small"),
        ("c2", 0.0, None),
        ("c3", 0.75, "big"),
    ]
    assert comparison.wins == {"small": 1, "big": 1, "tie": 1}
    assert comparison.to_dataframe()["difference"].tolist() == [-1.0, 0.0, 0.75]
    with pytest.raises(ValueError, match="no config 'huge' in this experiment; it has small, big"):
        _experiment(cells).compare("small", "huge")


async def test_unknown_config_keys_are_told_plainly() -> None:
    session = session_over(ScriptedLLM(script("ok")))
    with pytest.raises(ValueError, match=r"config 'x' has 'model', which a config does not take"):
        session.start_evaluation(["a"], configs={"x": {"model": "openai/gpt-4o"}})
    with pytest.raises(ValueError, match=r"config 'x': .*unknown setting"):
        session.start_evaluation(["a"], configs={"x": {"settings": {"max_rounds": 2}}})


async def test_a_cell_whose_run_is_driven_already_stays_pending_and_says_why(tmp_path: Path) -> None:
    gate = asyncio.Event()

    async def step(request: ScriptedRequest) -> str:
        await gate.wait()
        return "found it"

    llm = ScriptedLLM(script("ok", step=step))
    session = session_over(llm, tmp_path / "runs.sqlite")
    experiment = session.start_evaluation(["one", "two"], name="driven")
    while len(llm.requests_for("step")) < 2:
        await asyncio.sleep(0.01)
    experiment.cancel()
    assert await experiment is experiment
    first = experiment.results[0].run_id
    assert first is not None
    elsewhere = session.start_resume(first)  # the user went on with one cell's run by hand

    gate.set()
    resumed = await session.resume_evaluation("driven")

    assert [cell.status for cell in resumed.results] == ["pending", "done"]
    assert resumed.results[0].error == f"not started: run {first} is running in this session already"
    await elsewhere
    again = await session.resume_evaluation("driven")
    assert [cell.status for cell in again.results] == ["done", "done"]
    assert again.results[0].run_id == first


async def test_metadata_json_cannot_hold_is_stored_as_its_text(tmp_path: Path) -> None:
    class Source:
        def __str__(self) -> str:
            return "the atlas"

    session = session_over(ScriptedLLM(script("ok")), tmp_path / "runs.sqlite")
    experiment = await session.evaluate([{"goal": "g", "metadata": {"source": Source()}}], name="odd")

    assert experiment.results[0].status == "done"
    store = session.store
    assert store is not None
    found = store.load_experiment("odd")
    assert found is not None and '"source":"the atlas"' in found[0]


async def test_without_a_store_the_session_resumes_its_own_experiment_with_what_it_had() -> None:
    llm = ScriptedLLM(script("Paris"), price=(0.001, 0.001))
    session = session_over(llm)
    cost = (await session.run("warm up", conversation=False)).cost
    assert cost
    stopped = await session.evaluate(["a", "b"], scorers=[says_paris], concurrency=1, max_cost=cost / 2, name="mem")
    assert [cell.status for cell in stopped.results] == ["done", "not_started"]

    def other(case: Case, run: DagRun) -> float:
        return 0.0

    with pytest.raises(DagError, match=r"was scored by says_paris: pass scorers="):
        await session.resume_evaluation("mem", scorers=[other])
    resumed = await session.resume_evaluation("mem", max_cost=10 * cost)

    assert resumed is stopped
    assert [cell.scores for cell in resumed.results] == [{"says_paris": True}] * 2


async def test_a_judge_given_no_models_grades_every_config_with_the_sessions_smart_model() -> None:
    grader = ScriptedLLM({**script("Paris"), "judge": [{"reasoning": "right", "score": 5}] * 2})
    other = ScriptedLLM(script("Lyon"))
    session = session_over(grader)
    judge = llm_judge("Names the capital of France.")

    experiment = await session.evaluate(
        ["Capital of France?"], configs={"mine": {}, "other": {"models": {"smart": other}}}, scorers=[judge]
    )

    assert [cell.scores for cell in experiment.results] == [{"judge": 1.0}, {"judge": 1.0}]
    judged = [request.prompt for request in grader.requests_for("judge")]
    assert len(judged) == 2 and any("Lyon" in prompt for prompt in judged)  # the other config's answer, graded here
    assert other.requests_for("judge") == [] and len(judge.verdicts) == 2  # seen on the user's own judge object
