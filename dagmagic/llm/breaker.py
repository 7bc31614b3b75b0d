"""Circuit breakers: a model that stops answering is not called again for the rest of the run.

Each try that gets no answer (it timed out, or could not connect) counts against its model, whichever call
site made it (planner, steps, analyzer, synthesis, compaction); any answer starts the count again. At
``limit`` tries in a row the breaker opens: every later call to that model fails at once with
``ProviderUnavailableError`` instead of waiting out another timeout, so a dead provider costs a run about
``limit`` timeouts, not one per call, retry and round. An answer that still arrives (a call made before it
opened) closes it again.

Other failures (a rate limit, a 5xx, a refused key) are answers: they neither count nor start the count again.

A run's drive holds one ``CircuitBreakers`` (its subruns share it): a new run, a resume or a re-run tries the
model afresh, so a provider that came back (a restarted local server, the network again) is simply used, and a
model that did not answer never taints a later run.
"""

from __future__ import annotations

from collections.abc import Callable

from dagmagic import errors

__all__ = ["NO_ANSWER", "CircuitBreaker", "CircuitBreakers"]

NO_ANSWER: tuple[type[errors.ProviderError], ...] = (errors.ProviderTimeoutError, errors.ProviderConnectionError)
"""The failures that mean a try got no answer at all."""

Listener = Callable[["CircuitBreaker"], object]


class CircuitBreaker:
    """One model's tries in a row without an answer, and whether it is still called."""

    def __init__(self, model: str, limit: int, on_open: Listener | None = None) -> None:
        self.model = model
        self.limit = limit
        self.unanswered = 0
        """Tries in a row that got no answer."""
        self.last_error = ""
        """The last of them, as the user would read it."""
        self._on_open = on_open

    @property
    def open(self) -> bool:
        """Whether calls to the model fail at once."""
        return self.unanswered >= self.limit

    def refusal(self) -> errors.ProviderUnavailableError:
        """The error a call to this model meets while the breaker is open."""
        message = (
            f"{self.unanswered} tries in a row timed out or could not connect (the last: {self.last_error}); "
            "this run does not call it again"
        )
        return errors.ProviderUnavailableError(message, model=self.model)

    def check(self) -> None:
        """Raise ``ProviderUnavailableError`` when the breaker is open (no call is made then)."""
        if self.open:
            raise self.refusal()

    def answered(self) -> None:
        """The model answered: the count starts again (and an open breaker closes)."""
        self.unanswered = 0

    def failed(self, error: BaseException) -> bool:
        """A try failed with ``error``; True when it was the try that opened the breaker."""
        if not isinstance(error, NO_ANSWER):
            return False
        was_open = self.open
        self.unanswered += 1
        self.last_error = error.provider_message
        if self.open and not was_open:
            if self._on_open is not None:
                self._on_open(self)
            return True
        return False


class CircuitBreakers:
    """A run's breakers, one per model (by registry name), and who is told when one opens."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._breakers: dict[str, CircuitBreaker] = {}
        self._listeners: list[Listener] = []

    def of(self, model: str) -> CircuitBreaker:
        """The breaker of the model registered as ``model``."""
        breaker = self._breakers.get(model)
        if breaker is None:
            breaker = self._breakers[model] = CircuitBreaker(model, self.limit, self._opened)
        return breaker

    def is_open(self, model: str | None) -> bool:
        """Whether calls to ``model`` fail at once now."""
        return model is not None and model in self._breakers and self._breakers[model].open

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` with each breaker that opens from now on; returns a function that unsubscribes it."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def _opened(self, breaker: CircuitBreaker) -> None:
        for listener in list(self._listeners):
            listener(breaker)
