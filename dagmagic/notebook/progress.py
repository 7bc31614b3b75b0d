"""Text views for terminals and logs: one line per step event, and the trace of LLM calls."""

from __future__ import annotations

from dagmagic.diff import Divergence
from dagmagic.engine import STOPPED_BY_YOU, DagRun
from dagmagic.events import (
    AnswerCleared,
    AnswerReady,
    ApprovalRequested,
    Event,
    Replanning,
    RunFinished,
    RunWarning,
    StepCompleted,
    StepPaused,
    StepStarted,
)
from dagmagic.models import LLMCall, PlanStep, RoundRecord, ToolCallRecord, Usage
from dagmagic.notebook.tool_steps import call_text, direct_call, is_tool_step

__all__ = ["follow_in_terminal", "print_progress", "progress_line", "trace_table"]


def progress_line(event: Event) -> str | None:
    """A short line for the events a terminal user follows; None for the rest."""
    if not event.depth:
        return _own(event)
    if isinstance(event, StepStarted | StepCompleted):  # a subrun's steps, by their path
        line = _own(event) or ""
        return line.replace(f"] {event.step_id} ", f"] {event.scope}/{event.step_id} ", 1)
    return None


def _own(event: Event) -> str | None:
    if isinstance(event, StepStarted):
        return f"[round {event.round}] {event.step_id} started" + (f" ({event.model})" if event.model else "")
    if isinstance(event, StepCompleted):
        detail = f": {event.error}" if event.error else ""
        return f"[round {event.round}] {event.step_id} {event.status}{detail}"
    if isinstance(event, StepPaused):
        return f"[round {event.round}] {event.step_id} paused before it runs: %dag continue, %dag step or %dag skip"
    if isinstance(event, ApprovalRequested):
        return f"[round {event.round}] the plan waits for approval: %dag approve, or %dag reject WHY"
    if isinstance(event, Replanning):
        return f"[round {event.round}] replanning: {event.reason}"
    if isinstance(event, AnswerCleared):
        return f"(the answer being written was dropped: {event.reason})"
    if isinstance(event, AnswerReady):
        note = "(partial answer: the run was stopped before it finished)\n" if event.partial else ""
        return f"\n{note}{event.answer}\n"
    if isinstance(event, RunWarning):
        return _warning_line(event)
    if isinstance(event, RunFinished):
        divergence = Divergence.of_error(event.error) if event.status == "failed" else None
        if divergence is not None:  # a replay that left its recording: where, why, and the diff
            return f"[failed] {divergence.headline}: {divergence.why}\n{divergence.detail}".rstrip()
        status = STOPPED_BY_YOU if event.stopped_by_user else event.status
        return f"[{status}] achieved={event.achieved} confidence={event.confidence:.2f}"
    return None


def _warning_line(event: RunWarning) -> str:
    where = f"[round {event.round}] " if event.round is not None else ""
    line = f"{where}warning: {event.message}"
    cut = event.plan_cut
    if cut is None:
        return line
    n = cut.planned
    return f"{line} (to allow more: DAG_PLAN_MAX_STEPS={n}, or %dag config plan_max_steps={n} in a notebook)"


def print_progress(event: Event) -> None:
    """Print ``progress_line(event)`` when there is one."""
    line = progress_line(event)
    if line is not None:
        print(line, flush=True)


def follow_in_terminal(run: DagRun) -> None:
    """Print the run's progress lines until it finishes (a re-run of it later prints its own)."""

    def follow(event: Event) -> None:
        print_progress(event)
        if isinstance(event, RunFinished) and not event.depth:
            unsubscribe()

    unsubscribe = run.subscribe(follow)


_TRACE_COLUMNS = (
    ("#", ">"),
    ("purpose", "<"),
    ("model", "<"),
    ("round", ">"),
    ("step", "<"),
    ("level", "<"),
    ("retry", ">"),
    ("in", ">"),
    ("out", ">"),
    ("latency", ">"),
    ("cost", ">"),
    ("status", "<"),
)
"""The trace's columns and their alignment; each as wide as its widest cell, so a long step id shifts none."""


