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
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from typing import Any

from dagmagic.engine.calls import prompts
from dagmagic.engine.calls.plan_drafts import StepDraft
from dagmagic.engine.steps.tool_steps import references
from dagmagic.llm.registry import STANDARD_ROLES
from dagmagic.models import PlanStep, split_round_reference

__all__ = ["names_itself", "repair_steps", "step_hints", "usable_tool_args", "validate_steps"]


_OWN_NAME = re.compile(
    r"submit_\w+|(?:plan|step)_?drafts?|verdict|analysis_?result|execution_?plan|plan_?step", re.IGNORECASE
)
"""The names the plan and verdict calls use for their tools and schemas (``OutputShape.tool_name``)."""


def names_itself(task: str) -> bool:
    """Whether a step's task is only one of the calls' own tool or schema names (``"submit_plandraft"``,
    ``"PlanDraft"``): a small model copied it from the request, and such a step has nothing to do.
    """
    return bool(_OWN_NAME.fullmatch(task.strip().strip("`'\".:()[] ")))


def validate_steps(
    drafts: list[StepDraft],
    *,
    max_steps: int,
    earlier: Collection[str] = (),
    roles: Collection[str] = STANDARD_ROLES,
    warn: Callable[[str], None] = lambda message: None,
    tools: Collection[str] = (),
) -> tuple[list[PlanStep], str | None]:
    """The plan's steps and the problem that makes it unusable (None when it is usable).

    Fixed with a warning: dependencies on unknown steps are dropped (``earlier`` lists the ``rN.id``
    references that may be used), an unknown ``model_hint`` becomes null. Problems: no steps, too many,
    duplicate ids, tasks that are the calls' own names, a cycle.
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
    dropped: list[str] = []
    for draft in drafts:
        kept = []
        for dep in dict.fromkeys(own.get(dep, dep) for dep in draft.dependencies):
            reusable = split_round_reference(dep) is not None and dep in earlier
            if dep in known or reusable:
                kept.append(dep)
            else:
                dropped.append(f"{draft.id} -> {dep}")
        tool, hint = step_hints(draft, roles=roles, tools=tools, warn=warn)
        tool_args, dropped_why = usable_tool_args(draft, tool, tools)
        if dropped_why:
            warn(f"step {draft.id}: {dropped_why} (the step runs as an agent)")
        tool_args = _referenced(draft, tool_args, kept, known=known, earlier=earlier, warn=warn)
        steps.append(
            PlanStep(
                id=draft.id, task=draft.task, dependencies=kept, tool_hint=tool, model_hint=hint, tool_args=tool_args
            )
        )
    if dropped:
        more = f" and {len(dropped) - 10} more" if len(dropped) > 10 else ""
        warn(f"dropped dependencies on unknown steps: {', '.join(dropped[:10])}{more}")
    return steps


def _referenced(
    draft: StepDraft,
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
            warn(f"step {draft.id}: added dependency {ref} (its tool_args use ${ref})")
        elif earlier_round:
            missing_round_results.append(f"${ref}")
        else:
            warn(
                f"step {draft.id}: tool_args dropped: they use ${ref}, which names no other step of the plan (the "
                "step runs as an agent)"
            )
            return None
    if missing_round_results:
        names = ", ".join(missing_round_results)
        which = "names no reusable result" if len(missing_round_results) == 1 else "name no reusable results"
        warn(f"step {draft.id}: its tool_args use {names}, which {which} of an earlier round")
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
        warn(f"step {draft.id}: tool_hint {tool!r} is a role, not a tool: used as its model_hint")
        hint, tool = hint or tool, None
    if hint is not None and hint not in roles:
        warn(f"step {draft.id}: unknown model_hint {hint!r} replaced by the general model")
        hint = None
    return tool, hint


def usable_tool_args(
    draft: StepDraft, tool: str | None, tools: Collection[str]
) -> tuple[dict[str, Any] | None, str | None]:
    """The draft's ``tool_args`` as its step keeps them (``tool``: its tool hint as ``step_hints`` made it), and
    why they are not kept when the model wrote some: only a step whose tool exists is a tool step.
    """
    if draft.unreadable_tool_args:
        return None, f"tool_args ignored: {draft.unreadable_tool_args}"
    if draft.tool_args is None:
        return None, None
    if tool is None:
        return None, "tool_args dropped: the step has no tool_hint"
    if tool not in tools:
        return None, f"tool_args dropped: {tool} is not a tool of this session"
    if prompts.ARGUMENT_PLACEHOLDER in draft.tool_args.values():
        return None, (
            f"tool_args dropped: they hold the placeholder {prompts.ARGUMENT_PLACEHOLDER!r} of the planner's "
            "example, not a value"
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
) -> list[PlanStep]:
    """The usable part of a plan that stayed invalid: the first ``max_steps`` steps, repeated ids renamed,
    unknown dependencies dropped, and the dependencies that close a cycle dropped (those on a step listed
    later first). Each change goes to ``warn``. Empty only when there is no step at all.
    """
    if len(drafts) > max_steps:
        dropped = ", ".join(draft.id for draft in drafts[max_steps:])
        warn(f"the plan had {len(drafts)} steps: kept the first {max_steps}, dropped {dropped}")
        drafts = drafts[:max_steps]
    unique: list[StepDraft] = []
    taken = {draft.id for draft in drafts}
    seen: set[str] = set()
    for draft in drafts:
        if draft.id in seen:
            new_id = _free_id(draft.id, taken)
            taken.add(new_id)
            warn(f"step id {draft.id} was used twice: the second step is now {new_id}")
            draft = draft.model_copy(update={"id": new_id})
        seen.add(draft.id)
        unique.append(draft)
    named = [draft.id for draft in unique if names_itself(draft.task)]
    if named:
        warn(f"dropped {', '.join(named)}: their tasks are the plan's own tool or schema names, not tasks")
        unique = [draft for draft in unique if draft.id not in named]
    steps = _plan_steps(unique, earlier=earlier, roles=roles, warn=warn, tools=tools)
    _break_cycles(steps, warn)
    return steps


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
                warn(f"step {step.id} no longer depends on {dependency}: that dependency closed a cycle")


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
