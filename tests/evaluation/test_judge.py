"""``llm_judge``: a model grades a run's answer by a rubric; its calls are purpose ``judge`` and kept by the judge."""

from __future__ import annotations

from typing import Any

import pytest

from dagmagic import ModelRegistry
from dagmagic.engine.run.dag_run import DagRun
from dagmagic.errors import ScorerError
from dagmagic.evaluation import Case, llm_judge
from dagmagic.models import RunState
from dagmagic.testing import ScriptedLLM
from tests.engine.conftest import plan_reply, session_for, verdict

RUBRIC = "Names the capital correctly and says nothing false."


def answered(answer: str, run_id: str = "run-1") -> DagRun:
    return DagRun(RunState(run_id=run_id, goal="What is the capital of France?", status="done", answer=answer),
                  read_only=True)  # fmt: skip


def case(expected: Any = "Paris") -> Case:
    return Case(id="c1", goal="What is the capital of France?", expected=expected)


def judged_by(*replies: Any, **options: Any) -> tuple[ScriptedLLM, ModelRegistry]:
    llm = ScriptedLLM({"judge": list(replies)}, **options)
    return llm, ModelRegistry().register("judge-model", llm, roles=["smart"])


async def test_the_judge_asks_with_purpose_judge_and_maps_its_score_to_0_to_1() -> None:
    llm, models = judged_by({"reasoning": "Right, and nothing false.", "score": 4})
    judge = llm_judge(RUBRIC, models=models)
    assert await judge(case(), answered("The capital is **Paris**.")) == pytest.approx(0.75)
    (request,) = llm.requests
    assert request.purpose == "judge"
    for seen in (RUBRIC, "What is the capital of France?", "Reference answer:\nParis", "The capital is **Paris**."):
        assert seen in request.prompt
    verdict_ = judge.verdicts["run-1"]
    assert (verdict_.case_id, verdict_.score, verdict_.raw_score) == ("c1", 0.75, 4.0)
    assert verdict_.reasoning == "Right, and nothing false."
    assert [call.purpose for call in verdict_.calls] == ["judge"] and judge.calls == verdict_.calls
    assert judge.usage.requests == 1


async def test_without_expected_the_judge_grades_by_the_rubric_alone() -> None:
    llm, models = judged_by({"reasoning": "ok", "score": 7})
    assert await llm_judge(RUBRIC, models=models, scale=(0, 10))(case(None), answered("Paris")) == pytest.approx(0.7)
    prompt = llm.requests[0].prompt
    assert "Reference answer" not in prompt and "from 0 (fails the rubric) to 10" in prompt


async def test_the_smart_model_judges_unless_another_is_named() -> None:
    small = ScriptedLLM({"judge": [{"reasoning": "small", "score": 1}]})
    big = ScriptedLLM({"judge": [{"reasoning": "big", "score": 5}]})
    models = ModelRegistry().register("small", small, roles=["general"]).register("big", big, roles=["smart"])
    assert await llm_judge(RUBRIC, models=models)(case(), answered("Paris")) == 1.0
    assert await llm_judge(RUBRIC, models=models, model="small")(case(), answered("Paris")) == 0.0
    assert await llm_judge(RUBRIC, models=models, model="general")(case(), answered("Paris")) == 0.0
    assert (len(small.requests), len(big.requests)) == (2, 1)
    with pytest.raises(ScorerError, match=r"no model named 'tiny' and no role 'tiny'.*models: \['big', 'small'\]"):
        await llm_judge(RUBRIC, models=models, model="tiny")(case(), answered("Paris"))


async def test_a_score_outside_the_scale_is_asked_again() -> None:
    llm, models = judged_by({"reasoning": "great", "score": 9}, {"reasoning": "great", "score": 5})
    assert await llm_judge(RUBRIC, models=models)(case(), answered("Paris")) == 1.0
    assert len(llm.requests) == 2


