"""What small models copy into a plan instead of planning: found, for one re-ask, then repaired.

Measured on Qwen2.5-Coder 0.5B and 1.5B, a plan copies from its request:

- a tool's result fed to the same lookup tool: ``2. population(country=$1)`` after ``1. population(country=...)``
  (a number is no country; the direct call fails and its agent echoes the number);
- a step named after a tool (``population. ...``): an id that names what the user's tool is, not a step;
- a placeholder as an argument: ``<value>``, ``...``, ``$N``, a type from the tool list (``string``);
- an example of a tool's docstring as the arguments (``Examples: >>> population("Atlantis")``) where the goal
  says nothing of it;
- a computing tool given one result and nothing to compute (``calculate($1)``, where a lookup was meant).

``CopyCheck.problem`` names them (the planner re-asks once with the reason); ``CopyCheck.repair`` makes the best
of what is still there, each change a warning in the user's terms: a copied call runs as its agent's task
instead, a step named after a tool is renumbered. A computing tool (``Tool.computes``) is exempt from the
same-tool rule: ``calculate(expression="$1 * 2")`` after a ``calculate`` is a real chain.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dagmagic.engine.calls import prompts
from dagmagic.engine.calls.plan_drafts import StepDraft, names_itself
from dagmagic.engine.tools.functions import Tool

__all__ = ["CopyCheck"]

_PLACEHOLDER = re.compile(
    r"<[^<>]*>|\.\.\.|…|\$[Nn]|\$\{?\w*\}?|(?:string|str|integer|int|number|float|boolean|bool|value)(?:\[\])?",
    re.IGNORECASE,
)
"""A whole argument that only holds the place of one: ``<city>``, ``...``, ``$N``, ``string`` (a type of the tool
list), ``value``. A reference to a step (``$s1``, ``$2``) is matched by ``\\$\\w+`` too: ``_placeholders`` lets
references through.
"""
_WRITE_UP = re.compile(
    r"\s*(?:compare|summari[sz]e|combine|restate|report|present|display|print|output|return)\b"
    r"|\s*(?:write|give|state|list|show)\s+(?:down\s+|out\s+|up\s+)?(?:the\s+|a\s+|an\s+|all\s+)?(?:final\s+)?"
    r"(?:results?|answers?|summary|report)\b",
    re.IGNORECASE,
)
"""A task in words that only writes up, compares or restates results."""
_REFERENCE = re.compile(r"\$(?:s?\d+|r\d+\.\w+|[A-Za-z_]\w*)")
_EXAMPLE_LINE = re.compile(r"^\s*(?:>>>|\.\.\.\s|e\.g\.|for example|example)", re.IGNORECASE)
_EXAMPLE_HEADING = re.compile(r"^\s*examples?\s*:?\s*$", re.IGNORECASE)
_EXAMPLE_INLINE = re.compile(r"(?:e\.g\.|for example|for instance|such as)[,:]?\s*([^.;\n]*)", re.IGNORECASE)


@dataclass(frozen=True)
class CopyCheck:
    """The copies a plan for ``goal`` may hold, for these tools (described, with docstrings) and tool names."""

    goal: str
    tools: Mapping[str, Tool]
    tool_names: frozenset[str]

    @classmethod
    def of(cls, goal: str, tools: Sequence[Tool], tool_names: Iterable[str]) -> CopyCheck:
        """A check for ``goal``'s plans with these tools."""
        return cls(goal, {tool.name: tool for tool in tools}, frozenset(tool_names) | {tool.name for tool in tools})

    def write_ups(self, drafts: Sequence[StepDraft]) -> list[StepDraft]:
        """The steps in words that only write up, compare or restate results ("write the result", "Compare the two
        capitals: ..."), in a plan that looks things up with tools: the answer does that from every result, and
        such a step's agent, given nothing to do, invented figures the verdict then weighed ("4008 years").
        """
        if not any(draft.tool_args is not None for draft in drafts):
            return []
        return [draft for draft in drafts if draft.tool_args is None and _WRITE_UP.match(draft.task)]

    def without_write_ups(self, drafts: list[StepDraft], warn: Callable[[str], None]) -> list[StepDraft]:
        """``drafts`` without their write-ups (``write_ups``), each left out with a warning."""
        dropped = self.write_ups(drafts)
        for draft in dropped:
            warn(
                f"Step {draft.id} ({draft.task.strip()[:80]!r}) only writes up or compares results: the answer does "
                "that from every result, so it was left out."
            )
        return [draft for draft in drafts if draft not in dropped]

    def problem(self, drafts: Sequence[StepDraft]) -> str | None:
        """What the plan copied, said for the planner (None when it copied nothing)."""
        found = [why for draft in drafts if (why := self.step_problem(draft, drafts)) is not None]
        return "; ".join(found) if found else None

    def step_problem(self, draft: StepDraft, drafts: Sequence[StepDraft]) -> str | None:
        """What one step copied (``drafts``: the plan's steps so far, for the same-tool rule); None if nothing."""
        label = _label(draft.id)
        if draft.id in self.tool_names or names_itself(draft.id):
            return f"step {label!r} is named after a tool; number the steps 1, 2, 3"
        if draft.tool_args is None or draft.tool_hint not in self.tool_names:
            return None
        tool = draft.tool_hint
        placeholders = _placeholders(draft.tool_args)
        if placeholders:
            return (
                f"step {label} calls {tool} with {', '.join(placeholders)}, which only holds the place of a value; "
                "write the real value from the goal"
            )
        examples = self._examples(draft)
        if examples:
            return (
                f"step {label} calls {tool} with {', '.join(examples)}, an example of the tool's description that "
                "the goal does not ask about; write the values the goal needs"
            )
        chained = self._same_tool(draft, drafts)
        if chained is not None:
            return (
                f"step {label} gives {tool} the result of step {_label(chained)}, which is itself a {tool} result, "
                f"not what {tool} looks up; write each {tool} call with its own value from the goal"
            )
        idle = self._computes_nothing(draft)
        if idle is not None:
            return (
                f"step {label} gives {tool} only {idle}, with nothing to compute; call the tool that gives what the "
                "goal asks for"
            )
        return None

    def _computes_nothing(self, draft: StepDraft) -> str | None:
        """The one result a computing tool's call is given and nothing to do with it (``calculate($1)``)."""
        tool = self.tools.get(draft.tool_hint or "")
        if tool is None or not tool.computes or not draft.tool_args:
            return None
        values = [value.strip() for value in draft.tool_args.values() if isinstance(value, str)]
        if len(values) != len(draft.tool_args) or not all(_REFERENCE.fullmatch(value) for value in values):
            return None
        return " and ".join(dict.fromkeys(values))

    def repair(self, drafts: list[StepDraft], warn: Callable[[str], None]) -> list[StepDraft]:
        """The plan with each copy made harmless: a copied call runs as its agent's task (not called as written, no
        longer waiting for the step it wrongly used), a step named after a tool gets a number; each a warning.
        """
        taken = {draft.id for draft in drafts}
        renamed: dict[str, str] = {}
        repaired: list[StepDraft] = []
        for position, draft in enumerate(drafts, 1):
            why = self.step_problem(draft, repaired)
            if why is None:
                repaired.append(draft)
                continue
            if draft.id in self.tool_names or names_itself(draft.id):
                new_id = _free(f"s{position}", taken)
                taken.add(new_id)
                renamed[draft.id] = new_id
                warn(f"The planner named a step {draft.id!r}, a tool's name: it is step {new_id}.")
                repaired.append(draft.model_copy(update={"id": new_id}))
                continue
            chained = self._same_tool(draft, repaired)
            dependencies = [dep for dep in draft.dependencies if dep != chained]
            warn(
                f"Step {draft.id}: the planner's call {draft.task!r} was copied, not planned ({why}): "
                "a model does the step instead."
            )
            repaired.append(draft.model_copy(update={"tool_args": None, "dependencies": dependencies}))
        if not renamed:
            return repaired
        return [
            draft.model_copy(update={"dependencies": [renamed.get(dep, dep) for dep in draft.dependencies]})
            for draft in repaired
        ]

    def _examples(self, draft: StepDraft) -> list[str]:
        """The arguments that are examples of the tool's docstring the goal does not mention."""
        tool = self.tools.get(draft.tool_hint or "")
        if tool is None or draft.tool_args is None:
            return []
        examples = _docstring_examples(tool)
        goal = self.goal.lower()
        copied = []
        for value in draft.tool_args.values():
            if not isinstance(value, str | int | float) or isinstance(value, bool):
                continue
            text = str(value).strip()
            if len(text) < 2 or text.lower() in goal:
                continue
            if any(re.search(rf"(?<!\w){re.escape(text)}(?!\w)", example, re.IGNORECASE) for example in examples):
                copied.append(repr(value))
        return copied

    def _same_tool(self, draft: StepDraft, drafts: Sequence[StepDraft]) -> str | None:
        """The step whose result this call gives, whole, to the same lookup tool that made it (None if none)."""
        tool = self.tools.get(draft.tool_hint or "")
        if draft.tool_args is None or (tool is not None and tool.computes):
            return None
        callers = {other.id: other.tool_hint for other in drafts if other.tool_args is not None}
        for value in draft.tool_args.values():
            if isinstance(value, str) and (match := re.fullmatch(r"\$(s?\d+)", value.strip())):
                ref = match.group(1) if match.group(1).startswith("s") else f"s{match.group(1)}"
                if ref != draft.id and callers.get(ref) == draft.tool_hint:
                    return ref
        return None


