"""``StepDeadlines``: the running steps' deadlines, all on one timer.

Steps share one timeout and enter in start order, so the first entry is the earliest: one timer serves them all
(a timer per step costs ~5 us and leaves a cancelled heap entry). A step past its deadline has its
``asyncio.timeout`` scope expired: it raises ``TimeoutError`` with ``expired()`` true.
"""

from __future__ import annotations

import asyncio

__all__ = ["StepDeadlines"]


class StepDeadlines:
    """The deadlines of the steps running now, ``timeout`` seconds after each started."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._deadlines: dict[str, tuple[float, asyncio.Timeout]] = {}
        self._timer: asyncio.TimerHandle | None = None

    def add(self, step_id: str, scope: asyncio.Timeout) -> None:
        """The step started now, running inside ``scope``: it expires ``timeout`` seconds from now."""
        self._deadlines[step_id] = (asyncio.get_running_loop().time() + self.timeout, scope)
        self._arm()

    def discard(self, step_id: str) -> None:
        """The step ended: its deadline goes."""
        self._deadlines.pop(step_id, None)

    def close(self) -> None:
        """No step runs any more: the timer goes."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _arm(self) -> None:
        if self._timer is None and self._deadlines:
            when = next(iter(self._deadlines.values()))[0]
            self._timer = asyncio.get_running_loop().call_at(when, self._expire)

    def _expire(self) -> None:
        """Expire the scope of every step past its deadline."""
        self._timer = None
        now = asyncio.get_running_loop().time()
        for sid, (when, scope) in list(self._deadlines.items()):
            if when > now:
                break
            del self._deadlines[sid]
            scope.reschedule(now)
        self._arm()
