"""A run's cost budget (``DAG_MAX_COST``): no LLM call starts unless its estimated cost fits in what is left.

A run's drive holds one ``CostBudget`` in ``CURRENT_BUDGET`` (its step tasks and subruns inherit it), so every
``ChatModel`` call of the run, whichever part of the engine makes it, reserves its estimated cost before it
starts (``estimate``: its prompt's tokens and the most it may write, at the model's price) and, when it is
recorded, has that reservation replaced by what it really cost. A call that does not fit beside what is spent
and what the calls under way hold waits for those to end, then starts if it fits and is refused if not; once a
call is refused, the budget is reached and nothing more starts. So the spend passes the budget only by what the
calls in flight when the last one started cost beyond their estimates. A call whose price is unknown cannot be
counted: the budget says so once per run, and such calls count as nothing.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dagmagic.errors import BudgetExceeded
from dagmagic.events import Event, RunWarning
from dagmagic.llm.protocol import ChatRequest
from dagmagic.llm.tokens import request_tokens
from dagmagic.models import LLMCall, Purpose

if TYPE_CHECKING:
    from dagmagic.llm.registry import ModelEntry

__all__ = ["CURRENT_BUDGET", "EXPECTED_REPLY_TOKENS", "CostBudget", "Hold", "dollars", "estimate"]

Listener = Callable[["CostBudget"], object]

EXPECTED_REPLY_TOKENS: Mapping[Purpose, int] = {
    "history_summary": 1024,
    "plan": 1024,
    "tool_selection": 256,
    "step": 1024,
    "compaction": 1024,
    "analyze": 2048,
    "synthesize": 2048,
    "citation_check": 512,
    "route": 64,
    "judge": 512,
}
"""Tokens a call's reply is reckoned at when its model sets no ``max_tokens``: a plan of six steps, a step's turn
or a summary fit in 1,024; a verdict (with the answer it writes) or a written answer in 2,048."""


@dataclass(frozen=True, eq=False)
class Hold:
    """What a budget holds for one call under way, until its cost is known."""

    budget: CostBudget
    amount: float
    """USD: the call's estimate (0 when its price is unknown)."""
    task: asyncio.Task[Any] | None
    """The task that made the call."""


