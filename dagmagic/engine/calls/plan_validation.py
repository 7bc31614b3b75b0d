"""A plan's steps checked and, when they stay unusable, repaired: every fix a warning for the user.

``validate_steps`` turns drafts into plan steps and names the problem that makes a plan unusable (no steps,
too many, duplicate ids, tasks that are the calls' own names, a cycle found with Kahn's algorithm), fixing with a
warning what needs no re-ask: dependencies on unknown steps dropped, an unknown model hint made general.
``repair_steps`` makes the best of a plan still unusable after one re-ask: the first ``plan_max_steps`` kept,
repeated ids renamed, and the dependencies that close a cycle dropped.

A step's ``tool_args`` (a tool step: one call of its tool, made without a model) are kept only on a step whose
``tool_hint`` is a tool of the session; every step they reference (``"$s1"``, ``"$r1.s2"``) becomes a
dependency, with a warning when the model did not list it. A reference to nothing known is left in place:
the direct call cannot resolve it, and the step's agent runs instead.

Steps whose task is only one of the calls' own tool or schema names (``"submit_plandraft"``, ``"PlanDraft"``:
a small model copies them from the request) make a plan unusable like a cycle does: re-asked once, then dropped.

Every warning speaks in the user's terms: what the planner wrote (quoted), what was done about it; the schema's
field names (``tool_args``, ``model_hint``) appear in none.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection
from typing import Any

from dagmagic.engine.calls import prompts
from dagmagic.engine.calls.plan_copies import CopyCheck
from dagmagic.engine.calls.plan_drafts import StepDraft, names_itself
from dagmagic.engine.steps.tool_steps import references
from dagmagic.llm.registry import STANDARD_ROLES
from dagmagic.models import PlanStep, split_round_reference

__all__ = ["cut_warning", "names_itself", "repair_steps", "step_hints", "usable_tool_args", "validate_steps"]

_INSTEAD = "a model does the step instead of a direct call of the tool."
"""What happens to a tool step whose call cannot be made as the planner wrote it."""


def validate_steps(
    drafts: list[StepDraft],
    *,
    max_steps: int,
    earlier: Collection[str] = (),
    roles: Collection[str] = STANDARD_ROLES,
    warn: Callable[[str], None] = lambda message: None,
    tools: Collection[str] = (),
    copies: CopyCheck | None = None,
) -> tuple[list[PlanStep], str | None]:
    """The plan's steps and the problem that makes it unusable (None when it is usable).

    Fixed with a warning: dependencies on unknown steps are dropped (``earlier`` lists the ``rN.id``
    references that may be used), an unknown ``model_hint`` becomes null. Problems: no steps, too many,
    duplicate ids, tasks that are the calls' own names, what ``copies`` finds copied from the request, a cycle.
    """
    if not drafts:
        return [], "the plan has no steps; a plan needs at least one step"
    if len(drafts) > max_steps:
        return [], f"the plan has {len(drafts)} steps but at most {max_steps} are allowed; combine related steps"
    ids = [draft.id for draft in drafts]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        counts = ", ".join(f"{i} ({ids.count(i)} times)" for i in duplicates)
        return [], f"step ids must be unique, but these repeat: {counts}"
    named = [draft for draft in drafts if names_itself(draft.task)]
    if named:
        tasks = ", ".join(dict.fromkeys(repr(draft.task.strip()) for draft in named))
        return [], (
            f"the tasks of {', '.join(draft.id for draft in named)} are the plan's own tool or schema names "
            f"({tasks}), not what a step must do: write each step's task for the goal"
        )
    if copies is not None:
        drafts = copies.without_write_ups(drafts, warn)
    copied = copies.problem(drafts) if copies is not None else None
    if copied is not None:
        return [], copied
    steps = _plan_steps(drafts, earlier=earlier, roles=roles, warn=warn, tools=tools)
    cycle = _cycle(steps)
    if cycle:
        return [], f"the steps {', '.join(sorted(set(cycle)))} form a cycle ({' needs '.join(cycle)})"
    return steps, None


def _plan_steps(
    drafts: list[StepDraft],
    *,
    earlier: Collection[str],
    roles: Collection[str],
    warn: Callable[[str], None],
    tools: Collection[str] = (),
) -> list[PlanStep]:
    """Plan steps from drafts with unique ids: unknown dependencies and model hints dropped, with warnings."""
    ids = [draft.id for draft in drafts]
    known = set(ids)
    # a step the model named "r1.a" is "r1_a" here (normalize_step); "r1.a" in a dependency is that step unless
    # round 1 has a result "a" to reuse
    own = {ref: i for i in ids if split_round_reference(ref := i.replace("_", ".", 1)) and ref not in earlier}
    steps: list[PlanStep] = []
    dropped: list[tuple[str, str]] = []
    for draft in drafts:
        kept = []
        for dep in dict.fromkeys(own.get(dep, dep) for dep in draft.dependencies):
            reusable = split_round_reference(dep) is not None and dep in earlier
            if dep in known or reusable:
                kept.append(dep)
            else:
                dropped.append((draft.id, dep))
        tool, hint = step_hints(draft, roles=roles, tools=tools, warn=warn)
        tool_args, dropped_why = usable_tool_args(draft, tool, tools)
        if dropped_why:
            warn(f"Step {draft.id}: {dropped_why}: {_INSTEAD}")
        tool_args = _referenced(draft, tool, tool_args, kept, known=known, earlier=earlier, warn=warn)
        steps.append(
            PlanStep(
                id=draft.id, task=draft.task, dependencies=kept, tool_hint=tool, model_hint=hint, tool_args=tool_args
            )
        )
    if dropped:
        warn(_unknown_dependencies(dropped))
    return steps


def _unknown_dependencies(dropped: list[tuple[str, str]]) -> str:
    """The warning for dependencies on steps the plan does not have (what the planner wrote, quoted)."""
    if len(dropped) == 1:
        ((step, dep),) = dropped
        what = (
            "no result of an earlier round that can be reused" if split_round_reference(dep) else "no step of the plan"
        )
        return f"Step {step} was planned to wait for {dep!r}, which is {what}: it runs without waiting for it."
    named = ", ".join(f"{step} for {dep!r}" for step, dep in dropped[:10])
    more = f" and {len(dropped) - 10} more" if len(dropped) > 10 else ""
    return (
        f"Steps were planned to wait for steps that are not there ({named}{more}): they run without waiting for them."
    )


def _call(tool: str | None, arguments: dict[str, Any]) -> str:
    """A call as the planner's lines write it, ``double(x="$s9")``, cut to a readable length."""
    written = ", ".join(
        f"{key}={json.dumps(value, ensure_ascii=False, default=str)}" for key, value in arguments.items()
    )
    written = written if len(written) <= 80 else f"{written[:77]}..."
    return f"{tool or 'the tool'}({written})"


