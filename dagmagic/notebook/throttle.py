"""``Throttle``: a widget's state syncs at most ``rate`` a second. A change within ``1 / rate`` of the last sync is
sent once that time has passed (one sync waits at a time, carrying every change since); a final state is sent at once
by calling the sync itself.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

__all__ = ["Throttle"]


class Throttle:
    """Paces ``send`` (a widget's ``sync``) to at most ``rate`` calls a second."""

    def __init__(self, send: Callable[[], None], rate: float) -> None:
        self.send = send
        self.rate = rate
        self._last = float("-inf")
        self._pending: asyncio.TimerHandle | None = None

    def soon(self) -> None:
        """Send as soon as the pace allows (at once when it does; nothing more when a send already waits)."""
        if self._pending is not None:
            return
        wait = self._last + 1 / self.rate - time.monotonic()
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a synchronous caller): nothing to schedule on
            self.send()
            return
        self._pending = loop.call_later(max(wait, 0.0), self.send)

    def sent(self) -> None:
        """``send`` is sending now: a send that waited is no longer needed, and the pace counts from now."""
        self.cancel()
        self._last = time.monotonic()

    def cancel(self) -> None:
        """Drop the send that waits, if any."""
        if self._pending is not None:
            self._pending.cancel()
            self._pending = None
