"""The plan as the planner writes it (a ``PlanDraft`` of ``StepDraft``) and its recovery from what models write.

The reply is read from the shapes models actually write: ``{"steps": [...]}``, a bare list or step, ``steps`` as
a dict or a JSON string, ``description`` for ``task``, integer ids, dependencies as ``"s1, s2"`` or ``null``,
``tool_args`` as a JSON string. A step id that is one of the calls' own tool or schema names (``submit_plandraft``:
a small model names its step after the function it was asked to call) is no id: the step becomes ``sN`` by its
place, so that no warning shows the form's name as a step. What the steps then mean together is
``plan_validation``'s.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Mapping
from typing import Any, Literal, get_args

from pydantic import BaseModel, Field, field_validator
from pydantic.json_schema import SkipJsonSchema

from dagmagic.llm import extract_json
from dagmagic.models import split_round_reference

__all__ = [
    "Domain",
    "PlanDraft",
    "StepDraft",
    "names_itself",
    "normalize_step",
    "plan_schema",
    "recover_plan",
    "recover_steps",
]


_OWN_NAME = re.compile(
    r"submit_\w+|(?:plan|step)_?drafts?|verdict|analysis_?result|execution_?plan|plan_?step", re.IGNORECASE
)
"""The names the plan and verdict calls use for their tools and schemas (``OutputShape.tool_name``)."""


def names_itself(text: str) -> bool:
    """Whether a step's task (or id) is only one of the calls' own tool or schema names (``"submit_plandraft"``,
    ``"PlanDraft"``): a small model copied it from the request; as a task it has nothing to do, as an id it
    names nothing the user wrote.
    """
    return bool(_OWN_NAME.fullmatch(text.strip().strip("`'\".:()[] ")))


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
    renamed: dict[str, str] = {}  # an id that was the form's name -> the step's own id (the first such step)
    for index, item in enumerate(steps):
        if not isinstance(item, Mapping):
            raise ValueError(f"step {index + 1} is not an object: {item!r}")
        written = str(item.get("id", "")).strip()
        drafts.append(StepDraft.model_validate(normalize_step(dict(item), index)))
        if written != drafts[-1].id and names_itself(written):
            renamed.setdefault(written, drafts[-1].id)
    if renamed:
        for draft in drafts:
            draft.dependencies = [renamed.get(dep, dep) for dep in draft.dependencies]
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
    if names_itself(item["id"]):
        item["id"] = f"s{index + 1}"
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