async def test_a_prose_verdict_with_a_score_is_read_from_the_text() -> None:
    _, models = judged_by("It names Paris, which is right. Score: 4", capabilities=())
    judge = llm_judge(RUBRIC, models=models)
    assert await judge(case(), answered("Paris")) == pytest.approx(0.75)
    assert judge.verdicts["run-1"].reasoning == "It names Paris, which is right. Score: 4"
    assert [call.structured_level for call in judge.calls] == ["text", "text"]  # no JSON, even asked again


async def test_a_judge_reply_with_no_verdict_is_a_clear_error_and_its_calls_are_kept() -> None:
    llm, models = judged_by("I would rather not grade this.")
    judge = llm_judge(RUBRIC, models=models, name="correct")
    with pytest.raises(ScorerError, match=r"^correct: the judge model 'judge-model' gave no readable verdict on "
                                          r"case 'c1' \(a score from 1 to 5 and its reasoning\)"):  # fmt: skip
        await judge(case(), answered("Paris"))
    assert judge.verdicts == {}
    assert len(judge.failed_calls) == len(llm.requests) == 5  # a forced tool call, then JSON twice, then text twice
    assert {call.purpose for call in judge.calls} == {"judge"}


async def test_a_run_with_no_answer_scores_zero_without_a_call() -> None:
    llm, models = judged_by({"reasoning": "never asked", "score": 5})
    judge = llm_judge(RUBRIC, models=models)
    assert await judge(case(), answered("  ")) == 0.0
    assert llm.requests == [] and judge.verdicts["run-1"].raw_score is None


async def test_an_unbound_judge_bound_to_a_registry_uses_it_and_records_its_verdicts_in_the_original() -> None:
    _, models = judged_by({"reasoning": "ok", "score": 3})
    judge = llm_judge(RUBRIC)
    bound = judge.bound_to(models)
    assert bound.models is models and judge.models is None
    assert await bound(case(), answered("Paris", run_id="run-7")) == 0.5
    assert list(judge.verdicts) == ["run-7"] and judge.calls == bound.calls
    other = ModelRegistry().register("other", ScriptedLLM({}))
    assert judge.bound_to(models).bound_to(other).models is models  # a judge given models keeps them


async def test_an_unbound_judge_called_alone_uses_the_models_from_the_environment_and_can_still_be_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    env_llm, env_models = judged_by({"reasoning": "env", "score": 1})
    monkeypatch.setattr(ModelRegistry, "from_env", classmethod(lambda cls: env_models))
    judge = llm_judge(RUBRIC)
    assert await judge(case(), answered("Paris", run_id="run-1")) == 0.0
    session_llm, session_models = judged_by({"reasoning": "session", "score": 5})
    assert await judge.bound_to(session_models)(case(), answered("Paris", run_id="run-2")) == 1.0
    assert (len(env_llm.requests), len(session_llm.requests)) == (1, 1)


async def test_the_judges_calls_are_not_the_runs() -> None:
    llm = ScriptedLLM({
        "plan": [plan_reply(("s1", []))],
        "step": ["Paris"],
        "analyze": [verdict(True, 0.9, "ok", "Paris.")],
        "synthesize": [["Paris."]],
        "judge": [{"reasoning": "right", "score": 5}],
    })  # fmt: skip
    session = session_for(llm)
    run = await session.run("What is the capital of France?")
    judge = llm_judge(RUBRIC, models=session.models)
    assert await judge(case(), run) == 1.0
    assert "judge" not in {call.purpose for call in run.calls}
    assert [call.purpose for call in judge.verdicts[run.run_id].calls] == ["judge"]


def test_a_judge_needs_a_rubric_and_a_scale_that_rises() -> None:
    with pytest.raises(ValueError, match=r"needs the rubric as text"):
        llm_judge("  ")
    with pytest.raises(ValueError, match=r"needs low < high, got \(5, 1\)"):
        llm_judge(RUBRIC, scale=(5, 1))
    assert repr(llm_judge(RUBRIC, model="big")) == (
        "llm_judge('Names the capital correctly and says no…', model='big', scale=(1, 5))"
    )
    assert llm_judge(RUBRIC).name == "judge" and llm_judge(RUBRIC, name="correct").name == "correct"
