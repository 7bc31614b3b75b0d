"""Plan lines: what the planner asks for and reads, and how a scripted plan is written in them."""

from __future__ import annotations

from typing import Any

import pytest

from dagmagic.engine.calls.plan_lines import read_plan_lines, render_plan_lines

TOOLS = {"search": ["query"], "math": ["expression"], "compare": ["a", "b"]}


def steps(text: str, **kw: Any) -> list[dict[str, Any]]:
    plan = read_plan_lines(text, TOOLS, **kw)
    assert plan is not None
    return list(plan["steps"])


def test_a_call_is_a_tool_step_whose_references_are_its_dependencies() -> None:
    read = steps(
        '1. search(query="population of Norway")\n2. search("population of Sweden")\n3. math(expression="$1 + $2")'
    )
    assert [(s["id"], s["tool_hint"], s["tool_args"], s["dependencies"]) for s in read] == [
        ("s1", "search", {"query": "population of Norway"}, []),
        ("s2", "search", {"query": "population of Sweden"}, []),  # positional: the tool's first parameter
        ("s3", "math", {"expression": "$s1 + $s2"}, ["s1", "s2"]),
    ]
    assert read[2]["task"] == 'math(expression="$s1 + $s2")'  # a call's task is the call itself


def test_a_task_in_words_gets_its_hints_and_dependencies_from_brackets_and_references() -> None:
    read = steps(
        '1. search(query="x")\n2. Summarize what $1 says about the law [search, reasoning, $1]\n3. Judge [fast]'
    )
    assert read[1] == {
        "id": "s2",
        "task": "Summarize what $s1 says about the law",
        "tool_hint": "search",
        "model_hint": "reasoning",
        "dependencies": ["s1"],
    }
    assert read[2] == {"id": "s3", "task": "Judge", "model_hint": "fast", "dependencies": []}


def test_money_is_not_a_reference_and_a_bare_reference_in_arguments_always_is() -> None:
    read = steps('1. search(query="a $5 coffee or $1,000?")\n2. compare(a=$1, b=$3)\n3. Convert $5.50 for $1')
    assert read[0]["tool_args"] == {"query": "a $5 coffee or $1,000?"} and read[0]["dependencies"] == []
    assert read[1]["tool_args"] == {"a": "$s1", "b": "$s3"}  # a forward reference: the validation names it
    assert read[1]["dependencies"] == ["s1"]
    assert read[2]["task"] == "Convert $5.50 for $s1" and read[2]["dependencies"] == ["s1"]


def test_what_is_not_a_step_is_skipped_and_the_domain_is_read() -> None:
    text = 'domain: Legal\nHere is the plan:\n```\n1. search(query="x")\n2. join()\n<END_OF_PLAN>\n```\nThought: done'
    plan = read_plan_lines(text, TOOLS)
    assert plan is not None and plan["domain"] == "legal" and [s["id"] for s in plan["steps"]] == ["s1"]
    assert read_plan_lines("I would rather chat.", TOOLS) is None
    assert read_plan_lines('{"steps": [{"id": "s1", "task": "a"}]}', TOOLS) is None  # JSON: read as JSON


def test_json_literals_and_nested_values_are_arguments() -> None:
    (read,) = steps('1. search(query="x", exact=true, limit=-3, tags=["a", {"b": null}])')
    assert read["tool_args"] == {"query": "x", "exact": True, "limit": -3, "tags": ["a", {"b": None}]}


def test_a_line_that_is_not_a_readable_call_is_a_task() -> None:
    (read,) = steps("1. search(query=os.system('rm'))")
    assert "tool_args" not in read and read["task"] == "search(query=os.system('rm'))"


WELL_FORMED = [
    {"id": "s1", "task": "Search: Norway", "tool_hint": "search", "tool_args": {"query": "Norway"}},
    {"id": "s2", "tool_hint": "math", "tool_args": {"expression": "$s1 * 2"}, "dependencies": ["s1"]},
    {"id": "fetch", "task": "Compare the two", "dependencies": ["s2", "s1"], "model_hint": "fast"},
    {"id": "s4", "task": "Use $fetch", "dependencies": ["fetch"], "tool_hint": "search"},
    {"id": "s5", "task": "Later", "dependencies": ["s9"]},
]


