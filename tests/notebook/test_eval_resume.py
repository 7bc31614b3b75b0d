"""``%dag resume NAME`` on an experiment: only the cells that did not end run, as ``%%dag eval --resume NAME``
runs them; ``%dag history`` lists the experiments after the runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from dagmagic.evaluation import Experiment
from dagmagic.notebook import magics
from dagmagic.notebook.session import NotebookSession
from dagmagic.testing import ScriptedLLM, ScriptedRequest

PLAN = {"steps": [{"id": "s1", "task": "work on it"}]}
VERDICT = {"achieved": True, "confidence": 0.8, "reasoning": "ok"}
EVAL = "eval --cases goals --models gated --scorers says_ok --concurrency 2 --name halfway -o exp"
GOALS = ["fast one", "fast two", "slow three", "slow four", "fast five", "fast six"]


class Gated:
    """A scripted model whose steps for a "slow" goal wait until the gate opens."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.waiting = 0
        self.llm = ScriptedLLM({"plan": [PLAN], "step": self.step, "analyze": [VERDICT], "synthesize": ["ok"]})

    async def step(self, request: ScriptedRequest) -> str:
        if "slow" in request.prompt:
            self.waiting += 1
            await self.gate.wait()
        return "worked"

    def requests(self, purpose: str, word: str = "") -> int:
        return sum(word in request.prompt for request in self.llm.requests_for(purpose))


@pytest.fixture
def gated(ip: InteractiveShell) -> Iterator[Gated]:
    model = Gated()

    def says_ok(case: Any, run: Any) -> bool:
        return bool(run.answer == "ok")

    ip.user_ns.update(gated=model.llm, goals=GOALS, says_ok=says_ok)
    yield model
    for name in ("gated", "goals", "says_ok", "exp"):
        ip.user_ns.pop(name, None)


def use_store(tmp_path: Path) -> None:
    magics._magics().overrides["store"] = str(tmp_path / "runs.sqlite")


def in_a_new_kernel() -> None:
    """As after a restart: no session, no runs in memory; ``%dag config`` set again."""
    instance = magics._magics()
    overrides = dict(instance.overrides)
    instance.notebook = NotebookSession(instance)
    instance.overrides.update(overrides)


async def interrupted(model: Gated, ip: InteractiveShell, *, open_gate: bool = True) -> Experiment:
    """``%%dag eval`` over the six goals, interrupted once both slow cells wait: two cells done, two cut mid-run,
    two never started.
    """
    cell = asyncio.ensure_future(
        magics.run_dag_cell(
            "eval --cases goals --models gated --scorers says_ok --concurrency 2 --name halfway -o exp", ""
        )
    )
    for _ in range(1000):
        if model.waiting == 2:
            break
        await asyncio.sleep(0.01)
    cell.cancel()  # what the kernel's Interrupt does to the cell
    with pytest.raises(asyncio.CancelledError):
        await cell
    experiment: Experiment = ip.user_ns["exp"]
    assert [cell.status for cell in experiment.results] == [
        "done",
        "done",
        "cancelled",
        "cancelled",
        "pending",
        "pending",
    ]
    if open_gate:
        model.gate.set()
    return experiment


