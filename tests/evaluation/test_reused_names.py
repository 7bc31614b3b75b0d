"""An experiment resumed by its name: the same definition goes on with what it has, a changed one is refused naming
what changed, never answered with the old cells; the ``max_cost`` given now is the one that holds. On both store
backends.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dagmagic import DagError, DagSession, DagSettings, ModelRegistry
from dagmagic.evaluation import load_experiment
from dagmagic.testing import ScriptedLLM

pytestmark = pytest.mark.timeout(120)

PLAN = {"steps": [{"id": "s1", "task": "look it up"}]}
VERDICT = {"achieved": True, "confidence": 0.8, "reasoning": "ok"}
GOALS = ["question 0", "question 1", "question 2"]


def scripted(answer: str, price: tuple[float, float] | None = None) -> ScriptedLLM:
    script = {"plan": [PLAN], "step": ["found it"], "analyze": [VERDICT], "synthesize": [answer]}
    return ScriptedLLM(script, price=price)


def session(store: Path | str, model: str, llm: ScriptedLLM) -> DagSession:
    return DagSession(ModelRegistry().register(model, llm), DagSettings(store=str(store)))


async def test_a_changed_setting_of_a_config_is_refused_naming_the_field(store_path: Path | str) -> None:
    llm = scripted("an answer")
    await session(store_path, "m", llm).evaluate(
        GOALS, name="tuned", configs={"deep": {"settings": {"max_replan_rounds": 2}}}
    )
    with pytest.raises(DagError, match=r"config 'deep': setting max_replan_rounds 2 → 5"):
        await session(store_path, "m", llm).resume_evaluation(
            "tuned", configs={"deep": {"settings": {"max_replan_rounds": 5}}}
        )


async def test_resuming_with_another_model_is_refused(store_path: Path | str) -> None:
    small = scripted("small", price=(0.001, 0.001))
    warm = session(store_path, "small", small)
    cost = (await warm.run("warm up", conversation=False)).cost
    assert cost
    stopped = await warm.evaluate(GOALS, name="later", concurrency=1, max_cost=cost / 2)
    assert [cell.status for cell in stopped.cells] == ["done", "not_started", "not_started"]

    big = scripted("big", price=(0.001, 0.001))
    with pytest.raises(DagError, match=r"smart, general, fast, reasoning model small → big"):
        await session(store_path, "big", big).resume_evaluation("later", max_cost=10 * cost)
    assert big.requests == []

    again = await session(store_path, "small", small).resume_evaluation("later", max_cost=10 * cost)
    assert [cell.status for cell in again.cells] == ["done"] * 3  # the same definition goes on


async def test_a_resumed_experiment_keeps_its_cells_and_the_max_cost_given_now(store_path: Path | str) -> None:
    llm = scripted("an answer", price=(0.001, 0.001))
    cost = (await session(store_path, "m", llm).run("warm up", conversation=False)).cost
    assert cost
    first = await session(store_path, "m", llm).evaluate(GOALS, name="budgeted", concurrency=1, max_cost=cost / 2)
    assert [cell.status for cell in first.cells] == ["done", "not_started", "not_started"]
    plans = len(llm.requests_for("plan"))

    again = await session(store_path, "m", llm).resume_evaluation("budgeted", concurrency=1, max_cost=10 * cost)

    assert again.id == first.id
    assert [cell.status for cell in again.cells] == ["done"] * 3, again.definition.max_cost
    assert again.cells[0].run_id == first.cells[0].run_id  # the cell that ended kept as it was
    assert len(llm.requests_for("plan")) - plans == 2  # only the two left unstarted ran
    assert load_experiment("budgeted", store=str(store_path)).definition.max_cost == 10 * cost