def test_a_scripted_plan_reads_back_as_it_was_written() -> None:
    text = render_plan_lines({"domain": "medical", "steps": WELL_FORMED})
    assert text is not None and text.splitlines()[0] == "domain: medical"
    plan = read_plan_lines(text, TOOLS)
    assert plan is not None and plan["domain"] == "medical"
    for written, read in zip(WELL_FORMED, plan["steps"], strict=True):
        assert read["id"] == written["id"]
        assert read["dependencies"] == written.get("dependencies", [])
        assert read.get("tool_args") == written.get("tool_args")
        assert read.get("tool_hint") == written.get("tool_hint") and read.get("model_hint") == written.get("model_hint")
        if "task" in written:
            assert read["task"] == written["task"]
    assert text.splitlines()[1] == '1. search(query="Norway")  # Search: Norway'  # a task, as a note


@pytest.mark.parametrize(
    "plan",
    [
        {"steps": "not a list"},
        {"steps": [{"id": 1, "task": "integer id"}]},
        {"steps": [{"id": "s1", "description": "another key"}]},
        {"steps": [{"id": "s1", "task": "a", "dependencies": "s2"}]},
        {"steps": [{"id": "s1", "task": "two\nlines"}]},
        {"steps": [{"id": "s1", "task": "a"}], "note": "an extra key"},
        {"steps": []},
    ],
)
def test_a_malformed_scripted_plan_is_not_written_as_lines(plan: Any) -> None:
    assert render_plan_lines(plan) is None  # it keeps its JSON: the recovery of what models write is tested on it


def test_calls_written_as_a_small_model_writes_them_are_calls() -> None:
    # Qwen2.5-Coder-0.5B copied the tool list's "city_population(city: string)" into its calls, left the city
    # unquoted and said what the step does after a dash
    tools = {"city_population": ["city"], "is_prime": ["n"]}
    plan = read_plan_lines(
        '1. city_population(city: Paris) - The population of Paris\n2. city_population(city: "Berlin")\n'
        "3. is_prime(101)",
        tools,
    )
    assert plan is not None
    assert [(s["tool_hint"], s["tool_args"], s["task"]) for s in plan["steps"]] == [
        ("city_population", {"city": "Paris"}, "The population of Paris"),
        ("city_population", {"city": "Berlin"}, 'city_population(city: "Berlin")'),
        ("is_prime", {"n": 101}, "is_prime(101)"),
    ]


def test_lines_that_repeat_the_instructions_are_no_steps() -> None:
    prompt = "Write the plan as numbered lines.\nTools:\n  lookup(city: string) — The population of a city."
    plan = read_plan_lines(
        "1. Write the plan as numbered lines.\n2. Tools:\n3. lookup(city: string) — The population of a city.", {}
    )
    assert plan is not None and len(plan["steps"]) == 3  # without the instructions, nothing tells them apart
    from dagmagic.engine.calls.plan_lines import LineReader

    reader = LineReader({"lookup": ["city"]}, prompt=prompt)
    lines = ["1. Write the plan as numbered lines.", "2. tools:", "3. lookup(city: string) — the population of a city."]
    assert [reader.read(line) for line in lines] == [None, None, None] and reader.echoes == 3
    assert reader.read("4. lookup(city: Paris)") is not None


def test_a_short_task_found_inside_the_instructions_is_still_a_task() -> None:
    from dagmagic.engine.calls.plan_lines import LineReader

    reader = LineReader({"blocking": []}, prompt="Tools:\n  blocking() — Sleeps in a plain function.")
    assert reader.read("1. block") == {"id": "s1", "task": "block", "dependencies": []}  # "block" is in "blocking"
    assert reader.read("2. Sleeps in a plain function.") is None  # a whole line of the instructions


