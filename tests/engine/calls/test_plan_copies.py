"""What small models copy into a plan: found, re-asked once with the reason, else repaired with a warning.

Each plan below is what Qwen2.5-Coder 0.5B/1.5B wrote (issue 42's recorded calls), as plan lines.
"""

from __future__ import annotations

from typing import Any

import pytest

from dagmagic import DagSession, DagSettings, ModelRegistry
from dagmagic.engine.calls.plan_copies import CopyCheck
from dagmagic.engine.calls.plan_drafts import StepDraft
from dagmagic.engine.tools.functions import Tool
from dagmagic.events import RunWarning
from dagmagic.testing import ScriptedLLM
from tests.engine.calls.test_planner import Harness
from tests.engine.conftest import verdict

POPULATIONS = {"dorvania": 12_480_000, "kelmar": 7_310_000}


def population(country: str) -> int:
    """The population of a country.

    Examples:
        >>> population("Atlantis")
        5000

    Args:
        country: The country's name.
    """
    return POPULATIONS[country.strip().lower()]


def calculate(expression: str) -> str:
    """Evaluate an arithmetic expression, e.g. 2 * (3 + 4)."""
    return str(eval(expression, {"__builtins__": {}}))  # test data only: the expressions are the script's


TOOLS = [Tool(population), Tool(calculate)]
GOAL = "Which has more people, Dorvania or Kelmar?"
SAME_TOOL_CHAIN = '1. population(country="Dorvania")\n2. population(country=$1)\n3. calculate(expression="$1 > $2")'
FIXED = '1. population(country="Dorvania")\n2. population(country="Kelmar")\n3. calculate(expression="$1 > $2")'


def check() -> CopyCheck:
    return CopyCheck.of(GOAL, TOOLS, ["population", "calculate"])


def draft(step_id: str, tool: str | None = None, dependencies: list[str] | None = None, **arguments: Any) -> StepDraft:
    return StepDraft(
        id=step_id,
        task=f"{tool}(...)" if tool else "a task",
        tool_hint=tool,
        tool_args=arguments if tool else None,
        dependencies=dependencies or [],
    )


# --- the rules --------------------------------------------------------------------------------------------------


def test_a_lookup_tools_result_given_to_the_same_tool_is_a_copy() -> None:
    drafts = [draft("s1", "population", country="Dorvania"), draft("s2", "population", ["s1"], country="$s1")]
    problem = check().problem(drafts)
    assert problem is not None and "step 2 gives population the result of step 1" in problem
    assert "write each population call with its own value from the goal" in problem


def test_a_computing_tools_own_chain_and_a_cross_tool_reference_are_no_copies() -> None:
    drafts = [
        draft("s1", "population", country="Dorvania"),
        draft("s2", "calculate", ["s1"], expression="$s1 * 2"),
        draft("s3", "calculate", ["s2"], expression="$s2 + 1"),
    ]
    assert check().problem(drafts) is None


@pytest.mark.parametrize("value", ["<country>", "...", "$N", "string", "value", "<from the goal>"])
def test_a_placeholder_argument_is_a_copy(value: str) -> None:
    problem = check().problem([draft("s1", "population", country=value)])
    assert problem is not None and "only holds the place of a value" in problem


@pytest.mark.parametrize("value", ["Dorvania", "$s1", "$r1.s2", "Kelmar", "12 480 000"])
def test_real_values_and_references_are_no_placeholders(value: str) -> None:
    drafts = [draft("s0", "calculate", expression="1"), draft("s1", "population", country=value)]
    assert check().step_problem(drafts[1], drafts) is None


def test_a_docstring_example_the_goal_does_not_mention_is_a_copy() -> None:
    problem = check().problem([draft("s1", "population", country="Atlantis")])
    assert problem is not None and "'Atlantis', an example of the tool's description" in problem
    mentioned = CopyCheck.of("How many people live in Atlantis?", TOOLS, ["population"])
    assert mentioned.problem([draft("s1", "population", country="Atlantis")]) is None


def test_an_inline_example_counts_too_but_a_list_of_known_values_does_not() -> None:
    assert check().problem([draft("s1", "calculate", expression="2 * (3 + 4)")]) is not None

    def capital(country: str) -> str:
        """The capital of a country (Dorvania, Kelmar, Ostria)."""
        return ""

    listed = CopyCheck.of("What is the capital of Ostria?", [Tool(capital)], ["capital"])
    assert listed.problem([draft("s1", "capital", country="Kelmar")]) is None


@pytest.mark.parametrize("step_id", ["population", "calculate", "submit_plandraft"])
def test_a_step_named_after_a_tool_is_a_copy(step_id: str) -> None:
    problem = check().problem([draft(step_id, "population", country="Dorvania")])
    assert problem is not None and "is named after a tool; number the steps 1, 2, 3" in problem


def test_repair_makes_copied_calls_agent_tasks_and_renumbers_a_step_named_after_a_tool() -> None:
    warnings: list[str] = []
    drafts = [
        draft("population", "population", country="Dorvania"),
        draft("s2", "population", ["population"], country="$population"),
        draft("s3", "population", country="<country>"),
        draft("s4", None, ["s2", "population"]),
    ]
    repaired = check().repair(drafts, warnings.append)
    assert [d.id for d in repaired] == ["s1", "s2", "s3", "s4"]
    assert repaired[2].tool_args is None and repaired[3].dependencies == ["s2", "s1"]
    assert "The planner named a step 'population', a tool's name: it is step s1." in warnings
    assert any("Step s3: the planner's call" in w and "a model does the step instead" in w for w in warnings)


