"""``DagWidget``: the live view of a run. It reads the run's events and calls only its public controls.

State syncs are throttled (at most ``max_rate`` per second, the final one immediate) and always assign new
containers: mutating a synced list or dict in place sends nothing. What is synced is ``widget_state``'s
(``widget_state.py``); no coordinates are sent (the browser lays the graph out itself).

The front end's actions are requests with ids, each answered once (``AnsweringWidget``); ``_HANDLERS`` says what
each one does.

A widget lives as long as its view may be drawn (ipywidgets keeps every open widget), but its run must not: the
session keeps the latest ``runs_in_memory`` finished runs and lets older ones go. So the widget holds its run
while it runs, and only a weak reference once it has ended (what it draws stays in its synced traits); a control
used after the session let the run go gets it back through ``take_back`` (from the run store), or says why not.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anywidget
import traitlets

from dagmagic.engine import DagRun
from dagmagic.errors import DagError
from dagmagic.events import Event, RunFinished
from dagmagic.notebook.answering import AnsweringWidget, Reply
from dagmagic.notebook.throttle import Throttle
from dagmagic.notebook.widget_state import DETAIL_CHARS, cap, resumable, widget_state

__all__ = ["DagWidget", "widget_state"]

_STATIC = Path(__file__).resolve().parent.parent / "static"


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
    comparison = anywidget.WidgetTrait().tag(sync=True)
    """The compare widget of two rounds ("Compare with round N" under a what-if round; None: none is open)."""
    comparison_round = traitlets.Int(0).tag(sync=True)
    """The round whose "Compare with round N" opened ``comparison`` (0: none)."""
    comparison_label = traitlets.Unicode("").tag(sync=True)
    forked = traitlets.Unicode("").tag(sync=True)
    """Where a fork comes from: ``fork of run 3f2a19c0d4e1 at r1.s2`` ("" for a run of its own)."""
    detached = traitlets.Unicode("").tag(sync=True)
    """Where a run on Temporal's workers runs ("" for a run driven in this kernel)."""

    def __init__(self, run: DagRun, *, max_rate: float = 15.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._running: DagRun | None = None
        """The run, held while it runs (and while it has not ended, as a run read back that did not end)."""
        self._shown: weakref.ref[DagRun] = weakref.ref(run)
        self._hold(run)
        self.take_back: Callable[[str], DagRun] | None = None
        """How a control gets the run back (by its id) once its session let it go: the notebook's store."""
        self._throttle = Throttle(lambda: self.sync(), max_rate)  # looked up when it sends
        self.on_resume: Callable[[], DagRun] | None = None
        """What the widget's Resume button calls: the run that continues this one (the widget then follows it)."""
        self.on_restart: Callable[[], DagRun] | None = None
        """What its Start over button calls: a new run of the same goal."""
        self.syncs = 0
        """State syncs sent so far (for tests and the notebook-cost benchmark)."""
        self.on_run_ended: list[Callable[[], None]] = []
        """Called each time the run shown ends (again, after a re-run or a follow-up), once its state is sent."""
        self._unsubscribe = run.subscribe(self._on_event)
        self.sync()

    @property
    def max_rate(self) -> float:
        """State syncs a second at most."""
        return self._throttle.rate

    @max_rate.setter
    def max_rate(self, rate: float) -> None:
        self._throttle.rate = rate

    def __repr__(self) -> str:
        run = self._shown()
        return f"DagWidget({run!r})" if run is not None else f"DagWidget(run {self.run_id}, no longer in memory)"

    @property
    def run(self) -> DagRun:
        """The run shown: the one in memory, else taken back (``DagError`` when it cannot be)."""
        run = self._shown()
        if run is not None:
            return run
        if self.take_back is None:
            raise DagError(
                f"run {self.run_id} is no longer in memory (only the latest finished runs are kept: runs_in_memory); "
                f"read it back from the run store with `dagmagic.load_run({self.run_id!r})`"
            )
        run = self.take_back(self.run_id)
        self.follow(run)
        return run

    @property
    def in_memory(self) -> bool:
        """Whether the run shown is still in memory (a control may have to take it back from the store)."""
        return self._shown() is not None

    def _hold(self, run: DagRun) -> None:
        """Hold ``run`` strongly until it ends; then weakly, so that the session's memory window decides."""
        self._running = run if not run.done() else None

    def close(self) -> None:
        """Stop following the run and close the comm (and the comparison it shows, if any)."""
        self._unsubscribe()
        self._throttle.cancel()
        if self.comparison is not None:
            self._show_comparison(None, 0, "")
        super().close()

    def _show_comparison(self, view: Any, round_index: int, label: str) -> None:
        """Show ``view`` (a compare widget, or None: none) under round ``round_index``; the one it replaces closes."""
        earlier = self.comparison
        with self.hold_sync():
            self.comparison = view
            self.comparison_round = round_index
            self.comparison_label = label
        if earlier is not None and earlier is not view:
            earlier.close()

    def follow(self, run: DagRun) -> None:
        """Show ``run`` from now on (the resumed or restarted run of the one shown so far)."""
        self._unsubscribe()
        self._shown = weakref.ref(run)
        self._hold(run)
        self._unsubscribe = run.subscribe(self._on_event)
        self.sync()

    def sync(self) -> None:
        """Send the run's current state now, as one message."""
        self._throttle.sent()
        state = widget_state(self.run)
        state["resumable"] = self.on_resume is not None and resumable(self.run)
        with self.hold_sync():
            for name, value in state.items():
                setattr(self, name, value)
        self.syncs += 1

    def _on_event(self, event: Event) -> None:
        run = self._shown()
        if isinstance(event, RunFinished):
            self.sync()
            if not event.depth:
                for ended in list(self.on_run_ended):
                    ended()
                self._running = None  # ended: the session's memory window decides how long it stays
            return
        if self._running is None and run is not None and not run.done():  # going again (a step re-run)
            self._running = run
        self._throttle.soon()

    def _stop(self) -> None:
        if self.in_memory:  # a run let go has ended: a Stop does nothing, as it does to any run that ended
            self.run.stop()

    def _retry_now(self, step_id: str) -> None:
        if not self.in_memory or not self.run.retry_now(step_id):
            raise DagError("That step is not waiting to retry any more.")

    def _cancel(self) -> None:
        if not self.in_memory:
            raise DagError(f"Nothing to cancel: the run has ended ({self.status}).")
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
        {"role": str(m.get("role", "")), "content": cap(_message_text(m), DETAIL_CHARS) or ""} for m in call.messages
    ]
    return {
        "index": index,
        "messages": messages,
        "reply": cap(call.reply, DETAIL_CHARS) or "",
        "tool_calls": [cap(json.dumps(t, default=str), DETAIL_CHARS) for t in call.tool_calls],
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


def _follow_up(widget: DagWidget, content: dict[str, Any]) -> Reply:
    """Send a follow-up; the answer says what it will do (the view confirms it in those words)."""
    outlook = widget.run.follow_up_outlook  # for the phase it arrives in: the run moves on once it is taken
    widget.run.follow_up(str(content.get("text", "")))
    return {"notice": outlook}


def _rerun(widget: DagWidget, content: dict[str, Any]) -> Reply:
    widget.run.start_rerun(str(content.get("step", "")), task=_text(content.get("task")))
    return None


def _what_if(widget: DagWidget, content: dict[str, Any]) -> Reply:
    """Continue the ended run as if the step had said what the user wrote: its dependents run again."""
    result = content.get("result")
    if not isinstance(result, str) or not result.strip():
        raise DagError("write the result the step should have given: it is empty")
    widget.run.start_what_if(str(content.get("step", "")), result=result)
    return None


def _compare_rounds(widget: DagWidget, content: dict[str, Any]) -> Reply:
    """Compare two rounds of the run shown (a what-if round with the one it continued from): a compare widget opens
    under round ``b`` (the ``comparison`` trait; a front end draws it through anywidget's widget composition), and
    the answer carries the comparison as Markdown too, for a front end that cannot draw a widget inside another.

    Shown in the widget, not with ``IPython.display``: a display made while a widget's message is handled has no
    cell to land in (JupyterLab drops it).
    """
    a, b = _whole(content, "a"), _whole(content, "b")
    indices = {record.index for record in widget.run.rounds}
    missing = [str(index) for index in (a, b) if index not in indices]
    if missing:
        raise DagError(f"there is no round {' or '.join(missing)} in this run")
    try:
        from dagmagic.side_by_side import RunComparison, compare
    except ImportError as exc:
        raise DagError("comparing rounds needs dagmagic.compare, which this version of dagmagic does not have") from exc
    from dagmagic.notebook.compare_widget import CompareWidget

    comparison = compare(widget.run, rounds=(a, b))
    if not isinstance(comparison, RunComparison):  # two rounds of one run: always a RunComparison
        raise DagError(f"rounds {a} and {b} could not be compared")
    widget._show_comparison(CompareWidget(comparison), b, f"round {a} vs round {b}")
    return {"a": a, "b": b, "markdown": comparison._repr_markdown_()}


def _close_comparison(widget: DagWidget, content: dict[str, Any]) -> Reply:
    widget._show_comparison(None, 0, "")
    return None


def _release(word: str) -> Callable[[DagWidget, dict[str, Any]], Reply]:
    """Continue or Step a paused step (the first paused one when the request names none)."""

    def release(widget: DagWidget, content: dict[str, Any]) -> Reply:
        act = widget.run.resume_step if word == "continue" else widget.run.step_over
        act(str(content.get("step", "")) or None, task=_text(content.get("task")))
        return None

    return release


_HANDLERS: dict[str, Callable[[DagWidget, dict[str, Any]], Reply]] = {
    "stop": lambda w, c: w._stop(),
    "cancel": lambda w, c: w._cancel(),
    "follow_up": _follow_up,
    "retry_now": lambda w, c: w._retry_now(str(c.get("step", ""))),
    "rerun": _rerun,
    "what_if": _what_if,
    "compare_rounds": _compare_rounds,
    "close_comparison": _close_comparison,
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


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value.strip() else None
