"""``DagWidget``: the live view of a run. It reads the run's events and calls only its public controls.

State syncs are throttled (at most ``max_rate`` per second, the final one immediate) and always assign new
containers: mutating a synced list or dict in place sends nothing. Saved state stays small: results and
observations are capped, the trace keeps its latest calls without their messages, and no coordinates are
sent (the browser lays the graph out itself).

The front end's actions are requests with ids, each answered once (``AnsweringWidget``); ``_HANDLERS`` says what
each one does.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import traitlets

from dagmagic.engine import DagRun
from dagmagic.errors import DagError
from dagmagic.events import Event, RunFinished
from dagmagic.models import ExecutionPlan, LLMCall, PlanStep, RoundRecord, natural_key
from dagmagic.notebook.answering import AnsweringWidget, Reply
from dagmagic.notebook.fallbacks import answer_unreached

__all__ = ["DagWidget", "widget_state"]

_STATIC = Path(__file__).resolve().parent.parent / "static"
RESULT_CHARS = 4000
OBSERVATION_CHARS = 600
PAUSED_CHARS = 20000
DETAIL_CHARS = 50000
ANSWER_CHARS = 100_000
"""The answer as the view shows it: a model that writes a megabyte must not make every sync re-render it."""
"""A call's messages and reply, and a step's full result, sent on request: capped so one message stays small."""
"""A paused step's messages are shown whole up to this (the dependency context can be long)."""
TRACE_CALLS = 400
WARNINGS = 20
NOTE_CHARS = 2000
"""A round's or a step's note (it may quote a provider's error) is sent up to this: the view shows its start and
opens it in place."""


class DagWidget(AnsweringWidget):
    """The live view of one ``DagRun``: DAG, verdicts, streamed answer, controls and trace."""

    _esm = _STATIC / "widget.js"
    _css = _STATIC / "widget.css"

    run_id = traitlets.Unicode("").tag(sync=True)
    goal = traitlets.Unicode("").tag(sync=True)
    status = traitlets.Unicode("running").tag(sync=True)
    phase = traitlets.Unicode("starting").tag(sync=True)
    error = traitlets.Unicode("").tag(sync=True)
    divergence = traitlets.Dict(None, allow_none=True).tag(sync=True)
    """A replay that left its recording: ``headline`` (where, and why) and ``reason`` (the closest recorded call and
    the diff of what changed)."""
    warnings: traitlets.List[str] = traitlets.List().tag(sync=True)
    answer = traitlets.Unicode("").tag(sync=True)
    answer_fallback = traitlets.Bool(False).tag(sync=True)
    answer_partial = traitlets.Bool(False).tag(sync=True)
    answer_unreached = traitlets.Bool(False).tag(sync=True)
    resumable = traitlets.Bool(False).tag(sync=True)
    can_rerun = traitlets.Bool(False).tag(sync=True)
    usage = traitlets.Dict().tag(sync=True)
    rounds: traitlets.List[dict[str, Any]] = traitlets.List().tag(sync=True)
    calls: traitlets.List[dict[str, Any]] = traitlets.List().tag(sync=True)
    live_calls: traitlets.List[dict[str, Any]] = traitlets.List().tag(sync=True)
    """LLM calls under way (sent, not ended): how much of each reply has arrived."""
    now = traitlets.Float(0.0).tag(sync=True)
    started_at = traitlets.Float(0.0).tag(sync=True)
    phase_since = traitlets.Float(0.0).tag(sync=True)
    stopped_by_user = traitlets.Bool(False).tag(sync=True)
    idle = traitlets.Float(0.0).tag(sync=True)

    def __init__(self, run: DagRun, *, max_rate: float = 15.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.run = run
        self.max_rate = max_rate
        self.on_resume: Callable[[], DagRun] | None = None
        """What the widget's Resume button calls: the run that continues this one (the widget then follows it)."""
        self.on_restart: Callable[[], DagRun] | None = None
        """What its Start over button calls: a new run of the same goal."""
        self.syncs = 0
        """State syncs sent so far (for tests and the notebook-cost benchmark)."""
        self.on_run_ended: list[Callable[[], None]] = []
        """Called each time the run shown ends (again, after a re-run or a follow-up), once its state is sent."""
        self._last_sync = float("-inf")
        self._pending: asyncio.TimerHandle | None = None
        self._unsubscribe = run.subscribe(self._on_event)
        self.sync()

    def __repr__(self) -> str:
        return f"DagWidget({self.run!r})"

    def close(self) -> None:
        """Stop following the run and close the comm."""
        self._unsubscribe()
        if self._pending is not None:
            self._pending.cancel()
            self._pending = None
        super().close()

    def follow(self, run: DagRun) -> None:
        """Show ``run`` from now on (the resumed or restarted run of the one shown so far)."""
        self._unsubscribe()
        self.run = run
        self._unsubscribe = run.subscribe(self._on_event)
        self.sync()

    def sync(self) -> None:
        """Send the run's current state now, as one message."""
        if self._pending is not None:
            self._pending.cancel()
            self._pending = None
        state = widget_state(self.run)
        state["resumable"] = self.on_resume is not None and resumable(self.run)
        with self.hold_sync():
            for name, value in state.items():
                setattr(self, name, value)
        self._last_sync = time.monotonic()
        self.syncs += 1

    def _on_event(self, event: Event) -> None:
        if isinstance(event, RunFinished):
            self.sync()
            if not event.depth:
                for ended in list(self.on_run_ended):
                    ended()
            return
        if self._pending is not None:
            return
        wait = self._last_sync + 1 / self.max_rate - time.monotonic()
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a synchronous caller): nothing to schedule on
            self.sync()
            return
        self._pending = loop.call_later(max(wait, 0.0), self.sync)

    def _retry_now(self, step_id: str) -> None:
        if not self.run.retry_now(step_id):
            raise DagError("That step is not waiting to retry any more.")

    def _cancel(self) -> None:
        if not self.run.cancel():
            where = "does not run here" if self.run.read_only else f"has ended ({self.run.status})"
            raise DagError(f"Nothing to cancel: the run {where}.")

    def _go_on(self, kind: str) -> None:
        action = self.on_resume if kind == "resume" else self.on_restart
        if action is None:
            raise DagError("this view cannot resume its run; use %dag resume")
        self.follow(action())


