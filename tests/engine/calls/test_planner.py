"""The planner: its prompt, the plan call, recovery of the shapes models write, validation and the one re-ask."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest

from dagmagic import errors
from dagmagic.engine.calls import prompts
from dagmagic.engine.calls.plan_drafts import PlanDraft, StepDraft, plan_schema, recover_plan, recover_steps
from dagmagic.engine.calls.plan_validation import validate_steps
from dagmagic.engine.calls.planner import Planner
from dagmagic.engine.tools.functions import Tool
from dagmagic.events import LLMCallRecorded, RunWarning
from dagmagic.llm import ChatModel, ModelRegistry
from dagmagic.llm.protocol import ChatResponse
from dagmagic.llm.registry import STANDARD_ROLES
from dagmagic.models import ExecutionPlan
from dagmagic.settings import DagSettings
from dagmagic.testing import ScriptedLLM, ScriptedRequest

TODAY = dt.date(2026, 11, 30)
SETTINGS = DagSettings(llm_retry_backoff=0.001)
TOOL_AND_JSON = ("tool_call", "json_mode")
LEVELS = {"tool_call": TOOL_AND_JSON, "json_mode": ("json_mode",), "text": ()}

GOOD_PLAN = {
    "steps": [
        {"id": "s1", "task": "Find the population of Paris"},
        {"id": "s2", "task": "Find the population of Berlin"},
        {"id": "s3", "task": "Compare them", "dependencies": ["s1", "s2"]},
    ]
}


class Harness:
    """A planner over a scripted model, with every event it and its model emitted."""

    def __init__(
        self,
        replies: Any,
        *,
        capabilities: tuple[str, ...] = TOOL_AND_JSON,
        settings: DagSettings = SETTINGS,
        **planner_kwargs: Any,
    ) -> None:
        self.llm = ScriptedLLM({"plan": replies}, capabilities=capabilities)
        self.events: list[Any] = []
        model = ChatModel(ModelRegistry().register("m", self.llm).get("m"), settings=settings, emit=self.events.append)
        planner_kwargs.setdefault("today", lambda: TODAY)
        self.planner = Planner(model, settings, emit=self.events.append, **planner_kwargs)

    @property
    def requests(self) -> list[ScriptedRequest]:
        return self.llm.requests_for("plan")

    @property
    def warnings(self) -> list[str]:
        return [event.message for event in self.events if isinstance(event, RunWarning)]

    def last_user_message(self, index: int) -> str:
        content = self.requests[index].messages[-1]
        assert content["role"] == "user"
        return str(content["content"])


def shape(plan: ExecutionPlan) -> list[tuple[str, str, list[str]]]:
    return [(step.id, step.task, step.dependencies) for step in plan.steps]


# --- the prompt ------------------------------------------------------------------------------------------------


def test_system_prompt_injects_today() -> None:
    prompt = Harness([GOOD_PLAN]).planner.system_prompt()
    assert "Today is 2026-11-30." in prompt


def test_system_prompt_follows_the_injected_clock_not_the_real_one() -> None:
    prompt = Harness([GOOD_PLAN], today=lambda: dt.date(2031, 2, 3)).planner.system_prompt()
    assert "Today is 2031-02-03." in prompt
    assert "2026" not in prompt


def test_system_prompt_asks_for_plan_lines_the_goals_language_and_the_step_range() -> None:
    prompt = Harness([GOOD_PLAN]).planner.system_prompt()
    assert "numbered lines, one step a line" in prompt
    assert "write $ and that step's number in its place ($2 is step 2's\nresult)" in prompt
    assert "the step then waits for that step" in prompt
    assert "The answer to the goal is written from all the results once the steps are done" in prompt
    assert "in the goal's\nlanguage" in prompt or "in the goal's language" in prompt
    assert "Use at most 6 steps." in prompt


def test_step_range_comes_from_the_settings() -> None:
    settings = DagSettings(plan_min_steps=3, plan_max_steps=4)
    prompt = Harness([GOOD_PLAN], settings=settings).planner.system_prompt()
    assert "Use 3 to 4 steps" in prompt
    assert "2 to 6" not in prompt


def test_system_prompt_explains_model_hints() -> None:
    prompt = Harness([GOOD_PLAN]).planner.system_prompt()
    hint_rule = prompt[prompt.index("optional hints in brackets") :]
    assert "fast (a simple step)" in hint_rule
    assert "reasoning (careful analysis)" in hint_rule


def test_a_prompt_for_one_model_names_no_role_asks_no_domain_and_offers_no_subplan() -> None:
    """What one model plays every role with cannot be steered by a role: the prompt says nothing of them (nor of
    the domain, which only steers steps to the reasoning model), and subplans only when subruns are on.
    """
    planner = Harness([GOOD_PLAN]).planner
    planner.model_choice = False
    prompt = planner.system_prompt(ask_domain=True)
    assert "fast" not in prompt and "reasoning" not in prompt and "domain" not in prompt
    assert "subplan" not in prompt and "hints in brackets" not in prompt
    assert "domain" not in planner.system_prompt("legal")
    planner.subruns = True
    assert "subplan for a step too big for one agent" in planner.system_prompt()


def test_tool_names_are_listed_sorted_only_when_given() -> None:
    prompt = Harness([GOOD_PLAN], tool_names=["lookup", "add"]).planner.system_prompt()
    assert "Tools:\n  add\n  lookup" in prompt and "the tool it should use" in prompt
    assert "Tools:" not in Harness([GOOD_PLAN]).planner.system_prompt()


def test_custom_roles_are_listed_only_when_given() -> None:
    planner = Harness([GOOD_PLAN], roles=[*STANDARD_ROLES, "legal_expert"]).planner
    prompt = planner.system_prompt()
    assert "or a role: legal_expert." in prompt
    assert "or a role" not in Harness([GOOD_PLAN]).planner.system_prompt()


def test_domain_line_steers_precise_steps_to_the_reasoning_model() -> None:
    planner = Harness([GOOD_PLAN]).planner
    legal = planner.system_prompt(domain="legal")
    assert "This goal is in the legal domain" in legal
    assert "Hint reasoning for every step" in legal
    assert "domain" not in planner.system_prompt()


def test_the_planner_is_asked_for_the_domain_only_while_it_is_not_known() -> None:
    planner = Harness([GOOD_PLAN]).planner
    asking = planner.system_prompt(ask_domain=True)
    assert prompts.PLANNER_DOMAIN_ASK in asking and "hint reasoning for every step" in asking
    known = planner.system_prompt(domain="legal", ask_domain=True)
    assert prompts.PLANNER_DOMAIN.format(domain="legal") in known and prompts.PLANNER_DOMAIN_ASK not in known
    assert "domain" not in planner.system_prompt()


def test_the_plan_schema_asks_for_the_domain_before_the_steps_only_when_asked() -> None:
    assert plan_schema(ask_domain=True) == PlanDraft.model_json_schema()
    assert list(plan_schema(ask_domain=True)["properties"]) == ["domain", "steps"]  # streamed: the domain first
    assert list(plan_schema()["properties"]) == ["steps"] and plan_schema()["title"] == "PlanDraft"


@pytest.mark.parametrize("level", LEVELS)
async def test_the_plan_call_says_the_domain_at_every_level(level: str) -> None:
    harness = Harness([{"domain": "financial", **GOOD_PLAN}], capabilities=LEVELS[level])
    said: list[str | None] = []
    plan = await harness.planner.plan("Should I refinance my mortgage?", on_domain=said.append)
    assert said == ["financial"] and len(plan.steps) == 3
    (request,) = harness.requests
    assert prompts.PLANNER_DOMAIN_ASK in request.messages[0]["content"]
    assert request.tools == [] and request.level == "text"  # plan lines at every level: no schema sent


async def test_a_plan_call_not_asked_for_the_domain_says_none_and_an_unreadable_one_nothing() -> None:
    unasked = Harness([{"domain": "legal", **GOOD_PLAN}])
    await unasked.planner.plan("goal")
    assert "domain" not in unasked.requests[0].messages[0]["content"]
    said: list[str | None] = []
    await Harness(["no plan here"], capabilities=()).planner.plan("goal", on_domain=said.append)
    assert said == []  # nothing said: the next plan call asks again


def test_recover_plan_reads_the_domain_leniently() -> None:
    steps = GOOD_PLAN["steps"]
    assert recover_plan({"domain": " LEGAL", "steps": steps}).domain == "legal"
    assert recover_plan({"plan": {"domain": "medical", "steps": steps}}).domain == "medical"
    assert recover_plan(json.dumps({"domain": "financial", "steps": steps})).domain == "financial"
    for said in ("astrology", 7, None, ["legal"], {"name": "legal"}):
        assert recover_plan({"domain": said, "steps": steps}).domain is None
    assert recover_plan(steps).domain is None and len(recover_plan(steps).steps) == 3


async def test_plan_call_uses_purpose_plan_temperature_zero_and_plan_lines() -> None:
    harness = Harness([GOOD_PLAN], tool_names=["lookup"])
    plan = await harness.planner.plan("Compare Paris and Berlin", domain="legal")

    assert shape(plan) == [
        ("s1", "Find the population of Paris", []),
        ("s2", "Find the population of Berlin", []),
        ("s3", "Compare them", ["s1", "s2"]),
    ]
    assert (plan.goal, plan.round) == ("Compare Paris and Berlin", 1)
    (request,) = harness.llm.requests
    assert request.purpose == "plan"
    assert request.temperature == 0.0
    assert request.round == 1
    assert (request.tools, request.tool_choice) == ([], None)  # no schema: the format is in the prompt
    system, user = request.messages[0]["content"], request.messages[-1]["content"]
    assert "Today is 2026-11-30" in system
    assert "Tools:\n  lookup" in system
    assert "This goal is in the legal domain" in system
    assert user == "Compare Paris and Berlin"

    (call,) = [event.call for event in harness.events if isinstance(event, LLMCallRecorded)]
    assert (call.purpose, call.round, call.structured_level, call.model) == ("plan", 1, "text", "m")


async def test_plan_call_keeps_purpose_and_temperature_at_the_text_level() -> None:
    harness = Harness([GOOD_PLAN], capabilities=())
    await harness.planner.plan("goal")
    (request,) = harness.llm.requests
    assert (request.purpose, request.temperature, request.tools) == ("plan", 0.0, [])
    assert "JSON schema" not in request.messages[-1]["content"] and request.messages[-1]["content"] == "goal"


async def test_replan_message_carries_the_round_the_context_and_reusable_results() -> None:
    harness = Harness([{"steps": [{"id": "s1", "task": "retry", "dependencies": ["r1.s2"]}]}])
    plan = await harness.planner.plan("goal", round=2, context="--- Round 1 ---\ns2 failed", earlier=["r1.s2"])
    user = harness.last_user_message(0)
    assert "This is round 2" in user
    assert "--- Round 1 ---\ns2 failed" in user
    assert "Results that completed can be used again without running them: write $r1.s2 where" in user
    assert "for example" not in user  # no made-up id to copy
    assert harness.requests[0].round == 2
    assert plan.round == 2


# --- recovery of what models write -----------------------------------------------------------------------------

TWO_STEPS = [("s1", "a", []), ("s2", "b", ["s1"])]
RECOVERY_CASES = {
    "bare step object": ({"id": "s1", "task": "a"}, [("s1", "a", [])]),
    "bare list": ([{"id": "s1", "task": "a"}, {"id": "s2", "task": "b", "dependencies": ["s1"]}], TWO_STEPS),
    "steps as a dict keyed by id": (
        {"steps": {"s1": {"task": "a"}, "s2": {"task": "b", "dependencies": ["s1"]}}},
        TWO_STEPS,
    ),
    "steps as a JSON string": (
        {"steps": json.dumps([{"id": "s1", "task": "a"}, {"id": "s2", "task": "b", "dependencies": ["s1"]}])},
        TWO_STEPS,
    ),
    "description instead of task": (
        {"steps": [{"id": "s1", "description": "a"}, {"id": "s2", "description": "b", "dependencies": ["s1"]}]},
        TWO_STEPS,
    ),
    "integer ids": (
        {"steps": [{"id": 1, "task": "a"}, {"id": 2, "task": "b", "dependencies": [1]}]},
        [("1", "a", []), ("2", "b", ["1"])],
    ),
    "a string dependency": (
        {"steps": [{"id": "s1", "task": "a"}, {"id": "s2", "task": "b", "dependencies": "s1"}]},
        TWO_STEPS,
    ),
    "null dependencies": (
        {"steps": [{"id": "s1", "task": "a", "dependencies": None}, {"id": "s2", "task": "b", "dependencies": ["s1"]}]},
        TWO_STEPS,
    ),
    "depends_on alias": (
        {"steps": [{"id": "s1", "task": "a"}, {"id": "s2", "task": "b", "depends_on": ["s1"]}]},
        TWO_STEPS,
    ),
}


@pytest.mark.parametrize("level", list(LEVELS))
@pytest.mark.parametrize("case", list(RECOVERY_CASES))
async def test_recovery_through_the_planner(case: str, level: str) -> None:
    reply, expected = RECOVERY_CASES[case]
    harness = Harness([reply], capabilities=LEVELS[level])
    plan = await harness.planner.plan("goal")
    assert shape(plan) == expected
    assert [r.level for r in harness.requests] == ["text"]  # recovered on the first call, no re-ask
    assert harness.warnings == []


def test_recover_steps_numbers_steps_without_ids_and_reads_a_plan_key() -> None:
    drafts = recover_steps({"plan": {"steps": [{"task": "a"}, {"task": "b", "deps": "s1"}]}})
    assert [(d.id, d.task, d.dependencies) for d in drafts] == [("s1", "a", []), ("s2", "b", ["s1"])]


def test_recover_steps_splits_a_comma_separated_dependency_string_and_clears_null_hints() -> None:
    (draft,) = recover_steps(
        [{"id": "s3", "task": "c", "dependencies": "s1, s2", "tool_hint": "null", "model_hint": ""}]
    )
    assert draft == StepDraft(id="s3", task="c", dependencies=["s1", "s2"], tool_hint=None, model_hint=None)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"answer": "Paris"}, "no `steps`"),
        ({"steps": 3}, "`steps` must be a list"),
        ([{"id": "s1", "task": "a"}, "then b"], "step 2 is not an object"),
        (42, "expected an object"),
    ],
)
def test_recover_steps_refuses_what_is_not_a_plan(raw: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        recover_steps(raw)


# --- fixed with a warning, no re-ask ---------------------------------------------------------------------------


async def test_dangling_dependencies_are_dropped_with_a_warning_naming_them() -> None:
    reply = {
        "steps": [
            {"id": "s1", "task": "a"},
            {"id": "s2", "task": "b", "dependencies": ["s1", "s9"]},
            {"id": "s3", "task": "c", "dependencies": ["s7"]},
        ]
    }
    harness = Harness([reply, GOOD_PLAN])
    plan = await harness.planner.plan("goal")
    assert shape(plan) == [("s1", "a", []), ("s2", "b", ["s1"]), ("s3", "c", [])]
    assert len(harness.requests) == 1
    (warning,) = harness.warnings
    assert "s2 for 's9'" in warning and "s3 for 's7'" in warning
    (event,) = [e for e in harness.events if isinstance(e, RunWarning)]
    assert event.round == 1


async def test_unknown_model_hint_becomes_null_with_a_warning_known_ones_are_kept() -> None:
    reply = {
        "steps": [
            {"id": "s1", "task": "a", "model_hint": "genius"},
            {"id": "s2", "task": "b", "model_hint": "fast"},
            {"id": "s3", "task": "c", "model_hint": "reasoning"},
            {"id": "s4", "task": "d", "model_hint": "legal_expert"},
        ]
    }
    harness = Harness([reply], roles=["legal_expert"])
    plan = await harness.planner.plan("goal")
    assert [step.model_hint for step in plan.steps] == [None, "fast", "reasoning", "legal_expert"]
    assert len(harness.requests) == 1
    (warning,) = harness.warnings
    assert "s1" in warning and "'genius'" in warning


async def test_an_unknown_hint_is_read_as_a_role_and_named_in_a_warning() -> None:
    # in plan lines a hint in brackets is a tool of the session or a role: "[teleport]" names neither
    reply = {"steps": [{"id": "s1", "task": "a", "tool_hint": "teleport"}, {"id": "s2", "task": "b"}]}
    harness = Harness([reply], tool_names=["lookup"])
    plan = await harness.planner.plan("goal")
    assert [(step.tool_hint, step.model_hint) for step in plan.steps] == [(None, None), (None, None)]
    assert len(harness.requests) == 1
    assert harness.warnings == [
        "Step s1: the planner asked for the model 'teleport', which is no model role here (fast, general, "
        "reasoning, smart): the step runs on the general model."
    ]


async def test_earlier_round_references_are_kept_only_when_listed() -> None:
    reply = {"steps": [{"id": "s1", "task": "reuse", "dependencies": ["r1.s2", "r1.s5"]}, {"id": "s2", "task": "b"}]}
    harness = Harness([reply])
    plan = await harness.planner.plan("goal", round=2, context="round 1 failed", earlier=["r1.s2"])
    assert plan.steps[0].dependencies == ["r1.s2"]
    (warning,) = harness.warnings
    assert warning == (
        "Step s1 was planned to wait for 'r1.s5', which is no result of an earlier round that can be reused: it runs "
        "without waiting for it."
    )
    assert "r1.s2" not in warning.replace("r1.s5", "")

    unlisted = Harness([reply])
    plan = await unlisted.planner.plan("goal", round=2, context="round 1 failed")
    assert plan.steps[0].dependencies == []
    assert "s1 for 'r1.s2'" in unlisted.warnings[0]


async def test_a_plan_of_exactly_the_maximum_is_accepted_and_one_below_the_minimum_too() -> None:
    six = {"steps": [{"id": f"s{i}", "task": f"t{i}"} for i in range(1, 7)]}
    harness = Harness([six])
    assert len((await harness.planner.plan("goal")).steps) == 6
    one = Harness([{"steps": [{"id": "s1", "task": "everything at once"}]}])
    assert len((await one.planner.plan("goal")).steps) == 1  # the minimum is guidance, not a reason to re-ask
    assert len(harness.requests) == len(one.requests) == 1


# --- unusable plans: one re-ask quoting the problem, then PlanningError ----------------------------------------


def steps(*specs: tuple[str, list[str]]) -> dict[str, Any]:
    return {"steps": [{"id": sid, "task": f"do {sid}", "dependencies": deps} for sid, deps in specs]}


BAD_PLANS: dict[str, tuple[dict[str, Any], list[str], list[str]]] = {
    # name: (plan, text the re-ask and the error must quote, step ids they must NOT name)
    "two-node cycle": (steps(("s1", ["s2"]), ("s2", ["s1"]), ("s3", ["s1"])), ["cycle", "s1", "s2"], ["s3"]),
    "three-node cycle": (
        steps(("s1", ["s3"]), ("s2", ["s1"]), ("s3", ["s2"]), ("s4", [])),
        ["cycle", "s1, s2, s3"],
        ["s4"],
    ),
    "self cycle": (steps(("s1", ["s1"]), ("s2", [])), ["cycle", "s1"], ["s2"]),
    "duplicate ids": (steps(("s1", []), ("s1", []), ("s2", [])), ["unique", "s1 (2 times)"], ["s2"]),
    "empty plan": ({"steps": []}, ["no steps"], []),
    "oversize plan": (steps(*[(f"s{i}", []) for i in range(1, 8)]), ["7 steps", "at most 6"], []),
    # a small model writes the call's own tool and schema names as tasks (issue 23, a 0.5B model)
    "own names": (
        {
            "steps": [
                {"id": "s1", "task": "submit_plandraft"},
                {"id": "s2", "task": "PlanDraft", "dependencies": ["s1"]},
                {"id": "s3", "task": "do s3"},
            ]
        },
        ["s1, s2", "'submit_plandraft'", "not what a step must do"],
        ["s3"],
    ),
    "only own names": (
        {"steps": [{"id": "s1", "task": "`submit_plandraft`"}, {"id": "s2", "task": "StepDraft."}]},
        ["s1, s2", "the plan's own tool or schema names"],
        [],
    ),
}


@pytest.mark.parametrize("case", list(BAD_PLANS))
async def test_unusable_plan_gets_one_reask_quoting_the_problem_then_the_good_plan(case: str) -> None:
    bad, quoted, not_named = BAD_PLANS[case]
    harness = Harness([bad, GOOD_PLAN])
    plan = await harness.planner.plan("goal")

    assert [step.id for step in plan.steps] == ["s1", "s2", "s3"]
    assert len(harness.requests) == 2
    reask = harness.last_user_message(1)
    assert reask.startswith("That plan cannot be used:")
    problem = reask.splitlines()[0]
    for text in quoted:
        assert text in problem
    for sid in not_named:
        assert sid not in problem
    # the model sees the plan it wrote before the complaint
    assistant = harness.requests[1].messages[-2]
    assert assistant["role"] == "assistant"
    written = [draft.model_dump() for draft in harness.planner.read(assistant["content"]).steps]
    assert written == [StepDraft.model_validate(s).model_dump() for s in bad["steps"]]
    assert "That plan cannot be used" not in harness.last_user_message(0)


REPAIRED: dict[str, tuple[list[tuple[str, list[str]]], list[str]]] = {
    # name: (the repaired plan's steps and dependencies, what the warnings say)
    "two-node cycle": (
        [("s1", []), ("s2", ["s1"]), ("s3", ["s1"])],
        ["Step s1 no longer waits for s2: the plan had steps waiting for each other in a loop."],
    ),
    "three-node cycle": (
        [("s1", []), ("s2", ["s1"]), ("s3", ["s2"]), ("s4", [])],
        ["Step s1 no longer waits for s3"],
    ),
    "self cycle": ([("s1", []), ("s2", [])], ["Step s1 no longer waits for s1"]),
    "duplicate ids": (
        [("s1", []), ("s1_2", []), ("s2", [])],
        ["The plan used the id s1 for two steps: the second is now s1_2."],
    ),
    "empty plan": ([("s1", [])], ["The planner gave no usable plan", "the goal runs as one step"]),
    "oversize plan": (
        [(f"s{i}", []) for i in range(1, 7)],
        ["The plan had 7 steps, more than the 6 allowed: the first 6 run and s7 is left out (plan_max_steps=7 "],
    ),
    "own names": (
        [("s3", [])],
        [
            "Steps s1, s2 were left out: their tasks ('submit_plandraft', 'PlanDraft') are only the name of the "
            "form the planner answers in, nothing to do."
        ],
    ),
    "only own names": ([("s1", [])], ["The planner gave no usable plan", "the goal runs as one step"]),
}


@pytest.mark.parametrize("case", list(BAD_PLANS))
async def test_a_plan_unusable_twice_is_repaired_with_warnings_not_refused(case: str) -> None:
    bad, quoted, _ = BAD_PLANS[case]
    harness = Harness([bad])  # the last reply repeats: the correction is as bad as the first attempt
    plan = await harness.planner.plan("goal text", goal="the goal")
    expected, said = REPAIRED[case]
    assert [(step.id, step.dependencies) for step in plan.steps] == expected
    assert len(harness.requests) == 2  # one correction asked for, then repaired without asking again
    warnings = " | ".join(harness.warnings)
    for text in said:
        assert text in warnings
    if case not in ("empty plan", "only own names"):
        assert quoted[0] in warnings  # the first warning names the problem that was repaired
    else:
        assert plan.steps[0].task == "the goal"
    plan.layers()  # a valid DAG


async def test_cycles_are_broken_by_dropping_dependencies_on_steps_listed_later() -> None:
    harness = Harness([steps(("a", ["c"]), ("b", ["a"]), ("c", ["b"]), ("d", ["c", "a"]), ("e", ["e", "d"]))])
    plan = await harness.planner.plan("goal")
    assert [(step.id, step.dependencies) for step in plan.steps] == [
        ("a", []),
        ("b", ["a"]),
        ("c", ["b"]),
        ("d", ["c", "a"]),
        ("e", ["d"]),
    ]
    assert plan.layers() == [["a"], ["b"], ["c"], ["d"], ["e"]]


async def test_a_cycle_is_named_in_the_correction_asked_for() -> None:
    harness = Harness([steps(("a", ["c"]), ("b", ["a"]), ("c", ["b"])), GOOD_PLAN])
    await harness.planner.plan("goal")
    assert "the steps a, b, c form a cycle (a needs c needs b needs a)" in harness.last_user_message(1)


async def test_an_unreadable_correction_repairs_the_first_attempt() -> None:
    harness = Harness([steps(("s1", ["s2"]), ("s2", ["s1"])), "no idea"], capabilities=())
    plan = await harness.planner.plan("goal")
    assert [(step.id, step.dependencies) for step in plan.steps] == [("s1", []), ("s2", ["s1"])]


@pytest.mark.parametrize(("level", "calls"), [("tool_call", 2), ("json_mode", 2), ("text", 2)])
async def test_garbage_at_every_level_becomes_one_step_the_goal(level: str, calls: int) -> None:
    harness = Harness(["I would rather not make a plan today."], capabilities=LEVELS[level])
    plan = await harness.planner.plan("Previous conversation: ...\n\nCurrent request: g", goal="the goal itself")
    assert [(step.id, step.task, step.dependencies) for step in plan.steps] == [("s1", "the goal itself", [])]
    assert len(harness.requests) == calls  # plan lines at every level: asked, then asked once more
    assert any("no readable plan" in warning for warning in harness.warnings)


async def test_a_fatal_provider_error_is_not_disguised_as_a_planning_error() -> None:
    harness = Harness([errors.AuthenticationError("invalid api key", model="m")])
    with pytest.raises(errors.AuthenticationError):
        await harness.planner.plan("goal")
    assert len(harness.requests) == 1


# --- validate_steps directly -----------------------------------------------------------------------------------


def drafts(*specs: tuple[str, list[str]]) -> list[StepDraft]:
    return [StepDraft(id=sid, task=f"do {sid}", dependencies=deps) for sid, deps in specs]


def test_validate_steps_returns_pending_plan_steps_and_no_problem() -> None:
    found, problem = validate_steps(drafts(("s1", []), ("s2", ["s1", "s1"])), max_steps=6)
    assert problem is None
    assert [(s.id, s.dependencies, s.status) for s in found] == [("s1", [], "pending"), ("s2", ["s1"], "pending")]


def test_validate_steps_drops_a_dangling_dependency_that_would_have_closed_a_cycle() -> None:
    warned: list[str] = []
    found, problem = validate_steps(drafts(("s1", ["s9"]), ("s2", ["s1"])), max_steps=6, warn=warned.append)
    assert problem is None
    assert found[0].dependencies == []
    assert warned == [
        "Step s1 was planned to wait for 's9', which is no step of the plan: it runs without waiting for it."
    ]


def test_validate_steps_problem_order_empty_then_size_then_duplicates() -> None:
    assert validate_steps([], max_steps=2)[1] == "the plan has no steps; a plan needs at least one step"
    oversize = drafts(("s1", []), ("s1", []), ("s2", []))
    assert "3 steps but at most 2" in str(validate_steps(oversize, max_steps=2)[1])
    assert "s1 (2 times)" in str(validate_steps(oversize, max_steps=3)[1])


async def test_step_ids_that_look_like_earlier_references_still_count_in_cycles() -> None:
    # seen with Qwen2.5-0.5B in round 2: steps named "r1.submit_plandraft" depending on each other in a loop;
    # validation missed the loop and the run failed later in ExecutionPlan.layers()
    looped = {
        "steps": [
            {"id": "r1.a", "task": "x", "dependencies": ["r2.a"]},
            {"id": "r2.a", "task": "y", "dependencies": ["r1.a"]},
        ]
    }
    harness = Harness([looped])
    plan = await harness.planner.plan("goal", round=2)
    # ids written like earlier results are the plan's own steps (r1_a), and so are their dependencies here
    assert [(s.id, s.dependencies) for s in plan.steps] == [("r1_a", []), ("r2_a", ["r1_a"])]
    assert "form a cycle" in harness.last_user_message(1)
    plan.layers()


async def test_a_long_list_of_dropped_dependencies_is_named_briefly() -> None:
    harness = Harness([{"steps": [{"id": "s1", "task": "x", "dependencies": list(range(3, 101))}]}])
    await harness.planner.plan("goal")
    (warning,) = harness.warnings
    assert "s1 for '12' and 88 more)" in warning and len(warning) < 240


def test_a_role_written_as_the_tool_hint_becomes_the_model_hint() -> None:
    # Qwen2.5-Coder-0.5B wrote {"tool_hint": "reasoning"} for both steps of a plan: the step was then told
    # "Suggested tool: reasoning", a tool that does not exist
    drafts = [
        StepDraft(id="s1", task="compare", tool_hint="reasoning"),
        StepDraft(id="s2", task="look up", tool_hint="fast", model_hint="reasoning"),
        StepDraft(id="s3", task="search", tool_hint="search"),
        StepDraft(id="s4", task="a tool named like a role", tool_hint="fast"),
    ]
    warnings: list[str] = []
    steps, problem = validate_steps(drafts[:3], max_steps=6, warn=warnings.append)
    assert problem is None
    assert [(s.tool_hint, s.model_hint) for s in steps] == [(None, "reasoning"), (None, "reasoning"), ("search", None)]
    assert warnings[0] == (
        "Step s1: the planner named 'reasoning' as its tool, but that is a model role, not a tool: the step runs on "
        "the reasoning model."
    )
    kept, _ = validate_steps(drafts[3:], max_steps=6, tools=["fast"])
    assert (kept[0].tool_hint, kept[0].model_hint) == ("fast", None)  # a real tool of that name stays a tool


# --- tool steps ------------------------------------------------------------------------------------------------


def _population(country: str, year: int = 2024) -> float:
    """The population of a country, in millions."""
    return 68.4


def _double(x: float) -> float:
    """Twice a number."""
    return 2 * x


TOOLS = [Tool(_population, name="population"), Tool(_double, name="double")]


def test_the_prompt_lists_each_tools_arguments_and_says_when_to_write_a_call() -> None:
    prompt = Harness([GOOD_PLAN], tools=TOOLS).planner.system_prompt()
    assert "population(country: string, year: integer = 2024) — The population of a country, in millions." in prompt
    assert "double(x: number) — Twice a number." in prompt
    assert '- a call of one tool, its name and its arguments with real values, as in double(x="...")' in prompt
    assert "A call looks up one value: three countries are three calls." in prompt
    assert "- a task in words, for an agent that has the tools: only for a step that needs judgement" in prompt
    # no example a small model could copy into its own plan, and no placeholder that looks like a value
    assert "<from the goal>" not in prompt and "name=value" not in prompt
    assert "population(country=" not in prompt and 'double(x="...")' in prompt  # a form, no value to copy
    assert "a call of calculate does it" not in prompt and "looked up by the tool" not in prompt  # no computing tool
    bare = Harness([GOOD_PLAN]).planner.system_prompt()
    assert "a call of one tool" not in bare and "Each step is a task in words, for an agent." in bare


def test_with_a_computing_tool_the_prompt_sends_figures_to_it() -> None:
    def calculate(expression: str) -> float:
        """Evaluate an arithmetic expression."""
        return 0.0

    prompt = Harness([GOOD_PLAN], tools=[*TOOLS, Tool(calculate)]).planner.system_prompt()
    assert "A figure is looked up by the tool that gives it." in prompt
    assert "When the goal compares, ranks, adds or otherwise computes with figures, a call of calculate does" in prompt
    assert "with the $ of the steps that give them" in prompt


def test_tool_args_are_read_from_the_shapes_models_write() -> None:
    steps = recover_steps(
        [
            {"id": "s1", "task": "a", "tool_hint": "double", "tool_args": {"x": 1}},
            {"id": "s2", "task": "b", "tool_hint": "double", "arguments": '{"x": "$s1"}'},
            {"id": "s3", "task": "c", "tool_hint": "double", "args": {"x": 2}},
            {"id": "s4", "task": "d", "tool_hint": "double", "tool_args": "x=2"},
            {"id": "s5", "task": "e", "tool_hint": "double", "tool_args": [1, 2]},
            {"id": "s6", "task": "f", "tool_args": None},
        ]
    )
    assert [s.tool_args for s in steps] == [{"x": 1}, {"x": "$s1"}, {"x": 2}, None, None, None]
    warned: list[str] = []
    validate_steps(steps, max_steps=6, warn=warned.append, tools=["double"])
    direct = "a model does the step instead of a direct call of the tool."
    assert (
        f"Step s4: the planner's arguments for double cannot be read ('x=2' is not an object of arguments): {direct}"
        in warned
    )
    assert (
        f"Step s5: the planner's arguments for double cannot be read ([1, 2] is not an object of arguments): {direct}"
        in warned
    )


def test_validation_adds_referenced_steps_to_the_dependencies_and_drops_tool_args_without_a_tool() -> None:
    warned: list[str] = []
    steps = [
        StepDraft(id="s1", task="a", tool_hint="population", tool_args={"country": "France"}),
        StepDraft(id="s2", task="b", tool_hint="double", tool_args={"x": "$s1"}),
        StepDraft(id="s3", task="c", tool_hint="double", tool_args={"x": "$r1.s4"}),
        StepDraft(id="s4", task="d", tool_hint="double", tool_args={"x": "$r1.s5 and $r1.s4"}),
        StepDraft(id="s5", task="e", tool_hint="search", tool_args={"q": "x"}),
        StepDraft(id="s6", task="f", tool_hint=None, tool_args={"q": "x"}),
        # a small model copies the prompt's example: "$s1" in a plan with no step s1 (and a step naming itself)
        StepDraft(id="s7", task="g", tool_hint="double", tool_args={"x": "$s9"}),
        StepDraft(id="s8", task="h", tool_hint="double", tool_args={"x": "$s8"}),
    ]
    found, problem = validate_steps(
        steps, max_steps=8, earlier=["r1.s4"], warn=warned.append, tools=["population", "double"]
    )
    assert problem is None
    assert [(s.id, s.dependencies, s.tool_args) for s in found] == [
        ("s1", [], {"country": "France"}),
        ("s2", ["s1"], {"x": "$s1"}),
        ("s3", ["r1.s4"], {"x": "$r1.s4"}),
        # an earlier round's step that did not complete: left in place, the direct call fails and the agent is
        # told which result is missing
        ("s4", ["r1.s4"], {"x": "$r1.s5 and $r1.s4"}),
        ("s5", [], None),
        ("s6", [], None),
        ("s7", [], None),  # no such step at all: the step runs as an agent from the start
        ("s8", [], None),
    ]
    direct = "a model does the step instead of a direct call of the tool."
    assert warned == [
        "Step s2 now waits for s1: its call of double uses $s1, the result of s1 (the plan had not said so).",
        "Step s3 now waits for r1.s4: its call of double uses $r1.s4, the result of r1.s4 (the plan had not said so).",
        "Step s4 now waits for r1.s4: its call of double uses $r1.s4, the result of r1.s4 (the plan had not said so).",
        "Step s4: its call of double uses $r1.s5, no result of an earlier round that can be reused: if the call "
        "fails, a model does the step instead.",
        f"Step s5: the planner wrote a call of 'search', which is not a tool of this session: {direct}",
        f'Step s6: the planner wrote arguments ({{"q": "x"}}) but no tool to call with them: {direct}',
        f'Step s7: the planner\'s call double(x="$s9") uses $s9, which names no other step of the plan: {direct}',
        f'Step s8: the planner\'s call double(x="$s8") uses $s8, which names no other step of the plan: {direct}',
    ]


async def test_a_dependency_added_for_a_reference_can_close_a_cycle_and_is_then_repaired() -> None:
    looped = {
        "steps": [
            {"id": "s1", "task": "a", "tool_hint": "double", "tool_args": {"x": "$s2"}},
            {"id": "s2", "task": "b", "dependencies": ["s1"]},
        ]
    }
    harness = Harness([looped, looped], tools=TOOLS)
    plan = await harness.planner.plan("goal")
    assert "form a cycle" in harness.last_user_message(1)
    # the repair drops the dependency on the later step: s1's call cannot resolve $s2, and its agent runs instead
    assert [(s.id, s.dependencies) for s in plan.steps] == [("s1", []), ("s2", ["s1"])]
    plan.layers()


@pytest.mark.parametrize(
    "task",
    [
        "Submit the plan draft to the committee",  # words, not the name
        "Call submit_report with the totals",  # a task that mentions a tool among other words
        "Verdict of the 2019 court case on the merger",
        "Find the population of Paris",
    ],
)
def test_a_task_that_only_mentions_such_a_name_is_a_task(task: str) -> None:
    steps_, problem = validate_steps([StepDraft(id="s1", task=task)], max_steps=6)
    assert problem is None and steps_[0].task == task


@pytest.mark.parametrize(
    "task", ["submit_plandraft", "PlanDraft", "submit_analysis", " `submit_verdict()` ", "Verdict"]
)
def test_a_task_that_is_only_such_a_name_is_a_problem(task: str) -> None:
    _, problem = validate_steps([StepDraft(id="s1", task=task), StepDraft(id="s2", task="do s2")], max_steps=6)
    assert problem is not None and "s1" in problem and "s2" not in problem


def _cut(content: str) -> ChatResponse:
    """A reply the provider cut at the request's token limit."""
    return ChatResponse(content=content, output_tokens=512, finish_reason="length")