def trace_table(run: DagRun) -> str:
    """Every LLM call of the run, one row each under a header (``#`` N is ``run.calls[N - 1]``; its status says
    ``failed: why`` for a call that failed), then totals per purpose. A tool step's direct call (no LLM) has a
    row too, where it started among them: its call and outcome in the columns after its step.
    """
    rows: list[list[str]] = []
    direct = _direct_calls(run.state.rounds)
    waiting = list(direct)
    for number, call in enumerate(run.calls, 1):
        while waiting and waiting[0][0] < call.started_at:
            rows.append(waiting.pop(0)[1])
        rows.append(_call_row(number, call))
    rows += [row for _, row in waiting]
    lines = _table(rows)
    lines.append("")
    for purpose, usage in run.usage_by("purpose").items():
        cost = f"${usage.cost:.6f}" if usage.cost is not None else "cost unknown"
        lines.append(f"{purpose:16} {usage.requests:>3} calls {usage.total_tokens:>8} tokens  {cost}{_saved(usage)}")
    if direct:
        lines.append(f"{'direct call':16} {len(direct):>3} tool calls, no LLM call")
    total = run.usage
    cost = f"${total.cost:.6f}" if total.cost is not None else "cost unknown"
    lines.append(f"{'total':16} {total.requests:>3} calls {total.total_tokens:>8} tokens  {cost}{_saved(total)}")
    return "\n".join(lines)


def _call_row(number: int, call: LLMCall) -> list[str]:
    if call.status == "failed" or call.error:
        error = " ".join((call.error or "no reply").split())
        status = f"failed: {error if len(error) <= 200 else error[:199] + '…'}"
    else:
        status = "cancelled" if call.status == "cancelled" else "cached" if call.cached else "ok"
    return [
        str(number),
        call.purpose,
        call.model,
        str(call.round) if call.round is not None else "",
        call.step_id or "",
        call.structured_level or "",
        str(call.retries),
        str(call.usage.input_tokens),
        str(call.usage.output_tokens),
        f"{call.latency:.2f}s",
        f"{call.cost:.6f}" if call.cost is not None else "—",
        status,
    ]


def _table(rows: list[list[str]]) -> list[str]:
    """The trace's header and rows, each column as wide as its widest cell; a direct call's row (five cells)
    writes its call across the columns after its step.
    """
    widths = [len(name) for name, _ in _TRACE_COLUMNS]
    for row in rows:
        for index, cell in enumerate(row if len(row) == len(_TRACE_COLUMNS) else row[:-1]):
            if index < len(_TRACE_COLUMNS) - 1:  # the last column runs free
                widths[index] = max(widths[index], len(cell))

    def line(cells: list[str]) -> str:
        shown = [
            f"{cell:{align}{width}}" for cell, (_, align), width in zip(cells, _TRACE_COLUMNS, widths, strict=False)
        ]
        return "  ".join(shown).rstrip()

    lines = [line([name for name, _ in _TRACE_COLUMNS])]
    for row in rows:
        if len(row) == len(_TRACE_COLUMNS):
            lines.append(line(row))
        else:  # a direct call: number, purpose, model, round, step, then its call
            lines.append(f"{line(row[:-1]).ljust(sum(widths[:5]) + 2 * 5)}{row[-1]}")
    return lines


def _saved(usage: Usage) -> str:
    """`` · 3 cached, saved $0.000123`` when calls were answered from the response cache."""
    if not usage.cached_requests:
        return ""
    saved = "saving unknown" if usage.saved_cost is None else f"saved ${usage.saved_cost:.6f}"
    return f" · {usage.cached_requests} cached, {saved}"


def _direct_calls(rounds: list[RoundRecord], scope: str = "") -> list[tuple[float, list[str]]]:
    """(when, trace row) of each tool step's direct call, a subrun's too (under its step path), by time."""
    found: list[tuple[float, list[str]]] = []
    for record in rounds:
        for step in record.plan.steps:
            path = f"{scope}{step.id}"
            call = direct_call(step) if is_tool_step(step) else None
            if call is not None:
                found.append((call.started_at or step.started_at or 0.0, _direct_row(record.index, path, step, call)))
            if step.subrun_state is not None:
                found += _direct_calls(step.subrun_state.rounds, f"{path}/")
    return sorted(found, key=lambda item: item[0])


def _direct_row(round_index: int, path: str, step: PlanStep, call: ToolCallRecord) -> list[str]:
    if call.error:
        error = " ".join(call.error.split())
        outcome = f"failed: {error if len(error) <= 200 else error[:199] + '…'} · an agent ran the step"
    else:
        outcome = "0 LLM calls" + (f" · {call.duration:.2f}s" if call.duration is not None else "")
    return ["", "direct call", "—", str(round_index), path, f"{call_text(step)} · {outcome}"]