def _referenced(
    draft: StepDraft,
    tool: str | None,
    tool_args: dict[str, Any] | None,
    kept: list[str],
    *,
    known: Collection[str],
    earlier: Collection[str],
    warn: Callable[[str], None],
) -> dict[str, Any] | None:
    """The step's ``tool_args`` once every step they reference is among its dependencies (``kept``, added to
    with a warning). Arguments naming no other step of the plan are dropped: small models copy the prompt's
    example ("$s1" where there is no s1), and the call could never be made. A reference to an earlier round's
    result that is not reusable (it did not complete) is left in place: the direct call fails, and the step's
    agent is told which result is missing.
    """
    missing_round_results = []
    for ref in references(tool_args):
        if ref in kept:
            continue
        earlier_round = split_round_reference(ref) is not None
        if ref != draft.id and (ref in known or (earlier_round and ref in earlier)):
            kept.append(ref)
            warn(
                f"Step {draft.id} now waits for {ref}: its call of {tool} uses ${ref}, the result of {ref} (the plan "
                "had not said so)."
            )
        elif earlier_round:
            missing_round_results.append(f"${ref}")
        else:
            assert tool_args is not None  # it references a step
            warn(
                f"Step {draft.id}: the planner's call {_call(tool, tool_args)} uses ${ref}, which names no other step "
                f"of the plan: {_INSTEAD}"
            )
            return None
    if missing_round_results:
        names = ", ".join(missing_round_results)
        which = (
            "no result of an earlier round that can be reused"
            if len(missing_round_results) == 1
            else "no results of earlier rounds that can be reused"
        )
        warn(
            f"Step {draft.id}: its call of {tool} uses {names}, {which}: if the call fails, a model does the step "
            "instead."
        )
    return tool_args


