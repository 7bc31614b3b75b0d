"""The planner: a goal (and what earlier rounds learned) becomes a validated DAG of steps.

One ``structured_llm_call`` to the smart model at temperature 0; the reply is recovered from the shapes
models actually write (``plan_drafts``), then validated (``plan_validation``). A cycle, duplicate ids, an empty
plan or too many steps get ONE re-ask quoting the problem. A plan still unusable after it is repaired, every change
a warning on the round: duplicate ids renamed, the first ``plan_max_steps`` kept, dependencies that close a
cycle dropped. A reply with no usable step at all becomes one step: the goal itself. The loop always answers.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
from collections.abc import Callable, Collection, Sequence
from typing import Any

from pydantic import ValidationError

from dagmagic.engine.calls import prompts
from dagmagic.engine.calls.plan_drafts import Domain, PlanDraft, StepDraft, plan_schema, recover_plan
from dagmagic.engine.calls.plan_validation import repair_steps, validate_steps
from dagmagic.engine.tools.functions import Tool
from dagmagic.errors import PlanningError, StructuredOutputError
from dagmagic.events import Event, RunWarning
from dagmagic.llm import ChatModel, structured_llm_call
from dagmagic.llm.registry import STANDARD_ROLES
from dagmagic.models import ExecutionPlan, PlanCut, PlanStep
from dagmagic.settings import DagSettings

__all__ = ["Planner"]


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