class CostBudget:
    """What a run may spend on model calls, what it has spent and holds, and who is told when it is reached."""

    def __init__(self, limit: float, *, spent: float = 0.0, emit: Callable[[Event], object] | None = None) -> None:
        self.limit = limit
        """USD."""
        self.spent = spent
        """USD of the priced calls so far (a resumed run's earlier calls included)."""
        self.unpriced = 0
        """Calls answered whose price is unknown: not counted."""
        self._holds: list[Hold] = []
        self._refused: float | None = None
        """The estimate of the call that did not fit (from then on the budget is reached)."""
        self._emit = emit
        self._listeners: list[Listener] = []
        self._waiters: list[asyncio.Future[None]] = []

    @property
    def held(self) -> float:
        """USD held for the calls under way: their estimates."""
        return sum(hold.amount for hold in self._holds)

    @property
    def reached(self) -> bool:
        """Whether no further call may start."""
        return self.spent >= self.limit or self._refused is not None

    def describe(self) -> str:
        """``the cost budget of 0.05 USD was reached (0.052 USD spent)``, and what the next call needed when it
        was refused before the spend got there.
        """
        said = f"the cost budget of {dollars(self.limit)} was reached ({dollars(self.spent)} spent"
        if self._refused is not None and self.spent < self.limit:
            said += f", the next call estimated at {dollars(self._refused)}"
        return said + ")"

    def check(self) -> None:
        """Raise ``BudgetExceeded`` when the budget is reached (the call is then not started)."""
        if self.reached:
            raise BudgetExceeded(self.describe())

    async def reserve(self, estimate: float | None) -> Hold:
        """Hold ``estimate`` USD for a call about to start, once it fits beside what is spent and held; raise
        ``BudgetExceeded`` (nothing held) when it never will: it does not fit with no other call under way, or
        the budget is reached. ``charge`` (or ``release``) gives the hold back.
        """
        amount = estimate or 0.0
        task = asyncio.current_task()
        while True:
            self.check()
            if self.spent + self.held + amount <= self.limit:
                hold = Hold(self, amount, task)
                self._holds.append(hold)
                return hold
            # the calls under way may end costing less than they hold; not those of this very task (a call
            # made while its own stream is open), which would wait for themselves
            if not any(hold.task is not task for hold in self._holds):
                self._refuse(amount)
            await self._changed()

    def release(self, hold: Hold | None) -> None:
        """Give back what ``hold`` held (its call made no cost to count)."""
        if hold is not None and hold in self._holds:
            self._holds.remove(hold)
            self._wake()

    def charge(self, call: LLMCall, hold: Hold | None = None) -> None:
        """Count a recorded call in place of what was held for it; tell the listeners when it is the one that
        reached the budget.
        """
        self.release(hold)
        if call.usage.cost is None:
            if call.status == "ok" and not call.cached:
                self._unpriced(call)
            return
        was_reached = self.reached
        self.spent += call.usage.cost
        if self.reached and not was_reached:
            self._tell()

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` when the budget is reached from now on; returns a function that unsubscribes it."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def _refuse(self, amount: float) -> None:
        was_reached = self.reached
        self._refused = amount
        self._wake()  # the calls waiting for room are refused too
        if not was_reached:
            self._tell()
        raise BudgetExceeded(self.describe())

    def _tell(self) -> None:
        for listener in list(self._listeners):
            listener(self)

    async def _changed(self) -> None:
        """Wait until a hold is given back or the budget is reached."""
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        finally:
            if waiter in self._waiters:
                self._waiters.remove(waiter)

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def _unpriced(self, call: LLMCall) -> None:
        self.unpriced += 1
        if self.unpriced == 1 and self._emit is not None:
            message = (
                f"The cost budget ({dollars(self.limit)}) cannot be enforced for calls whose price is unknown: "
                f"litellm has no price for model {call.model!r}, so its calls count as 0 USD against the budget."
            )
            self._emit(RunWarning(message=message, round=call.round, step_id=call.step_id))


CURRENT_BUDGET: contextvars.ContextVar[CostBudget | None] = contextvars.ContextVar("dagmagic_budget", default=None)
"""The budget of the run whose task makes the call (None: no budget)."""


def estimate(entry: ModelEntry, request: ChatRequest) -> float | None:
    """What ``request`` may cost, in USD: its prompt's tokens and the most its reply may take (the entry's
    ``max_tokens``, else ``EXPECTED_REPLY_TOKENS`` for its purpose) at its backend's ``estimate_cost``; None
    when the backend has no price for the model.
    """
    price = getattr(entry.backend, "estimate_cost", None)
    if not callable(price):
        return None
    reply = _max_tokens(entry.options) or EXPECTED_REPLY_TOKENS[request.purpose]
    try:
        prompt = request_tokens(entry, request.messages, request.tools, counted=True)
        cost = price(entry.target, prompt, reply)
    except Exception:  # a price the backend cannot give is an unknown price
        return None
    return None if cost is None else float(cost)


def _max_tokens(options: Mapping[str, Any]) -> int | None:
    for name in ("max_tokens", "max_completion_tokens"):
        value = options.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def dollars(amount: float) -> str:
    """An amount as the budget's messages say it: ``0.05 USD``, ``0.0523 USD``, ``1.5 USD``, ``0 USD``.

    Not ``$0.05``: the messages reach Markdown and HTML views, where JupyterLab's MathJax (and GitHub) typeset
    the words between two dollar signs as math, escaped or not.
    """
    return (f"{amount:,.4f}".rstrip("0").rstrip(".") or "0") + " USD"
