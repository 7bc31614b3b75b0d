"""The goal loop: plan, execute, analyze, then answer or replan (DESIGN §3).

``decide`` is the decision table; ``replan_context`` is what the planner learns from earlier rounds;
``GoalLoop.drive`` runs a ``DagRun`` from its first plan to its answer.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from dagmagic.engine.analyzer import Analyzer
from dagmagic.engine.context import ContextGuard, Exchange, dependency_context, truncate
from dagmagic.engine.executor import DagExecutor
from dagmagic.engine.plan_stream import PlanStream
from dagmagic.engine.planner import Planner
from dagmagic.engine.routing import classify_domain
from dagmagic.engine.run import DagRun
from dagmagic.engine.steps import StepRequest, StepRunner
from dagmagic.engine.synthesis import fallback_answer, synthesize
from dagmagic.errors import PlanningError
from dagmagic.events import (
    AnalysisReady,
    AnswerDelta,
    AnswerReady,
    PlanReady,
    Replanning,
    RoundStarted,
    RunFinished,
    RunStarted,
    StepPlanned,
)
from dagmagic.llm import ChatModel, ModelRegistry
from dagmagic.models import AnalysisResult, Decision, ExecutionPlan, PlanStep, RoundRecord
from dagmagic.settings import DagSettings

__all__ = ["GoalLoop", "decide", "replan_context"]

INTERRUPTED = "The round was interrupted before its steps ran."


def decide(
    analysis: AnalysisResult,
    *,
    follow_up: bool,
    stopped: bool,
    autonomous_rounds: int,
    settings: DagSettings,
) -> Decision:
    """What follows a round, in DESIGN §3's order: achieved, follow-up, (user stop), budget, confidence."""
    if analysis.achieved:
        return Decision(action="synthesize", reason="The goal was achieved.")
    if follow_up:
        return Decision(action="replan", reason="A follow-up changed the goal.", counts_against_budget=False)
    if stopped:
        return Decision(action="stop", reason="Stopped by the user.")
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