def _placeholders(arguments: Mapping[str, Any]) -> list[str]:
    """The arguments that only hold a value's place (a reference to a step is a value)."""
    found = []
    for value in arguments.values():
        if not isinstance(value, str):
            continue
        text = value.strip()
        written = text in (prompts.ARGUMENT_PLACEHOLDER, "$N", "$n")
        if written or (_PLACEHOLDER.fullmatch(text) and not _REFERENCE.fullmatch(text)):
            found.append(repr(value))
    return found


def _docstring_examples(tool: Tool) -> list[str]:
    """The parts of a tool's docstring that show an example (``Examples:`` blocks, ``>>>`` lines, "e.g. ...")."""
    doc = inspect.getdoc(tool.function) or ""
    found: list[str] = [match.group(1) for match in _EXAMPLE_INLINE.finditer(doc)]
    in_block = False
    for line in doc.splitlines():
        if _EXAMPLE_HEADING.match(line):
            in_block = True
            continue
        if in_block and line.strip() and not line.startswith((" ", "\t", ">")):
            in_block = line.lstrip().startswith(">>>")
        if in_block or _EXAMPLE_LINE.match(line):
            found.append(line)
    return found


def _label(step_id: str) -> str:
    """A step's id as the plan lines write it (``s2`` is 2)."""
    return step_id[1:] if re.fullmatch(r"s\d+", step_id) else step_id


def _free(wanted: str, taken: set[str]) -> str:
    number, candidate = 2, wanted
    while candidate in taken:
        candidate = f"{wanted}_{number}"
        number += 1
    return candidate
