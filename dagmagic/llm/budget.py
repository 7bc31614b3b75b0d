"""A run's cost budget (``DAG_MAX_COST``): no LLM call starts once what the run has spent reaches it.

A run's drive holds one ``CostBudget`` in ``CURRENT_BUDGET`` (its step tasks and subruns inherit it), so every
``ChatModel`` call of the run, whichever part of the engine makes it, checks it before it starts and charges it
when it is recorded. Calls already under way when the budget is reached finish, and their cost counts: the
spend can pass the budget by what those calls cost. A call whose price litellm does not know cannot be counted:
the budget says so once per run, and such calls count as nothing.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable

from dagmagic.errors import BudgetExceeded
from dagmagic.events import Event, RunWarning
from dagmagic.models import LLMCall

__all__ = ["CURRENT_BUDGET", "CostBudget", "dollars"]

Listener = Callable[["CostBudget"], object]


class CostBudget:
    """What a run may spend on model calls, what it has spent, and who is told when it is reached."""

    def __init__(self, limit: float, *, spent: float = 0.0, emit: Callable[[Event], object] | None = None) -> None:
        self.limit = limit
        """USD."""
        self.spent = spent
        """USD of the priced calls so far (a resumed run's earlier calls included)."""
        self.unpriced = 0
        """Calls answered whose price is unknown: not counted."""
        self._emit = emit
        self._listeners: list[Listener] = []

    @property
    def reached(self) -> bool:
        """Whether no further call may start."""
        return self.spent >= self.limit

    def describe(self) -> str:
        """``the cost budget of 0.05 USD was reached (0.052 USD spent)``."""
        return f"the cost budget of {dollars(self.limit)} was reached ({dollars(self.spent)} spent)"

    def check(self) -> None:
        """Raise ``BudgetExceeded`` when the budget is reached (the call is then not started)."""
        if self.reached:
            raise BudgetExceeded(self.describe())

    def charge(self, call: LLMCall) -> None:
        """Count a recorded call; tell the listeners when it is the one that reached the budget."""
        if call.usage.cost is None:
            if call.status == "ok" and not call.cached:
                self._unpriced(call)
            return
        was_reached = self.reached
        self.spent += call.usage.cost
        if self.reached and not was_reached:
            for listener in list(self._listeners):
                listener(self)

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` when the budget is reached from now on; returns a function that unsubscribes it."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

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


def dollars(amount: float) -> str:
    """An amount as the budget's messages say it: ``0.05 USD``, ``0.0523 USD``, ``1.5 USD``, ``0 USD``.

    Not ``$0.05``: the messages reach Markdown and HTML views, where JupyterLab's MathJax (and GitHub) typeset
    the words between two dollar signs as math, escaped or not.
    """
    return (f"{amount:,.4f}".rstrip("0").rstrip(".") or "0") + " USD"
