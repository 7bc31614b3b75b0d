"""Workers sharing one experiment through the run store (``shard=(i, n)``): each cell claimed before it runs, so each
runs once; a worker that dies leaves its cells to the others, its cut run resumed rather than started again.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from dagmagic import DagSession, DagSettings, ModelRegistry
from dagmagic.errors import StoreError
from dagmagic.evaluation import load_experiment
from dagmagic.store import RunStore
from dagmagic.testing import ScriptedLLM

pytestmark = pytest.mark.timeout(120)

PLAN = {"steps": [{"id": "s1", "task": "look it up"}]}
VERDICT = {"achieved": True, "confidence": 0.8, "reasoning": "ok"}
GOALS = [f"question {n}" for n in range(6)]
ROOT = Path(__file__).resolve().parents[2]


def scripted(latency: float = 0.0) -> ScriptedLLM:
    return ScriptedLLM(
        {"plan": [PLAN], "step": ["found it"], "analyze": [VERDICT], "synthesize": ["the answer"]}, latency=latency
    )


def worker(store: Path | str, llm: ScriptedLLM) -> DagSession:
    return DagSession(ModelRegistry().register("scripted", llm), DagSettings(store=str(store)))


def planned(llm: ScriptedLLM) -> list[str]:
    """The goals this model was asked to plan."""
    asked = " ".join(str(request.messages) for request in llm.requests_for("plan"))
    return [goal for goal in GOALS if goal in asked]


def cells_in(store: Path | str, name: str = "shared") -> list[dict[str, Any]]:
    """The experiment's cells as its store holds them now (any backend)."""
    return [cell.model_dump() for cell in load_experiment(name, store=str(store)).cells]


def runs_in(store: Path | str) -> list[str]:
    """Every run the store holds."""
    return [summary.run_id for summary in RunStore.open(store).runs(limit=1000)]


async def test_two_workers_share_one_experiment_and_run_each_cell_once(store_path: Path | str) -> None:
    store = store_path
    first, second = scripted(latency=0.01), scripted(latency=0.01)
    seen: dict[int, str] = {}
    experiments = await asyncio.gather(
        worker(store, first).evaluate(
            GOALS,
            name="shared",
            shard=(0, 2),
            concurrency=2,
            on_cell=lambda cell: seen.update({cell.index: cell.status}),
        ),
        worker(store, second).evaluate(GOALS, name="shared", shard=(1, 2), concurrency=2),
    )
    assert seen == dict.fromkeys(range(6), "done")  # the first worker's view heard of the second's cells too
    assert experiments[0].id == experiments[1].id  # they found one another by name and definition
    for experiment in experiments:  # each returns once every cell ended, the other's included
        assert [cell.status for cell in experiment.cells] == ["done"] * 6
    plans = len(first.requests_for("plan")) + len(second.requests_for("plan"))
    assert plans == 6  # each cell planned once, by one worker or the other
    assert first.requests_for("plan") and second.requests_for("plan")  # both worked
    stored = cells_in(store)
    assert len({cell["run_id"] for cell in stored}) == 6 and len(runs_in(store)) == 6


async def test_a_worker_joining_before_the_cells_are_written_writes_them(tmp_path: Path) -> None:
    """Two workers start at once: the second finds the experiment the first recorded before its cells were; the
    cells are the same for both, so the second writes those missing rather than joining an empty experiment (CI
    once saw a worker end at once, with no cell).
    """
    store = tmp_path / "runs.sqlite"
    first = worker(store, scripted())
    first.start_evaluation(GOALS, name="shared", shard=(0, 2))
    assert first.store is not None
    first.store.close()  # all it recorded is written
    with sqlite3.connect(store) as connection:
        connection.execute("DELETE FROM experiment_cells")
    assert cells_in(store) == []
    joined = worker(store, scripted()).start_evaluation(GOALS, name="shared", shard=(1, 2))
    assert len(joined.cells) == 6
    assert [cell["index"] for cell in cells_in(store)] == list(range(6))


