"""Every prompt the goal loop sends, in one place, so they can be read and tuned together."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dagmagic.engine.tools.functions import Tool

__all__ = [
    "ANALYZER_CHECK",
    "ANALYZER_REASK",
    "ANALYZER_SYSTEM",
    "ANALYZER_UNREAD",
    "ARGUMENT_PLACEHOLDER",
    "COMPACTION_SYSTEM",
    "HISTORY_SUMMARY_SYSTEM",
    "PLANNER_SYSTEM",
    "STEP_SYSTEM",
    "SYNTHESIS_PARTIAL",
    "SYNTHESIS_SYSTEM",
    "SYNTHESIS_UNREACHED",
]

PLANNER_SYSTEM = """\
Plan how to reach the user's goal. Today is {today}.
Answer with numbered lines, one step a line, and nothing else.
{formats}
Where a step needs what an earlier step gives, write $ and that step's number in its place ($2 is step 2's
result): the step then waits for that step. Steps that need no other step's result run at once.{compute}
The answer to the goal is written from all the results once the steps are done: write no step that only
restates, compares or sums up results in words. {step_range} Write tasks in the goal's language.\
{hints}{tools}{domain}"""

PLANNER_FORMATS_TOOLS = """\
A step is one of:
- a call of one tool, its name and its arguments with real values, as in {example}: it runs without a model.
  A call looks up one value: three countries are three calls.
- a task in words, for an agent that has the tools: only for a step that needs judgement, several calls, or to
  read a result before choosing what to do."""
PLANNER_FORMATS_TASKS = "Each step is a task in words, for an agent."
PLANNER_COMPUTE = (
    "\nA figure is looked up by the tool that gives it. When the goal compares, ranks, adds or otherwise computes "
    "with figures, a call of {tools} does it, with the $ of the steps that give them: an agent's or the answer's "
    "own arithmetic is not trusted."
)
PLANNER_HINTS = "\nAfter a task in words, optional hints in brackets: {hints}."
PLANNER_HINT_TOOL = "the tool it should use"
PLANNER_HINT_ROLES = "fast (a simple step) or reasoning (careful analysis){others}"
PLANNER_ROLES = ", or a role: {names}"
PLANNER_SUBPLAN = "subplan for a step too big for one agent (it is planned and run as a plan of its own; rarely)"
PLANNER_TOOL_LIST = "\nTools:{lines}"
SUBRUN_GOAL = "{task}\n\nThis is one step of a larger goal: {goal}"
PLANNER_DOMAIN = (
    "\nThis goal is in the {domain} domain: precision matters. Hint reasoning for every step that states facts, "
    "figures or citations the answer depends on."
)
PLANNER_DOMAIN_ASK = (
    '\nWhen the goal needs legal, medical or financial expertise, first write "domain: " and that domain, and hint '
    "reasoning for every step that states facts, figures or citations the answer depends on."
)

PLANNER_REPLAN = """\
This is round {round}. Earlier rounds did not reach the goal. What happened:

{context}

Make a new plan that fixes what went wrong.{reusable}"""

PLANNER_REUSE = (
    "\nResults that completed can be used again without running them: write {names} where a step needs that result."
)

PLANNER_REASK = """\
That plan cannot be used: {problem}
Return a corrected plan in the same format."""

STEP_SYSTEM = """\
You carry out one step of a larger plan. Do exactly your task and answer with its result: facts, figures
and sources, stated plainly. Do not answer the whole goal, do not describe what you would do."""

STEP_USER = """\
Original goal: {goal}

Your task ({step_id}): {task}{tool_hint}{context}"""

ANALYZER_SYSTEM = """\
Judge whether the step results below reach the user's goal, and if they do, answer it.
First line: yes or no (reached or not) and your confidence from 0 to 1, e.g. "yes 0.9". When not reached, add a
colon and what is missing. When steps disagree (numbers, dates, claims), say so on that line, say which source
is more reliable, and lower your confidence.
When reached, the next lines are the answer itself, as the user reads it, not your judgement of the results:
complete (every part of the goal, with the figures the results give), direct (never "based on the results", "the
step results" or similar), in the goal's language, in Markdown where it helps (lists, tables); where sources
disagree, say so and which is more reliable."""

