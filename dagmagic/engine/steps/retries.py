"""Step retries in three tiers (reference 003): immediate, then delayed with growing delays, then for good.

A step that fails with a transient error (rate limit, timeout, 5xx, connection: after the LLM layer's own
retries) is tried again at once ``immediate`` times, then after each of ``delays`` in turn, its concurrency
slot free while it waits; after that it has failed for good. Any other error fails it at once.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RetryPolicy"]


@dataclass(frozen=True)
class RetryPolicy:
    """How often, and after how long, a step that met a transient error is tried again."""

    immediate: int = 1
    """Retries at once, before any delayed one."""
    delays: tuple[float, ...] = (30.0, 120.0, 600.0)
    """Seconds to wait before each delayed retry, in order."""

    def delay_after(self, failures: int) -> float | None:
        """Seconds to wait before the next try after ``failures`` transient failures; None: no more tries."""
        if failures <= self.immediate:
            return 0.0
        tier = failures - self.immediate - 1
        return self.delays[tier] if tier < len(self.delays) else None

    @property
    def tries(self) -> int:
        """Tries a step gets at most: the first, the immediate retries and the delayed ones."""
        return 1 + self.immediate + len(self.delays)