# --- in the planner: one re-ask with the reason, then the repair -------------------------------------------------


@pytest.mark.parametrize("streaming", [False, True], ids=["whole-plan", "streamed-plan"])
async def test_a_same_tool_chain_is_re_asked_with_the_reason_and_the_corrected_plan_runs(streaming: bool) -> None:
    """The 1.5B wrote ``population(country=$1)`` after a population: re-asked once, the corrected plan runs, and no
    step ever called population with a number.
    """
    llm = ScriptedLLM(
        {
            "plan": [SAME_TOOL_CHAIN, FIXED],
            "analyze": [verdict(True, 0.9, "checked", "Dorvania has more people (12480000 against 7310000).")],
        }
    )
    session = DagSession(
        ModelRegistry().register("m", llm), DagSettings(store="none", streaming_planner=streaming), tools=TOOLS
    )
    run = await session.run(GOAL)
    assert run.status == "done"
    plans = llm.requests_for("plan")
    assert len(plans) == 2 and "step 2 gives population the result of step 1" in plans[1].messages[-1]["content"]
    assert [(s.id, s.tool_args) for s in run.rounds[-1].plan.steps] == [
        ("s1", {"country": "Dorvania"}),
        ("s2", {"country": "Kelmar"}),
        ("s3", {"expression": "$s1 > $s2"}),
    ]
    called = [call.arguments for step in run.steps.values() for call in step.tool_calls]
    assert {"country": "12480000"} not in called and {"country": 12480000} not in called
    assert run.steps["s3"].result == "True" and not llm.requests_for("step")


async def test_a_chain_still_there_after_the_re_ask_runs_as_an_agent_step_with_a_warning() -> None:
    harness = Harness([SAME_TOOL_CHAIN, SAME_TOOL_CHAIN], tools=TOOLS)
    plan = await harness.planner.plan(GOAL)
    s2 = plan.steps[1]
    assert s2.tool_args is None and s2.dependencies == []
    assert any("Step s2: the planner's call" in w and "a model does the step instead" in w for w in harness.warnings)
    assert plan.steps[2].tool_args == {"expression": "$s1 > $s2"}


async def test_a_placeholder_copied_from_the_prompt_is_re_asked() -> None:
    harness = Harness(['1. population(country="<country>")\n2. population(country="Kelmar")', FIXED], tools=TOOLS)
    plan = await harness.planner.plan(GOAL)
    assert "'<country>', which only holds the place of a value" in harness.last_user_message(1)
    assert plan.steps[0].tool_args == {"country": "Dorvania"}


def test_no_warning_event_for_a_plan_that_copied_nothing() -> None:
    harness = Harness([FIXED], tools=TOOLS)
    steps, problem = harness.planner.validate(
        [draft("s1", "population", country="Dorvania")], round=1, goal="How many live in Dorvania?"
    )
    assert problem is None and steps[0].tool_args == {"country": "Dorvania"}
    assert not [e for e in harness.events if isinstance(e, RunWarning)]


def test_a_computing_tool_given_only_a_result_computes_nothing() -> None:
    """The 1.5B wrote ``calculate(capital(Ostria))`` for "the population of the capital of Ostria": the direct call
    failed and its agent invented a population.
    """
    drafts = [draft("s1", "population", country="Ostria"), draft("s2", "calculate", ["s1"], expression="$s1")]
    problem = check().problem(drafts)
    assert problem == (
        "step 2 gives calculate only $s1, with nothing to compute; call the tool that gives what the goal asks for"
    )
    assert check().problem([drafts[0], draft("s2", "calculate", ["s1"], expression="$s1 * 2")]) is None


@pytest.mark.parametrize("streaming", [False, True], ids=["whole-plan", "streamed-plan"])
async def test_a_step_that_only_writes_up_or_compares_results_is_left_out_with_a_warning(streaming: bool) -> None:
    """The 1.5B added "2. write the result" after a lookup; its agent, with nothing to do, answered "4008", and the
    verdict weighed it against the founding year. The answer writes up the results: the step is left out.
    """
    llm = ScriptedLLM(
        {
            "plan": ['1. population(country="Dorvania")\n2. write the result\n3. Compare the two results'],
            "analyze": [verdict(True, 0.9, "found", "Dorvania has 12,480,000 people.")],
        }
    )
    session = DagSession(
        ModelRegistry().register("m", llm), DagSettings(store="none", streaming_planner=streaming), tools=TOOLS
    )
    run = await session.run("How many people live in Dorvania?")
    assert run.status == "done" and [s.id for s in run.rounds[0].plan.steps] == ["s1"]
    assert not llm.requests_for("step") and len(llm.requests_for("plan")) == 1  # no re-ask, no agent
    warnings = run.rounds[0].warnings
    assert any("Step s2 ('write the result') only writes up or compares results" in w for w in warnings)


def test_a_write_up_is_kept_in_a_plan_without_tool_steps_and_a_task_that_writes_something_else_stays() -> None:
    words = [draft("s1"), StepDraft(id="s2", task="Compare the two theories")]
    assert check().write_ups(words) == []
    mixed = [draft("s1", "population", country="Dorvania"), StepDraft(id="s2", task="Write a poem about $s1")]
    assert check().write_ups(mixed) == []