ANALYZER_USER = """\
Goal: {goal}

Step results:
{results}"""

ANALYZER_PARTIAL = (
    "\n\nThese results are partial: {unfinished} of {total} steps did not complete (they failed, or were "
    "skipped). Judge only what the completed steps establish, and name what is missing."
)

SYNTHESIS_SYSTEM = """\
Write the final answer to the user's goal from the step results below.
- Answer directly. No meta-commentary: never write "based on the results", "the steps show" or similar.
- Write in the same language as the goal.
- Where sources disagree, say so and say which is more reliable.
- Use Markdown where it helps (lists, tables)."""

SYNTHESIS_USER = """\
Goal: {goal}

What the analysis concluded: {reasoning}

Step results:
{results}"""

SYNTHESIS_PARTIAL = """

The run was stopped before it finished: answer from these results only. Begin with one sentence saying
that the answer is partial and what is still missing, then give what the results do establish."""

SYNTHESIS_UNREACHED = """

The goal was not reached: these results do not answer all of it. The reader is already told so, with what is
missing, just above your answer. Write only what these results do establish toward the goal, with their
figures; do not repeat these instructions."""

ANALYZER_REASK = """\
That verdict cannot be used: it says the goal was reached, but its reasoning says '{said}'.
Judge again from the same results: say yes or no as they establish, and make the reasoning agree."""

ANALYZER_CHECK = """\
That answer does not check against the step results:
{problems}
Judge again, only from the step results: the answer gives what they found, every figure of it must be one a
step result gives (or a tool computed), and every comparison or ranking must follow those figures. When the goal
needs a figure that must be computed (a sum, a difference, a ranking of large numbers) and no step computed it,
say no, and name the missing step: that calculation, done with a tool."""

ANALYZER_UNREAD = """\
That verdict cannot be read. Begin with a line that says yes or no and your confidence (e.g. "yes 0.9"), then,
when the goal is reached, the answer on the next lines."""

HISTORY_SUMMARY_SYSTEM = """\
Summarize this conversation so a planner can continue it, in at most {tokens} tokens: keep every fact, number,
name, decision and open question; drop pleasantries. Write in the conversation's language. When it starts with a
summary of the conversation so far, write that summary again with the exchanges since added to it."""

COMPACTION_SYSTEM = """\
Shorten the following text to at most {tokens} tokens for the task: "{task}". Keep every fact, figure,
name, citation and table row the task needs; drop the rest."""


def tool_line(tool: Tool, description_chars: int = 160) -> str:
    """A tool as the planner reads it: ``name(arg: type, arg: type = default) — description``."""
    schema = tool.parameters
    required = set(schema.get("required", ()))
    arguments = []
    for name, field in schema.get("properties", {}).items():
        default = "" if name in required else f" = {json.dumps(field.get('default'), default=str)}"
        arguments.append(f"{name}: {_json_type(field)}{default}")
    description = " ".join(tool.description.split())
    if len(description) > description_chars:
        description = description[: description_chars - 3].rstrip() + "..."
    return f"{tool.name}({', '.join(arguments)}) — {description}"


def _json_type(schema: dict[str, Any]) -> str:
    if "enum" in schema:
        return " | ".join(json.dumps(value) for value in schema["enum"])
    if "anyOf" in schema:
        return " | ".join(dict.fromkeys(_json_type(option) for option in schema["anyOf"]))
    if "$ref" in schema:
        return "object"
    kind = schema.get("type", "any")
    if kind == "array":
        return f"{_json_type(schema.get('items', {}))}[]"
    return " | ".join(kind) if isinstance(kind, list) else str(kind)


ARGUMENT_PLACEHOLDER = "<from the goal>"
"""Where the planner's example of ``tool_args`` puts a value taken from the goal (a plan that still holds it
copied the example: its arguments are not run)."""
