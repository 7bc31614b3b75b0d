"""The conversation as the planner reads it, from a summary kept up to date after each answer (DESIGN §3).

A history that fits ``ContextGuard.history_limit`` tokens is read as written. Past that, the planner reads a
summary of its beginning and the exchanges since, as written (``PlannerHistory``). ``ConversationSummary`` is a
session's: once an answer has joined the conversation, the summary is extended in the background
(``PlannerHistory.summarize_later``), the fast model reading the previous summary and the new exchanges only, so
a call costs the same at the 100th run as at the 6th, and the next run finds it made.

A run that plans while that call is under way does not wait for it: it reads the summary made before and the
exchanges since, as written (their latest part, when they do not fit). Answers that join the conversation
meanwhile are summarized together by the next call. A history that arrives without a summary (given to the
session, a resumed run's) is summarized before planning, as before; a replay reads the conversation as the run it
replays read it (``dagmagic._session.replays.history_read``), making no summary.

The call is recorded in the first run that plans after it ended (``take_calls``): in its calls, usage and cost,
as if that run had made it, for it was made for that run's plan. A call that fails leaves the summary as it
was (the next answer tries again), and its warning goes to that run too.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from dagmagic.engine.calls import prompts
from dagmagic.engine.calls.context import compose_query, format_exchanges, format_history
from dagmagic.engine.calls.guard import MIN_ROOM, ContextGuard
from dagmagic.events import Event, LLMCallRecorded, RunWarning
from dagmagic.llm import ChatModel
from dagmagic.llm.budget import CURRENT_BUDGET
from dagmagic.llm.tokens import fits
from dagmagic.models import Exchange

__all__ = ["ConversationSummary", "HistorySummary", "PlannerHistory", "Summarizer"]

log = logging.getLogger("dagmagic")

SINCE_TOKENS = 16
"""Tokens of the line that introduces the exchanges a summary does not cover yet, and the blank lines around it."""


@dataclass(frozen=True)
class HistorySummary:
    """A summary of the beginning of a conversation."""

    text: str
    covers: tuple[Exchange, ...]
    """The exchanges it summarizes, oldest first."""

    def begins(self, history: Sequence[Exchange]) -> bool:
        """Whether it summarizes the beginning of ``history`` (a re-run's new answer, or a reset, ends that)."""
        count = len(self.covers)
        return count <= len(history) and all(a is b or a == b for a, b in zip(self.covers, history, strict=False))


Summarizer = Callable[[HistorySummary | None, tuple[Exchange, ...]], Awaitable[HistorySummary | None]]
"""Makes the summary of a history from an earlier summary of its beginning (or None); None when it fails."""


class ConversationSummary:
    """A session's summary of its conversation, and the one call that extends it in the background."""

    def __init__(self) -> None:
        self.latest: HistorySummary | None = None
        self._wanted: tuple[Exchange, ...] = ()
        self._summarize: Summarizer | None = None
        self._task: asyncio.Task[None] | None = None
        self._unread: list[Event] = []

    def of(self, history: Sequence[Exchange]) -> HistorySummary | None:
        """The latest summary of the beginning of ``history``, None when there is none."""
        latest = self.latest
        return latest if latest is not None and latest.begins(history) else None

    def offer(self, summary: HistorySummary) -> None:
        """Keep ``summary`` (made before a plan) unless the one kept covers more of the conversation."""
        if self.latest is None or not summary.begins(self.latest.covers):
            self.latest = summary

    @property
    def under_way(self) -> bool:
        """Whether a call extending the summary is under way."""
        return self._task is not None and not self._task.done()

    def extend(self, history: Sequence[Exchange], summarize: Summarizer) -> None:
        """Bring the summary up to ``history`` in the background with ``summarize``; while a call is under way,
        the next one takes up what joined meanwhile.
        """
        self._wanted, self._summarize = tuple(history), summarize
        if not self.under_way:  # its own context: nothing of the run that ended (its budget, its id) carries over
            self._task = asyncio.get_running_loop().create_task(
                self._work(), name="dagmagic:history-summary", context=contextvars.Context()
            )

    async def _work(self) -> None:
        while True:
            wanted, summarize = self._wanted, self._summarize
            earlier = self.of(wanted)
            if summarize is None or (earlier is not None and len(earlier.covers) == len(wanted)):
                return
            try:
                made = await summarize(earlier, wanted)
            except Exception as exc:  # a key that stopped working, say: the next run meets it itself
                log.warning("[dagmagic] the conversation's summary was not extended: %s", type(exc).__name__)
                made = None
            if made is not None and made.begins(self._wanted):
                self.latest = made
            if self._wanted is wanted:  # nothing joined meanwhile
                return

    def note(self, event: Event) -> None:
        """What the call reported (its record, a warning), kept for the next run that plans."""
        if isinstance(event, LLMCallRecorded | RunWarning):
            self._unread.append(event)

    def take_calls(self) -> list[Event]:
        """What the calls that ended since the last plan reported: the next run records it as its own."""
        taken, self._unread = self._unread, []
        return taken

    def reset(self) -> asyncio.Task[None] | None:
        """Forget the summary (the conversation was forgotten); the call under way, cancelled, to await."""
        self.latest, self._wanted, self._summarize, self._unread = None, (), None, []
        return self.cancel()

    def cancel(self) -> asyncio.Task[None] | None:
        """Cancel the call under way; its task, to await (None when there is none)."""
        task, self._task = self._task, None
        if task is None or task.done():
            return None
        task.cancel()
        return task


@dataclass
class PlannerHistory:
    """The conversation before a run as its planner reads it, fitted by ``guard``, from ``summary``."""

    guard: ContextGuard
    summary: ConversationSummary

    async def read(self, history: Sequence[Exchange], *, limit: int, round: int | None) -> str | None:
        """``Previous conversation: ...`` within ``limit`` tokens of the smart model: as written, else from the
        summary and the exchanges since, else its last ``history_fallback_chars``.

        A history with no summary yet is summarized here, before the plan, unless its summary is being made
        (then it is not waited for); the calls that extended the summary since the last plan are recorded here.
        """
        if not history:
            return None
        self._record_calls(round)
        guard, smart = self.guard, self.guard.smart()
        past = format_history(history)
        if fits(smart.entry, past, limit):
            return past
        summary = self.summary.of(history)
        if summary is None and not self.summary.under_way and guard.registry.has_role("fast"):
            summary = await self.summarize(None, tuple(history), round=round)
            if summary is not None:
                self.summary.offer(summary)
        if summary is not None:
            return self._with_summary(summary, history, smart, limit)
        tail = f"Previous conversation (last part):\n...{past[-guard.settings.history_fallback_chars :]}"
        return guard.truncate(tail, smart, limit)

    async def planner_input(
        self, goal: str, history: Sequence[Exchange], follow_ups: Sequence[str], *, round: int | None
    ) -> str:
        """The enriched query with its history fitted (see ``read``)."""
        past = await self.read(history, limit=self.guard.history_limit(), round=round)
        return compose_query(past, goal, follow_ups)

    async def summarize(
        self, earlier: HistorySummary | None, history: tuple[Exchange, ...], *, round: int | None = None
    ) -> HistorySummary | None:
        """The fast model's summary of ``history``: ``earlier`` (a summary of its beginning) extended with the
        exchanges after it, else the whole history summarized; None when the call fails (a warning says so).
        """
        guard = self.guard
        limit = guard.history_limit()
        if earlier is None:
            source = format_history(history)
        else:
            since = format_exchanges(history[len(earlier.covers) :])
            source = f"Summary of the conversation so far:\n{earlier.text}\n\nThe exchanges since:\n{since}"
        system = prompts.HISTORY_SUMMARY_SYSTEM.format(tokens=max(limit // 2, MIN_ROOM))
        text = await guard.ask_fast(system, source, purpose="history_summary", round=round)
        return HistorySummary(guard.truncate(text, guard.smart(), limit), history) if text else None

    def summarize_later(self, history: Sequence[Exchange]) -> None:
        """After an answer joined the conversation: when it no longer fits the planner's share, its summary is
        extended in the background, for the next run (the guard's ``emit`` should be the summary's ``note``).
        """
        guard = self.guard
        if not history or not guard.registry.has_role("fast"):
            return
        if not fits(guard.smart().entry, format_history(history), guard.history_limit()):
            self.summary.extend(history, self.summarize)

    def _with_summary(self, summary: HistorySummary, history: Sequence[Exchange], smart: ChatModel, limit: int) -> str:
        """The summary, then the exchanges it does not cover yet, as written (their latest part, when the two do
        not fit together).
        """
        guard = self.guard
        head = f"Previous conversation (summary):\n{summary.text}"
        since = history[len(summary.covers) :]
        if not since:
            return guard.truncate(head, smart, limit)
        text = f"{head}\n\nSince then:\n{format_exchanges(since)}"
        if fits(smart.entry, text, limit):
            return text
        head = guard.truncate(head, smart, limit // 2)
        room = max(limit - guard.tokens(smart, head) - SINCE_TOKENS, MIN_ROOM)
        return f"{head}\n\nSince then (the latest part):\n{self._latest_part(format_exchanges(since), smart, room)}"

    def _latest_part(self, text: str, model: ChatModel, budget: int) -> str:
        """The end of ``text`` that takes at most ``budget`` tokens of ``model``."""
        if fits(model.entry, text, budget):
            return text
        keep = int(len(text) * budget / max(self.guard.tokens(model, text), 1) * 0.95)
        while True:
            cut = f"...{text[len(text) - keep :]}" if keep > 0 else ""
            if keep <= 0 or fits(model.entry, cut, budget):
                return cut
            keep = int(keep * 0.85)

    def _record_calls(self, round: int | None) -> None:
        """Record in this run the calls that extended the summary since the last plan (and what they warned),
        counted in its usage and its cost budget: they were made for its plan.
        """
        emit = self.guard.emit
        if emit is None:
            return
        budget = CURRENT_BUDGET.get()
        for event in self.summary.take_calls():
            if isinstance(event, LLMCallRecorded):
                call = event.call.model_copy(update={"round": round})
                emit(LLMCallRecorded(call=call))
                if budget is not None:
                    budget.charge(call)
            elif isinstance(event, RunWarning):
                emit(event.model_copy(update={"round": round}))