async def test_resume_runs_only_the_cells_of_a_stored_experiment_that_did_not_end(
    gated: Gated, ip: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    use_store(tmp_path)
    stopped = await interrupted(gated, ip)
    kept = [cell.run_id for cell in stopped.results[:4]]
    assert gated.requests("plan") == 4
    in_a_new_kernel()
    capsys.readouterr()

    shown = await magics.run_dag_line("resume", "halfway --models gated --scorers says_ok --concurrency 3")

    assert shown is None  # the grid shows already: no second copy as the cell's value
    assert capsys.readouterr().out.splitlines()[-1] == "Experiment('halfway', 6 cells: 6 done)"  # its grid, as text
    resumed = await magics._magics().notebook.session().resume_evaluation("halfway")  # nothing left: runs nothing
    assert [cell.status for cell in resumed.results] == ["done"] * 6
    assert [cell.run_id for cell in resumed.results[:4]] == kept  # the cut runs resumed, not started again
    assert len({cell.run_id for cell in resumed.results}) == 6
    assert gated.requests("plan") == 6  # two runs started: the cells never started, nothing planned again
    assert gated.requests("step", "fast") == 4  # the finished cells' steps did not run again
    assert gated.requests("synthesize") == 6
    assert [cell.scores for cell in resumed.results] == [{"says_ok": True}] * 6


async def test_resume_finds_an_experiment_of_this_kernel_without_a_store(
    gated: Gated, ip: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    magics._magics().overrides["store"] = "none"
    await interrupted(gated, ip)

    await magics.run_dag_line("resume", "halfway")  # its configs and scorers are the kernel's already

    assert [cell.status for cell in ip.user_ns["exp"].results] == ["done"] * 6
    assert gated.requests("plan") == 8  # no store to resume the two cut runs from: they started again
    assert gated.requests("step", "fast") == 4
    capsys.readouterr()
    assert " halfway " in history(ip, capsys).partition("Experiments:")[2]


async def test_the_options_of_a_resumed_experiment_are_checked_and_said_in_one_line(
    gated: Gated, ip: InteractiveShell, tmp_path: Path
) -> None:
    use_store(tmp_path)
    await interrupted(gated, ip)
    in_a_new_kernel()
    with pytest.raises(UsageError, match=r"was scored by says_ok: pass scorers=") as caught:
        await magics.run_dag_line("resume", "halfway --models gated")
    assert "\n" not in str(caught.value)
    with pytest.raises(UsageError, match=r"%dag resume halfway.*unrecognized arguments: --colour"):
        await magics.run_dag_line("resume", "halfway --colour red")


async def test_a_key_naming_neither_a_run_nor_an_experiment_says_where_both_are_listed(
    gated: Gated, ip: InteractiveShell, tmp_path: Path
) -> None:
    magics._magics().overrides["store"] = "none"
    with pytest.raises(UsageError, match=r"no experiment 'nowhere' ran in this kernel, and DAG_STORE is none"):
        await magics.run_dag_line("resume", "nowhere")
    use_store(tmp_path)
    await interrupted(gated, ip)
    with pytest.raises(UsageError) as caught:
        await magics.run_dag_line("resume", "nowhere")
    told = str(caught.value)
    assert "no run or experiment 'nowhere' in the run store" in told
    assert "`%dag history` lists the stored runs and experiments" in told


async def test_interrupting_a_resumed_experiment_tells_how_to_go_on_not_about_one_of_its_runs(
    gated: Gated, ip: InteractiveShell
) -> None:
    magics._magics().overrides["store"] = "none"
    await interrupted(gated, ip, open_gate=False)
    resuming = asyncio.ensure_future(magics.run_dag_line("resume", "halfway"))
    for _ in range(1000):
        if gated.waiting == 4:  # both slow cells resumed, waiting again
            break
        await asyncio.sleep(0.01)
    resuming.cancel()
    with pytest.raises(asyncio.CancelledError) as caught:
        await resuming
    told = caught.value._render_traceback_()  # type: ignore[attr-defined]
    assert len(told) == 1 and "--resume halfway" in told[0] and "runs the cells that did not end" in told[0]
    assert [cell.status for cell in ip.user_ns["exp"].results][:4] == ["done", "done", "cancelled", "cancelled"]


def history(ip: InteractiveShell, capsys: pytest.CaptureFixture[str]) -> str:
    ip.run_line_magic("dag", "history")
    return capsys.readouterr().out


async def test_history_lists_the_experiments_after_the_runs(
    gated: Gated, ip: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    use_store(tmp_path)
    await interrupted(gated, ip)
    capsys.readouterr()
    listed = history(ip, capsys)
    runs, _, experiments = listed.partition("Experiments:")
    assert "fast one" in runs  # the experiment's cells are runs of this kernel
    assert "halfway" in experiments and "2 of 6 cells done" in experiments
    assert "`%dag resume halfway` runs the cells of an experiment that did not end." in experiments
    await magics.run_dag_line("resume", "halfway")
    assert "6 of 6 cells done" in history(ip, capsys).partition("Experiments:")[2]