def _call_detail(widget: DagWidget, content: dict[str, Any]) -> Reply:
    """One LLM call's messages, reply and error, on request (the synced state keeps calls small)."""
    index = _whole(content, "index")
    calls = widget.run.calls
    if not 0 <= index < len(calls):
        raise DagError(f"there is no LLM call {index}")
    call = calls[index]
    messages = [
        {"role": str(m.get("role", "")), "content": _cap(_message_text(m), DETAIL_CHARS) or ""} for m in call.messages
    ]
    return {
        "index": index,
        "messages": messages,
        "reply": _cap(call.reply, DETAIL_CHARS) or "",
        "tool_calls": [_cap(json.dumps(t, default=str), DETAIL_CHARS) for t in call.tool_calls],
        "error": call.error or "",
    }


def _full_text(widget: DagWidget, content: dict[str, Any]) -> Reply:
    """A step's whole result, or one tool call's whole observation (the synced state cuts them)."""
    round_index, step_id = _whole(content, "round"), str(content.get("step", ""))
    step = widget.run.step_of(round_index, step_id)
    if step is None:
        raise DagError(f"there is no step {step_id!r} in round {round_index}")
    field = str(content.get("field", "result"))
    if field == "result":
        return {"text": step.result or ""}
    if field != "observation":
        raise DagError(f"unknown field {field!r}")
    position = _whole(content, "call")
    if not 0 <= position < len(step.tool_calls):
        raise DagError(f"step {step_id} has no tool call {position}")
    return {"text": step.tool_calls[position].observation or ""}


def _whole(content: dict[str, Any], name: str) -> int:
    value = content.get(name)
    if not isinstance(value, int) or isinstance(value, bool):
        raise DagError(f"the request's {name} must be a whole number, not {value!r}")
    return value


def _message_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    return json.dumps(content, default=str) if content is not None else ""


def _approve(widget: DagWidget, content: dict[str, Any]) -> Reply:
    plan = content.get("plan")
    widget.run.approve(plan.get("steps") if isinstance(plan, dict) else None)
    return None


def _rerun(widget: DagWidget, content: dict[str, Any]) -> Reply:
    widget.run.start_rerun(str(content.get("step", "")), task=_text(content.get("task")))
    return None


def _release(word: str) -> Callable[[DagWidget, dict[str, Any]], Reply]:
    """Continue or Step a paused step (the first paused one when the request names none)."""

    def release(widget: DagWidget, content: dict[str, Any]) -> Reply:
        act = widget.run.resume_step if word == "continue" else widget.run.step_over
        act(str(content.get("step", "")) or None, task=_text(content.get("task")))
        return None

    return release


