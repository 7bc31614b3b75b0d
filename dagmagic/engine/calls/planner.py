"""The planner: a goal (and what earlier rounds learned) becomes a validated DAG of steps.

One ``structured_llm_call`` to the smart model at temperature 0; the reply is recovered from the shapes
models actually write, then validated with Kahn's algorithm. A cycle, duplicate ids, an empty plan or
too many steps get ONE re-ask quoting the problem. A plan still unusable after it is repaired, every change
a warning on the round: duplicate ids renamed, the first ``plan_max_steps`` kept, dependencies that close a
cycle dropped. A reply with no usable step at all becomes one step: the goal itself. The loop always answers.

A step's ``tool_args`` (a tool step: one call of its tool, made without a model) are kept only on a step whose
``tool_hint`` is a tool of the session; every step they reference (``"$s1"``, ``"$r1.s2"``) becomes a
dependency, with a warning when the model did not list it. A reference to nothing known is left in place:
the direct call cannot resolve it, and the step's agent runs instead.

Steps whose task is only one of the calls' own tool or schema names (``"submit_plandraft"``, ``"PlanDraft"``:
a small model copies them from the request) make a plan unusable like a cycle does: re-asked once, then dropped.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Literal, get_args

from pydantic import BaseModel, Field, ValidationError, field_validator
from pydantic.json_schema import SkipJsonSchema

from dagmagic.engine.calls import prompts
from dagmagic.engine.steps.tool_steps import references
from dagmagic.engine.tools.functions import Tool
from dagmagic.errors import PlanningError, StructuredOutputError
from dagmagic.events import Event, RunWarning
from dagmagic.llm import ChatModel, extract_json, structured_llm_call
from dagmagic.llm.registry import STANDARD_ROLES
from dagmagic.models import ExecutionPlan, PlanCut, PlanStep, split_round_reference
from dagmagic.settings import DagSettings

__all__ = [
    "Domain",
    "PlanDraft",
    "Planner",
    "StepDraft",
    "names_itself",
    "normalize_step",
    "plan_schema",
    "recover_plan",
    "recover_steps",
    "repair_steps",
    "usable_tool_args",
    "validate_steps",
]


class StepDraft(BaseModel):
    """One step as the planner writes it."""

    id: str = Field(description='Short unique id, e.g. "s1".')
    task: str = Field(description="What the step must do, in the goal's language.")
    dependencies: list[str] = Field(default_factory=list, description="Ids of steps whose results it needs.")
    tool_hint: str | None = Field(None, description="The tool the step should use, or null.")
    model_hint: str | None = Field(None, description='"fast", "reasoning", another role, or null.')
    tool_args: dict[str, Any] | None = Field(
        None, description='For a step that is ONE call of its tool: the arguments ("$s1": s1\'s result); else null.'
    )
    unreadable_tool_args: SkipJsonSchema[str | None] = Field(None, exclude=True)
    """Why what the model wrote as ``tool_args`` is none (the validation warns); not part of the schema."""


Domain = Literal["legal", "medical", "financial"]
"""A goal's domain: the planner steers the steps that need precision to the reasoning model."""


class PlanDraft(BaseModel):
    """The planner's output."""

    # before the steps: a streaming model writes it first
    domain: Domain | None = Field(
        None, description='"legal", "medical" or "financial" when the goal needs that expertise, else null.'
    )
    steps: list[StepDraft] = Field(description="The steps of the plan.")

    @field_validator("domain", mode="before")
    @classmethod
    def _lenient_domain(cls, value: Any) -> str | None:
        """The domain is a hint: anything that does not name one of the three is none."""
        said = value.strip().lower() if isinstance(value, str) else None
        return said if said in get_args(Domain) else None


def plan_schema(*, ask_domain: bool = False) -> dict[str, Any]:
    """The JSON schema the plan call asks for: ``PlanDraft``'s, without ``domain`` unless the planner must say it."""
    schema = PlanDraft.model_json_schema()
    if not ask_domain:
        schema["properties"].pop("domain")
    return schema


def recover_plan(raw: Any) -> PlanDraft:
    """``recover_steps``, and the goal's domain when the reply says one (anything else is none)."""
    if isinstance(raw, str):
        raw = extract_json(raw)
    said = raw.get("domain") if isinstance(raw, Mapping) else None
    if said is None and isinstance(raw, Mapping) and isinstance(raw.get("plan"), Mapping):
        said = raw["plan"].get("domain")
    return PlanDraft(domain=said, steps=recover_steps(raw))


