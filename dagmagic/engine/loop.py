"""The goal loop: plan, execute, analyze, then answer or replan (DESIGN §3).

``decide`` is the decision table; ``replan_context`` is what the planner learns from earlier rounds;
``visible_results`` is what the analyzer and the answer see; ``GoalLoop.drive`` runs a ``DagRun`` from its
first plan to its answer, taking the user's Stop and follow-ups as ``dagmagic.engine.control`` says.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

from dagmagic.engine import prompts
from dagmagic.engine.analyzer import Analyzer
from dagmagic.engine.context import Exchange, compose_query, dependency_context, truncate
from dagmagic.engine.control import Interrupted
from dagmagic.engine.executor import DagExecutor, StepFailure
from dagmagic.engine.guard import PLANNER_RESERVE, ContextGuard, HistoryDigests
from dagmagic.engine.plan_stream import PlanStream, StreamedPlan
from dagmagic.engine.planner import Planner, recover_steps
from dagmagic.engine.retries import RetryPolicy
from dagmagic.engine.routing import classify_domain
from dagmagic.engine.run import DagRun
from dagmagic.engine.steps import StepRequest, StepRunner, step_messages
from dagmagic.engine.synthesis import fallback_answer, synthesize
from dagmagic.errors import RUN_ENDING, ConfigurationError, PlanningError, TransientProviderError
from dagmagic.events import (
    AnalysisReady,
    AnswerCleared,
    AnswerDelta,
    AnswerReady,
    ApprovalRequested,
    Event,
    LLMCallRecorded,
    PlanReady,
    Replanning,
    RoundStarted,
    RunFinished,
    RunStarted,
    RunWarning,
    StepCompleted,
    StepPaused,
    StepPlanned,
    UserAction,
)
from dagmagic.llm import ChatModel, ModelEntry, ModelRegistry
from dagmagic.llm.secrets import mask_secrets, scrub_exception
from dagmagic.models import AnalysisResult, Decision, ExecutionPlan, PlanStep, RoundRecord, RunState
from dagmagic.settings import DagSettings

__all__ = ["GoalLoop", "decide", "replan_context", "visible_results"]

STOPPED_WHILE_PLANNING = "Stopped by the user before the round's plan was ready."
STOPPED_BEFORE_ROUND = "Stopped by the user before the round began."
FOLLOW_UP_WHILE_PLANNING = "A follow-up arrived while planning: this plan was dropped for one that includes it."
FOLLOW_UP_WHILE_ANSWERING = "A follow-up arrived while the answer was being written: it gets its own round."
INTERRUPTED_WHILE_PLANNING = "Interrupted while planning: planned again, keeping what completed."
UNFINISHED_PLAN = "Cancelled — the run stopped before the plan was whole; the plan was made again"
REJECTED = "The user rejected this plan: {feedback}"
RERUN = "{step} is re-run: the answer is written again from the new results."
SUBPLAN = "subplan"
"""The ``tool_hint`` that marks a composite step."""


def decide(
    analysis: AnalysisResult,
    *,
    follow_up: bool,
    stopped: bool,
    autonomous_rounds: int,
    settings: DagSettings,
) -> Decision:
    """What follows a round: achieved, then the user's latest word (a Stop answers now from what completed;
    a follow-up not yet planned for gets a round outside the budget), then the budget, then confidence.
    """
    if analysis.achieved:
        return Decision(action="synthesize", reason="The goal was achieved.")
    if stopped:  # a follow-up after the Stop would have cleared it: the Stop is the latest word
        return Decision(action="synthesize", reason="Stopped by the user: answering from what completed.", partial=True)
    if follow_up:
        return Decision(action="replan", reason="A follow-up changed the goal.", counts_against_budget=False)
    if autonomous_rounds >= settings.max_replan_rounds:
        return Decision(action="stop", reason=f"No rounds left ({autonomous_rounds} of {settings.max_replan_rounds}).")
    if analysis.confidence >= settings.replan_stop_confidence:
        return Decision(
            action="stop",
            reason=f"Confident enough ({analysis.confidence:.2f} >= {settings.replan_stop_confidence:.2f}) "
            "that replanning would not help.",
        )
    return Decision(action="replan", reason=analysis.reasoning or "The goal was not achieved.")


def replan_context(rounds: Sequence[RoundRecord], settings: DagSettings) -> str:
    """Every round so far: verdict, reasoning, and each step's status with a preview of its result."""
    parts = []
    for record in rounds:
        latest = record is rounds[-1]
        limit = settings.replan_preview_chars if latest else settings.replan_older_preview_chars
        analysis = record.analysis or AnalysisResult()
        lines = [
            f"--- Round {record.index} ---",
            f"Analysis: {analysis.reasoning or '(none)'}",
            f"Achieved: {analysis.achieved}, confidence: {analysis.confidence:.2f}",
        ]
        if record.decision is not None and record.analysis is None:
            lines.append(f"Interrupted: {record.decision.reason}")
        if record.error:
            lines.append(f"Error: {record.error}")
        for step in record.plan.steps:
            lines.append(f"- r{record.index}.{step.id} ({step.status}): {step.task}")
            if step.result:
                lines.append(f"  Result: {truncate(step.result, limit)}")
            if step.error:
                lines.append(f"  Error: {step.error}")
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def visible_results(rounds: Sequence[RoundRecord]) -> list[tuple[str, PlanStep]]:
    """What the analyzer and the answer see: every completed result of earlier rounds that no later round
    redid (same task, completed again), as ``rN.id``, then each step of the latest round by its id.
    """
    if not rounds:
        return []
    *earlier, latest = rounds
    replaced = {record.rerun_of for record in rounds if record.rerun_of is not None}  # its steps were copied
    visible: list[tuple[str, PlanStep]] = []
    for position, record in enumerate(earlier):
        if record.index in replaced:
            continue
        redone = {
            _task_key(step.task)
            for later in rounds[position + 1 :]
            for step in later.plan.steps
            if step.status == "completed"
        }
        visible += [
            (f"r{record.index}.{step.id}", step)
            for step in record.plan.steps
            if step.status == "completed" and _task_key(step.task) not in redone
        ]
    return [*visible, *((step.id, step) for step in latest.plan.steps)]


