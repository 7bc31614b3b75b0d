"""Reading a run from Python: steps of any round, compact reprs, HTML views, data frames."""

from __future__ import annotations

import builtins
from typing import Any

import pytest

from dagmagic.models import Usage, money
from dagmagic.testing import ScriptedLLM
from tests.engine.conftest import plan_reply, session_for, verdict


async def two_rounds() -> Any:
    llm = ScriptedLLM(
        {
            "plan": [plan_reply(("s1", []), ("s2", ["s1"])), plan_reply(("s1", [], "again"), ("s3", ["r1.s2"]))],
            "step": lambda r: f"result of {r.step_id} in round {r.round}",
            "analyze": [verdict(False, 0.2, "more"), verdict(True, 0.9, "done")],
            "synthesize": [["The answer."]],
        }
    )
    return await session_for(llm).run("goal")


async def test_steps_of_every_round_are_within_reach() -> None:
    run = await two_rounds()
    assert run.step("s3").result == "result of s3 in round 2"  # the latest round
    assert run.step("r1.s2").result == "result of s2 in round 1"
    assert run.step("r2.s1").task == "again" and run.step("r1.s1").task == "do s1"
    assert list(run.all_steps) == ["r1.s1", "r1.s2", "r2.s1", "r2.s3"]
    with pytest.raises(KeyError, match="no step 's9' in round 2"):
        run.step("s9")
    with pytest.raises(KeyError, match="no round 7"):
        run.step("r7.s1")


async def test_reprs_are_compact_and_html_views_escape() -> None:
    run = await two_rounds()
    step = run.step("r1.s2")
    assert repr(step).startswith("PlanStep(s2 completed ") and repr(step).endswith(
        "'do s2' → 'result of s2 in round 1')"
    )
    assert "epoch" not in repr(step) and "queued_at" not in repr(step)
    assert repr(run.plan) == "ExecutionPlan(round 2, 2 steps: s1 completed, s3 completed)"
    call = run.calls[0]
    assert repr(call).startswith("LLMCall(plan · scripted · round 1 · ") and repr(call).endswith("· cost unknown · ok)")
    assert repr(Usage(input_tokens=1234, output_tokens=5, requests=1, cost=0.012345)) == (
        "Usage(1,234 in · 5 out · 1 request · $0.0123)"
    )
    assert [money(c) for c in (None, 0, 0.00012345, 2.5, 1234.5)] == [
        "cost unknown",
        "$0",
        "$0.0001",
        "$2.50",
        "$1,234.50",
    ]

    step.result = "<script>alert(1)</script>"
    assert "<script>" not in step._repr_html_() and "&lt;script&gt;" in step._repr_html_()
    assert "<table>" in run.plan._repr_html_() and "<details>" in call._repr_html_()


async def test_a_run_as_a_data_frame() -> None:
    pytest.importorskip("pandas")
    run = await two_rounds()
    steps = run.to_dataframe()
    assert list(steps["round"]) == [1, 1, 2, 2] and list(steps["step"]) == ["s1", "s2", "s1", "s3"]
    assert steps.loc[3, "dependencies"] == "r1.s2" and steps.loc[3, "status"] == "completed"
    calls = run.to_dataframe("calls")
    assert len(calls) == len(run.calls) and set(calls["purpose"]) >= {"plan", "step", "analyze", "synthesize"}


async def test_without_pandas_the_message_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    run = await two_rounds()
    real_import = builtins.__import__

    def no_pandas(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "pandas":
            raise ImportError("No module named 'pandas'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pandas)
    monkeypatch.delitem(__import__("sys").modules, "pandas", raising=False)
    with pytest.raises(ImportError, match="pip install pandas"):
        run.to_dataframe()
