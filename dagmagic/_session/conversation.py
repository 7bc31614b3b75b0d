"""A session's conversation and the runs it owns: each finished run's goal and answer become history for the
next (its summary then extended in the background, once the conversation outgrew the planner's share), and every
run's task, and the summary's, is held until it ends, cancelled and awaited when the session closes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from dagmagic.engine.calls.guard import ContextGuard, ModelWindows
from dagmagic.engine.calls.history import ConversationSummary, PlannerHistory
from dagmagic.engine.loop.driver import GoalLoop
from dagmagic.engine.run.dag_run import DagRun
from dagmagic.models import Exchange

__all__ = ["Conversation"]

log = logging.getLogger("dagmagic")


class Conversation:
    """The exchanges so far, the runs kept in memory and the tasks driving them."""

    def __init__(self, runs_in_memory: Callable[[], int]) -> None:
        self.history: list[Exchange] = []
        self.runs: list[DagRun] = []
        self.summary = ConversationSummary()
        """The history's summary, extended after each answer (``dagmagic.engine.calls.history``)."""
        self.windows = ModelWindows()
        """What the session learned of its models' windows (``ContextGuard``)."""
        self._runs_in_memory = runs_in_memory
        self._active: set[asyncio.Task[None]] = set()
        self._in_history: dict[str, int] = {}
        """Where each run's exchange sits in the history (a re-run replaces it)."""
        self._outside: set[str] = set()
        """Runs started outside the conversation: their answers do not join it."""

    def keep(self, run: DagRun, *, outside: bool = False) -> DagRun:
        """Hold ``run`` (``outside``: its answer does not join the conversation)."""
        if outside:
            self._outside.add(run.run_id)
        if all(kept is not run for kept in self.runs):
            self.runs.append(run)
        self._forget_finished()
        return run

    def started(self, run: DagRun, task: asyncio.Task[None], loop: GoalLoop) -> None:
        """``task`` drives ``run`` with ``loop``: held until it ends (the loop keeps only weak references to tasks)."""
        self._active.add(task)
        task.add_done_callback(lambda finished: self._finished(run, finished, loop))
        self.keep(run)

    def reset(self) -> None:
        """Forget the conversation: later runs start without history (its summary's call under way cancelled)."""
        self.history.clear()
        self.summary.reset()

    def cancel_runs(self) -> list[asyncio.Task[None]]:
        """Cancel every run still going, and the summary's call under way; the tasks to await for their ends."""
        tasks = [task for task in self._active if not task.done()]
        for task in tasks:
            task.cancel()
        summarizing = self.summary.cancel()
        return [*tasks, summarizing] if summarizing is not None else tasks

    def _forget_finished(self) -> None:
        """Keep the latest ``runs_in_memory`` finished runs (and every running one); older ones stay in the store."""
        finished = [run for run in self.runs if run.done() and not run.driven]
        dropped = {id(run) for run in finished[: max(len(finished) - self._runs_in_memory(), 0)]}
        if dropped:
            self.runs[:] = [run for run in self.runs if id(run) not in dropped]

    def _finished(self, run: DagRun, task: asyncio.Task[None], loop: GoalLoop) -> None:
        self._active.discard(task)
        self._forget_finished()
        if not task.cancelled():
            task.exception()  # retrieved: the loop records failures on the run itself
        if run.status in ("done", "failed") and run.answer and run.run_id not in self._outside:
            exchange = Exchange(goal=run.objective, answer=run.answer)  # a follow-up sent just before a Stop counts
            place = self._in_history.get(run.run_id)
            if place is not None and place < len(self.history):  # a re-run: its new answer replaces the old
                self.history[place] = exchange
            else:
                self._in_history[run.run_id] = len(self.history)
                self.history.append(exchange)
            self._summarize_later(loop)

    def _summarize_later(self, loop: GoalLoop) -> None:
        """Extend the history's summary in the background with the models of the run that answered, when the
        history outgrew the planner's share: the next run plans with it made, not waiting for it.
        """
        guard = ContextGuard(loop.registry, loop.settings, emit=self.summary.note, windows=self.windows)
        try:
            PlannerHistory(guard, self.summary).summarize_later(self.history)
        except Exception:  # a summary is an optimization: the next run summarizes before planning instead
            log.exception("[dagmagic] the conversation's summary could not be started")