async def test_a_worker_leaves_the_other_part_to_a_worker_starting_later(tmp_path: Path) -> None:
    """Room for every cell does not make the first worker take them all: the other part waits until its own ran,
    so a worker started a moment later (another machine, a slower kernel) still runs its own part.
    """
    store = tmp_path / "runs.sqlite"
    first, second = scripted(latency=0.2), scripted(latency=0.2)
    started = asyncio.Event()

    def on_cell(cell: Any) -> None:
        if cell.status == "running":
            started.set()

    early = asyncio.create_task(
        worker(store, first).evaluate(GOALS, name="late", shard=(0, 2), concurrency=6, on_cell=on_cell)
    )
    await started.wait()
    late = await worker(store, second).evaluate(GOALS, name="late", shard=(1, 2), concurrency=6)
    await early
    assert [cell.status for cell in late.cells] == ["done"] * 6
    assert planned(first) == ["question 0", "question 2", "question 4"]
    assert planned(second) == ["question 1", "question 3", "question 5"]


async def test_a_worker_joining_a_finished_experiment_runs_nothing(tmp_path: Path) -> None:
    store = tmp_path / "runs.sqlite"
    await worker(store, scripted()).evaluate(GOALS, name="shared", shard=(0, 1))
    late = scripted()
    experiment = await worker(store, late).evaluate(GOALS, name="shared", shard=(1, 2))
    assert late.requests == [] and [cell.status for cell in experiment.cells] == ["done"] * 6


async def test_another_definition_under_the_same_name_is_another_experiment(tmp_path: Path) -> None:
    store = tmp_path / "runs.sqlite"
    one = await worker(store, scripted()).evaluate(GOALS[:2], name="shared", shard=(0, 1))
    two = await worker(store, scripted()).evaluate(GOALS[:3], name="shared", shard=(0, 1))
    assert one.id != two.id and len(two.cells) == 3


async def test_a_budget_spent_ends_the_workers_with_the_rest_not_started(tmp_path: Path) -> None:
    store = tmp_path / "runs.sqlite"
    priced = [
        ScriptedLLM(
            {"plan": [PLAN], "step": ["found it"], "analyze": [VERDICT], "synthesize": ["the answer"]},
            latency=0.01,
            price=(0.001, 0.001),
        )
        for _ in range(2)
    ]
    cost = (await worker(tmp_path / "probe.sqlite", priced[0]).evaluate(GOALS[:1])).cells[0].cost
    assert cost is not None and cost > 0
    experiments = await asyncio.wait_for(
        asyncio.gather(
            *(
                worker(store, llm).evaluate(GOALS, name="budget", shard=(index, 2), concurrency=1, max_cost=2.5 * cost)
                for index, llm in enumerate(priced)
            )
        ),
        timeout=60,  # a budget must not leave the workers waiting for cells nobody will run
    )
    statuses = [cell.status for cell in experiments[0].cells]
    assert 2 <= statuses.count("done") <= 4 and statuses.count("not_started") == 6 - statuses.count("done")
    assert experiments[0].stopped_reason is not None and "not started" in experiments[0].stopped_reason


@pytest.mark.parametrize(
    ("options", "told"),
    [
        ({"shard": (2, 2), "name": "x"}, r"shard takes \(i, n\)"),
        ({"shard": (0, 0), "name": "x"}, r"shard takes \(i, n\)"),
        ({"shard": [0, 2], "name": "x"}, r"shard takes \(i, n\)"),
        ({"shard": (0, 2)}, "shard= needs name="),
    ],
)
async def test_bad_shards_are_told_plainly(tmp_path: Path, options: dict[str, Any], told: str) -> None:
    with pytest.raises(ValueError, match=told):
        worker(tmp_path / "runs.sqlite", scripted()).start_evaluation(GOALS, **options)


async def test_a_shard_needs_a_store(tmp_path: Path) -> None:
    session = DagSession(ModelRegistry().register("scripted", scripted()), DagSettings(store="none"))
    with pytest.raises(ValueError, match="shard= needs a run store the workers share"):
        session.start_evaluation(GOALS, name="x", shard=(0, 2))


