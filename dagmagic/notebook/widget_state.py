"""What a run's live view shows: ``widget_state``, every synced trait of a ``DagWidget`` for a run.

Saved state stays small: results and observations are capped, the trace keeps its latest calls without their
messages (a call's messages and a step's whole result are sent on request).
"""

from __future__ import annotations

import time
from typing import Any

from dagmagic.engine import DagRun
from dagmagic.models import ExecutionPlan, LLMCall, PlanStep, RoundRecord, natural_key
from dagmagic.notebook.fallbacks import answer_unreached

__all__ = ["DETAIL_CHARS", "cap", "resumable", "widget_state"]

RESULT_CHARS = 4000
OBSERVATION_CHARS = 600
PAUSED_CHARS = 20000
"""A paused step's messages are shown whole up to this (the dependency context can be long)."""
DETAIL_CHARS = 50000
"""A call's messages and reply, and a step's full result, sent on request: capped so one message stays small."""
ANSWER_CHARS = 100_000
"""The answer as the view shows it: a model that writes a megabyte must not make every sync re-render it."""
TRACE_CALLS = 400
WARNINGS = 20
NOTE_CHARS = 2000
"""A round's or a step's note (it may quote a provider's error) is sent up to this: the view shows its start and
opens it in place."""


def resumable(run: DagRun) -> bool:
    """Whether ``run`` did not end and can go on: read back interrupted from the store, or cancelled."""
    if run.read_only:
        return run.status in ("running", "cancelled")
    return run.status == "cancelled" and run.durable


def widget_state(run: DagRun) -> dict[str, Any]:
    """Every synced trait's value for the run, as fresh containers."""
    usage = run.usage
    return {
        "run_id": run.run_id,
        "goal": run.goal,
        "status": run.status,
        "phase": run.phase,
        "error": run.error or "",
        "divergence": _divergence(run),
        "forked": f"fork of run {run.forked_from} at {run.forked_at}" if run.forked_from else "",
        "detached": _detached(run),
        "warnings": [cap(warning, 1000) for warning in run.warnings[-WARNINGS:]],
        "answer": _capped_answer(run.answer),
        "answer_fallback": _answer_is_fallback(run),
        "answer_partial": run.partial and bool(run.answer),
        "answer_unreached": answer_unreached(run),
        "resumable": False,
        "can_rerun": run.can_rerun,
        "usage": {
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "requests": usage.requests,
            "cost": usage.cost,
            "cached_requests": usage.cached_requests,
            "saved_cost": usage.saved_cost,
        },
        "rounds": [_round_state(record, run) for record in run.rounds],
        "calls": [
            _call_state(call, index)
            for index, call in enumerate(run.calls[-TRACE_CALLS:], start=max(len(run.calls) - TRACE_CALLS, 0))
        ],
        "live_calls": _live_calls(run),
        "phase_since": _phase_since(run),
        "stopped_by_user": run.stopped_by_user,
        "now": _now(run),
        "started_at": run.state.started_at,
        "idle": _idle(run),
    }


def _divergence(run: DagRun) -> dict[str, str] | None:
    """Where a replay left its recording, for the header to show instead of the error's one long text."""
    divergence = run.divergence
    if divergence is None:
        return None
    headline = f"{divergence.headline}: {divergence.why}"
    return {"headline": headline, "reason": cap(divergence.detail, DETAIL_CHARS) or ""}


def _now(run: DagRun) -> float:
    """The run's clock: the time now while it runs here; an ended run's stands at its end, and one read back
    that never ended (its kernel died) at its last event, so shown again later its elapsed time is what it ran.
    """
    if run.status != "running" and run.state.finished_at:
        return run.state.finished_at
    if run.read_only:
        return max((event.at for event in run.events if not event.depth), default=run.state.started_at)
    return time.time()


def _idle(run: DagRun) -> float:
    """Seconds the run stood ended before it went on (a step re-run, a follow-up after its end): the elapsed
    time the front end shows leaves them out.
    """
    idle = 0.0
    ended: float | None = None
    for event in run.events:
        if event.depth:  # a composite step's own run
            continue
        if event.type == "run_finished":
            ended = event.at
        elif ended is not None:
            idle += max(event.at - ended, 0.0)
            ended = None
    return idle


def _answer_is_fallback(run: DagRun) -> bool:
    """Whether the answer shown is a fallback: an answer written since the last one was cleared is not."""
    for event in reversed(run.events):
        if event.depth:  # a composite step's own run
            continue
        if event.type == "answer_cleared":
            return False
        if event.type == "answer_ready":
            return bool(event.fallback)
    return False


