"""A new run from another's state (``run.fork``): the state it starts from, and where in the original it starts.

The fork keeps the original's rounds before the step it is forked at, and of that step's round every step that does
not depend on it, results and all (nothing of them is asked again); the step (with an edited task, or as the user
says it ended) and what depends on it run, then the verdict, the answer and any later round, as a run of its own.
"""

from __future__ import annotations

import time
import uuid

from dagmagic.errors import DagError
from dagmagic.models import ExecutionPlan, RoundRecord, RunState, split_round_reference

__all__ = ["fork_point", "forked_state"]


def fork_point(state: RunState, at: str) -> tuple[int, str]:
    """The round and step ``at`` names: ``s3`` (the latest round that has it) or ``r2.s3``; a ``DagError`` saying
    which steps there are when there is no such step.
    """
    if not isinstance(at, str) or not at.strip():
        raise TypeError(f"fork() takes the step to fork at as its id (at='s3', or 'r2.s3'), got {at!r}")
    reference = split_round_reference(at.strip())
    if reference is not None:
        index, step_id = reference
        record = next((r for r in state.rounds if r.index == index), None)
        if record is None:
            raise DagError(f"no round {index} in run {state.run_id}: it has rounds 1 to {len(state.rounds)}")
    else:
        step_id = at.strip()
        record = next((r for r in reversed(state.rounds) if any(s.id == step_id for s in r.plan.steps)), None)
        if record is None:
            latest = ", ".join(s.id for s in state.rounds[-1].plan.steps) if state.rounds else "none"
            raise DagError(f"no step {step_id!r} in run {state.run_id} (its latest round's steps: {latest})")
    if not any(step.id == step_id for step in record.plan.steps):
        known = ", ".join(step.id for step in record.plan.steps) or "none"
        raise DagError(f"no step {step_id!r} in round {record.index} of run {state.run_id} (its steps: {known})")
    return record.index, step_id


def forked_state(state: RunState, at: str, *, task: str | None = None, result: str | None = None) -> RunState:
    """The state a fork of ``state`` at step ``at`` starts from (see the module's docstring): a new run id,
    ``forked_from`` naming the original; ``result``: the step ended with this text (``edited``), only what depends
    on it runs; ``task``: the step runs with this task instead.
    """
    if result is not None and task is not None:
        raise TypeError("fork() takes a new task for the step (it runs) or its result (it does not run), not both")
    if result is not None and not isinstance(result, str):
        raise TypeError(f"fork() takes the step's result as text, got {type(result).__name__}")
    if state.status == "running":
        raise DagError(f"run {state.run_id} has not ended: fork it once it has (or stop it first)")
    index, step_id = fork_point(state, at)
    source = state.rounds[index - 1]
    again = source.plan.downstream(step_id)
    if result is not None:
        again.discard(step_id)
    edited_task = task.strip() if task and task.strip() else None
    steps = [
        step.said(result)
        if step.id == step_id and result is not None
        else step.model_copy(deep=True)
        if step.id not in again
        else source.plan.again(step.id, task=edited_task if step.id == step_id else None)
        for step in source.plan.steps
    ]
    plan = ExecutionPlan(goal=source.plan.goal, query=source.plan.query, steps=steps, round=index)
    record = RoundRecord(
        index=index, plan=plan, warnings=list(source.warnings), free=source.free, rerun_of=source.rerun_of,
        rerun_step=source.rerun_step, what_if=source.what_if, follow_ups=list(source.follow_ups),
        plan_cut=source.plan_cut,
    )  # fmt: skip
    rounds = [r.model_copy(deep=True) for r in state.rounds[: index - 1]] + [record]
    seen = {text for r in rounds for text in (*r.follow_ups, *r.answered_follow_ups)}
    return RunState(
        run_id=uuid.uuid4().hex[:12],
        goal=state.goal,
        rounds=rounds,
        follow_ups=[text for text in state.follow_ups if text in seen],
        domain=state.domain,
        routed=state.routed,
        started_at=time.time(),
        forked_from=state.run_id,
        forked_at=f"r{index}.{step_id}",
    )
