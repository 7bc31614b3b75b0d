"""Every prompt the goal loop sends, in one place, so they can be read and tuned together."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dagmagic.engine.tools.functions import Tool

__all__ = [
    "ANALYZER_REASK",
    "ANALYZER_SYSTEM",
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
You are the planner of an autonomous agent. Break the user's goal into a small DAG of concrete steps.
Today is {today} (the year is {year}); plan searches and facts with that date in mind.

Rules:
- Write every step's task in the same language as the goal.
- Use between {min_steps} and {max_steps} steps. Fewer, larger steps are better than many tiny ones:
  if several checks fit in one script or one lookup, make them ONE step.
- Each step is self-contained: it sees the original goal, its own task and the results of the steps it
  depends on, nothing else. Name every step whose result it needs in `dependencies`.
- Steps without dependencies between them run in parallel; only add a dependency when the result is needed.
- `id`: short unique ids such as "s1", "s2".
- `tool_hint`: the tool the step should use, or null.{tools}{tool_args}
- `model_hint`: "fast" for simple, mechanical steps (a lookup, a format conversion), "reasoning" for steps
  that need careful analysis, or null for everything else (the default, capable model). When unsure, null.{roles}
{domain}"""

PLANNER_TOOLS = "\n  Available tools: {names}."
PLANNER_TOOL_LIST = "\n  Available tools:{lines}"
PLANNER_TOOL_ARGS = """
- `tool_args`: null, except when the step's whole task is ONE call of its tool_hint tool and every argument
  is known from the goal or from its dependencies' results: then the arguments as an object, "$s1" standing
  for the result of step s1 (list s1 in `dependencies`). Such a step runs at once, without a model. Keep
  null when the step needs judgement, several calls, or must read a result to choose what to do.
  Example steps: {example}"""
PLANNER_ROLES = "\n  Other roles available as model_hint: {names}."
PLANNER_SUBPLAN = (
    '\n  `"subplan"`: for a step too big for one agent (several lookups and a conclusion of its own): it is '
    "planned and run as a small DAG of its own, and its answer becomes the step's result. Use it rarely."
)
SUBRUN_GOAL = "{task}\n\nThis is one step of a larger goal: {goal}"
PLANNER_DOMAIN = (
    '\nThis goal is in the {domain} domain: precision matters. Use model_hint "reasoning" for every step '
    "that states facts, figures or citations the answer depends on."
)
PLANNER_DOMAIN_ASK = (
    '\n`domain`: "legal", "medical" or "financial" when answering the goal needs that expertise, else null. '
    'When you set it, use model_hint "reasoning" for every step that states facts, figures or citations the '
    "answer depends on."
)

PLANNER_REPLAN = """\
This is round {round}. Earlier rounds did not reach the goal. What happened:

{context}

Make a new plan that fixes what went wrong. Completed results of earlier rounds can be reused without
running them again: depend on them as "rN.id" (for example "r1.s2").{reusable}"""

PLANNER_REASK = """\
That plan cannot be used: {problem}
Return a corrected plan with the same format."""

STEP_SYSTEM = """\
You carry out one step of a larger plan. Do exactly your task and answer with its result: facts, figures
and sources, stated plainly. Do not answer the whole goal, do not describe what you would do."""

STEP_USER = """\
Original goal: {goal}

Your task ({step_id}): {task}{tool_hint}{context}"""

ANALYZER_SYSTEM = """\
You judge whether an agent reached the user's goal, from the results of the steps it ran.
- `achieved`: true only if the results fully answer the goal.
- `confidence`: 0.0 to 1.0, how sure you are of your verdict.
- Compare the sources: when steps disagree (numbers, dates, claims), name the contradiction, say which
  source is more reliable, and lower your confidence.
- `final_answer`: when the goal is reached, THE answer the user reads, written for them from the results,
  complete (it answers every part of the goal, with the figures the results give): answer directly, with no
  meta-commentary (never "based on the results", "the steps show" or similar);
  write in the same language as the goal; where sources disagree, say so and say which is more reliable;
  use Markdown where it helps (lists, tables). When the goal is not reached: null.
- `reasoning`: why, in a few sentences; name what is missing when the goal is not reached."""

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
That verdict cannot be used: it says the goal was achieved, but its reasoning says '{said}'.
Judge again from the same results: set `achieved` to what they establish, and make the reasoning agree."""

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


def planner_tool_args(tools: Sequence[Tool]) -> str:
    """When to write ``tool_args``, with an example of two steps on one of the session's own tools: an argument
    from the goal, then one from a dependency's result (an example of the second alone was copied as is by a
    small model, into a plan with no s1).
    """
    tool = next((t for t in tools if t.parameters.get("properties")), tools[0])
    properties = tool.parameters.get("properties", {})
    required = [name for name in properties if name in tool.parameters.get("required", ())]
    argument = (required or list(properties) or [None])[0]
    first = {
        "id": "s1",
        "task": f"Call {tool.name} for what the goal names",
        "tool_hint": tool.name,
        "tool_args": {argument: ARGUMENT_PLACEHOLDER} if argument else {},
    }
    second = {
        "id": "s2",
        "task": f"Call {tool.name} with the result of s1",
        "dependencies": ["s1"],
        "tool_hint": tool.name,
        "tool_args": {argument: "$s1"} if argument else {},
    }
    example = f"{json.dumps(first, ensure_ascii=False)}, {json.dumps(second, ensure_ascii=False)}"
    return PLANNER_TOOL_ARGS.format(example=example)