def _round_state(record: RoundRecord, run: DagRun) -> dict[str, Any]:
    """A round as the view draws it: its steps in plan order (the browser lays them out from their
    dependencies), the verdict and what changed since the round it is compared with.
    """
    latest = bool(run.rounds) and record is run.rounds[-1]
    reused = _reused(run, record)
    return {
        "index": record.index,
        "rerun_of": record.rerun_of,
        "rerun_step": record.rerun_step,
        "what_if": record.what_if,
        "approval": record.approval,
        "follow_ups": [cap(text, 500) for text in record.follow_ups],
        "answered_follow_ups": [cap(text, 500) for text in record.answered_follow_ups],
        "diff_base": _diff_base(run, record),
        "diff": _diff_state(run, record),
        "error": record.error,
        "warnings": [cap(warning, NOTE_CHARS) for warning in record.warnings[-WARNINGS:]],
        "plan_cut": _plan_cut_state(record),
        "nodes": [
            {
                **_step_state(step),
                "reused_from": reused.get(step.id),
                **_paused_state(run, step, latest),
                **_subrun_state(step),
            }
            for step in _ordered(record.plan)
        ],
        "analysis": record.analysis.model_dump(include={"achieved", "confidence", "reasoning"})
        if record.analysis
        else None,
        "decision": record.decision.model_dump(include={"action", "reason", "partial"}) if record.decision else None,
    }


def _reused(run: DagRun, record: RoundRecord) -> dict[str, int]:
    """The steps a re-run round carried over instead of running them again (all but the step re-run and what
    depends on it), each with the round where it ran.
    """
    if record.rerun_of is None or record.rerun_step is None:
        return {}
    again = {record.rerun_step}
    grew = True
    while grew:  # the step re-run, and every step that needs it, directly or not
        grew = False
        for step in record.plan.steps:
            if step.id not in again and again.intersection(step.dependencies):
                again.add(step.id)
                grew = True
    base = next((r for r in run.rounds if r.index == record.rerun_of), None)
    earlier = _reused(run, base) if base is not None and base is not record else {}
    return {step.id: earlier.get(step.id, record.rerun_of) for step in record.plan.steps if step.id not in again}


def _plan_cut_state(record: RoundRecord) -> dict[str, Any] | None:
    """How much of the round's plan was cut (``plan_max_steps``), the dropped tasks shortened."""
    cut = record.plan_cut
    if cut is None:
        return None
    dropped = [cap(task, 200) for task in cut.dropped[:WARNINGS]]
    return {"planned": cut.planned, "kept": cut.kept, "dropped": dropped}


def _diff_base(run: DagRun, record: RoundRecord) -> int | None:
    """The round a round is compared with: the one it re-ran, or for a follow-up's round the round before."""
    if record.rerun_of is not None:
        return record.rerun_of
    if record.follow_ups and record.index > 1 and any(r.index == record.index - 1 for r in run.rounds):
        return record.index - 1
    return None


def _diff_state(run: DagRun, record: RoundRecord) -> list[dict[str, Any]] | None:
    """What differs from the round it is compared with (a re-run's, a follow-up's), None for other rounds."""
    base = _diff_base(run, record)
    if base is None:
        return None
    diff = run.diff(base, record.index)
    rerun = record.rerun_step
    edited = rerun if record.what_if and record.rerun_of == base else None
    changes: list[dict[str, Any]] = []
    for change in diff.changes:
        fields = list(change.fields)
        if change.id == edited and change.change == "changed":  # no model wrote the user's result: not a change
            fields = [field for field in fields if field != "model"]
            if not fields:
                continue
        changes.append(
            {"id": change.id, "change": change.change, "fields": fields, "round": change.round, "was": change.was}
        )
    if rerun is not None and record.rerun_of == base and not any(change["id"] == rerun for change in changes):
        # the step the user re-ran came back the same: say it ran again, not that nothing happened (or, its
        # result edited to what it was, that the user gave it)
        kind = "edited" if record.what_if else "re-run"
        changes.insert(0, {"id": rerun, "change": kind, "fields": [], "round": record.index, "was": None})
    return changes


def _paused_state(run: DagRun, step: PlanStep, latest: bool) -> dict[str, Any]:
    """What a paused step is about to send (the detail panel shows it)."""
    paused = run.about_to_send(step.id) if latest and step.status == "paused" else None
    if paused is None:
        return {"paused_messages": None, "paused_tools": []}
    messages = [
        {"role": m.get("role", ""), "content": cap(m.get("content", ""), PAUSED_CHARS)} for m in paused.messages
    ]
    return {"paused_messages": messages, "paused_tools": list(paused.tools)}