def step_hints(
    draft: StepDraft,
    *,
    roles: Collection[str],
    tools: Collection[str] = (),
    warn: Callable[[str], None] = lambda message: None,
) -> tuple[str | None, str | None]:
    """A draft's ``(tool_hint, model_hint)`` as a step uses them: a role written as the tool (real models do)
    becomes the model hint, unless a tool has that name; an unknown model hint becomes None (the general model).
    """
    hint, tool = draft.model_hint, draft.tool_hint
    if tool is not None and tool in roles and tool not in tools:
        model = tool if hint is None else hint if hint in roles else "general"
        warn(
            f"Step {draft.id}: the planner named {tool!r} as its tool, but that is a model role, not a tool: the step "
            f"runs on the {model} model."
        )
        hint, tool = hint or tool, None
    if hint is not None and hint not in roles:
        warn(
            f"Step {draft.id}: the planner asked for the model {hint!r}, which is no model role here "
            f"({', '.join(sorted(roles))}): the step runs on the general model."
        )
        hint = None
    return tool, hint


def usable_tool_args(
    draft: StepDraft, tool: str | None, tools: Collection[str]
) -> tuple[dict[str, Any] | None, str | None]:
    """The draft's ``tool_args`` as its step keeps them (``tool``: its tool hint as ``step_hints`` made it), and
    why they are not kept when the model wrote some: only a step whose tool exists is a tool step.
    """
    if draft.unreadable_tool_args:
        return None, f"the planner's arguments for {tool or 'its tool'} cannot be read ({draft.unreadable_tool_args})"
    if draft.tool_args is None:
        return None, None
    if tool is None:
        written = json.dumps(draft.tool_args, ensure_ascii=False, default=str)
        written = written if len(written) <= 80 else f"{written[:77]}..."
        return None, f"the planner wrote arguments ({written}) but no tool to call with them"
    if tool not in tools:
        return None, f"the planner wrote a call of {tool!r}, which is not a tool of this session"
    if prompts.ARGUMENT_PLACEHOLDER in draft.tool_args.values():
        return None, (
            f"the planner's call of {tool} holds {prompts.ARGUMENT_PLACEHOLDER!r}, the placeholder of its "
            "instructions' example, not a value"
        )
    return draft.tool_args, None


def repair_steps(
    drafts: list[StepDraft],
    *,
    max_steps: int,
    earlier: Collection[str] = (),
    roles: Collection[str] = STANDARD_ROLES,
    warn: Callable[[str], None] = lambda message: None,
    tools: Collection[str] = (),
    copies: CopyCheck | None = None,
) -> list[PlanStep]:
    """The usable part of a plan that stayed invalid: the first ``max_steps`` steps, repeated ids renamed,
    what ``copies`` finds copied made harmless, unknown dependencies dropped, and the dependencies that close a
    cycle dropped (those on a step listed later first). Each change goes to ``warn``. Empty only when there is
    no step at all.
    """
    if len(drafts) > max_steps:
        warn(cut_warning(drafts, max_steps))
        drafts = drafts[:max_steps]
    unique: list[StepDraft] = []
    taken = {draft.id for draft in drafts}
    seen: set[str] = set()
    for draft in drafts:
        if draft.id in seen:
            new_id = _free_id(draft.id, taken)
            taken.add(new_id)
            warn(f"The plan used the id {draft.id} for two steps: the second is now {new_id}.")
            draft = draft.model_copy(update={"id": new_id})
        seen.add(draft.id)
        unique.append(draft)
    named = [draft for draft in unique if names_itself(draft.task)]
    if named:
        ids = ", ".join(draft.id for draft in named)
        tasks = ", ".join(dict.fromkeys(repr(draft.task.strip()) for draft in named))
        subject, verb, their = ("Steps", "were", "their tasks") if len(named) > 1 else ("Step", "was", "its task")
        warn(
            f"{subject} {ids} {verb} left out: {their} ({tasks}) {'are' if len(named) > 1 else 'is'} only the name "
            "of the form the planner answers in, nothing to do."
        )
        unique = [draft for draft in unique if draft not in named]
    if copies is not None:
        unique = copies.repair(copies.without_write_ups(unique, warn), warn)
    steps = _plan_steps(unique, earlier=earlier, roles=roles, warn=warn, tools=tools)
    _break_cycles(steps, warn)
    return steps