@dataclass
class GoalLoop:
    """Everything a run needs besides its own state."""

    registry: ModelRegistry
    settings: DagSettings
    step_runner: StepRunner
    history: Sequence[Exchange] = ()
    tool_names: Sequence[str] = field(default_factory=list)

    async def drive(self, run: DagRun) -> None:
        """Pursue the run's goal to an answer. Cancellation ends it ``cancelled`` and propagates."""
        run.emit(RunStarted(run_id=run.run_id, goal=run.goal))
        try:
            await self._rounds(run)
            run.state.status = "failed" if run.state.error else "done"
        except asyncio.CancelledError:
            run.state.status = "cancelled"
            raise
        except Exception as exc:  # an unexpected failure: keep what was done, say what happened
            run.exception = exc
            run.state.error = f"{type(exc).__name__}: {exc}"
            run.state.status = "failed"
            if not run.state.answer:
                self._answer(run, fallback_answer(run.analysis, _completed(run.rounds)), fallback=True)
        finally:
            run.state.finished_at = time.time()
            run.emit(
                RunFinished(
                    status=run.state.status, achieved=run.achieved, confidence=run.confidence, error=run.state.error
                )
            )

    def _model(self, role: str | None, run: DagRun) -> ChatModel:
        return ChatModel(self.registry.for_role(role), settings=self.settings, emit=run.emit)

    async def _rounds(self, run: DagRun) -> None:
        guard = ContextGuard(self.registry, self.settings, emit=run.emit)
        planner = Planner(
            self._model("smart", run),
            self.settings,
            emit=run.emit,
            tool_names=self.tool_names,
            roles=self.registry.roles.keys(),
        )
        domain = None
        if self.settings.domain_routing:
            domain = await classify_domain(self._model("fast", run), run.goal, round=1)
        autonomous = 0
        started_by_follow_up = False
        while True:
            index = len(run.rounds) + 1
            run.state.follow_ups.extend(run._pending_follow_ups)
            run._pending_follow_ups.clear()
            run._round_stop = asyncio.Event()
            if run._stopped:
                run._round_stop.set()
            run.emit(RoundStarted(round=index))
            goal = _goal_with_follow_ups(run)
            query = await guard.planner_input(run.goal, self.history, run.state.follow_ups, round=index)
            earlier = _reusable(run.rounds)
            context = replan_context(run.rounds, self.settings) if run.rounds else None
            record = RoundRecord(index=index, plan=_empty_plan(query, index))
            run.rounds.append(record)
            try:
                if self.settings.streaming_planner and planner.model.entry.capabilities.stream:
                    await self._stream_round(run, record, planner, guard, context, earlier, domain, goal)
                else:
                    plan = await planner.plan(
                        query, round=index, context=context, earlier=earlier.keys(), domain=domain
                    )
                    await self._run_plan(run, record, plan, earlier, guard, goal)
            except PlanningError as exc:
                record.error = run.state.error = str(exc)
                self._answer(run, fallback_answer(run.analysis, _completed(run.rounds)), fallback=True)
                return
            plan = record.plan
            interrupted = run._round_stop.is_set() and all(step.attempts == 0 for step in plan.steps)
            seen = _seen_by_round(plan.steps, earlier)
            goal = _goal_with_follow_ups(run)  # judged against follow-ups that arrived during the round too
            if interrupted:
                analysis = AnalysisResult(reasoning=INTERRUPTED)
            else:
                analysis = await Analyzer(self._model("smart", run), self.settings).analyze(goal, seen, round=index)
            if not started_by_follow_up:
                autonomous += 1
            follow_up = bool(run._pending_follow_ups)
            decision = decide(
                analysis,
                follow_up=follow_up,
                stopped=run._stopped,
                autonomous_rounds=autonomous,
                settings=self.settings,
            )
            record.analysis, record.decision = analysis, decision
            run.emit(AnalysisReady(round=index, analysis=analysis, decision=decision))
            if decision.action == "replan":
                run.emit(Replanning(round=index, reason=decision.reason, follow_up=_latest(run._pending_follow_ups)))
                started_by_follow_up = follow_up
                continue
            if decision.action == "synthesize":
                # follow-ups the analyzer already judged against are answered now, not in another round
                run.state.follow_ups.extend(run._pending_follow_ups)
                run._pending_follow_ups.clear()
                await self._synthesize(run, goal, seen, analysis, index)
            else:
                self._answer(run, fallback_answer(analysis, _completed(run.rounds)), fallback=True)
            if not run._pending_follow_ups or run._stopped:
                return
            # a follow-up arrived while the answer was being written: it still gets its round
            run.emit(Replanning(round=index, reason="A follow-up arrived.", follow_up=run._pending_follow_ups[-1]))
            started_by_follow_up = True

    def _executor(
        self,
        run: DagRun,
        plan: ExecutionPlan,
        earlier: dict[str, PlanStep],
        guard: ContextGuard,
        goal: str,
        *,
        open_ended: bool = False,
    ) -> DagExecutor:
        index = plan.round

        async def run_step(step: PlanStep, dependencies: dict[str, PlanStep]) -> str:
            model = self._model(step.model_hint, run)
            context = dependency_context(dependencies, self.settings) if dependencies else ""
            if context:
                context = await guard.fit(context, model, task=step.task, round=index, step_id=step.id)
            request = StepRequest(
                goal=goal,
                step=step,
                context=context,
                model=model,
                round=index,
                settings=self.settings,
                emit=run.emit,
                smart=self._model("smart", run),
            )
            return await self.step_runner(request)

        return DagExecutor(
            plan,
            run_step,
            max_concurrency=self.settings.max_concurrency,
            step_timeout=self.settings.step_timeout,
            emit=run.emit,
            stop=run._round_stop,
            earlier=earlier,
            open_ended=open_ended,
        )

    async def _run_plan(
        self,
        run: DagRun,
        record: RoundRecord,
        plan: ExecutionPlan,
        earlier: dict[str, PlanStep],
        guard: ContextGuard,
        goal: str,
    ) -> None:
        """Execute a whole plan as the round's."""
        for step in plan.steps:
            step.model = self.registry.for_role(step.model_hint).name
        record.plan = plan
        run.emit(PlanReady(round=plan.round, plan=plan))
        await self._executor(run, plan, earlier, guard, goal).execute()

    async def _stream_round(
        self,
        run: DagRun,
        record: RoundRecord,
        planner: Planner,
        guard: ContextGuard,
        context: str | None,
        earlier: dict[str, PlanStep],
        domain: str | None,
        goal: str,
    ) -> None:
        """Plan while executing: steps start as they stream in. A plan the final validation rejects is
        dropped (its started steps cancelled) and re-asked once; an unreadable one is planned again normally.
        """
        plan, index = record.plan, record.index
        executor = self._executor(run, plan, earlier, guard, goal, open_ended=True)
        execution = asyncio.create_task(executor.execute(), name=f"dagmagic:round:{index}")

        def start(step: PlanStep) -> None:
            step.model = self.registry.for_role(step.model_hint).name
            run.emit(StepPlanned(round=index, step=step))
            executor.add(step)

        try:
            streamed = await PlanStream(planner, start).run(
                plan.goal, round=index, context=context, earlier=earlier.keys(), domain=domain
            )
            steps, problem = (
                planner.validate(streamed.drafts, round=index, earlier=earlier.keys())
                if streamed.readable
                else ([], "unreadable")
            )
            if problem is None:
                whole = ExecutionPlan(goal=plan.goal, steps=steps, round=index)
                for layer in whole.layers():
                    for step in (whole.step(sid) for sid in layer):
                        if step.id not in streamed.started:
                            start(step)
                order = {step.id: position for position, step in enumerate(steps)}
                plan.steps.sort(key=lambda step: order[step.id])
                executor.close()
                run.emit(PlanReady(round=index, plan=plan))
                await execution
                return
        finally:
            if not execution.done():
                execution.cancel()
                await asyncio.wait([execution])
        if streamed.readable:
            replanned = await planner.finish(
                streamed.messages, streamed.drafts, query=plan.goal, round=index, earlier=earlier.keys()
            )
        else:
            replanned = await planner.plan(
                plan.goal, round=index, context=context, earlier=earlier.keys(), domain=domain
            )
        await self._run_plan(run, record, replanned, earlier, guard, goal)

    async def _synthesize(
        self, run: DagRun, goal: str, seen: list[tuple[str, PlanStep]], analysis: AnalysisResult, index: int
    ) -> None:
        def on_delta(text: str) -> None:
            run.state.answer += text
            run.emit(AnswerDelta(text=text))

        answer, fallback = await synthesize(
            self._model("smart", run), goal, seen, analysis, self.settings, round=index, on_delta=on_delta
        )
        self._answer(run, answer, fallback=fallback)

    @staticmethod
    def _answer(run: DagRun, answer: str, *, fallback: bool) -> None:
        run.state.answer = answer
        run.emit(AnswerReady(answer=answer, fallback=fallback))


def _goal_with_follow_ups(run: DagRun) -> str:
    """The goal with every follow-up so far, those not yet planned for included."""
    follow_ups = [*run.state.follow_ups, *run._pending_follow_ups]
    return "".join([run.goal, *(f"\n\n[User follow-up]: {text}" for text in follow_ups)])


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


def _seen_by_round(steps: list[PlanStep], earlier: dict[str, PlanStep]) -> list[tuple[str, PlanStep]]:
    """The round's steps, plus the earlier results they reused, as (reference, step)."""
    reused = {dep: earlier[dep] for step in steps for dep in step.dependencies if dep in earlier}
    return [*reused.items(), *((step.id, step) for step in steps)]


def _completed(rounds: Sequence[RoundRecord]) -> list[tuple[str, PlanStep]]:
    """Every completed step of every round; steps of earlier rounds are named ``rN.id``."""
    last = rounds[-1].index if rounds else 0
    return [
        (step.id if record.index == last else f"r{record.index}.{step.id}", step)
        for record in rounds
        for step in record.plan.steps
        if step.status == "completed"
    ]


def _empty_plan(goal: str, index: int) -> ExecutionPlan:
    return ExecutionPlan(goal=goal, steps=[], round=index)