_HANDLERS: dict[str, Callable[[DagWidget, dict[str, Any]], Reply]] = {
    "stop": lambda w, c: w.run.stop(),
    "cancel": lambda w, c: w._cancel(),
    "follow_up": lambda w, c: w.run.follow_up(str(c.get("text", ""))),
    "retry_now": lambda w, c: w._retry_now(str(c.get("step", ""))),
    "rerun": _rerun,
    "approve": _approve,
    "reject": lambda w, c: w.run.reject(str(c.get("feedback", ""))),
    "continue": _release("continue"),
    "step": _release("step"),
    "skip": lambda w, c: w.run.skip(str(c.get("step", ""))),
    "call_detail": _call_detail,
    "full_text": _full_text,
    "resume": lambda w, c: w._go_on("resume"),
    "restart": lambda w, c: w._go_on("restart"),
}
"""What each request of the front end does, and what its answer carries back."""
DagWidget.handlers = _HANDLERS


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
        "warnings": [_cap(warning, 1000) for warning in run.warnings[-WARNINGS:]],
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
    return {"headline": headline, "reason": _cap(divergence.detail, DETAIL_CHARS) or ""}


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
        "approval": record.approval,
        "follow_ups": [_cap(text, 500) for text in record.follow_ups],
        "diff_base": _diff_base(run, record),
        "diff": _diff_state(run, record),
        "error": record.error,
        "warnings": [_cap(warning, NOTE_CHARS) for warning in record.warnings[-WARNINGS:]],
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
        "decision": record.decision.model_dump(include={"action", "reason"}) if record.decision else None,
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
    dropped = [_cap(task, 200) for task in cut.dropped[:WARNINGS]]
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
    changes = [
        {"id": change.id, "change": change.change, "fields": change.fields, "round": change.round, "was": change.was}
        for change in diff.changes
    ]
    rerun = record.rerun_step
    if rerun is not None and record.rerun_of == base and not any(change["id"] == rerun for change in changes):
        # the step the user re-ran came back the same: say it ran again, not that nothing happened
        changes.insert(0, {"id": rerun, "change": "re-run", "fields": [], "round": record.index, "was": None})
    return changes


def _paused_state(run: DagRun, step: PlanStep, latest: bool) -> dict[str, Any]:
    """What a paused step is about to send (the detail panel shows it)."""
    paused = run.about_to_send(step.id) if latest and step.status == "paused" else None
    if paused is None:
        return {"paused_messages": None, "paused_tools": []}
    messages = [
        {"role": m.get("role", ""), "content": _cap(m.get("content", ""), PAUSED_CHARS)} for m in paused.messages
    ]
    return {"paused_messages": messages, "paused_tools": list(paused.tools)}


def _subrun_state(step: PlanStep) -> dict[str, Any]:
    """A step's subrun, drawn inside its detail."""
    sub = step.subrun
    if sub is None:
        return {"subrun": None}
    rounds = [_round_state(record, sub) for record in sub.rounds]
    answer = _cap(sub.answer, RESULT_CHARS)
    return {"subrun": {"status": sub.status, "answer": answer, "error": sub.error or "", "rounds": rounds}}


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value.strip() else None


def _ordered(plan: ExecutionPlan) -> list[PlanStep]:
    return sorted(plan.steps, key=lambda step: natural_key(step.id))


def _step_state(step: PlanStep) -> dict[str, Any]:
    return {
        "id": step.id,
        "task": step.task,
        "status": step.status,
        "dependencies": list(step.dependencies),
        "model": step.model,
        "tool_hint": step.tool_hint,
        "model_hint": step.model_hint,
        "tool_args": _capped_values(step.tool_args, RESULT_CHARS) if step.tool_args is not None else None,
        "result": _cap(step.result, RESULT_CHARS),
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
        "warnings": [_cap(warning, NOTE_CHARS) for warning in step.warnings[-WARNINGS:]],
        "tool_calls": [
            {
                "name": call.name,
                "arguments": _capped_values(call.arguments, RESULT_CHARS),
                "observation": _cap(call.observation, OBSERVATION_CHARS),
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
        return _cap(value, limit)
    if isinstance(value, dict):
        return {key: _capped_values(item, limit) for key, item in value.items()}
    if isinstance(value, list):
        return [_capped_values(item, limit) for item in value]
    return value


def _cap(text: str | None, limit: int) -> str | None:
    if text is None or len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit} more characters)"