# --- what Qwen2.5-Coder 1.5B writes instead of a call (issue 42) --------------------------------------------------


def test_a_call_in_backticks_or_after_a_colon_in_a_task_is_that_call_with_the_words_as_its_description() -> None:
    read = steps(
        "1. Get the population of Norway: `search(Norway)`\n"
        "2. Get the population of Sweden: search(Sweden)\n"
        "3. Write `reverse(s)` in Python"
    )
    assert [(s["task"], s.get("tool_hint"), s.get("tool_args")) for s in read] == [
        ("Get the population of Norway", "search", {"query": "Norway"}),
        ("Get the population of Sweden", "search", {"query": "Sweden"}),
        ("Write `reverse(s)` in Python", None, None),  # no tool of the session: a task in words
    ]


def test_an_unquoted_expression_is_its_text_and_a_call_an_earlier_step_makes_is_its_result() -> None:
    read = steps(
        "1. search(Norway)\n2. search(Sweden)\n"
        "3. Compare them: `math(search(Norway) > search(Sweden))`\n"
        "4. math($1 + $2 * 2)\n"
        "5. math(search(Denmark) - 1)"
    )
    assert [(s.get("tool_args"), s["dependencies"]) for s in read[2:]] == [
        ({"expression": "$s1 > $s2"}, ["s1", "s2"]),
        ({"expression": "$s1 + $s2 * 2"}, ["s1", "s2"]),
        (None, []),  # a call no step makes: not guessed, the line is a task in words
    ]


def test_the_replan_context_written_back_is_no_step() -> None:
    plan = read_plan_lines(
        "1. $r1.s2 (completed): Calculate the population of Norway\n   Result: 5 million\n2. search(Sweden)", TOOLS
    )
    assert plan is not None and [s["task"] for s in plan["steps"]] == ["search(Sweden)"]


def test_a_computing_call_given_only_a_lookup_is_the_lookup_and_a_stated_result_is_no_step() -> None:
    """The 1.5B, told figures are computed by the calculator, wrote a lookup wrapped in it (in double quotes, in a
    task) and invented its result as a second step.
    """
    plan = read_plan_lines(
        "1. Find the population of Norway using the formula: \"math(search('Norway'))\".\n"
        "2. The result is 3,000,000.\n"
        "3. math(search(Sweden))\n"
        "4. math($1 * 2)",
        TOOLS,
        computing=["math"],
    )
    assert plan is not None
    assert [(s["id"], s["task"], s.get("tool_hint"), s.get("tool_args")) for s in plan["steps"]] == [
        ("s1", "Find the population of Norway using the formula", "search", {"query": "Norway"}),
        ("s3", "search(Sweden)", "search", {"query": "Sweden"}),
        ("s4", "math($s1 * 2)", "math", {"expression": "$s1 * 2"}),
    ]


def test_a_line_that_states_a_figure_is_no_step() -> None:
    """Asked for two steps where one lookup did, the 1.5B added "The population of Dorvania is 300,000." as a step:
    an invented result, which the verdict then weighed against the looked-up one.
    """
    plan = read_plan_lines(
        "1. search(Norway)\n2. The population of Norway is 300,000.\n3. Check whether the total is 300,000", TOOLS
    )
    assert plan is not None and [s["id"] for s in plan["steps"]] == ["s1", "s3"]


def test_a_tool_named_in_other_capitals_is_that_tool() -> None:
    """The 1.5B wrote ``Calculate(capital("Kelmora"))``: a lookup, wrapped in the calculator, capitalised."""
    plan = read_plan_lines('1. Math(search("Norway"))\n2. Search(Sweden)', TOOLS, computing=["math"])
    assert plan is not None
    assert [(s.get("tool_hint"), s.get("tool_args")) for s in plan["steps"]] == [
        ("search", {"query": "Norway"}),
        ("search", {"query": "Sweden"}),
    ]