_DEPENDENCY_KEYS = ("dependencies", "depends_on", "deps", "requires")
_TOOL_ARGS_KEYS = ("tool_args", "arguments", "args")


def recover_steps(raw: Any) -> list[StepDraft]:
    """Steps from what a model wrote: ``{"steps": [...]}``, a bare list, a bare step, ``steps`` as a dict
    or a JSON string, ``description`` for ``task``, integer ids, ``"s1"`` or ``null`` as dependencies.
    """
    steps = _step_list(raw)
    drafts = []
    for index, item in enumerate(steps):
        if not isinstance(item, Mapping):
            raise ValueError(f"step {index + 1} is not an object: {item!r}")
        drafts.append(StepDraft.model_validate(normalize_step(dict(item), index)))
    return drafts


def _step_list(raw: Any) -> list[Any]:
    if isinstance(raw, str):
        raw = extract_json(raw)
    if isinstance(raw, list):
        return raw
    if not isinstance(raw, Mapping):
        raise ValueError(f"expected an object with `steps`, got {type(raw).__name__}")
    if "steps" in raw:
        steps = raw["steps"]
        if isinstance(steps, str):
            steps = extract_json(steps)
        if isinstance(steps, Mapping):
            if _looks_like_step(steps):
                return [steps]
            return [{"id": key, **value} if isinstance(value, Mapping) else value for key, value in steps.items()]
        if isinstance(steps, list):
            return steps
        raise ValueError(f"`steps` must be a list, got {type(steps).__name__}")
    if "plan" in raw:
        return _step_list(raw["plan"])
    if _looks_like_step(raw):
        return [raw]
    raise ValueError("the reply has no `steps`")


def _looks_like_step(item: Mapping[str, Any]) -> bool:
    return "task" in item or "description" in item


def normalize_step(item: dict[str, Any], index: int) -> dict[str, Any]:
    """One step's fields as models write them, in the shape ``StepDraft`` expects.

    An id written like a reference to an earlier round's result (``r1.s2``) is the plan's own step, not that
    result: it becomes ``r1_s2``, so that ``r1.s2`` in a dependency always means the earlier result (on both
    planner paths: a streamed step may have started on it before the plan named a step so).
    """
    if "task" not in item and "description" in item:
        item["task"] = item.pop("description")
    item["id"] = str(item["id"]).strip() if item.get("id") is not None else f"s{index + 1}"
    if split_round_reference(item["id"]) is not None:
        item["id"] = item["id"].replace(".", "_", 1)
    for key in _DEPENDENCY_KEYS[1:]:
        if key in item and "dependencies" not in item:
            item["dependencies"] = item.pop(key)
    if isinstance(item.get("task"), int | float) and not isinstance(item.get("task"), bool):
        item["task"] = str(item["task"])
    item["dependencies"] = _dependency_ids(item.get("dependencies"))
    for key in _TOOL_ARGS_KEYS[1:]:
        if key in item and "tool_args" not in item:
            item["tool_args"] = item.pop(key)
    item["tool_args"], item["unreadable_tool_args"] = _tool_args(item.get("tool_args"))
    for hint in ("tool_hint", "model_hint"):
        value = item.get(hint)
        item[hint] = None if value in (None, "", "null", "none", "None") else str(value).strip()
    return item


def _tool_args(value: Any) -> tuple[dict[str, Any] | None, str | None]:
    """A step's arguments as models write them (an object, or a JSON string of one), and why what was written
    is none (anything else: the step runs as an agent).
    """
    if value in (None, "", "null", "none", "None"):
        return None, None
    if isinstance(value, str):
        with contextlib.suppress(ValueError, RecursionError):
            parsed = json.loads(value)
            if isinstance(parsed, dict):
                return parsed, None
    elif isinstance(value, Mapping):
        return {str(key): item for key, item in value.items()}, None
    shown = value if len(repr(value)) <= 80 else f"{repr(value)[:77]}..."
    return None, f"{shown!r} is not an object of arguments"


