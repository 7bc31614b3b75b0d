"""The planner: a goal (and what earlier rounds learned) becomes a validated DAG of steps.

One call to the smart model at temperature 0 for plan lines (``plan_lines``: a step a line, a tool step written
as its call); the reply is read as lines, else recovered from the JSON shapes models write instead
(``plan_drafts``), then validated (``plan_validation``). A reply with no plan at all is asked for once more.
A cycle, duplicate ids, an empty
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

from dagmagic.engine.calls import prompts
from dagmagic.engine.calls.plan_copies import CopyCheck
from dagmagic.engine.calls.plan_drafts import Domain, PlanDraft, StepDraft, plan_schema, recover_plan
from dagmagic.engine.calls.plan_lines import LineReader, render_plan_lines
from dagmagic.engine.calls.plan_validation import cut_warning, repair_steps, validate_steps
from dagmagic.engine.tools.functions import Tool
from dagmagic.errors import PlanningError, TransientProviderError
from dagmagic.events import Event, RunWarning
from dagmagic.llm import ChatModel, extract_json
from dagmagic.llm.registry import STANDARD_ROLES
from dagmagic.llm.structured import echoes_schema
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
        model_choice: bool = True,
    ) -> None:
        """``subruns``: steps may be marked ``subplan``, to run as subruns (a DAG of their own). ``tools``: the
        tools themselves, whose arguments the prompt describes (so that steps can be tool steps); a tool known
        only by name (``tool_names``) is listed by name. ``model_choice``: the roles a step may name lead to more
        than one model (else the prompt names no role and asks no domain, which only steers steps to a model).
        """
        self.model = model
        self.subruns = subruns
        self.settings = settings
        self.emit = emit
        self.tools = sorted(tools, key=lambda tool: tool.name)
        self.tool_names = sorted(set(tool_names) | {tool.name for tool in tools})
        self.roles = sorted(set(roles) | set(STANDARD_ROLES))
        self.today = today
        self.model_choice = model_choice

    def system_prompt(self, domain: str | None = None, *, ask_domain: bool = False) -> str:
        """The planner's instructions for today, the available tools and roles, and the goal's domain: the one
        known (``domain``), else, with ``ask_domain``, the request to say it. Only what this registry and these
        tools need is said: no roles (nor domain) when one model plays them all, no subplans unless subruns are
        on, no computing rule without a computing tool.
        """
        computing = [tool.name for tool in self.tools if tool.computes]
        hints = []
        if self.tool_names:
            hints.append(prompts.PLANNER_HINT_TOOL)
        if self.model_choice:
            extra_roles = [r for r in self.roles if r not in STANDARD_ROLES]
            others = prompts.PLANNER_ROLES.format(names=", ".join(extra_roles)) if extra_roles else ""
            hints.append(prompts.PLANNER_HINT_ROLES.format(others=others))
        if self.subruns:
            hints.append(prompts.PLANNER_SUBPLAN)
        if not self.model_choice:
            domain, ask_domain = None, False
        return prompts.PLANNER_SYSTEM.format(
            today=self.today().isoformat(),
            formats=prompts.PLANNER_FORMATS_TOOLS.format(example=self._call_form())
            if self.tools
            else prompts.PLANNER_FORMATS_TASKS,
            compute=prompts.PLANNER_COMPUTE.format(tools=" or ".join(computing)) if computing else "",
            step_range=_step_range(self.settings.plan_min_steps, self.settings.plan_max_steps),
            hints=prompts.PLANNER_HINTS.format(hints="; ".join(hints)) if hints else "",
            tools=self._tools_prompt(),
            domain=prompts.PLANNER_DOMAIN.format(domain=domain)
            if domain
            else prompts.PLANNER_DOMAIN_ASK
            if ask_domain
            else "",
        )

    def _call_form(self) -> str:
        """How a call is written, shown on a tool of this session with a value no model can take for one
        (``capital(country="...")``: a plan that keeps the dots copied it, and is asked again).
        """
        tool = next((tool for tool in self.tools if not tool.computes), self.tools[0])
        parameters = list(tool.parameters.get("properties", {}))
        return f'{tool.name}({parameters[0]}="...")' if parameters else f"{tool.name}()"

    def _tools_prompt(self) -> str:
        described = {tool.name for tool in self.tools}
        lines = [prompts.tool_line(tool) for tool in self.tools]
        lines += [name for name in self.tool_names if name not in described]
        return prompts.PLANNER_TOOL_LIST.format(lines="".join(f"\n  {line}" for line in lines)) if lines else ""

    def reader(self, earlier: Collection[str] = (), prompt: str = "") -> LineReader:
        """A reader of this planner's plan lines (its tools' parameters known, for positional arguments; lines
        that only repeat ``prompt``, the instructions, are no steps).
        """
        parameters = {tool.name: list(tool.parameters.get("properties", {})) for tool in self.tools}
        parameters.update({name: [] for name in self.tool_names if name not in parameters})
        computing = [tool.name for tool in self.tools if tool.computes]
        return LineReader(parameters, earlier, self.roles, prompt, computing)

    def read(self, text: str, earlier: Collection[str] = (), prompt: str = "", *, cut: bool = False) -> PlanDraft:
        """The plan a whole reply writes: its lines, else the JSON a model wrote instead. ``ValueError`` when it
        holds no plan (the instructions written back are none). ``cut``: the reply stopped at its length limit,
        so its last line is a fragment (half a call, or the start of an instruction written back): not read.
        """
        reader = self.reader(earlier, prompt)
        lines = text.splitlines()
        if cut and lines and not text.endswith("\n"):
            lines.pop()
        steps = [step for line in lines if (step := reader.read(line)) is not None]
        if steps:
            return recover_plan({"domain": reader.domain, "steps": steps})
        if reader.echoes:
            raise _Echo("it repeats the instructions instead of giving a plan")
        raw = extract_json(text)
        if echoes_schema(raw, plan_schema(ask_domain=True)):  # a small model writes back the form it knows
            raise ValueError("the reply repeats the plan's JSON schema instead of giving a plan")
        return recover_plan(raw)

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
            names = " or ".join(", ".join(f"${ref}" for ref in sorted(earlier)).rsplit(", ", 1))
            reusable = prompts.PLANNER_REUSE.format(names=names) if earlier else ""
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
            draft = await self._draft(messages, round, earlier=earlier)
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
        steps, problem = self.validate(drafts, round=round, earlier=earlier, goal=query)
        if problem is None:
            return ExecutionPlan(goal=goal or query, query=query, steps=steps, round=round)
        messages = [
            *messages,
            {"role": "assistant", "content": _as_lines(drafts)},
            {"role": "user", "content": prompts.PLANNER_REASK.format(problem=problem)},
        ]
        with contextlib.suppress(PlanningError):  # an unreadable correction: the first attempt is repaired
            drafts = (await self._draft(messages, round, earlier=earlier)).steps
        steps, problem = self.validate(drafts, round=round, earlier=earlier, goal=query)
        if problem is None:
            return ExecutionPlan(goal=goal or query, query=query, steps=steps, round=round)
        self._warn(
            f"The planner's plan was still unusable after it was asked once to correct it ({problem}): it was "
            "repaired.",
            round,
        )
        drafts = self._cut(drafts, round)
        steps = repair_steps(
            drafts,
            max_steps=self.settings.plan_max_steps,
            earlier=earlier,
            roles=self.roles,
            warn=lambda message: self._warn(message, round),
            tools=self.tool_names,
            copies=self.copies(query),
        )
        if not steps:
            return self.goal_step(query, goal, round=round, why=problem)
        return ExecutionPlan(goal=goal or query, query=query, steps=steps, round=round)

    def goal_step(self, query: str, goal: str | None, *, round: int, why: str) -> ExecutionPlan:
        """The last resort: one step whose task is the goal itself (a warning says why)."""
        self._warn(f"The planner gave no usable plan ({why}): the goal runs as one step.", round)
        step = PlanStep(id="s1", task=goal or query)
        return ExecutionPlan(goal=goal or query, query=query, steps=[step], round=round)

    def validate(
        self, drafts: list[StepDraft], *, round: int, earlier: Collection[str] = (), goal: str = ""
    ) -> tuple[list[PlanStep], str | None]:
        """``validate_steps`` with this planner's limits, roles and tools (what a plan for ``goal`` copied is a
        problem), warnings as events.
        """
        return validate_steps(
            drafts,
            max_steps=self.settings.plan_max_steps,
            earlier=earlier,
            roles=self.roles,
            warn=lambda message: self._warn(message, round),
            tools=self.tool_names,
            copies=self.copies(goal),
        )

    def copies(self, goal: str) -> CopyCheck:
        """What a plan for ``goal`` may copy from its request, with these tools."""
        return CopyCheck.of(goal, self.tools, self.tool_names)

    async def _draft(self, messages: list[dict[str, Any]], round: int, *, earlier: Collection[str] = ()) -> PlanDraft:
        """The plan the model writes, asked once more (quoting the problem) when its reply holds none."""
        problem = ""
        for _attempt in range(2):
            try:
                result = await self.model.chat(
                    messages, purpose="plan", round=round, temperature=0.0, structured_level="text", reply_format="plan"
                )
            except TransientProviderError as exc:  # retried already: the goal is planned as one step
                raise PlanningError(f"Planning failed: the model gave no plan ({exc.kind})") from exc
            try:
                cut = result.response.finish_reason == "length"
                return self.read(result.content, earlier, prompt=str(messages[0]["content"]), cut=cut)
            except (ValueError, TypeError, RecursionError) as exc:  # as PlanStream.run: a reply that is no plan
                problem = str(exc) if isinstance(exc, _Echo) else "it has no numbered step lines, one step a line"
                messages = [
                    *messages,
                    {"role": "assistant", "content": result.content},
                    {"role": "user", "content": prompts.PLANNER_REASK.format(problem=problem)},
                ]
        raise PlanningError(f"Planning failed: the model gave no readable plan ({problem})")

    def _warn(self, message: str, round: int) -> None:
        if self.emit is not None:
            self.emit(RunWarning(message=message, round=round))

    def _cut(self, drafts: list[StepDraft], round: int) -> list[StepDraft]:
        """The first ``plan_max_steps`` drafts; a cut is told as data (``PlanCut``), for the views to show."""
        limit = self.settings.plan_max_steps
        if len(drafts) <= limit:
            return drafts
        cut = PlanCut(planned=len(drafts), kept=limit, dropped=[draft.task for draft in drafts[limit:]])
        message = cut_warning(drafts, limit)
        if self.emit is not None:
            self.emit(RunWarning(message=message, round=round, plan_cut=cut))
        return drafts[:limit]


def _step_range(fewest: int, most: int) -> str:
    """How many steps the plan may have, as a small model cannot misread it ("Use 1 to 1 steps" was answered "1")."""
    if fewest == most:
        return "Use one step." if most == 1 else f"Use {most} steps."
    return f"Use at most {most} steps." if fewest <= 1 else f"Use {fewest} to {most} steps."


class _Echo(ValueError):
    """A reply that wrote the instructions back instead of a plan."""


def _as_lines(drafts: list[StepDraft]) -> str:
    """Drafts as the plan lines that would write them (the planner's own reply, quoted back in a re-ask)."""
    plan = {"steps": [draft.model_dump(exclude={"unreadable_tool_args"}, exclude_none=True) for draft in drafts]}
    return render_plan_lines(plan) or json.dumps(plan, ensure_ascii=False)