WORKER = textwrap.dedent(
    """
    import asyncio, pathlib, sys, time
    from dagmagic import DagSession, DagSettings, ModelRegistry
    from dagmagic.testing import ScriptedLLM

    store, index, workers, latency = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    goals = [f"question {n}" for n in range(6)]
    llm = ScriptedLLM({"plan": [{"steps": [{"id": "s1", "task": "look it up"}]}], "step": ["found it"],
                       "analyze": [{"achieved": True, "confidence": 0.8, "reasoning": "ok"}],
                       "synthesize": ["the answer"]}, latency=latency)
    session = DagSession(ModelRegistry().register("scripted", llm), DagSettings(store=store))
    if len(sys.argv) > 5:  # start together: say it is ready, wait for the word
        ready, go = pathlib.Path(sys.argv[5] + f"-ready-{index}"), pathlib.Path(sys.argv[5] + "-go")
        ready.touch()
        while not go.exists():
            time.sleep(0.02)
    experiment = asyncio.run(session.evaluate(goals, name="shared", shard=(index, workers), concurrency=1))
    print("plans", len(llm.requests_for("plan")), "statuses", ",".join(cell.status for cell in experiment.cells))
    """
)


def start_worker(
    store: Path | str, index: int, workers: int, latency: float, signals: Path | None = None
) -> subprocess.Popen[str]:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHONPATH": str(ROOT)}
    together = [str(signals)] if signals is not None else []
    return subprocess.Popen(
        [sys.executable, "-c", WORKER, str(store), str(index), str(workers), str(latency), *together],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_two_worker_processes_share_one_experiment_each_cell_once(tmp_path: Path, store_path: Path | str) -> None:
    store, signals = store_path, tmp_path / "start"
    workers = [start_worker(store, index, 2, 0.1, signals) for index in (0, 1)]
    deadline = time.monotonic() + 60
    while not all(Path(f"{signals}-ready-{index}").exists() for index in (0, 1)) and time.monotonic() < deadline:
        time.sleep(0.05)
    Path(f"{signals}-go").touch()  # both imported and ready: neither can finish before the other starts
    outputs = [process.communicate(timeout=90) for process in workers]
    for process, (out, err) in zip(workers, outputs, strict=True):
        assert process.returncode == 0, err
        assert out.strip().endswith("statuses " + ",".join(["done"] * 6))
    plans = [int(out.split()[1]) for out, _ in outputs]
    assert sum(plans) == 6 and all(plans), plans  # both worked, each cell planned once
    assert len(runs_in(store)) == 6


def test_a_killed_workers_cells_are_finished_by_another_its_cut_run_resumed(store_path: Path | str) -> None:
    store = store_path
    doomed = start_worker(store, 1, 2, 0.3)  # alone at first: it takes its own cells, then the others'
    deadline = time.monotonic() + 60
    cut: dict[str, Any] | None = None
    while cut is None and time.monotonic() < deadline:
        time.sleep(0.1)
        try:
            cells = cells_in(store)
        except (KeyError, StoreError):  # not made yet by the worker
            continue
        if any(cell["status"] == "done" for cell in cells):
            cut = next((cell for cell in cells if cell["status"] == "running" and cell["run_id"]), None)
    assert cut is not None, "the first worker never got one cell done and another running"
    doomed.send_signal(signal.SIGKILL)
    doomed.communicate(timeout=30)
    survivor = start_worker(store, 0, 2, 0.0)
    out, err = survivor.communicate(timeout=90)
    assert survivor.returncode == 0, err
    assert out.strip().endswith("statuses " + ",".join(["done"] * 6)), out
    cells = cells_in(store)
    assert [cell["status"] for cell in cells] == ["done"] * 6
    assert cells[cut["index"]]["run_id"] == cut["run_id"]  # the cut run was resumed, not started again
    assert len(runs_in(store)) == 6  # one run per cell, whoever ran it


async def test_a_claim_from_another_machine_holds_until_it_is_not_heard_from(tmp_path: Path) -> None:
    """Another host's process cannot be looked up: its claim lasts as long as it is heard from (the lease's time)."""
    from dagmagic.store import experiments, lease

    store = tmp_path / "runs.sqlite"
    await worker(store, scripted()).evaluate(GOALS[:2], name="elsewhere", shard=(0, 1))
    with sqlite3.connect(store) as db:
        experiment_id = db.execute("SELECT experiment_id FROM experiments").fetchone()[0]
        now = time.time()
        db.execute(
            "UPDATE experiment_cells SET status = 'running', owner = 'theirs', owner_host = 'far-away', "
            "owner_pid = 1, heard_at = ? WHERE idx = 0",
            (now - 1,),
        )
        assert not experiments.claim_cell(db, experiment_id, 0, "mine", now)  # heard from a second ago
        assert experiments.claim_cell(db, experiment_id, 0, "mine", now + lease.LEASE_SECONDS)  # silent too long
        assert db.execute("SELECT owner, owner_host FROM experiment_cells WHERE idx = 0").fetchone() == (
            "mine",
            lease.HOST,
        )
        assert not experiments.claim_cell(db, experiment_id, 1, "mine", now)  # ended: nobody claims it


EVALS = textwrap.dedent(
    """
    from dagmagic import ModelRegistry
    from dagmagic.testing import ScriptedLLM

    name = "from-the-command-line"
    cases = [f"question {n}" for n in range(6)]
    llm = ScriptedLLM({"plan": [{"steps": [{"id": "s1", "task": "look it up"}]}], "step": ["found it"],
                       "analyze": [{"achieved": True, "confidence": 0.8, "reasoning": "ok"}],
                       "synthesize": ["the answer"]}, latency=0.05)
    models = ModelRegistry().register("scripted", llm)
    scorers = [lambda case, run: run.answer == "the answer"]
    """
)


def test_eval_worker_processes_from_the_command_line(tmp_path: Path) -> None:
    definition, store = tmp_path / "evals.py", tmp_path / "runs.sqlite"
    definition.write_text(EVALS)
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHONPATH": str(ROOT), "DAG_STORE": str(store)}
    command = [sys.executable, "-m", "dagmagic", "eval-worker", str(definition)]
    workers = [
        subprocess.Popen(
            [*command, "--shard", f"{index}/2"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for index in (0, 1)
    ]
    outputs = [process.communicate(timeout=90) for process in workers]
    for process, (out, err) in zip(workers, outputs, strict=True):
        assert process.returncode == 0, err
        assert out.splitlines()[-1] == "Experiment('from-the-command-line', 6 cells: 6 done)"
    lines = [line for out, _ in outputs for line in out.splitlines() if line.endswith(": done")]
    assert set(lines) == {f"cell {n} (c{n + 1} × default): done" for n in range(6)}  # its own, and the other's
    assert len(runs_in(store)) == 6 and len({cell["run_id"] for cell in cells_in(store, "from-the-command-line")}) == 6

    definition.write_text("cases = ['a']\n")
    refused = subprocess.run([*command, "--shard", "0/1"], env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "must define `name`" in refused.stderr
    refused = subprocess.run([*command, "--shard", "2/1"], env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "--shard takes I/N" in refused.stderr


async def test_any_kernel_reads_a_shared_experiment_back_with_every_workers_cells(tmp_path: Path) -> None:
    from dagmagic.evaluation import load_experiment

    store = tmp_path / "runs.sqlite"
    await asyncio.gather(*(worker(store, scripted(0.01)).evaluate(GOALS, name="read-me", shard=(i, 2)) for i in (0, 1)))
    experiment = load_experiment("read-me", store=str(store))
    assert repr(experiment) == "Experiment('read-me', 6 cells: 6 done)" and experiment.done()
    run = experiment.run_of(4)
    assert run.read_only and run.answer == "the answer" and run.run_id == experiment.cells[4].run_id
    with pytest.raises(KeyError, match="no experiment named or numbered 'nope'"):
        load_experiment("nope", store=str(store))