def cut_warning(drafts: list[StepDraft], limit: int) -> str:
    """The warning for a plan of more than ``limit`` steps, of which the first ``limit`` run."""
    left_out = [draft.id for draft in drafts[limit:]]
    shown = ", ".join(left_out[:10]) + (f" and {len(left_out) - 10} more" if len(left_out) > 10 else "")
    verb = "is" if len(left_out) == 1 else "are"
    return (
        f"The plan had {len(drafts)} steps, more than the {limit} allowed: the first {limit} run and {shown} {verb} "
        f"left out (plan_max_steps={len(drafts)} would let them all run)."
    )


def _free_id(taken_id: str, taken: set[str]) -> str:
    number = 2
    while f"{taken_id}_{number}" in taken:
        number += 1
    return f"{taken_id}_{number}"


def _break_cycles(steps: list[PlanStep], warn: Callable[[str], None]) -> None:
    """Drop, inside each cycle, every dependency on the step itself or on a step listed later: what is
    left only points back up the list, so it cannot loop.
    """
    position = {step.id: index for index, step in enumerate(steps)}
    for component in _cycles(steps):
        for step in steps:
            if step.id not in component:
                continue
            closing = [d for d in step.dependencies if d in component and position[d] >= position[step.id]]
            for dependency in closing:
                step.dependencies.remove(dependency)
                warn(
                    f"Step {step.id} no longer waits for {dependency}: the plan had steps waiting for each other in a "
                    "loop."
                )


def _cycles(steps: list[PlanStep]) -> list[set[str]]:
    """The groups of steps that reach one another through their dependencies (each group holds a loop)."""
    ids = {step.id for step in steps}
    deps = {step.id: [d for d in step.dependencies if d in ids] for step in steps}
    reach = {sid: _reachable(sid, deps) for sid in deps}  # plans are small: a search per step is cheap
    groups: list[set[str]] = []
    placed: set[str] = set()
    for sid in deps:
        if sid in placed or sid not in reach[sid]:
            continue
        group = {other for other in reach[sid] if sid in reach[other]}
        placed |= group
        groups.append(group)
    return groups


def _reachable(start: str, deps: dict[str, list[str]]) -> set[str]:
    """Every step ``start`` depends on, directly or not (itself only through a loop)."""
    seen: set[str] = set()
    frontier = list(deps[start])
    while frontier:
        sid = frontier.pop()
        if sid not in seen:
            seen.add(sid)
            frontier.extend(deps[sid])
    return seen


def _cycle(steps: list[PlanStep]) -> list[str]:
    """One cycle as a path ``[a, b, a]``, or an empty list when the steps form a DAG. A dependency naming a
    step of the plan is inside it, even when it looks like an earlier round's (``r1.s2`` as a step's own id,
    which small models write): ``ExecutionPlan.layers()`` and the executor read it so too.
    """
    ids = {s.id for s in steps}
    deps = {s.id: {d for d in s.dependencies if d in ids} for s in steps}
    remaining = set(deps)
    progress = True
    while progress:  # Kahn's algorithm: peel off steps whose dependencies are all gone
        done = {sid for sid in remaining if not deps[sid] & remaining}
        remaining -= done
        progress = bool(done)
    if not remaining:
        return []
    # every remaining step waits on another remaining one, so following them must come back round
    node = min(remaining)
    path: list[str] = []
    seen: dict[str, int] = {}
    while node not in seen:
        seen[node] = len(path)
        path.append(node)
        node = min(deps[node] & remaining)
    return [*path[seen[node] :], node]