def _dependency_ids(deps: Any) -> list[str]:
    """Dependencies as models write them (a list, ``"s1, s2"``, ``2``, ``{"id": "s1"}`` items, ``null``) as
    ids; what cannot name a step (``1.5``, an object without an id) is left out here and not guessed at.
    """
    if isinstance(deps, str):
        deps = deps.replace(";", ",").split(",")
    elif not isinstance(deps, list | tuple):
        deps = [deps]
    ids = []
    for dep in deps:
        if isinstance(dep, dict):
            dep = dep.get("id")
        if isinstance(dep, float) and dep.is_integer():
            dep = int(dep)
        if isinstance(dep, str | int) and not isinstance(dep, bool) and str(dep).strip():
            ids.append(str(dep).strip())
    return ids


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


class Planner:
    """Plans a goal with the smart model."""

    def __init__(
        self,
        model: ChatModel,
        settings: DagSettings,
        *,
        emit: Callable[[Event], object] | None = None,
        tool_names: Collection[str] = (),
        roles: Collection[str] = STANDARD_ROLES,
        today: Callable[[], dt.date] = dt.date.today,
        subruns: bool = False,
        tools: Sequence[Tool] = (),
    ) -> None:
        """``subruns``: steps may be marked ``subplan``, to run as subruns (a DAG of their own). ``tools``: the
        tools themselves, whose arguments the prompt describes (so that steps can be tool steps); a tool known
        only by name (``tool_names``) is listed by name.
        """
        self.model = model
        self.subruns = subruns
        self.settings = settings
        self.emit = emit
        self.tools = sorted(tools, key=lambda tool: tool.name)
        self.tool_names = sorted(set(tool_names) | {tool.name for tool in tools})
        self.roles = sorted(set(roles) | set(STANDARD_ROLES))
        self.today = today

    def system_prompt(self, domain: str | None = None, *, ask_domain: bool = False) -> str:
        """The planner's instructions for today, the available tools and roles, and the goal's domain: the one
        known (``domain``), else, with ``ask_domain``, the request to say it.
        """
        date = self.today()
        extra_roles = [r for r in self.roles if r not in STANDARD_ROLES]
        return prompts.PLANNER_SYSTEM.format(
            today=date.isoformat(),
            year=date.year,
            min_steps=self.settings.plan_min_steps,
            max_steps=self.settings.plan_max_steps,
            tools=self._tools_prompt() + (prompts.PLANNER_SUBPLAN if self.subruns else ""),
            tool_args=prompts.planner_tool_args(self.tools) if self.tools else "",
            roles=prompts.PLANNER_ROLES.format(names=", ".join(extra_roles)) if extra_roles else "",
            domain=prompts.PLANNER_DOMAIN.format(domain=domain)
            if domain
            else prompts.PLANNER_DOMAIN_ASK
            if ask_domain
            else "",
        )

    def _tools_prompt(self) -> str:
        if self.tools:
            described = {tool.name for tool in self.tools}
            named = [name for name in self.tool_names if name not in described]
            lines = [prompts.tool_line(tool) for tool in self.tools] + named
            return prompts.PLANNER_TOOL_LIST.format(lines="".join(f"\n    {line}" for line in lines))
        return prompts.PLANNER_TOOLS.format(names=", ".join(self.tool_names)) if self.tool_names else ""

    def messages(
        self,
        query: str,
        *,
        round: int = 1,
        context: str | None = None,
        earlier: Collection[str] = (),
        domain: str | None = None,
        ask_domain: bool = False,
    ) -> list[dict[str, Any]]:
        """The planner's conversation for a round (``ask_domain``: it must say the goal's domain)."""
        user = query
        if context:
            reusable = f"\nReusable results: {', '.join(sorted(earlier))}." if earlier else ""
            user = f"{query}\n\n{prompts.PLANNER_REPLAN.format(round=round, context=context, reusable=reusable)}"
        system = self.system_prompt(domain, ask_domain=ask_domain and not domain)
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    async def plan(
        self,
        query: str,
        *,
        round: int = 1,
        context: str | None = None,
        earlier: Collection[str] = (),
        domain: str | None = None,
        goal: str | None = None,
        on_domain: Callable[[Domain | None], object] | None = None,
    ) -> ExecutionPlan:
        """A valid plan for ``query``: as the model wrote it, corrected once, repaired, or at worst one step
        whose task is ``goal`` (default: the query). Provider errors propagate.

        ``on_domain``: the planner is asked for the goal's domain too, and this receives what its reply said
        (not called when no reply was readable).
        """
        ask_domain = on_domain is not None and not domain
        messages = self.messages(
            query, round=round, context=context, earlier=earlier, domain=domain, ask_domain=ask_domain
        )
        try:
            draft = await self._draft(messages, round, ask_domain=ask_domain)
        except PlanningError as exc:
            return self.goal_step(query, goal, round=round, why=str(exc))
        if on_domain is not None and ask_domain:
            on_domain(draft.domain)
        return await self.finish(messages, draft.steps, query=query, round=round, earlier=earlier, goal=goal)

    async def finish(
        self,
        messages: list[dict[str, Any]],
        drafts: list[StepDraft],
        *,
        query: str,
        round: int,
        earlier: Collection[str] = (),
        goal: str | None = None,
    ) -> ExecutionPlan:
        """Validate a first attempt's steps; on a problem, ONE re-ask quoting it; then repair what came back."""
        steps, problem = self.validate(drafts, round=round, earlier=earlier)
        if problem is None:
            return ExecutionPlan(goal=goal or query, query=query, steps=steps, round=round)
        messages = [
            *messages,
            {"role": "assistant", "content": json.dumps({"steps": [d.model_dump() for d in drafts]})},
            {"role": "user", "content": prompts.PLANNER_REASK.format(problem=problem)},
        ]
        with contextlib.suppress(PlanningError):  # an unreadable correction: the first attempt is repaired
            drafts = (await self._draft(messages, round)).steps
        steps, problem = self.validate(drafts, round=round, earlier=earlier)
        if problem is None:
            return ExecutionPlan(goal=goal or query, query=query, steps=steps, round=round)
        self._warn(f"the plan was still unusable after one correction ({problem}); repaired it", round)
        drafts = self._cut(drafts, round)
        steps = repair_steps(
            drafts,
            max_steps=self.settings.plan_max_steps,
            earlier=earlier,
            roles=self.roles,
            warn=lambda message: self._warn(message, round),
            tools=self.tool_names,
        )
        if not steps:
            return self.goal_step(query, goal, round=round, why=problem)
        return ExecutionPlan(goal=goal or query, query=query, steps=steps, round=round)

    def goal_step(self, query: str, goal: str | None, *, round: int, why: str) -> ExecutionPlan:
        """The last resort: one step whose task is the goal itself (a warning says why)."""
        self._warn(f"no usable plan ({why}): the goal is planned as one step", round)
        step = PlanStep(id="s1", task=goal or query)
        return ExecutionPlan(goal=goal or query, query=query, steps=[step], round=round)

    def validate(
        self, drafts: list[StepDraft], *, round: int, earlier: Collection[str] = ()
    ) -> tuple[list[PlanStep], str | None]:
        """``validate_steps`` with this planner's limits and roles, warnings as events."""
        return validate_steps(
            drafts,
            max_steps=self.settings.plan_max_steps,
            earlier=earlier,
            roles=self.roles,
            warn=lambda message: self._warn(message, round),
            tools=self.tool_names,
        )

    async def _draft(self, messages: list[dict[str, Any]], round: int, *, ask_domain: bool = False) -> PlanDraft:
        try:
            result = await structured_llm_call(
                self.model,
                messages,
                plan_schema(ask_domain=ask_domain),
                parse_fn=recover_plan,
                purpose="plan",
                round=round,
                temperature=0.0,
            )
        except StructuredOutputError as exc:
            raise PlanningError(f"Planning failed: the model gave no readable plan ({exc})") from exc
        except ValidationError as exc:  # pragma: no cover - parse_fn failures are caught inside the call
            raise PlanningError(f"Planning failed: {exc}") from exc
        draft: PlanDraft = result.value
        return draft

    def _warn(self, message: str, round: int) -> None:
        if self.emit is not None:
            self.emit(RunWarning(message=message, round=round))

    def _cut(self, drafts: list[StepDraft], round: int) -> list[StepDraft]:
        """The first ``plan_max_steps`` drafts; a cut is told as data (``PlanCut``), for the views to show."""
        limit = self.settings.plan_max_steps
        if len(drafts) <= limit:
            return drafts
        dropped = ", ".join(draft.id for draft in drafts[limit:])
        cut = PlanCut(planned=len(drafts), kept=limit, dropped=[draft.task for draft in drafts[limit:]])
        message = f"the plan had {len(drafts)} steps: kept the first {limit}, dropped {dropped}"
        if self.emit is not None:
            self.emit(RunWarning(message=message, round=round, plan_cut=cut))
        return drafts[:limit]