async def test_a_reply_cut_at_its_token_limit_is_not_read_to_its_last_half_line() -> None:
    # Qwen2.5-Coder-0.5B wrote its instructions back until max_tokens cut it after "24. $N stands for": the
    # fragment matches no whole line of the instructions, so it was run as the plan's only step; and a call cut
    # in the middle would start with half its argument
    def echo_cut(request: ScriptedRequest) -> ChatResponse:
        system = str(request.messages[0]["content"]).splitlines()[2:]
        lines = [f"{number}. {line.strip()}" for number, line in enumerate(system, 1)]
        return _cut("\n".join(lines) + f"\n{len(lines) + 1}. $N stands for")

    harness = Harness(echo_cut, tools=TOOLS)
    plan = await harness.planner.plan("How long is the Nile?", goal="How long is the Nile?")
    assert [(step.id, step.task) for step in plan.steps] == [("s1", "How long is the Nile?")]
    assert harness.last_user_message(1).startswith("That plan cannot be used: it repeats the instructions")

    harness = Harness([_cut('1. population(country="France")\n2. population(country="Ger')], tools=TOOLS)
    plan = await harness.planner.plan("France or Germany?")
    assert [(step.id, step.tool_args) for step in plan.steps] == [("s1", {"country": "France"})]

    harness = Harness([ChatResponse(content='1. population(country="France")\n2. Say how many')], tools=TOOLS)
    plan = await harness.planner.plan("France?")  # not cut: the provider stopped there, so the line is whole
    assert [step.task for step in plan.steps][1] == "Say how many"