def _task_key(task: str) -> str:
    return " ".join(task.lower().split())


@dataclass
class GoalLoop:
    """Everything a run needs besides its own state."""

    registry: ModelRegistry
    settings: DagSettings
    step_runner: StepRunner
    history: Sequence[Exchange] = ()
    tool_names: Sequence[str] = field(default_factory=list)
    digests: HistoryDigests | None = None
    """The session's history summaries, so a history is summarized once however many runs read it."""
    approve_plans: bool = False
    """Every plan waits for the user's approval before it runs."""
    depth: int = 0
    """0 for a run; 1 for the nested run of a composite step, and so on (``DAG_MAX_DEPTH`` bounds it)."""

    async def drive(self, run: DagRun) -> None:
        """Pursue the run's goal to an answer. Cancellation ends it ``cancelled`` and propagates."""
        run.emit(RunStarted(run_id=run.run_id, goal=run.goal))
        await self._lifecycle(run, lambda: self._rounds(run))

    async def rerun(self, run: DagRun, step_id: str, task: str | None, model: str | None) -> None:
        """Run ``step_id`` of the latest round again (with a new task or model), and the steps downstream of
        it, in a new round that keeps every other result; then judge and answer again.
        """
        await self._lifecycle(run, lambda: self._rerun(run, step_id, task, model))

    async def _lifecycle(self, run: DagRun, work: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run ``work()`` as the run's life: its end status, a fallback answer if it failed, ``RunFinished``."""
        try:
            self._check_credentials()
            await self.registry.warm_up()  # slow preparation (litellm's import) off the loop, before the first call
            await work()
            run.state.status = "failed" if run.state.error else "done"
        except asyncio.CancelledError:
            run.state.status = "cancelled"
            raise
        except Exception as exc:  # a failure: keep what was done, say what happened (never a key)
            run.exception = scrub_exception(exc)
            run.state.error = mask_secrets(f"{type(exc).__name__}: {exc}")
            run.state.status = "failed"
            if not run.state.answer:
                self._answer(run, fallback_answer(run.analysis, _completed(run.rounds)), fallback=True)
        finally:
            run.state.finished_at = time.time()
            run.control.enter("finished")
            run.emit(
                RunFinished(
                    status=run.state.status, achieved=run.achieved, confidence=run.confidence, error=run.state.error
                )
            )

    def _check_credentials(self) -> None:
        """A model whose provider key is not set fails the run before its first call, naming the variable."""
        missing = self.registry.missing_credentials()
        if missing:
            needs = "; ".join(f"{name!r} needs {' or '.join(variables)}" for name, variables in sorted(missing.items()))
            raise ConfigurationError(
                f"{needs}, which the kernel's environment does not have. Set it where Jupyter starts (or "
                "os.environ[...] in a cell) and run again, or pass api_key=... to ModelRegistry.register(). "
                "No call was made."
            )

    def entry(self, hint: str | None) -> ModelEntry:
        """The model a step's ``model_hint`` names: a role (with its fallbacks), or a registered model's name."""
        if hint and hint in self.registry and not self.registry.has_role(hint):
            return self.registry.get(hint)
        return self.registry.for_role(hint)

    def _model(self, role: str | None, run: DagRun) -> ChatModel:
        return ChatModel(self.entry(role), settings=self.settings, emit=run.emit)

    def _planner(self, run: DagRun) -> Planner:
        return Planner(
            self._model("smart", run),
            self.settings,
            emit=run.emit,
            tool_names=self.tool_names,
            roles=self.registry.roles.keys(),
            composite=self.depth < self.settings.max_depth,
        )

    async def _rounds(self, run: DagRun) -> None:
        guard = ContextGuard(self.registry, self.settings, emit=run.emit, digests=self.digests)
        if self.settings.domain_routing and not run.state.routed:
            run.state.domain = await classify_domain(self._model("fast", run), run.goal, round=1)
            run.state.routed = True
        budget = _Budget.of(run.rounds)
        if run.rounds and await self._resume_round(run, guard, budget):
            return
        await self._more_rounds(run, guard, budget)

    async def _more_rounds(self, run: DagRun, guard: ContextGuard, budget: _Budget) -> None:
        """Rounds until one is answered."""
        planner = self._planner(run)
        past = await guard.history(self.history, limit=guard.history_limit(), round=len(run.rounds) + 1)
        while not await self._round(run, guard, planner, past, run.state.domain, budget):
            pass

    async def _rerun(self, run: DagRun, step_id: str, task: str | None, model: str | None) -> None:
        guard = ContextGuard(self.registry, self.settings, emit=run.emit, digests=self.digests)
        source = run.rounds[-1]
        again = _downstream(source.plan, step_id)
        index = len(run.rounds) + 1
        steps = []
        for step in source.plan.steps:
            if step.id not in again:
                steps.append(step.model_copy(deep=True))
                continue
            fresh = PlanStep(
                id=step.id,
                task=task if step.id == step_id and task else step.task,
                dependencies=list(step.dependencies),
                tool_hint=step.tool_hint,
                model_hint=model if step.id == step_id and model else step.model_hint,
            )
            steps.append(fresh)
        plan = ExecutionPlan(goal=source.plan.goal, steps=steps, round=index)
        record = RoundRecord(index=index, plan=plan, free=True, rerun_of=source.index, rerun_step=step_id)
        control = run.control
        control.stopped = False
        control.new_round()
        run.emit(RoundStarted(round=index))
        run.rounds.append(record)
        self._clear_answer(run, RERUN.format(step=step_id))
        await self._run_plan(run, record, plan, _reusable(run.rounds[:-2]), guard)
        analysis = await self._judge(run, guard, index)
        reason = f"Re-ran {step_id} of round {source.index} and what depends on it: answering from the new results."
        record.analysis = analysis
        record.decision = Decision(action="synthesize", reason=reason, counts_against_budget=False)
        run.emit(AnalysisReady(round=index, analysis=analysis, decision=record.decision))
        budget = _Budget.of(run.rounds)
        answered = await self._synthesize(run, guard, analysis, index, partial=control.stopped)
        if not answered:  # a follow-up arrived while the answer was written: it gets its round
            self._free_round(run, budget, FOLLOW_UP_WHILE_ANSWERING)
            await self._more_rounds(run, guard, budget)

    async def _resume_round(self, run: DagRun, guard: ContextGuard, budget: _Budget) -> bool:
        """A resumed run's last round, from where it was: True when the run is answered."""
        record = run.rounds[-1]
        if record.decision is not None:
            return await self._act(run, record, record.decision, guard, budget)
        if not _plan_final(run, record):  # it was being planned (streaming, some steps may have run): plan again
            if not record.plan.steps:
                run.rounds.pop()
                return False
            return self._plan_again(run, record, budget)
        if record.approval == "pending":  # it waited for the user's word: it waits again
            earlier = _reusable(run.rounds[:-1])
            approved = await self._approval(run, record, record.plan, self._planner(run), earlier)
            if approved is None:
                if _rejected(record):
                    return self._replan_rejected(run, record, budget)
                return await self._answer_now(run, guard, STOPPED_WHILE_PLANNING) if run.control.stopped else False
            run.control.new_round()
            await self._run_plan(run, record, approved, earlier, guard)
            return await self._conclude(run, record, guard, budget)
        for step in record.plan.steps:  # what had not completed runs again; a retry keeps its tier and time
            if step.status in ("pending", "queued", "paused", "running", "cancelled"):
                step.status = "retrying" if step.retry_at is not None else "pending"
                step.error = None
        run.control.new_round()
        await self._run_plan(run, record, record.plan, _reusable(run.rounds[:-1]), guard)
        return await self._conclude(run, record, guard, budget)

    async def _round(
        self,
        run: DagRun,
        guard: ContextGuard,
        planner: Planner,
        past: str | None,
        domain: str | None,
        budget: _Budget,
    ) -> bool:
        """One round: plan, execute, judge, then answer (True) or leave the next round to the caller (False)."""
        control = run.control
        if control.stopped:
            answered = await self._answer_now(run, guard, STOPPED_BEFORE_ROUND)
            return answered or self._free_round(run, budget, FOLLOW_UP_WHILE_ANSWERING)
        index = len(run.rounds) + 1
        control.new_round()
        control.enter("planning", index)
        run.emit(RoundStarted(round=index))
        query = compose_query(past, run.goal, [*run.state.follow_ups, *control.pending])
        record = RoundRecord(index=index, plan=ExecutionPlan(goal=query, steps=[], round=index), free=budget.next_free)
        planning = _Planning(
            record=record,
            planner=planner,
            guard=guard,
            earlier=_reusable(run.rounds),
            previous=list(run.rounds),
            domain=domain,
            follow_ups=len(control.pending),
            goal=_goal_with_follow_ups(run),
        )
        run.rounds.append(record)
        try:
            ran = await self._plan_and_execute(run, planning)
        except PlanningError as exc:
            record.error = run.state.error = str(exc)
            self._answer(run, fallback_answer(run.analysis, _completed(run.rounds)), fallback=True)
            return True
        if not ran:  # a Stop or a follow-up interrupted the planning: no verdict, no budget used
            if _rejected(record):  # plan again, with the reason
                return self._replan_rejected(run, record, budget)
            if control.stopped:
                record.decision = Decision(action="synthesize", reason=STOPPED_WHILE_PLANNING, partial=True)
                answered = await self._answer_now(run, guard, STOPPED_WHILE_PLANNING)
                return answered or self._free_round(run, budget, FOLLOW_UP_WHILE_ANSWERING)
            return self._free_round(run, budget, FOLLOW_UP_WHILE_PLANNING)
        return await self._conclude(run, record, guard, budget)

    async def _conclude(self, run: DagRun, record: RoundRecord, guard: ContextGuard, budget: _Budget) -> bool:
        """Judge a round whose steps ran, decide what follows, and act on it."""
        control, index = run.control, record.index
        if not record.free:
            budget.used += 1
        analysis = await self._judge(run, guard, index)
        decision = decide(
            analysis,
            follow_up=bool(control.pending),
            stopped=control.stopped,
            autonomous_rounds=budget.used,
            settings=self.settings,
        )
        record.analysis, record.decision = analysis, decision
        run.emit(AnalysisReady(round=index, analysis=analysis, decision=decision))
        if decision.action == "replan":
            run.emit(Replanning(round=index, reason=decision.reason, follow_up=_latest(control.pending)))
        return await self._act(run, record, decision, guard, budget)

    async def _act(
        self, run: DagRun, record: RoundRecord, decision: Decision, guard: ContextGuard, budget: _Budget
    ) -> bool:
        """Carry out a round's decision: True when the run is answered, False when another round follows."""
        if decision.action == "replan":
            budget.next_free = not decision.counts_against_budget
            return False
        if decision.action == "stop":
            self._answer(run, fallback_answer(record.analysis, _completed(run.rounds)), fallback=True)
            return True
        analysis = record.analysis or AnalysisResult()
        answered = await self._synthesize(run, guard, analysis, record.index, partial=decision.partial)
        return answered or self._free_round(run, budget, FOLLOW_UP_WHILE_ANSWERING)

    @staticmethod
    def _replan_rejected(run: DagRun, record: RoundRecord, budget: _Budget) -> bool:
        """A rejected plan: the next round plans again, told why (it uses no budget). Returns False."""
        assert record.decision is not None
        run.emit(Replanning(round=record.index, reason=record.decision.reason))
        budget.next_free = True
        return False

    @staticmethod
    def _plan_again(run: DagRun, record: RoundRecord, budget: _Budget) -> bool:
        """A round whose plan was still streaming when the run stopped: it ends here, what completed stays
        reusable (``rN.id``) and what did not is cancelled, and the next round plans the goal again in its place
        (free if it was: no verdict was reached, so no budget was used). Returns False.
        """
        for step in record.plan.steps:
            if step.status in ("pending", "queued", "paused", "running", "retrying"):
                step.status, step.error, step.retry_at = "cancelled", UNFINISHED_PLAN, None
                run.emit(StepCompleted(round=record.index, step_id=step.id, status="cancelled", error=UNFINISHED_PLAN))
        record.decision = Decision(
            action="replan", reason=INTERRUPTED_WHILE_PLANNING, counts_against_budget=not record.free
        )
        run.emit(
            Replanning(round=record.index, reason=INTERRUPTED_WHILE_PLANNING, follow_up=_latest(run.control.pending))
        )
        budget.next_free = record.free
        return False

    @staticmethod
    def _free_round(run: DagRun, budget: _Budget, reason: str) -> bool:
        """A follow-up asks for another round, outside the budget: the last round's decision says so.
        Returns False: the run goes on.
        """
        decision = Decision(action="replan", reason=reason, counts_against_budget=False)
        if run.rounds:
            run.rounds[-1].decision = decision
        run.emit(Replanning(round=len(run.rounds), reason=reason, follow_up=_latest(run.control.pending)))
        budget.next_free = True
        return False

    async def _replan_context(self, planning: _Planning) -> str | None:
        """What earlier rounds taught, fitted into the planner's window beside its instructions and the query."""
        if not planning.previous:
            return None
        planner, index = planning.planner, planning.record.index
        fixed = planner.messages(
            planning.query, round=index, context=" ", earlier=planning.earlier.keys(), domain=planning.domain
        )
        room = planning.guard.room(planner.model, fixed, reserve=PLANNER_RESERVE)
        text = replan_context(planning.previous, self.settings)
        return await planning.guard.fit(text, planner.model, budget=room, task="planning the next round", round=index)

    async def _plan(self, planning: _Planning) -> ExecutionPlan:
        """A whole plan from the planner (the planning phase's work when it does not stream)."""
        context = await self._replan_context(planning)
        return await planning.planner.plan(
            planning.query,
            round=planning.record.index,
            context=context,
            earlier=planning.earlier.keys(),
            domain=planning.domain,
            goal=planning.goal,
        )

    async def _plan_and_execute(self, run: DagRun, planning: _Planning) -> bool:
        """Plan the round and run its steps; False when a Stop or a follow-up interrupted the planning."""
        planner, record = planning.planner, planning.record
        streams = self.settings.streaming_planner and planner.model.entry.capabilities.stream
        if streams and not self.approve_plans:  # a plan waiting for approval must not start its steps
            return await self._stream_round(run, planning)
        plan = await run.control.interruptible(
            "planning", self._plan(planning), round=record.index, name=f"dagmagic:plan:{record.index}"
        )
        if isinstance(plan, Interrupted):
            return False
        self._planned(run, planning)
        if self.approve_plans:
            approved = await self._approval(run, record, plan, planning.planner, planning.earlier)
            if approved is None:
                return False
            plan = approved
        await self._run_plan(run, record, plan, planning.earlier, planning.guard)
        return True

    async def _approval(
        self,
        run: DagRun,
        record: RoundRecord,
        plan: ExecutionPlan,
        planner: Planner,
        earlier: dict[str, PlanStep],
    ) -> ExecutionPlan | None:
        """Show the plan and wait for the user's word: the plan to run (as approved, or edited), or None when
        it was rejected (the round's decision says why) or a Stop or a follow-up dropped it.
        """
        index, control = record.index, run.control
        for step in plan.steps:
            step.model = self.entry(step.model_hint).name
        record.plan, record.approval = plan, "pending"
        run.emit(PlanReady(round=index, plan=plan))

        def validate(drafts: list[dict[str, Any]]) -> list[PlanStep]:
            steps, problem = planner.validate(recover_steps(drafts), round=index, earlier=earlier.keys())
            if problem is not None:
                raise ValueError(f"the edited plan cannot run: {problem}")
            return steps

        control.validate_plan = validate
        run.emit(ApprovalRequested(round=index))
        try:
            verdict = await control.interruptible(
                "awaiting_approval", control.approval(), round=index, name=f"dagmagic:approval:{index}"
            )
        finally:
            control.validate_plan = None
        if isinstance(verdict, Interrupted):
            record.approval = None
            for step in plan.steps:
                step.status, step.error = "skipped", "Skipped — the plan was dropped before it ran"
            return None
        if verdict[0] == "reject":
            record.approval = "rejected"
            for step in plan.steps:
                step.status, step.error = "skipped", "Skipped — the user rejected the plan"
            record.decision = Decision(
                action="replan", reason=REJECTED.format(feedback=verdict[1]), counts_against_budget=False
            )
            return None
        record.approval = "approved"
        edited = verdict[1]
        return plan if edited is None else ExecutionPlan(goal=plan.goal, steps=edited, round=index)

    @staticmethod
    def _planned(run: DagRun, planning: _Planning) -> None:
        """The follow-ups the round's plan saw are handled now (the round keeps those it was first to see)."""
        seen = run.control.seen(planning.follow_ups)
        run.state.follow_ups.extend(seen)
        planning.record.follow_ups.extend(seen)

    async def _judge(self, run: DagRun, guard: ContextGuard, index: int) -> AnalysisResult:
        """The round's verdict against the goal and every follow-up so far; judged again when a follow-up
        arrives meanwhile.
        """
        analyzer = Analyzer(self._model("smart", run), self.settings, emit=run.emit, guard=guard)
        while True:
            waiting = len(run.control.pending)
            verdict = await run.control.interruptible(
                "analyzing",
                analyzer.analyze(_goal_with_follow_ups(run), visible_results(run.rounds), round=index),
                round=index,
                name=f"dagmagic:analyze:{index}",
            )
            if not isinstance(verdict, Interrupted) and len(run.control.pending) == waiting:
                return verdict

    def _executor(
        self,
        run: DagRun,
        plan: ExecutionPlan,
        earlier: dict[str, PlanStep],
        guard: ContextGuard,
        *,
        open_ended: bool = False,
    ) -> DagExecutor:
        index = plan.round
        goal = _goal_with_follow_ups(run)
        reserve_for_tools = bool(self.tool_names)
        prepared: dict[str, StepRequest] = {}
        control = run.control

        async def before_step(step: PlanStep, dependencies: dict[str, PlanStep]) -> bool:
            """A breakpoint: the step waits, slot free, showing what it is about to send."""
            if step.id in control.skips:
                return False
            if not control.breaks_before(step.id):
                return True
            request = prepared[step.id] = await prepare(step, dependencies)
            step.status = "paused"
            messages, tools = step_messages(request), list(self.tool_names)
            run.emit(StepPaused(round=index, step_id=step.id, messages=messages, tools=tools))
            word, task = await control.pause(step.id)
            if task and task.strip() and task.strip() != step.task:
                step.task = task.strip()
            run.emit(UserAction(action=word, text=step.id))
            return word != "skip"

        async def run_step(step: PlanStep, dependencies: dict[str, PlanStep]) -> str:
            request = prepared.pop(step.id, None) or await prepare(step, dependencies)
            if step.tool_hint == SUBPLAN and self.depth < self.settings.max_depth:
                return await self._subrun(run, step, request)
            return await self.step_runner(request)

        async def prepare(step: PlanStep, dependencies: dict[str, PlanStep]) -> StepRequest:
            model = self._model(step.model_hint, run)
            request = StepRequest(
                goal=goal,
                step=step,
                context="",
                model=model,
                round=index,
                settings=self.settings,
                emit=run.emit,
                smart=self._model("smart", run),
                guard=guard,
            )
            if dependencies:
                # the step's instructions, and a third of the window for its tool turns, come first
                reserve = guard.budget(model) // 3 if reserve_for_tools else 0
                room = guard.room(model, step_messages(request), reserve=reserve)
                request.context = await guard.fit(
                    dependency_context(dependencies, self.settings),
                    model,
                    budget=room,
                    task=step.task,
                    round=index,
                    step_id=step.id,
                )
            return request

        executor = DagExecutor(
            plan,
            run_step,
            max_concurrency=self.settings.max_concurrency,
            step_timeout=self.settings.step_timeout,
            emit=run.emit,
            stop=run.control.round_stop,
            earlier=earlier,
            open_ended=open_ended,
            fatal=RUN_ENDING,
            transient=(TransientProviderError,),
            retries=RetryPolicy(self.settings.step_immediate_retries, tuple(self.settings.step_retry_delays)),
            before_step=before_step,
        )
        run.control.executor = executor
        return executor

    async def _subrun(self, run: DagRun, step: PlanStep, request: StepRequest) -> str:
        """A composite step: its task planned and executed as a nested run (one level deeper, same models,
        tools and guard settings); its answer is the step's result. Its events reach this run tagged with
        their depth and the step's path; its LLM calls count here under ``s2/s1``.
        """
        goal = prompts.SUBRUN_GOAL.format(task=step.task, goal=request.goal)
        if request.context:
            goal += f"\n\nResults it may use:\n{request.context}"
        child = DagRun(RunState(run_id=f"{run.run_id}/{step.id}", goal=goal, started_at=time.time()))
        step.nested, step._subrun = child.state, child
        index = request.round

        def forward(event: Event) -> None:
            scope = f"{step.id}/{event.scope}" if event.scope else step.id
            update: dict[str, Any] = {"depth": event.depth + 1, "scope": scope}
            if isinstance(event, LLMCallRecorded):
                path = f"{step.id}/{event.call.step_id}" if event.call.step_id else step.id
                update["call"] = event.call.model_copy(update={"step_id": path, "round": index})
            run.emit(event.model_copy(update=update))

        def stop_with_parent(event: Event) -> None:
            if isinstance(event, UserAction) and event.action == "stop" and not event.depth and not child.done():
                child.stop()

        child.subscribe(forward)
        unsubscribe = run.subscribe(stop_with_parent)
        nested = dataclasses.replace(
            self,
            settings=self.settings.model_copy(update={"domain_routing": False}),
            history=(),
            depth=self.depth + 1,
            approve_plans=False,
        )
        try:
            await nested.drive(child)
        finally:
            unsubscribe()
        if child.status == "failed" or not child.answer:
            raise StepFailure(
                f"its nested run ended {child.status}: {child.error or 'no answer'}", child.answer or None
            )
        return child.answer

    async def _run_plan(
        self,
        run: DagRun,
        record: RoundRecord,
        plan: ExecutionPlan,
        earlier: dict[str, PlanStep],
        guard: ContextGuard,
    ) -> None:
        """Execute a whole plan as the round's."""
        for step in plan.steps:
            step.model = self.entry(step.model_hint).name
        record.plan = plan
        run.control.enter("executing", plan.round)
        run.emit(PlanReady(round=plan.round, plan=plan))
        await self._executor(run, plan, earlier, guard).execute()

    async def _stream_round(self, run: DagRun, planning: _Planning) -> bool:
        """Plan while executing: steps start as they stream in. A plan the final validation rejects is
        dropped (its started steps cancelled) and re-asked once; an unreadable one is planned again normally,
        and so is one whose stream broke (steps it started that the new plan holds unchanged go on). An
        interruption ends the stream; steps already running finish, the others are skipped.
        """
        control, planner, plan, index = run.control, planning.planner, planning.record.plan, planning.record.index
        earlier = planning.earlier
        executor = self._executor(run, plan, earlier, planning.guard, open_ended=True)
        execution = asyncio.create_task(executor.execute(), name=f"dagmagic:round:{index}")
        started: dict[str, PlanStep] = {}

        def start(step: PlanStep) -> None:
            step.model = self.entry(step.model_hint).name
            run.emit(StepPlanned(round=index, step=step))
            started[step.id] = step
            executor.add(step)

        async def stream() -> tuple[StreamedPlan, str | None]:
            context = await self._replan_context(planning)
            streamed = await PlanStream(planner, start).run(
                plan.goal, round=index, context=context, earlier=earlier.keys(), domain=planning.domain
            )
            return streamed, context

        try:
            try:
                outcome: tuple[StreamedPlan, str | None] | ExecutionPlan | Interrupted = await control.interruptible(
                    "planning", stream(), round=index, name=f"dagmagic:plan:{index}"
                )
            except TransientProviderError as broken:  # the stream broke mid-way: plan again, without streaming
                self._warn(run, index, f"the plan's stream broke ({broken.kind}): planned again without streaming")
                outcome = await control.interruptible(
                    "planning", self._plan(planning), round=index, name=f"dagmagic:plan:{index}"
                )
            if isinstance(outcome, Interrupted):
                executor.close()
                if plan.steps:  # steps that started while the plan streamed finish
                    control.enter("executing", index)
                await execution
                return False
            if isinstance(outcome, ExecutionPlan):
                steps, problem = outcome.steps, None
            else:
                streamed, context = outcome
                steps, problem = (
                    planner.validate(streamed.drafts, round=index, earlier=earlier.keys())
                    if streamed.readable
                    else ([], "unreadable")
                )
            if problem is None:
                self._planned(run, planning)
                self._adopt(executor, plan, steps, started, start)
                executor.close()
                control.enter("executing", index)
                run.emit(PlanReady(round=index, plan=plan))
                await execution
                return True
        finally:
            if not execution.done():
                execution.cancel()
                await asyncio.wait([execution])
        if streamed.readable:
            again = planner.finish(
                streamed.messages,
                streamed.drafts,
                query=plan.goal,
                round=index,
                earlier=earlier.keys(),
                goal=planning.goal,
            )
        else:
            again = planner.plan(
                plan.goal,
                round=index,
                context=context,
                earlier=earlier.keys(),
                domain=planning.domain,
                goal=planning.goal,
            )
        replanned = await control.interruptible("planning", again, round=index, name=f"dagmagic:plan:{index}")
        if isinstance(replanned, Interrupted):
            return False
        self._planned(run, planning)
        await self._run_plan(run, planning.record, replanned, earlier, planning.guard)
        return True

    @staticmethod
    def _adopt(
        executor: DagExecutor,
        plan: ExecutionPlan,
        steps: list[PlanStep],
        started: dict[str, PlanStep],
        start: Callable[[PlanStep], None],
    ) -> None:
        """Make the plan being executed the whole plan ``steps``: a started step the whole plan holds
        unchanged (id, task, dependencies, and its dependencies kept too) goes on; the others are withdrawn,
        and the whole plan's other steps start, layer by layer.
        """
        whole = {step.id: step for step in steps}
        order = [
            sid for layer in ExecutionPlan(goal=plan.goal, steps=steps, round=plan.round).layers() for sid in layer
        ]
        kept: set[str] = set()
        for sid in order:
            old, new = started.get(sid), whole[sid]
            if (
                old is not None
                and (old.task, set(old.dependencies)) == (new.task, set(new.dependencies))
                and all(dep in kept or dep not in started for dep in old.dependencies)
            ):
                kept.add(sid)
        for sid in reversed(list(started)):  # dependents were started after their dependencies: they go first
            if sid not in kept:
                executor.withdraw(sid)
        for sid in order:
            if sid not in kept:
                start(whole[sid])
        position = {sid: index for index, sid in enumerate(whole)}
        plan.steps.sort(key=lambda step: position[step.id])

    @staticmethod
    def _warn(run: DagRun, index: int, message: str) -> None:
        run.emit(RunWarning(message=message, round=index))

    async def _synthesize(
        self, run: DagRun, guard: ContextGuard, analysis: AnalysisResult, index: int, *, partial: bool = False
    ) -> bool:
        """Write the answer; False when a follow-up arrived meanwhile (the answer is dropped for a new round)."""
        control = run.control
        waiting = len(control.pending)

        def on_delta(text: str) -> None:
            if control.interrupted:  # outdated: the cancellation lands at the stream's next pause
                return
            run.state.answer += text
            run.emit(AnswerDelta(text=text))

        outcome = await control.interruptible(
            "synthesizing",
            synthesize(
                self._model("smart", run),
                _goal_with_follow_ups(run),
                visible_results(run.rounds),
                analysis,
                self.settings,
                round=index,
                on_delta=on_delta,
                guard=guard,
                partial=partial,
            ),
            round=index,
            name=f"dagmagic:synthesize:{index}",
            on_interrupt=lambda: self._clear_answer(run),
        )
        if isinstance(outcome, Interrupted) or len(control.pending) > waiting:
            self._clear_answer(run)
            return False
        run.state.follow_ups.extend(control.seen(waiting))
        answer, fallback = outcome
        self._answer(run, answer, fallback=fallback, partial=partial)
        return True

    async def _answer_now(self, run: DagRun, guard: ContextGuard, reason: str) -> bool:
        """After a Stop with no new verdict to go on: an answer written from whatever completed, if anything
        did. False when a follow-up arrived while it was written (the Stop is overridden; the run goes on).
        """
        if not _completed(run.rounds):
            self._answer(run, fallback_answer(AnalysisResult(reasoning=reason), ()), fallback=True, partial=True)
            return True
        analysis = run.analysis or AnalysisResult(reasoning=reason)
        return await self._synthesize(run, guard, analysis, max(len(run.rounds), 1), partial=True)

    @staticmethod
    def _clear_answer(run: DagRun, reason: str = FOLLOW_UP_WHILE_ANSWERING) -> None:
        """Drop the answer being written: a follow-up (or a re-run) made it outdated."""
        if run.state.answer:
            run.state.answer = ""
            run.emit(AnswerCleared(reason=reason))

    @staticmethod
    def _answer(run: DagRun, answer: str, *, fallback: bool, partial: bool = False) -> None:
        run.state.answer = answer
        run.emit(AnswerReady(answer=answer, fallback=fallback, partial=partial))


@dataclass
class _Planning:
    """What planning one round needs."""

    record: RoundRecord
    planner: Planner
    guard: ContextGuard
    earlier: dict[str, PlanStep]
    """Completed results of earlier rounds, by ``rN.id``."""
    previous: list[RoundRecord]
    """The rounds before this one."""
    domain: str | None
    follow_ups: int
    """How many pending follow-ups the plan sees (they are handled once it is made)."""
    goal: str
    """The goal with its follow-ups: the one step of the last-resort plan."""

    @property
    def query(self) -> str:
        """The enriched query the round plans for."""
        return self.record.plan.goal


@dataclass
class _Budget:
    """The autonomous rounds a run has used, and whether the coming round is the user's (free)."""

    used: int = 0
    next_free: bool = False

    @classmethod
    def of(cls, rounds: Sequence[RoundRecord]) -> _Budget:
        """The budget a resumed run had used: rounds judged that were not the user's."""
        used = sum(1 for record in rounds if record.analysis is not None and not record.free)
        last = rounds[-1].decision if rounds else None
        return cls(used=used, next_free=last is not None and not last.counts_against_budget)


def _goal_with_follow_ups(run: DagRun) -> str:
    """The goal with every follow-up so far, those not yet planned for included."""
    follow_ups = [*run.state.follow_ups, *run.control.pending]
    return "".join([run.goal, *(f"\n\n[User follow-up]: {text}" for text in follow_ups)])


def _plan_final(run: DagRun, record: RoundRecord) -> bool:
    """Whether the round's plan was whole: ``PlanReady`` marks it (a streaming plan's steps come before it)."""
    return any(isinstance(event, PlanReady) and event.round == record.index and not event.depth for event in run.events)


def _rejected(record: RoundRecord) -> bool:
    return record.approval == "rejected" and record.decision is not None


def _downstream(plan: ExecutionPlan, step_id: str) -> set[str]:
    """``step_id`` and every step of the plan that needs it, directly or not."""
    found = {step_id}
    grew = True
    while grew:
        grew = False
        for step in plan.steps:
            if step.id not in found and found.intersection(step.dependencies):
                found.add(step.id)
                grew = True
    return found


def _latest(items: list[str]) -> str | None:
    return items[-1] if items else None


def _reusable(rounds: Sequence[RoundRecord]) -> dict[str, PlanStep]:
    """Completed steps of earlier rounds by their ``rN.id`` reference."""
    return {
        f"r{record.index}.{step.id}": step
        for record in rounds
        for step in record.plan.steps
        if step.status == "completed"
    }


def _completed(rounds: Sequence[RoundRecord]) -> list[tuple[str, PlanStep]]:
    """Every completed step of every round; steps of earlier rounds are named ``rN.id``."""
    last = rounds[-1].index if rounds else 0
    return [
        (step.id if record.index == last else f"r{record.index}.{step.id}", step)
        for record in rounds
        for step in record.plan.steps
        if step.status == "completed"
    ]