def _subrun_state(step: PlanStep) -> dict[str, Any]:
    """A step's subrun, drawn inside its detail."""
    sub = step.subrun
    if sub is None:
        return {"subrun": None}
    rounds = [_round_state(record, sub) for record in sub.rounds]
    answer = cap(sub.answer, RESULT_CHARS)
    return {"subrun": {"status": sub.status, "answer": answer, "error": sub.error or "", "rounds": rounds}}


def _ordered(plan: ExecutionPlan) -> list[PlanStep]:
    return sorted(plan.steps, key=lambda step: natural_key(step.id))


def _step_state(step: PlanStep) -> dict[str, Any]:
    return {
        "id": step.id,
        "task": step.task,
        "status": step.status,
        "edited": step.edited,
        "dependencies": list(step.dependencies),
        "model": step.model,
        "tool_hint": step.tool_hint,
        "model_hint": step.model_hint,
        "tool_args": _capped_values(step.tool_args, RESULT_CHARS) if step.tool_args is not None else None,
        "result": cap(step.result, RESULT_CHARS),
        "error": step.error,
        "attempts": step.attempts,
        "failures": step.failures,
        "retry_at": step.retry_at,
        "queued_at": step.queued_at,
        "started_at": step.started_at,
        "completed_at": step.completed_at,
        "input_tokens": step.usage.input_tokens,
        "output_tokens": step.usage.output_tokens,
        "cost": step.usage.cost,
        "warnings": [cap(warning, NOTE_CHARS) for warning in step.warnings[-WARNINGS:]],
        "tool_calls": [
            {
                "name": call.name,
                "arguments": _capped_values(call.arguments, RESULT_CHARS),
                "observation": cap(call.observation, OBSERVATION_CHARS),
                "error": call.error,
                "duration": call.duration,
                "turn": call.turn,
            }
            for call in step.tool_calls
        ],
    }


def _phase_since(run: DagRun) -> float:
    """When the run entered its current phase (the front end counts the seconds since)."""
    for event in reversed(run.events):
        if event.type == "phase_changed" and not event.depth:
            return event.at
    return run.state.started_at


def _live_calls(run: DagRun) -> list[dict[str, Any]]:
    """The run's calls under way, oldest first, while it runs (a call cut off by a dead kernel never ends)."""
    if run.status != "running":
        return []
    return [
        {
            "purpose": progress.purpose,
            "model": progress.model,
            "round": progress.round,
            "step_id": progress.step_id,
            "started_at": progress.started_at,
            "tokens": progress.pieces,
            "stream": progress.stream,
        }
        for progress in sorted(run.calls_under_way.values(), key=lambda p: p.started_at)
    ]


def _call_state(call: LLMCall, index: int) -> dict[str, Any]:
    return {
        "index": index,
        "started_at": call.started_at,
        "purpose": call.purpose,
        "model": call.model,
        "round": call.round,
        "step_id": call.step_id,
        "level": call.structured_level,
        "retries": call.retries,
        "input_tokens": call.usage.input_tokens,
        "output_tokens": call.usage.output_tokens,
        "latency": round(call.latency, 3),
        "cost": call.cost,
        "error": call.error,
        "stream": call.stream,
        "status": call.status,
        "cached": call.cached,
    }


def _capped_answer(answer: str) -> str:
    if len(answer) <= ANSWER_CHARS:
        return answer
    return f"{answer[:ANSWER_CHARS]}\n\n*… {len(answer) - ANSWER_CHARS} more characters: `run.answer` has all of it.*"


def _capped_values(value: Any, limit: int) -> Any:
    """Arguments with every text in them capped: a tool step's ``$s1`` becomes a whole result."""
    if isinstance(value, str):
        return cap(value, limit)
    if isinstance(value, dict):
        return {key: _capped_values(item, limit) for key, item in value.items()}
    if isinstance(value, list):
        return [_capped_values(item, limit) for item in value]
    return value


def cap(text: str | None, limit: int) -> str | None:
    """``text`` cut at ``limit`` characters, saying how many more there were."""
    if text is None or len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit} more characters)"


def _detached(run: DagRun) -> str:
    """Where a run on Temporal's workers runs, and that it outlives this kernel ("" for a run driven here)."""
    where = run.state.detached_on
    if not where:
        return ""
    return f"runs on Temporal's workers ({where}) and goes on without this kernel: %dag attach {run.run_id} follows it"
