"""``WrappingBackend``: a backend around another one (recording, replaying, caching), which answers for it
everything but the calls it changes: capabilities, token counts, context window and warm-up.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from dagmagic.llm.protocol import Capabilities, ChatBackend, ChatRequest, ChatResponse, StreamChunk

__all__ = ["WrappingBackend", "provider_backend"]


class WrappingBackend:
    """Passes every call to ``inner``; subclasses override ``complete`` and ``stream``.

    The optional members of ``ChatBackend`` (``count_tokens``, ``context_window``, ``estimate_cost``, ``warm_up``)
    are the inner backend's when it has them, so a wrapped model counts tokens, guards its context and reserves
    its budget exactly as before.
    """

    calls_inner: bool = True
    """Whether calls may reach the inner backend (a replay that never falls through does not call it)."""

    def __init__(self, inner: ChatBackend) -> None:
        self.inner = inner

    def capabilities(self, model: str) -> Capabilities:
        """The inner backend's."""
        return self.inner.capabilities(model)

    async def complete(self, request: ChatRequest) -> ChatResponse:
        """The inner backend's reply."""
        return await self.inner.complete(request)

    def stream(self, request: ChatRequest) -> AsyncIterator[StreamChunk]:
        """The inner backend's stream."""
        return self.inner.stream(request)

    def __getattr__(self, name: str) -> Any:
        if name in ("count_tokens", "context_window", "estimate_cost", "warm_up"):
            return getattr(self.inner, name)  # AttributeError when the inner one has none: the default applies
        raise AttributeError(name)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r})"


def provider_backend(backend: ChatBackend) -> ChatBackend | None:
    """The backend under every wrapper, which calls reach; None when a wrapper never lets them through."""
    while isinstance(backend, WrappingBackend):
        if not backend.calls_inner:
            return None
        backend = backend.inner
    return backend