async def test_a_plan_that_writes_the_instructions_back_is_asked_again_then_planned_as_the_goal() -> None:
    # Qwen2.5-Coder-0.5B, asked for plan lines about the Nile, numbered the lines of its own prompt: the format's
    # description, "Tools:", the tool's description, "domain: natural sciences"; none of them is a step
    def echo(request: ScriptedRequest) -> str:
        system = str(request.messages[0]["content"]).splitlines()[2:]
        return "\n".join(f"{number}. {line.strip()}" for number, line in enumerate(system, 1)) + "\n9. domain: sciences"

    harness = Harness(echo, tools=TOOLS)
    plan = await harness.planner.plan("How long is the Nile?", goal="How long is the Nile?")
    assert [(step.id, step.task) for step in plan.steps] == [("s1", "How long is the Nile?")]
    assert len(harness.requests) == 2
    assert harness.last_user_message(1).startswith(
        "That plan cannot be used: it repeats the instructions instead of giving a plan"
    )
    assert any("no usable plan" in warning for warning in harness.warnings)


async def test_a_step_named_after_the_planners_form_gets_a_step_id_and_no_warning_calls_it_so() -> None:
    # issue 41: a small model named its step after the function it was asked to call, and the user read
    # "dropped dependencies on unknown steps: submit_plandraft -> city_area_km2", the form's name as a step
    reply = {
        "steps": [
            {"id": "submit_plandraft", "task": "Find the area of Paris", "dependencies": ["city_area_km2"]},
            {"id": "s2", "task": "Divide the population by $submit_plandraft", "dependencies": ["submit_plandraft"]},
        ]
    }
    harness = Harness([reply])
    plan = await harness.planner.plan("goal")
    assert [(step.id, step.dependencies) for step in plan.steps] == [("s1", []), ("s2", ["s1"])]
    assert not any("submit_plandraft" in warning for warning in harness.warnings)
    assert harness.warnings == [
        "Step s1 was planned to wait for 'city_area_km2', which is no step of the plan: it runs without waiting for it."
    ]
    lines = await Harness(
        ["submit_plandraft. Find the area of Paris\n2. Divide 2.1 by $submit_plandraft\n"]
    ).planner.plan("goal")
    assert [(step.id, step.dependencies) for step in lines.steps] == [("s1", []), ("s2", ["s1"])]


@pytest.mark.parametrize(
    ("fewest", "most", "said"),
    [(1, 1, "Use one step."), (3, 3, "Use 3 steps."), (1, 6, "Use at most 6 steps."), (2, 6, "Use 2 to 6 steps.")],
)
def test_the_step_range_is_said_so_a_small_model_cannot_misread_it(fewest: int, most: int, said: str) -> None:
    """Asked to "Use 1 to 1 steps", Qwen2.5-Coder 0.5B answered "1", three times."""
    settings = DagSettings(plan_min_steps=fewest, plan_max_steps=most)
    prompt = Harness([GOOD_PLAN], settings=settings).planner.system_prompt()
    assert said in prompt and "1 to 1" not in prompt
